"""The test suite's factories: people, departments, jobs, API clients and the local render target.

Plain functions, so fixtures, test bodies and module-level helpers can all use them; tests/conftest.py makes
the shared personas (platform admin, lead of A, member of A, member of B, outsider, node agent) fixtures.
Everything goes through the code the portal itself uses where it has such code (departments through
`save_department`, so isolation pools are allocated; the node agent through `manage.py
discovery_agent_token --fleet`); jobs are rows as the scheduling pass leaves them, without running the pass:
their in-quota/borrowed flags too (`stand_jobs`), unless a test sets `over_quota` itself.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from datetime import timedelta
from io import StringIO

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core import posix
from core.access import Role
from integrations.models import ConfigTarget
from inventory.choices import GpuHealth, MigMode, TrayState
from inventory.demo import GB200_MIG_PROFILES
from inventory.discovery import nvidia_smi
from inventory.discovery.mig import GpuMig, MigInstance, MigProfile
from inventory.ingest.gpus import write_mig_devices
from inventory.ingest.reports import ingest_report
from inventory.mig_layouts import place
from inventory.models import ComputeTray, Gpu
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES
from scheduling.models import Allocation, Job
from scheduling.usage import department_positions
from tenancy.choices import PosixSource
from tenancy.models import Department, Membership, PosixAccount
from tenancy.quota import in_quota_prefix
from tenancy.services import save_department

# --- people ---------------------------------------------------------------------------------------------


def make_user(username: str, *, staff: bool = False, password: str | None = None, posix: bool = True):
    """An active account (`staff`: a platform admin). Without a password it cannot sign in with one:
    tests sign people in with `client.force_login` or a token. With `posix` (the default) it has a POSIX
    identity, as a person of a real site has (jobs on a live backend run as it): see `give_posix_account`."""
    user = get_user_model().objects.create_user(username, f"{username}@example.com", password, is_staff=staff)
    if posix:
        give_posix_account(user)
    return user


def give_posix_account(user, name: str = "", uid: int | None = None, gid: int | None = None, groups=()):
    """An administrator's POSIX mapping for `user`: login name from the username (lower case, other
    characters as _), uid and gid 30000 + the account's id unless given."""
    if not name:
        name = re.sub(r"[^a-z0-9_.-]", "_", user.get_username().lower())[:24] or "user"
        if not re.match(r"[a-z_]", name) or name in posix.RESERVED_NAMES:
            name = f"u{name}"[:24]
        if PosixAccount.objects.filter(name=name).exists():
            name = f"{name[:20]}{user.pk}"
    number = 30000 + user.pk
    # bulk_create sends no post_save: a test's fixture is not an audited change (tests count audit events).
    account = PosixAccount(
        user=user,
        name=name,
        uid=number if uid is None else uid,
        gid=number if gid is None else gid,
        groups=list(groups),
        source=PosixSource.ADMIN,
    )
    account.full_clean()
    return PosixAccount.objects.bulk_create([account])[0]


def make_member(username: str, department: Department, role: Role = Role.MEMBER, **user_fields):
    """A new account with one membership: a member, or with `role=Role.LEAD` a lead of `department`."""
    user = make_user(username, **user_fields)
    Membership.objects.create(user=user, department=department, role=role)
    return user


def make_node_agent():
    """The fleet node agent, made as operators make it: `manage.py discovery_agent_token --fleet` (an
    account with the inventory.report_discovery permission and an API token; it reports for every host)."""
    out = StringIO()
    call_command("discovery_agent_token", "--fleet", stdout=out)
    key = out.getvalue().strip().rsplit(" ", 1)[1]
    token = Token.objects.select_related("user").get(key=key)
    return token.user


def token_client(user) -> APIClient:
    """A DRF client authenticated with `user`'s API token (made if missing), as scripts call the API."""
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


# --- departments -----------------------------------------------------------------------------------------


def make_department(name: str, slug: str | None = None, **fields) -> Department:
    """A department saved through the service (validated; VLAN, VNI, P_Key and export path allocated)."""
    return save_department(Department(name=name, slug=slug or name.lower(), **fields))


# --- GPUs and trays --------------------------------------------------------------------------------------


