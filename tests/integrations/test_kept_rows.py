"""The rows a process keeps between renders (integrations.kept_rows) are always the ones a cold read gives,
and what the render keeps per rack (integrations.state) renders what a cold render renders.

On PostgreSQL, where triggers (migration integrations 0011) log the racks every transaction changed a
rendered row of. Each test changes rows of one watched kind (through the ORM, in bulk and in raw SQL), then
compares the kept read with a cold one and counts the racks read again. On SQLite every read is cold; only
the column checks and the whole render run.
"""

from __future__ import annotations

from importlib import import_module

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from integrations import kept_rows
from integrations import state as configstate
from integrations.plans import service as plans
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from inventory.planning import preset_layout
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Allocation, Job
from tenancy.models import DedicatedPartition, Department
from tests.factories import make_department, make_job
from tests.scheduling.test_pass_cache import columns_read

MIGRATION = import_module("integrations.migrations.0011_render_change_log")

postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the kept rows need PostgreSQL's triggers"
)


def rack_of(name: str) -> Rack:
    return Rack.objects.get(name=name)


def kept_is_cold(*, reread: int | None = None, cold: bool = False) -> kept_rows.Kept:
    """Read as the next render will, compare with a cold read of every rack. `reread`: at most how many racks
    the kept read may have read again (a change's commit may have pushed, and so read it, already); `cold`:
    it must have read every rack."""
    parts = kept_rows.kept_parts()
    assert parts == kept_rows._inventory()
    kept = kept_rows.kept()
    assert kept is not None
    if cold:
        assert kept.racks_read == Rack.objects.count()
    elif reread is not None:
        assert kept.racks_read <= reread, (kept.racks_read, reread)
    return kept


