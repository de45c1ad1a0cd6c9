"""The demo `make run` shows (`manage.py seed_demo`) tells no lies: its times, names, drain reasons,
dedicated partitions, allocations and quota standing are consistent, the scheduler agrees with it, and
seeding again neither breaks nor duplicates it."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.utils import timezone

from core.hardware import GPUS_PER_TRAY
from integrations.tasks import sync_jobs
from inventory.choices import FabricState, GpuHealth, MigMode, TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu
from portal.demo.jobs import NAME_PREFIX
from portal.demo.seeding import seed_tenants
from scheduling.choices import HOLDING_STATES, JobEventKind, JobState, PriorityClass, Topology
from scheduling.models import Allocation, Job, JobEvent
from scheduling.services.passes import run_pass
from tenancy.models import DedicatedPartition, Department, Membership, QuotaSnapshot
from tenancy.quota import in_quota_prefix
from tests.factories import seed_demo

pytestmark = pytest.mark.django_db

STATE_WORDS = re.compile(r"queued|pending|waiting|starting|running|completed|done|failed|cancel", re.I)


# --- the invariants -------------------------------------------------------------------------------------


def check_times(now):
    for job in Job.objects.all():
        times = [t for t in (job.created_at, job.placed_at, job.started_at, job.finished_at) if t is not None]
        assert times == sorted(times), f"{job.name}: submitted, placed, started, finished out of order"
        assert times[-1] <= now, f"{job.name}: a time in the future"
        if job.state == JobState.PENDING:
            assert job.placed_at is job.started_at is job.finished_at is None, job.name
        if job.state in HOLDING_STATES:
            assert job.placed_at is not None and job.finished_at is None, job.name
        if job.state == JobState.RUNNING:
            # Within its limit, with an hour to spare: nothing ends a seeded job while `make run` runs.
            assert job.started_at + timedelta(minutes=job.time_limit_minutes) > now + timedelta(hours=1), (
                f"{job.name} runs past (or within an hour of) its {job.time_limit_minutes}-minute limit"
            )
        if job.state in (JobState.COMPLETED, JobState.FAILED):
            assert job.started_at is not None and job.finished_at is not None, job.name
            ran = job.finished_at - job.started_at
            assert ran <= timedelta(minutes=job.time_limit_minutes), f"{job.name} ran past its limit"
        if job.state == JobState.CANCELLED:
            assert job.finished_at is not None, job.name
    for job in Job.objects.prefetch_related("events"):
        at = [event.at for event in job.events.all()]
        assert at == sorted(at) and all(t <= now for t in at), f"{job.name}: its history is out of order"
        kinds = [event.kind for event in job.events.all()]
        assert kinds[0] == JobEventKind.SUBMITTED, job.name
        if job.placed_at is not None and job.state != JobState.PENDING:
            assert JobEventKind.PLACED in kinds, job.name


def check_names():
    for name, priority_class, state in Job.objects.values_list("name", "priority_class", "state"):
        assert name.startswith(f"{NAME_PREFIX[priority_class]}-"), f"{name} is not {priority_class}"
        assert not STATE_WORDS.search(name.removeprefix(NAME_PREFIX[priority_class])), (
            f"{name} names a state ({state})"
        )
    names = list(Job.objects.values_list("name", flat=True))
    assert len(names) == len(set(names))


def check_reasons_match_gpus():
    """A tray's reason that names a GPU ('on GPU 2', 'GPU 1 (uuid) ...') is what that GPU's row says."""
    trays = ComputeTray.objects.exclude(state=TrayState.UP)
    assert trays.exists()
    for tray in trays:
        gpus = {gpu.index: gpu for gpu in tray.gpus.all()}
        for index in re.findall(r"\bGPU (\d+)", tray.state_reason):
            gpu = gpus[int(index)]
            assert gpu.health == GpuHealth.UNHEALTHY, (
                f"{tray.hostname}: {tray.state_reason!r} but GPU {index} is {gpu.health}"
            )
    for tray in ComputeTray.objects.exclude(fabric_problems=[]):
        for problem in tray.fabric_problems:
            index, uuid = re.match(r"GPU (\d+) \((GPU-[0-9a-f-]+)\)", problem).groups()
            gpu = Gpu.objects.get(tray=tray, index=int(index))
            assert gpu.uuid == uuid and gpu.fabric_state != FabricState.COMPLETED, problem


def check_dedicated_partitions():
    dedications = list(DedicatedPartition.objects.select_related("partition"))
    for dedication in dedications:
        hosts = set(dedication.partition.trays.values_list("hostname", flat=True))
        for job in Job.objects.exclude(placement=[]):
            if hosts.isdisjoint(job.placement):
                continue
            if job.department_id == dedication.department_id:
                continue
            # Another department may only borrow it, as preemptible work, while it runs.
            assert (
                job.state in HOLDING_STATES and job.over_quota and job.priority_class == PriorityClass.TRAIN
            ), f"{job.name} of {job.department} on {dedication}"
    return dedications


def check_allocations():
    seen = set()
    for job in Job.objects.filter(state__in=HOLDING_STATES).select_related("department"):
        allocations = list(Allocation.objects.filter(job=job).select_related("gpu__tray__partition"))
        assert len(allocations) == job.gpus, f"{job.name} holds {len(allocations)} GPUs, not {job.gpus}"
        trays = {a.gpu.tray for a in allocations}
        assert {t.hostname for t in trays} == set(job.placement), job.name
        for allocation in allocations:
            gpu = allocation.gpu
            assert gpu.pk not in seen, f"GPU {gpu.uuid} given twice"
            seen.add(gpu.pk)
            assert gpu.health != GpuHealth.UNHEALTHY and gpu.tray.state == TrayState.UP, (
                f"{job.name} holds unschedulable GPU {gpu.uuid}"
            )
        if job.gpus > GPUS_PER_TRAY:
            assert len(trays) == job.gpus // GPUS_PER_TRAY, f"{job.name}: whole trays"
            for tray in trays:  # the fabric of its trays is the partition it was promised
                for gpu in tray.gpus.all():
                    assert gpu.fabric_state == FabricState.COMPLETED, job.name
                    assert gpu.reported_clique_id == tray.partition.clique_id, job.name
            if job.topology == Topology.PARTITION:
                assert len({t.partition_id for t in trays}) == 1, f"{job.name} spans partitions"
            if job.topology == Topology.RACK:
                assert len({t.rack_id for t in trays}) == 1, f"{job.name} spans racks"
        else:
            assert len(trays) == 1, job.name
    assert not Allocation.objects.exclude(job__state__in=HOLDING_STATES).exists()


def check_standing():
    """Per department, its running non-preemptible jobs, then its oldest training, hold its guarantee (the
    engine's Standing); the rest borrow, and only training does."""
    for department in Department.objects.all():
        jobs = sorted(
            Job.objects.filter(department=department, state__in=HOLDING_STATES),
            key=lambda j: (j.priority_class == PriorityClass.TRAIN, j.placed_at or j.started_at, j.pk),
        )
        in_quota = in_quota_prefix(department.guaranteed_gpus, [(j.pk, j.gpus) for j in jobs])
        for job in jobs:
            assert job.over_quota == (job.pk not in in_quota), f"{job.name}: over_quota={job.over_quota}"
            if job.over_quota:
                assert job.priority_class == PriorityClass.TRAIN, f"{job.name} borrows but is not preemptible"


def check_history(now):
    last = QuotaSnapshot.objects.order_by("-taken_at").first()
    assert now - last.taken_at < timedelta(minutes=5)
    for department in Department.objects.all():
        snapshot = department.quota_snapshots.order_by("-taken_at").first()
        in_use = Allocation.objects.filter(job__department=department, job__state__in=HOLDING_STATES).count()
        assert snapshot.in_use == in_use, f"{department}: chart ends at {snapshot.in_use}, cards say {in_use}"


def check_demo_is_true():
    now = timezone.now()
    check_times(now)
    check_names()
    check_reasons_match_gpus()
    check_allocations()
    check_standing()
    check_history(now)
    return check_dedicated_partitions()


def picture():
    """What a pass could change: each job's state, standing and GPUs."""
    held = {}
    for job_id, gpu_id in Allocation.objects.values_list("job_id", "gpu_id"):
        held.setdefault(job_id, set()).add(gpu_id)
    return {
        pk: (state, over_quota, frozenset(held.get(pk, ())))
        for pk, state, over_quota in Job.objects.values_list("pk", "state", "over_quota")
    }


# --- the tests ------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_the_demo_make_run_shows_is_true(var_dir):
    out = seed_demo()
    assert "Seeded 8 racks" in out and "First scheduling pass" in out
    dedications = check_demo_is_true()

    # It still shows everything: four departments, Inference's dedicated tier in use by Inference only,
    # and jobs in every state.
    assert Department.objects.count() == 4
    assert [d.department.slug for d in dedications] == ["inference"]
    tier = set(dedications[0].partition.trays.values_list("hostname", flat=True))
    on_tier = Job.objects.filter(state__in=HOLDING_STATES, department__slug="inference")
    assert any(not tier.isdisjoint(job.placement) for job in on_tier)
    states = set(Job.objects.values_list("state", flat=True))
    assert {
        JobState.PENDING,
        JobState.RUNNING,
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    } <= states
    assert set(Job.objects.values_list("priority_class", flat=True)) == set(PriorityClass.values)
    assert Job.objects.filter(state=JobState.RUNNING, over_quota=True).exists()  # Research borrows
    # Pending jobs wait with the scheduler's own reason, not a made-up one.
    for reason in Job.objects.filter(state=JobState.PENDING).values_list("pending_reason", flat=True):
        assert reason.startswith("waiting: ") and reason != "waiting for the scheduler"
    # The drained tray's reason is the rules' drain for its GPU 2 (named by its UUID), which shows unhealthy.
    drained = ComputeTray.objects.get(state=TrayState.DRAIN)
    assert drained.state_reason.startswith("rackplane: XID 79 ")
    assert drained.gpus.get(index=2).uuid in drained.state_reason
    assert drained.gpus.get(index=2).health == GpuHealth.UNHEALTHY
    # Its timeline shows why: the XID 79 its node reported, on that GPU (the health rules' own event row).
    [event] = drained.health_events.all()
    assert (event.xid, event.gpu, event.mnemonic) == (
        79,
        drained.gpus.get(index=2),
        "GPU_HAS_FALLEN_OFF_THE_BUS",
    )
    # And its GPU 0 is in MIG mode, with its devices, held by no job (the tray is out).
    mig = Gpu.objects.get(mig_mode=MigMode.ENABLED)
    assert mig.tray == drained and mig.index == 0 and mig.mig_devices.count() == 4
    assert not mig.allocations.exists()
    # The simulated nodes do not report every minute: the demo's node-silent rule warns, so the demo keeps
    # scheduling once its trays read as silent.
    from inventory.models import HealthRule
    from inventory.staleness import silent_policy

    assert not silent_policy().hold
    assert HealthRule.objects.get(kind="node_silent").action == "warn"


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_seeded_running_jobs_end_at_their_time_limits(
    var_dir, render_dir, django_capture_on_commit_callbacks
):
    """make run has no live backend: the seeded running jobs belong to the embedded one, which ends each at
    its time limit counted from when it started, so the demo never shows a job running past its limit."""
    seed_demo()
    running = list(Job.objects.filter(state=JobState.RUNNING))
    assert running and all(job.backend_id == f"rendered/rp-{job.pk}" for job in running)
    for job in running:
        ends = (render_dir / "jobs" / f"rp-{job.pk}.ends").read_text()
        assert ends == (job.started_at + timedelta(minutes=job.time_limit_minutes)).isoformat()

    first = min(running, key=lambda job: job.started_at + timedelta(minutes=job.time_limit_minutes))
    (render_dir / "jobs" / f"rp-{first.pk}.ends").write_text(timezone.now().isoformat())  # its limit is up
    with django_capture_on_commit_callbacks(execute=True):
        sync_jobs()
    first.refresh_from_db()
    assert first.state == JobState.COMPLETED and not Allocation.objects.filter(job=first).exists()
    assert Job.objects.filter(state=JobState.RUNNING).count() >= len(running) - 1


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_the_scheduler_agrees_with_the_seeded_state(var_dir):
    """Right after seeding, a pass starts what fits from the queue and nothing else: no preemption, no
    running job re-flagged or moved; the pass after it changes nothing."""
    seed_datacenter(racks=8)
    seed_tenants()
    check_demo_is_true()
    before = picture()

    first = run_pass()
    after = picture()
    assert first.preempted == 0
    assert not JobEvent.objects.filter(kind=JobEventKind.PREEMPTED).exists()
    # A build or inference job the pass started holds its department's guarantee before training (Standing):
    # only there may a running training job's standing change (check_standing below says how).
    firm_starts = set(
        Job.objects.filter(pk__in=[pk for pk, (state, _, _) in before.items() if state == JobState.PENDING])
        .exclude(state=JobState.PENDING)
        .exclude(priority_class=PriorityClass.TRAIN)
        .values_list("department_id", flat=True)
    )
    for pk, (state, over_quota, gpus) in before.items():
        if state == JobState.PENDING:
            assert after[pk][0] in (JobState.PENDING, JobState.STARTING)
            continue
        job = Job.objects.get(pk=pk)
        if job.department_id in firm_starts:
            assert after[pk][::2] == (state, gpus), f"the pass changed {job.name}"
        else:
            assert after[pk] == (state, over_quota, gpus), f"the pass changed {job.name}"
    check_demo_is_true_after_pass()

    second = run_pass()
    assert (second.started, second.preempted) == (0, 0)
    assert picture() == after


def check_demo_is_true_after_pass():
    now = timezone.now()
    check_times(now)
    check_names()
    check_allocations()
    check_standing()
    check_dedicated_partitions()


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_seeding_again_changes_nothing_and_keeps_it_true(var_dir):
    seed_demo()
    counts = {
        model.__name__: model.objects.count()
        for model in (Job, Allocation, JobEvent, Department, Membership, QuotaSnapshot, Gpu, get_user_model())
    }
    jobs = picture()

    out = seed_demo()  # `make run` again
    assert "nothing seeded" in out
    assert {model: count for model, count in counts.items()} == {
        model.__name__: model.objects.count()
        for model in (Job, Allocation, JobEvent, Department, Membership, QuotaSnapshot, Gpu, get_user_model())
    }
    assert picture() == jobs
    check_demo_is_true()


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_reseeding_with_reset_is_true_and_its_logins_work(var_dir):
    seed_demo("--racks", "3")
    seed_demo("--racks", "3", "--reset")
    assert Department.objects.count() == 4 and Membership.objects.count() == 9
    assert get_user_model().objects.filter(username="alice").count() == 1
    check_demo_is_true()
    logins = (var_dir / "demo-logins.txt").read_text()
    password = re.search(r"^alice \(.+ of Research\): (\S+)$", logins, re.M).group(1)
    assert authenticate(username="alice", password=password) is not None


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
@pytest.mark.parametrize("racks", [1, 3])
def test_smaller_demos_are_true_too(var_dir, racks):
    seed_demo("--racks", str(racks))
    check_demo_is_true()
    assert Job.objects.filter(state=JobState.RUNNING).exists()


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_every_seeded_running_job_says_why_it_runs_where_it_does(var_dir, client, platform_admin):
    """The demo's running jobs were placed by the engine (portal.demo.jobs), and each page says why there in
    the engine's own sentence (scheduling.engine.placement.explain), naming the partition or rack it chose."""
    seed_demo()
    client.force_login(platform_admin)
    running = list(Job.objects.filter(state=JobState.RUNNING))
    assert running
    for job in running:
        page = client.get(f"/scheduling/jobs/{job.pk}/").content.decode()
        found = re.search(r'<p class="why-here"><b>Why here:</b> (.+?)\.</p>', page)
        assert found, f"{job.name} has no why-here sentence"
        trays = ComputeTray.objects.filter(hostname__in=job.placement).select_related("rack", "partition")
        named = {f"{t.rack.name} {t.partition.name}" for t in trays} | {t.rack.name for t in trays}
        assert any(name in found.group(1) for name in named), (job.name, found.group(1))