def healthy_gpus(count: int, skip: int = 0) -> list[Gpu]:
    """GPUs the scheduler could use (on up trays, not unhealthy), in primary-key order; allocations are
    not looked at."""
    gpus = Gpu.objects.filter(tray__state=TrayState.UP).exclude(health=GpuHealth.UNHEALTHY).order_by("pk")
    return list(gpus[skip : skip + count])


def free_trays(count: int, skip: int = 0) -> list[ComputeTray]:
    """Up trays with four healthy GPUs and no allocation, in rack and slot order."""
    trays = (
        ComputeTray.objects.filter(state=TrayState.UP)
        .exclude(gpus__health=GpuHealth.UNHEALTHY)
        .exclude(gpus__allocations__isnull=False)
        .order_by("rack__name", "slot")
        .distinct()
    )
    return list(trays[skip : skip + count])


def _trays(trays: Iterable[ComputeTray | str]) -> list[ComputeTray]:
    trays = list(trays)
    hostnames = [t for t in trays if isinstance(t, str)]
    if not hostnames:
        return trays
    by_name = ComputeTray.objects.in_bulk(hostnames, field_name="hostname")
    return [by_name[t] if isinstance(t, str) else t for t in trays]


# --- jobs ------------------------------------------------------------------------------------------------


def stand_jobs(department: Department) -> None:
    """Set `over_quota` on the department's GPU-holding jobs as every pass does (scheduling.engine.scheduler,
    Standing): in quota while their GPUs fit its in-quota share (tenancy.quota.in_quota_prefix),
    non-preemptible classes first, then oldest first (a job never started counts as the newest). The
    engine's one other rule, a job on another department's dedicated partition always borrows, is left out:
    tests of it set `over_quota` themselves or run the pass."""
    share = department_positions().of(department).guarantee.in_quota
    jobs = sorted(
        Job.objects.filter(department=department, state__in=HOLDING_STATES),
        key=lambda j: (
            j.priority_class in PREEMPTIBLE_CLASSES,
            (j.placed_at or j.started_at).timestamp() if (j.placed_at or j.started_at) else float("inf"),
            j.pk,
        ),
    )
    in_quota = in_quota_prefix(share, [(j.pk, j.gpus) for j in jobs])
    changed = [j for j in jobs if j.over_quota != (j.pk not in in_quota)]
    for job in changed:
        job.over_quota = job.pk not in in_quota
    Job.objects.bulk_update(changed, ["over_quota"])


def make_job(
    department: Department,
    name: str = "train",
    state: JobState = JobState.RUNNING,
    trays: Iterable[ComputeTray | str] = (),
    submitted_by=None,
    **fields,
) -> Job:
    """A job in `state` that was placed on `trays` (its placement); while it holds GPUs (starting or
    running) it has a start time and holds every GPU of those trays. It asks for 4 GPUs per tray (4 without
    trays) unless `gpus` says otherwise. Unless `over_quota` is given, the department's jobs are stood
    again (`stand_jobs`)."""
    trays = _trays(trays)
    fields.setdefault("gpus", 4 * len(trays) or 4)
    if state in HOLDING_STATES:
        fields.setdefault("started_at", timezone.now())
    job = Job.objects.create(
        department=department,
        name=name,
        state=state,
        submitted_by=submitted_by,
        placement=[tray.hostname for tray in trays],
        **fields,
    )
    if state in HOLDING_STATES:
        Allocation.objects.bulk_create(
            Allocation(job=job, gpu=gpu) for gpu in Gpu.objects.filter(tray__in=trays).order_by("pk")
        )
        if "over_quota" not in fields:
            stand_jobs(department)
            job.refresh_from_db(fields=["over_quota"])
    return job


