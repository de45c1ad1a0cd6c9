"""Upgrade from the previous release: a database made before the re-cut into layers (AuditEvent in portal,
ConfigTarget and ConfigPush in scheduling) migrates forward with every row, id, permission and admin history
entry kept, on the same tables.

An empty database of the test's own (tests/scratch_database.py) is migrated to the previous release's leaf
migrations (the apps that release did not have, core and integrations, not at all) and given what that
release's `migrate` made after them (its content types and permissions, under its app labels), filled
through that release's historical models, then migrated to the latest migrations and read through today's
models. The suite's test database is never migrated back (unapplying the whole project for it, then applying
it again, took a minute and a half of the run on 2 cores)."""

import io
import uuid
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import RunPython
from django.utils import timezone

from core.hardware import DEFAULT_CLIQUE_ID
from core.models import AuditEvent
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from scheduling.models import Allocation, Job, JobEvent
from tenancy.models import Department, Membership

# The leaf migration of each project app in the release before the re-cut (None: the app did not exist).
PREVIOUS_RELEASE = [
    ("portal", "0001_initial"),
    ("inventory", "0003_partition_plans"),
    ("tenancy", "0001_initial"),
    ("scheduling", "0005_jobs_dispatch_events"),
    ("core", None),
    ("integrations", None),
]
# model name: (app before the re-cut, app now)
MOVED = {
    "auditevent": ("portal", "core"),
    "configtarget": ("scheduling", "integrations"),
    "configpush": ("scheduling", "integrations"),
}
# Constraint and index names on the moved tables before the re-cut; integrations 0002 renames them.
PREVIOUS_NAMES = {
    "scheduling_configtarget": {"scheduling_configtarget_unique_name", "scheduling_configtarget_kind_valid"},
    "scheduling_configpush": {
        "scheduling_configpush_one_active_per_target",
        "scheduling_configpush_status_valid",
        "scheduling_push_target_status",
    },
}
# Tables the upgrade creates: only those of models added after the previous release. The moved models keep
# their tables, so no core_* or integrations_* table of theirs appears.
TABLES_OF_MODELS_ADDED_SINCE: set[str] = {
    # Rendered files' pieces by content, outside the push rows (integrations.contents, issue 32).
    "integrations_configpiece",
    "inventory_agenttoken",
    # Health: events, rules, decisions, active check results, settings.
    "inventory_healthevent",
    "inventory_healthrule",
    "inventory_healthaction",
    "inventory_healthcheckresult",
    "inventory_healthsettings",
    # Service and RMA tracking of trays and GPUs (the health centre).
    "inventory_servicerecord",
    # Identity: personal API tokens, identity providers' group rules and linked identities.
    "core_personaltoken",
    "tenancy_grouprolerule",
    "tenancy_externalidentity",
    # Notifications (core.notifications): subscriptions, notifications, delivery attempts.
    "core_notificationsubscription",
    "core_notification",
    "core_notificationattempt",
    # What-if replays of the partition wizard: a run and its layouts.
    "scheduling_whatifrun",
    "scheduling_whatiflayout",
    # Projects under departments and their people.
    "tenancy_project",
    "tenancy_projectmembership",
    # What a priority class's running jobs do when their tray fails.
    "scheduling_faultpolicy",
    # The site's Prometheus as the metrics source.
    "tenancy_metricssource",
    # Users' own notifications: the bell's inbox.
    "core_inboxitem",
    # Each person's POSIX identity, which their jobs run as.
    "tenancy_posixaccount",
    # Carving that follows demand: each rack's re-carving policy.
    "inventory_recarvepolicy",
    # MIG devices the nodes report (a MIG UUID belongs to one GPU).
    "inventory_migdevice",
    # Partition plans scheduled for a maintenance window.
    "integrations_planwindow",
    # The MIG devices slice jobs hold (scheduling.services.slices).
    "scheduling_sliceallocation",
    # The finished jobs' decayed usage the beat rolls up (scheduling.usage.roll_up_usage, issue 32).
    "scheduling_usagerollup",
    # Each department's idle GPUs and GPUs without data as the beat counts them (scheduling.usage, issue 32).
    "scheduling_idlecount",
    # The compute fabric above the rack (issue 33): each source's import, its groups, places and rails, and a
    # file uploaded on the import page between its preview and its applying.
    "inventory_fabricimport",
    "inventory_fabricgroup",
    "inventory_rackplace",
    "inventory_trayplace",
    "inventory_gpurail",
    "inventory_fabricupload",
}
SLURM_SETTINGS = {
    "config_dir": "/etc/slurm",
    "scontrol": "scontrol",
    "slurmctld_log": "",
    "topology_format": "conf",
    "cpus": None,
    "memory_mb": None,
    "node_hostname": "",
    "node_address": "",
    "node_port_base": None,
    "rest_url": "http://slurmrestd.example:6820",
    "rest_user": "rackplane",
    "rest_token": "eyJhbGciOiJIUzI1NiJ9.previous-release-token",
    "jwt_key_file": "",
    "accounting": True,
    "imex": False,
}