def horizon() -> int:
    """The render log's pruning horizon (0: never pruned)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(max(rack_id), 0) FROM {kept_rows.LOG} WHERE xid = 0")
        return cursor.fetchone()[0]


def render_is_cold() -> None:
    """The whole render through every kept piece equals the render of a process that keeps nothing."""
    warm = configstate.render_files(configstate.build_state())
    configstate.forget_kept()
    assert warm == configstate.render_files(configstate.build_state())


def render_is_fresh() -> None:
    """The whole render through every kept piece (each rack's node lines, tiers, blocks, specs, members)
    equals the render that makes every piece again from the same rows: no piece outlives what it was
    made of. The kept rows stay (the next `kept_is_cold` still counts the racks read again)."""

    def render():
        state = configstate.build_state()
        try:
            return state, configstate.render_files(state)
        except ValueError as error:  # a state Slurm cannot hold (a tray taken out of a partition): the same
            return state, str(error)

    warm = render()
    configstate.forget_kept(rows=False)
    assert warm == render()


# --- the triggers watch what the render reads ----------------------------------------------------------


def test_the_render_columns_are_every_column_the_render_reads(demo_inventory):
    with CaptureQueriesContext(connection) as queries:
        kept_rows._inventory()
    read = set()
    for query in queries:
        read |= columns_read(query["sql"])
    watched = {(table, column) for table, columns in kept_rows.RENDER_COLUMNS.items() for column in columns}
    # A row's id never changes; its insert and delete are logged whatever the columns.
    assert {(table, column) for table, column in read if column != "id"} <= watched, read
    assert {table for table, _ in read} == set(kept_rows.RENDER_COLUMNS), read
    assert MIGRATION.COLUMNS == kept_rows.RENDER_COLUMNS
    assert set(MIGRATION.HOLDING) == {str(state) for state in HOLDING_STATES}


@postgresql
def test_the_installed_triggers_watch_the_render_columns(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgname, ARRAY(SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid "
            "AND a.attnum = ANY(t.tgattr) ORDER BY array_position(t.tgattr::int2[], a.attnum)) "
            "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname LIKE 'integrations_render_changed%%'"
        )
        rows = cursor.fetchall()
    updates = {table: tuple(columns) for table, name, columns in rows if name.endswith("_update")}
    assert updates == kept_rows.RENDER_COLUMNS
    by_table: dict[str, set[str]] = {}
    for table, name, _ in rows:
        by_table.setdefault(table, set()).add(name.rsplit("_", 1)[1])
    rows_of = {"update", "truncate", "insert", "delete"}
    assert by_table == {
        table: rows_of if table not in ("inventory_gpu", "scheduling_job") else {"update", "truncate"}
        for table in kept_rows.RENDER_COLUMNS
    }


@postgresql
def test_a_rendered_change_is_logged_with_its_rack_and_others_are_not(demo_inventory):
    def logged() -> set[int]:
        """The racks this transaction logged since the last call."""
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {kept_rows.LOG} WHERE xid = txid_current() RETURNING rack_id")
            return {row[0] for row in cursor.fetchall()}

    logged()  # the seed's
    r02 = rack_of("gb-r02")
    tray = ComputeTray.objects.filter(rack=r02).order_by("slot").first()
    ComputeTray.objects.filter(pk=tray.pk).update(last_report_at=timezone.now(), state_reason="noted")
    tray.save()  # every column written, none changed
    assert logged() == set()
    ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ff"])
    assert logged() == {r02.pk}
    r03 = rack_of("gb-r03")
    Rack.objects.filter(pk=r03.pk).update(cluster_uuid="11111111-2222-3333-4444-555555555555")
    assert logged() == {r03.pk}
    NVLinkPartition.objects.filter(rack=r02).update(degraded_reason="a link is down")  # not rendered
    assert logged() == set()
    NVLinkPartition.objects.create(rack=r03, name="spare", clique_id=7)
    assert logged() == {r03.pk}
    Rack.objects.filter(pk=r03.pk).update(name="gb-r33")  # every rack's block names: all
    assert logged() == {0}


# --- the kept rows are the cold ones -----------------------------------------------------------------


@postgresql
@pytest.mark.django_db(transaction=True)
def test_kept_rows_follow_committed_changes_of_every_kind(demo_inventory, admin_user):
    """Real commits, no test transaction around: each change is read again rack by rack."""
    kept_rows.forget()
    kept_is_cold(cold=True)
    kept_is_cold(reread=0)  # nothing changed

    r02, r03 = rack_of("gb-r02"), rack_of("gb-r03")
    tray = ComputeTray.objects.filter(rack=r03).order_by("slot").first()
    ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ff"])
    kept_is_cold(reread=1)
    render_is_fresh()
    ComputeTray.objects.filter(pk=tray.pk).update(last_report_at=timezone.now())  # not rendered
    kept_is_cold(reread=0)
    ComputeTray.objects.filter(pk=tray.pk).update(
        mig_layout="all-balanced", mig_layout_devices={"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}
    )
    kept_is_cold(reread=1)
    render_is_fresh()

    # A re-carve deletes and creates partitions and moves trays between them: that rack only.
    plans.create_and_apply(r03, preset_layout("2x9"), drain=False, user=admin_user)
    kept_is_cold(reread=1)
    render_is_fresh()

    # Dedications (insert, delete) and service tiers, by the partition's rack.
    research = make_department("Research", guaranteed_gpus=8)
    partition = NVLinkPartition.objects.filter(rack=r02).order_by("pk").first()
    DedicatedPartition.objects.create(partition=partition, department=research)
    kept_is_cold(reread=1)
    render_is_fresh()
    NVLinkPartition.objects.filter(pk=partition.pk).update(service_tier="gpu_gold")
    kept_is_cold(reread=1)
    render_is_fresh()
    # A department's slug names its dedicated partitions' Slurm partition and QOS: no rack row changes.
    Department.objects.filter(pk=research.pk).update(slug="optics")
    kept_is_cold(reread=0)
    render_is_fresh()
    DedicatedPartition.objects.filter(partition=partition).delete()
    kept_is_cold(reread=1)
    render_is_fresh()

    # Work placed and ended: the running (department, tray) pairs of OpenSM's members.
    trays = list(ComputeTray.objects.filter(rack=r02).order_by("slot")[:2])
    job = make_job(research, "train", trays=trays)
    kept_is_cold(reread=1)
    render_is_fresh()
    with connection.cursor() as cursor:  # behind the ORM's back: a job that stops holding its GPUs
        cursor.execute("UPDATE scheduling_job SET state = %s WHERE id = %s", [JobState.COMPLETED, job.pk])
    kept_is_cold(reread=1)
    render_is_fresh()
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    kept_is_cold(reread=1)
    render_is_fresh()
    # A GPU of the job taken out of its tray (no longer on a rendered tray) and put back.
    gpu = Allocation.objects.filter(job=job).order_by("pk").first().gpu
    home, index = gpu.tray_id, gpu.index
    Gpu.objects.filter(pk=gpu.pk).update(tray=None, index=None)
    kept_is_cold(reread=1)
    render_is_fresh()
    Gpu.objects.filter(pk=gpu.pk).update(tray_id=home, index=index)
    kept_is_cold(reread=1)
    render_is_fresh()
    Allocation.objects.filter(job=job).delete()
    kept_is_cold(reread=1)
    render_is_fresh()

    # A tray replaced: its GPUs out, its row deleted and made again (a delete and an insert).
    last = ComputeTray.objects.filter(rack=r03).order_by("slot").last()
    gpus = dict(Gpu.objects.filter(tray=last).values_list("pk", "index"))
    Gpu.objects.filter(pk__in=gpus).update(tray=None, index=None)
    kept_is_cold(reread=1)
    render_is_fresh()
    hostname, slot, partition = last.hostname, last.slot, last.partition_id
    last.delete()
    kept_is_cold(reread=1)
    render_is_fresh()
    again = ComputeTray.objects.create(rack=r03, slot=slot, hostname=hostname, partition_id=partition)
    kept_is_cold(reread=1)
    render_is_fresh()
    for pk, index in gpus.items():
        Gpu.objects.filter(pk=pk).update(tray=again, index=index)
    kept_is_cold(reread=1)
    render_is_fresh()
    # A rack renamed: every rack's names (cold).
    Rack.objects.filter(pk=r03.pk).update(name="gb-r33")
    kept_is_cold(cold=True)
    render_is_cold()


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_read_of_its_own_changes_is_not_kept_and_a_rollback_leaves_the_kept_rows_right(demo_inventory):
    kept_rows.forget()
    kept_is_cold()
    r03 = rack_of("gb-r03")
    tray = ComputeTray.objects.filter(rack=r03).order_by("slot").first()
    before = kept_rows.kept()
    with transaction.atomic():
        ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ff"])
        assert kept_rows.kept_parts() == kept_rows._inventory()  # sees its own change
        assert kept_rows.kept() is before  # but does not keep what may be rolled back
        transaction.set_rollback(True)
    kept_is_cold(reread=0)
    # Read inside a transaction before it changed anything, kept; its later change is read when it commits.
    with transaction.atomic():
        kept_is_cold(reread=0)
        ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ee"])
    kept_is_cold(reread=1)
    render_is_cold()


@postgresql
@pytest.mark.django_db(transaction=True)
def test_pruning_the_log_makes_older_copies_read_cold(demo_inventory, monkeypatch):
    kept_rows.forget()
    kept_is_cold()
    monkeypatch.setattr(kept_rows, "PRUNE_AT", 0)
    tray = ComputeTray.objects.order_by("pk").first()
    ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ff"])
    kept_is_cold(reread=1)  # prunes after reading: the horizon moves past this copy's mark
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(rack_id) FROM {kept_rows.LOG} WHERE xid = 0")
        assert cursor.fetchone()[0] is not None
    kept_is_cold(reread=0)  # kept from after the prune: still checkable
    stale = kept_rows.kept()
    ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ee"])
    kept_is_cold(reread=1)
    kept_rows._kept[kept_rows._database()] = stale  # a copy from before the last prune
    # Cold when the horizon passed its mark; another database's transaction on the same server (a parallel
    # test run) can hold the horizon back, and then the copy is still checkable: either way, right.
    kept_is_cold(cold=horizon() > stale.mark.xmin)


def test_the_render_with_everything_kept_is_the_cold_render(demo_inventory, admin_user):
    """Whatever the database (SQLite reads cold rows but keeps the per-rack pieces): a render after changes
    equals a render of a process that keeps nothing."""
    configstate.forget_kept()
    render_is_cold()
    research = make_department("Research", guaranteed_gpus=8)
    make_job(research, "train", trays=list(ComputeTray.objects.filter(rack=rack_of("gb-r02"))[:2]))
    configstate.render_files(configstate.build_state())
    plans.create_and_apply(rack_of("gb-r03"), preset_layout("2x9"), drain=False, user=admin_user)
    ComputeTray.objects.filter(rack=rack_of("gb-r01")).update(ib_port_guids=["0x0002c90300a1b2ff", "bad"])
    render_is_cold()
    partition = NVLinkPartition.objects.filter(rack=rack_of("gb-r02")).order_by("pk").first()
    DedicatedPartition.objects.create(partition=partition, department=research)
    render_is_fresh()
    Department.objects.filter(pk=research.pk).update(slug="optics")
    render_is_fresh()
    NVLinkPartition.objects.filter(pk=partition.pk).update(service_tier="gpu_gold")
    render_is_fresh()
    render_is_cold()


@postgresql
@pytest.mark.django_db(transaction=True)
def test_the_beat_keeps_the_log_bounded_on_a_site_that_seldom_renders(demo_inventory, monkeypatch):
    from integrations.tasks import retry_stale_pushes

    kept_rows.forget()
    kept_is_cold()
    tray = ComputeTray.objects.order_by("pk").first()
    ComputeTray.objects.filter(pk=tray.pk).update(ib_port_guids=["0x0002c90300a1b2ff"])
    assert retry_stale_pushes()["render_log_pruned"] == 0  # under the bound: kept
    monkeypatch.setattr(kept_rows, "PRUNE_AT", 0)
    before = kept_rows.kept()
    assert retry_stale_pushes()["render_log_pruned"] > 0
    with connection.cursor() as cursor:  # every row older than the horizon is gone
        cursor.execute(f"SELECT count(*) FROM {kept_rows.LOG} WHERE xid > 0 AND xid < %s", [horizon()])
        assert cursor.fetchone()[0] == 0
    # Cold when the horizon passed the copy's mark (another database's transaction on the same server can
    # hold it back: the copy is then still checkable).
    kept_is_cold(cold=horizon() > before.mark.xmin)