def run_job(
    department: Department,
    gpus: Iterable[Gpu] = (),
    name: str = "train",
    *,
    trays: Iterable[ComputeTray | str] = (),
    state: JobState = JobState.RUNNING,
    size: int | None = None,
    **fields,
) -> Job:
    """A job holding `gpus` (Gpu rows) and every GPU of `trays` (rows or hostnames, which become its
    placement): its Allocation rows, as the pass writes them. `state` may be one that does not hold GPUs,
    for rows the pass has not cleaned up yet (a preempted job, a cancel in flight). It asks for as many
    GPUs as it holds unless `size` says otherwise. Unless `over_quota` is given, the department's holding
    jobs are stood again (`stand_jobs`)."""
    trays = _trays(trays)
    held = [*gpus, *Gpu.objects.filter(tray__in=trays).order_by("pk")]
    if trays:
        fields.setdefault("placement", [tray.hostname for tray in trays])
    job = Job.objects.create(department=department, name=name, gpus=size or len(held), state=state, **fields)
    Allocation.objects.bulk_create([Allocation(job=job, gpu=gpu) for gpu in held])
    if state in HOLDING_STATES and "over_quota" not in fields:
        stand_jobs(department)
        job.refresh_from_db(fields=["over_quota"])
    return job


def finished_job(department: Department, name: str, *, ago: timedelta, ran: timedelta, **fields) -> Job:
    """A completed job row of the history: submitted `ago`, started at once and ran `ran` (what a what-if
    replays, scheduling.whatif_runs.history). `fields`: gpus, or mig_profile and mig_slices (gpus 0)."""
    submitted = timezone.now() - ago
    fields.setdefault("gpus", 0 if fields.get("mig_slices") else 4)
    job = Job.objects.create(
        department=department,
        name=name,
        state=JobState.COMPLETED,
        placed_at=submitted,
        started_at=submitted,
        finished_at=submitted + ran,
        time_limit_minutes=max(60, int(ran.total_seconds() // 60) * 2),
        **fields,
    )
    Job.objects.filter(pk=job.pk).update(created_at=submitted)
    return job


# --- configuration targets -------------------------------------------------------------------------------


def local_target() -> ConfigTarget:
    """The embedded `local` directory target, writing into settings.RACKPLANE_RENDER_DIR (the data migration
    makes it; made again here when a transactional test before this one flushed the database)."""
    return ConfigTarget.objects.get_or_create(
        name="local", defaults={"kind": "directory", "settings": {"path": "", "keep": 5}}
    )[0]


def nodes_report_their_partitions(rack) -> None:
    """Every tray of `rack` reports, through the discovery service a node agent posts to, its GPUs in the
    clique of the tray's partition with the fabric registration completed (what real nodes report once the
    fabric manager has applied a plan)."""
    for tray in ComputeTray.objects.filter(rack=rack, partition__isnull=False).select_related("partition"):
        gpus = [
            nvidia_smi.ReportedGpu(
                gpu.uuid,
                gpu.index,
                str(rack.cluster_uuid),
                tray.partition.clique_id,
                nvidia_smi.FabricState.COMPLETED,
                "Success",
                nvidia_smi.GpuHealth(gpu.health),
            )
            for gpu in tray.gpus.order_by("index")
        ]
        ingest_report(tray.hostname, "json", gpus)


def node_report(
    tray: ComputeTray,
    clique_id: int = 2,
    *,
    health: dict[int, str] | None = None,
    gpu_fields=None,
    fabric_fields: dict | None = None,
    **extra,
) -> dict:
    """The JSON body a node agent posts to /api/v1/discovery/reports/ for `tray`: its GPUs registered in
    `clique_id` (completed, healthy unless `health` maps a GPU index to another word), each GPU with
    `gpu_fields(gpu)` and its fabric with `fabric_fields` added, and `extra` at the top level."""
    health = health or {}
    return {
        "host": tray.hostname,
        "gpus": [
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "serial": gpu.serial,
                "product": gpu.product,
                "memory_mib": gpu.memory_mib,
                **(gpu_fields(gpu) if gpu_fields else {}),
                "fabric": {
                    "state": "completed",
                    "status": "Success",
                    "cluster_uuid": str(tray.rack.cluster_uuid),
                    "clique_id": clique_id,
                    "health": health.get(gpu.index, "healthy"),
                    **(fabric_fields or {}),
                },
            }
            for gpu in tray.gpus.order_by("index")
        ],
        **extra,
    }


def seed_demo(*args: str) -> str:
    """`manage.py seed_demo ARGS` (what `make run` seeds); its output."""
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def set_activity(gpus, utilization: float, low_for=None, *, age=None) -> None:
    """Each GPU's latest utilization row (tenancy GpuActivity), sampled `age` ago (now by default) and low
    for `low_for` (None: not low)."""
    from datetime import timedelta

    from tenancy.models import GpuActivity

    now = timezone.now()
    for gpu in gpus:
        GpuActivity.objects.update_or_create(
            gpu=gpu,
            defaults={
                "utilization": utilization,
                "sampled_at": now - (age or timedelta(0)),
                "low_since": now - low_for if low_for is not None else None,
            },
        )


def make_unreachable_slurm_target(directory):
    """A live Slurm target (a slurmrestd address and a jwt_key under `directory`) where nothing listens: jobs
    of people without an identity are refused before anything is sent, and a status asked there fails."""
    from integrations.models import ConfigTarget

    key = directory / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)
    return ConfigTarget.objects.create(
        name="cluster",
        kind="slurm",
        settings={
            "config_dir": str(directory),
            "rest_url": "http://127.0.0.1:9",
            "rest_user": "slurm",
            "jwt_key_file": str(key),
        },
    )