def previous_release_nodes(graph) -> list[tuple[str, str]]:
    """The migration nodes a database of the previous release is at: its project apps' leaves, and today's
    leaves of the apps outside the project (auth, contenttypes, admin, ...), which did not change."""
    project_apps = {app for app, _ in PREVIOUS_RELEASE}
    others = [node for node in graph.leaf_nodes() if node[0] not in project_apps]
    return others + [node for node in PREVIOUS_RELEASE if node[1] is not None]


def table_columns() -> dict[str, list[str]]:
    """The columns of every table but the migration record and the content types (whose labels move)."""
    with connection.cursor() as cursor:
        return {
            table: [column.name for column in connection.introspection.get_table_description(cursor, table)]
            for table in connection.introspection.table_names(cursor)
            if table not in ("django_migrations", "django_content_type")
        }


def table_rows(columns: dict[str, list[str]]) -> dict[str, list[tuple]]:
    """Every row of the given tables, read in the given columns."""
    quote = connection.ops.quote_name
    rows = {}
    with connection.cursor() as cursor:
        for table, names in columns.items():
            cursor.execute(f"SELECT {', '.join(map(quote, names))} FROM {quote(table)}")
            rows[table] = sorted(cursor.fetchall(), key=repr)
    return rows


def constraint_names(table: str) -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, table))