def post_kubernetes_job(client, work: dict):
    """POST a one-GPU Kubernetes job of Research with `work` through the jobs API as `client`'s person."""
    body = {"department": "research", "name": "train-llm", "gpus": 1, "backend": "kubernetes", "work": work}
    return client.post("/api/v1/jobs/", body, format="json")


# --- partition plans ---------------------------------------------------------------------------------------


def scheduler_plan(rack, reason: str = "an earlier re-carve", *, ago=None, **fields):
    """A partition plan the scheduler made (carving that follows demand), applied unless `status` says
    otherwise, created `ago` (a timedelta) before now: what the hourly bound and the pages count."""
    from inventory.choices import PlanOrigin, PlanStatus
    from inventory.models import PartitionPlan

    fields.setdefault("status", PlanStatus.APPLIED)
    plan = PartitionPlan.objects.create(
        rack=rack, layout=[], base_layout="", origin=PlanOrigin.SCHEDULER, reason=reason, **fields
    )
    if ago:
        PartitionPlan.objects.filter(pk=plan.pk).update(created_at=plan.created_at - ago)
        plan.refresh_from_db()
    return plan


# --- MIG -------------------------------------------------------------------------------------------------


def mig_tray(
    hostname: str, layout: dict[str, int] | None = None, *, name: str = "all-balanced"
) -> ComputeTray:
    """A tray given a MIG layout (`layout`, per GPU; mig-parted's GB200 all-balanced by default) whose four
    GPUs report it: MIG mode on, the GB200's profiles (inventory.demo.GB200_MIG_PROFILES) and one MIG device
    per instance, placed as inventory.mig_layouts.place places them (MigDevice rows, as discovery writes)."""
    layout = layout or {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}
    profiles = {
        pname: MigProfile(pid, pname, 0, count, memory, False, sms, tuple((s, size) for s in starts))
        for pid, pname, count, memory, sms, starts, size in GB200_MIG_PROFILES
    }
    tray = ComputeTray.objects.get(hostname=hostname)
    ComputeTray.objects.filter(pk=tray.pk).update(mig_layout=name, mig_layout_devices=layout)
    states = {}
    for gpu in Gpu.objects.filter(tray=tray).order_by("index"):
        instances = tuple(
            MigInstance(
                gpu_instance_id=gi,
                compute_instance_id=0,
                profile=pname,
                profile_id=profiles[pname].profile_id,
                placement_start=start,
                placement_size=size,
                uuid=f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'{gpu.uuid}/{gi}')}",
                multiprocessors=profiles[pname].multiprocessors,
                memory_mib=profiles[pname].memory_mib,
            )
            for gi, (pname, start, size) in enumerate(place(layout, profiles.values()), start=1)
        )
        mig = GpuMig(gpu.uuid, MigMode.ENABLED, MigMode.ENABLED, instances, tuple(profiles.values()), True)
        Gpu.objects.filter(pk=gpu.pk).update(
            mig_mode=MigMode.ENABLED, mig_pending=MigMode.ENABLED, mig=mig.as_dict()
        )
        states[gpu.pk] = mig.as_dict()
    write_mig_devices(states)
    tray.refresh_from_db()
    return tray