def fill_previous_release(old_apps) -> dict:
    """Rows as the previous release made them, through its historical models; returns their ids."""
    User = old_apps.get_model("auth", "User")
    Rack_ = old_apps.get_model("inventory", "Rack")
    Partition_ = old_apps.get_model("inventory", "NVLinkPartition")
    Tray_ = old_apps.get_model("inventory", "ComputeTray")
    Gpu_ = old_apps.get_model("inventory", "Gpu")
    Department_ = old_apps.get_model("tenancy", "Department")
    Membership_ = old_apps.get_model("tenancy", "Membership")
    Job_ = old_apps.get_model("scheduling", "Job")
    Allocation_ = old_apps.get_model("scheduling", "Allocation")
    JobEvent_ = old_apps.get_model("scheduling", "JobEvent")
    Target_ = old_apps.get_model("scheduling", "ConfigTarget")
    Push_ = old_apps.get_model("scheduling", "ConfigPush")
    Audit_ = old_apps.get_model("portal", "AuditEvent")
    ContentType_ = old_apps.get_model("contenttypes", "ContentType")
    Permission_ = old_apps.get_model("auth", "Permission")
    LogEntry_ = old_apps.get_model("admin", "LogEntry")
    now = timezone.now()

    admin = User.objects.create(username="upgrade-admin", password="!", is_staff=True, is_superuser=True)
    member = User.objects.create(username="upgrade-member", password="!")

    rack = Rack_.objects.create(name="upgrade-r01", cluster_uuid=uuid.uuid4(), location="hall A, row 3")
    partition = Partition_.objects.create(rack=rack, clique_id=DEFAULT_CLIQUE_ID, name="default")
    trays = [
        Tray_.objects.create(
            rack=rack,
            slot=1,
            hostname="upgrade-r01-n01",
            partition=partition,
            ib_port_guids=["0x" + "a" * 16],
        ),
        Tray_.objects.create(
            rack=rack,
            slot=2,
            hostname="upgrade-r01-n02",
            partition=partition,
            state="drain",
            state_reason="fan replaced",
        ),
    ]
    gpus = [
        Gpu_.objects.create(
            tray=tray,
            index=index,
            uuid=f"GPU-upgrade-{tray.slot}-{index}",
            product="NVIDIA GB200",
            health="healthy",
            memory_mib=189471,
        )
        for tray in trays
        for index in range(4)
    ]

    department = Department_.objects.create(
        name="Upgrade research",
        slug="upgrade-research",
        guaranteed_gpus=4,
        over_quota_weight=Decimal("2.50"),
        limit_gpus=8,
        vlan_id=901,
        vxlan_vni=19001,
        ib_pkey=0x0901,
        network_cidr="10.64.90.0/24",
        export_path="/exports/tenants/upgrade-research",
    )
    membership = Membership_.objects.create(user=member, department=department, role="member")
    job = Job_.objects.create(
        department=department,
        submitted_by=member,
        name="train-llm",
        gpus=4,
        state="running",
        backend="slurm",
        work={"script": "#!/bin/bash\nsrun python train.py\n"},
        placement=[trays[0].hostname],
        backend_id="4242",
        started_at=now,
    )
    for gpu in gpus[:4]:
        Allocation_.objects.create(job=job, gpu=gpu)
    JobEvent_.objects.create(job=job, kind="started", placement=[trays[0].hostname])

    target = Target_.objects.create(name="upgrade-slurm", kind="slurm", settings=SLURM_SETTINGS)
    succeeded = Push_.objects.create(
        target=target,
        status="succeeded",
        payload={"files": {"topology.conf": "BlockName=b1 Nodes=n01\n"}},
        payload_hash="ab" * 32,
        attempts=1,
        log="pushed\n",
        requested_by=admin,
        started_at=now,
        finished_at=now,
    )
    superseded = Push_.objects.create(
        target=target, status="superseded", superseded_by=succeeded, reason="an older plan"
    )
    queued = Push_.objects.create(
        target=target,
        status="queued",
        attempts=1,
        error="slurmctld unreachable",
        plan_id=7,
        next_attempt_at=now + timedelta(minutes=1),
        requested_by=admin,
    )

    audit = [
        Audit_.objects.create(
            actor=admin,
            actor_name=admin.username,
            source="ui",
            action="create",
            object_type="tenancy.department",
            object_id=str(department.pk),
            object_repr=department.name,
            department_id=department.pk,
            after={"name": department.name, "guaranteed_gpus": 4},
        ),
        Audit_.objects.create(
            actor=None,
            actor_name="",
            source="task",
            action="update",
            object_type="scheduling.job",
            object_id=str(job.pk),
            object_repr=job.name,
            department_id=department.pk,
            before={"state": "starting"},
            after={"state": "running"},
        ),
    ]

    # What the previous release's post_migrate made, and what an operator then attached to it.
    content_types = {}
    for model, (old_app, new_app) in MOVED.items():
        assert not ContentType_.objects.filter(app_label=new_app, model=model).exists()
        content_types[model] = ContentType_.objects.get(app_label=old_app, model=model)
    member.user_permissions.add(
        Permission_.objects.get(content_type=content_types["auditevent"], codename="view_auditevent"),
        Permission_.objects.get(content_type=content_types["configtarget"], codename="change_configtarget"),
    )
    log_entry = LogEntry_.objects.create(
        user=admin,
        content_type=content_types["configtarget"],
        object_id=str(target.pk),
        object_repr=target.name,
        action_flag=CHANGE,
        change_message="[]",
        action_time=now,
    )

    return {
        "admin": admin.pk,
        "member": member.pk,
        "rack": rack.pk,
        "partition": partition.pk,
        "trays": [tray.pk for tray in trays],
        "gpus": [gpu.pk for gpu in gpus],
        "department": department.pk,
        "membership": membership.pk,
        "job": job.pk,
        "target": target.pk,
        "succeeded": succeeded.pk,
        "superseded": superseded.pk,
        "queued": queued.pk,
        "audit": [event.pk for event in audit],
        "content_types": {model: content_type.pk for model, content_type in content_types.items()},
        "log_entry": log_entry.pk,
    }


def same_rows(model, old_rows: list[dict]) -> bool:
    """Whether today's model reads the rows the historical model read (in its fields, by primary key)."""
    return list(model.objects.order_by("pk").values(*old_rows[0])) == old_rows


def values_of(old_apps) -> dict[str, list[dict]]:
    """The moved and the main domain rows, field by field, as the historical models read them."""
    return {
        "auditevent": list(old_apps.get_model("portal", "AuditEvent").objects.order_by("pk").values()),
        "configtarget": list(
            old_apps.get_model("scheduling", "ConfigTarget").objects.order_by("pk").values()
        ),
        "configpush": list(old_apps.get_model("scheduling", "ConfigPush").objects.order_by("pk").values()),
        "job": list(old_apps.get_model("scheduling", "Job").objects.order_by("pk").values()),
        "allocation": list(old_apps.get_model("scheduling", "Allocation").objects.order_by("pk").values()),
        "gpu": list(old_apps.get_model("inventory", "Gpu").objects.order_by("pk").values()),
        "department": list(old_apps.get_model("tenancy", "Department").objects.order_by("pk").values()),
        "membership": list(old_apps.get_model("tenancy", "Membership").objects.order_by("pk").values()),
    }


@pytest.mark.slow(reason="migrates a previous release's database forward")
@pytest.mark.django_db(transaction=True)
def test_previous_release_database_migrates_forward_with_nothing_lost(scratch_database):
    executor = MigrationExecutor(connection)
    previous = previous_release_nodes(executor.loader.graph)
    executor.migrate(previous)
    executor.loader.build_graph()
    old_apps = executor.loader.project_state(previous).apps
    # What the previous release's `migrate` made after its migrations (post_migrate, for each app that had
    # models then: portal had AuditEvent): the content types and permissions of its models, under its app
    # labels. Django's own handlers, given that release's models.
    for label in old_apps.app_configs:
        create_permissions(SimpleNamespace(label=label, models_module=True), verbosity=0, apps=old_apps)

    tables_before = set(connection.introspection.table_names())
    assert not {t for t in tables_before if t.startswith(("core_", "integrations_"))}
    for table, names in PREVIOUS_NAMES.items():
        assert names <= constraint_names(table), f"{table} is not at the previous release's schema"

    ids = fill_previous_release(old_apps)
    columns_before = table_columns()
    rows_before = table_rows(columns_before)
    values_before = values_of(old_apps)

    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    # No table for the moved models, nothing dropped, and every row of every table unchanged (on SQLite,
    # integrations 0002 rebuilds both moved tables: new table, rows copied, old one dropped).
    created = set(connection.introspection.table_names()) - tables_before
    # PostgreSQL only: the pass's log of inventory changes and their racks (migrations scheduling 0010 and
    # 0027, no model), the held GPUs the triggers keep (scheduling 0031, no model), the pass's log of job
    # changes (scheduling 0033, no model) and the render's log of changed racks (integrations 0011, no model).
    logs = (
        {
            "scheduling_inventorychange",
            "scheduling_inventorychangerack",
            "scheduling_heldgpus",
            "scheduling_jobchange",
            "integrations_renderchange",
        }
        if connection.vendor == "postgresql"
        else set()
    )
    assert created == TABLES_OF_MODELS_ADDED_SINCE | logs
    assert {model._meta.db_table for model in (AuditEvent, ConfigTarget, ConfigPush)} <= tables_before
    assert table_rows(columns_before) == rows_before

    # Today's models read the rows, field by field.
    assert same_rows(AuditEvent, values_before["auditevent"])
    assert same_rows(ConfigTarget, values_before["configtarget"])
    assert same_rows(ConfigPush, values_before["configpush"])
    assert same_rows(Job, values_before["job"])
    assert same_rows(Allocation, values_before["allocation"])
    assert same_rows(Gpu, values_before["gpu"])
    assert same_rows(Department, values_before["department"])
    assert same_rows(Membership, values_before["membership"])
    # Memberships that predate identity providers were all granted by hand.
    assert set(Membership.objects.values_list("origin", flat=True)) == {"manual"}

    rack = Rack.objects.get(pk=ids["rack"])
    partition = NVLinkPartition.objects.get(pk=ids["partition"], rack=rack)
    trays = ComputeTray.objects.filter(rack=rack, partition=partition)
    assert list(trays.values_list("pk", flat=True)) == ids["trays"]
    assert list(Gpu.objects.filter(tray__rack=rack).values_list("pk", flat=True)) == ids["gpus"]
    department = Department.objects.get(pk=ids["department"])
    assert Membership.objects.get(pk=ids["membership"]).user_id == ids["member"]
    job = Job.objects.get(pk=ids["job"], department=department)
    assert sorted(job.allocations.values_list("gpu_id", flat=True)) == ids["gpus"][:4]
    assert JobEvent.objects.get(job=job).kind == "started"

    target = ConfigTarget.objects.get(pk=ids["target"])
    assert target.settings == SLURM_SETTINGS
    # Today's registry reads the previous release's settings (with the target's outbound allowance,
    # on by default for targets, and no API version chosen yet); the token stays hidden.
    assert target.cleaned_settings() == {
        **SLURM_SETTINGS,
        "allow_private_address": True,
        "api_version": "",
        "target_id": target.pk,
    }
    assert target.masked_settings()["rest_token"] != SLURM_SETTINGS["rest_token"]
    assert sorted(target.pushes.values_list("pk", flat=True)) == sorted(
        [ids["succeeded"], ids["superseded"], ids["queued"]]
    )
    queued = ConfigPush.objects.get(pk=ids["queued"])
    assert (queued.target, queued.status, queued.error) == (
        target,
        PushStatus.QUEUED,
        "slurmctld unreachable",
    )
    succeeded = ConfigPush.objects.get(pk=ids["succeeded"])
    assert ConfigPush.objects.get(pk=ids["superseded"]).superseded_by == succeeded
    assert succeeded.requested_by_id == ids["admin"]
    events = AuditEvent.objects.filter(pk__in=ids["audit"]).order_by("pk")
    assert [(e.object_type, e.object_id, e.actor_id) for e in events] == [
        ("tenancy.department", str(department.pk), ids["admin"]),
        ("scheduling.job", str(job.pk), None),
    ]

    # The renamed constraints hold on the old tables: one active push per target, valid statuses.
    for model in (ConfigTarget, ConfigPush):
        table = model._meta.db_table
        names = constraint_names(table)
        wanted = {c.name for c in model._meta.constraints} | {i.name for i in model._meta.indexes}
        assert wanted <= names, f"{table} lacks {wanted - names}"
        assert not (PREVIOUS_NAMES[table] & names), f"{table} still has {PREVIOUS_NAMES[table] & names}"
    with pytest.raises(IntegrityError), transaction.atomic():
        ConfigPush.objects.create(target=target, status=PushStatus.QUEUED)
    with pytest.raises(IntegrityError), transaction.atomic():
        ConfigPush.objects.create(target=target, status="bogus")
    ConfigPush.objects.create(target=target, status=PushStatus.SUCCEEDED)  # only active pushes are unique
    # The kind check is gone: any kind registered later is stored (the model validates it instead).
    ConfigTarget.objects.create(name="upgrade-later-kind", kind="registered-later")

    # Content types followed the models (same rows): permissions and admin history stay attached.
    for model, (old_app, new_app) in MOVED.items():
        assert ContentType.objects.get(pk=ids["content_types"][model]).app_label == new_app
        assert not ContentType.objects.filter(app_label=old_app, model=model).exists()
    assert ContentType.objects.get_for_model(ConfigTarget).pk == ids["content_types"]["configtarget"]
    assert ContentType.objects.get_for_model(AuditEvent).pk == ids["content_types"]["auditevent"]
    member = get_user_model().objects.get(pk=ids["member"])
    assert member.has_perm("core.view_auditevent")
    assert member.has_perm("integrations.change_configtarget")
    assert LogEntry.objects.get(pk=ids["log_entry"]).get_edited_object() == target

    # The way back: what unapplying core 0001 and integrations 0001 runs gives the same content-type rows
    # their previous labels again.
    latest = executor.loader.project_state(executor.loader.graph.leaf_nodes()).apps
    for app_label in ("core", "integrations"):
        (relabel,) = [
            operation
            for operation in executor.loader.get_migration(app_label, "0001_initial").operations
            if isinstance(operation, RunPython)
        ]
        relabel.reverse_code(latest, None)
    assert {
        model: ContentType.objects.get(app_label=old_app, model=model).pk
        for model, (old_app, _) in MOVED.items()
    } == ids["content_types"]
    assert (
        not ContentType.objects.filter(app_label__in=("core", "integrations"))
        .filter(model__in=MOVED)
        .exists()
    )


@pytest.mark.django_db
def test_models_and_migrations_agree():
    out = io.StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
