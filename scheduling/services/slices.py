"""Placing slice jobs (scheduling.slices) on free MIG devices, inside the scheduling pass.

The pass (scheduling.services.passes) calls `place_slice_jobs` under its lock, after the engine's decisions:
the engine places whole GPUs and never sees a GPU in MIG mode (tenancy.services.schedulable_gpus_q), and a
slice job never takes a whole GPU, so the two never compete for a device.

A job's slices are MIG devices (MigDevice rows, as the nodes report them) of exactly its profile (Slurm's
``--gres=gpu:<profile>:N`` and the device plugin's ``nvidia.com/mig-<profile>`` give a job devices of the type
it names, never a larger one), on one tray that is up, whose MIG layout offers the profile, not held by a
starting or running job (SliceAllocation, unique per device). Pending slice jobs are served oldest first.

Which devices (scheduling.engine.mig.choose): the first by the fragmentation-aware rule against the mix of
profiles the waiting slice jobs ask for, ties broken best-fit (the GPU left with the fewest free compute
slices first: packing keeps whole GPUs' worth of slices free for the large profiles), among the trays with
enough free devices for the whole job; the rest on the same tray by the same rule.

Quota, in GPU-equivalents (scheduling.slices: a slice counts g/7): a slice job starts only while its
department's holdings (whole GPUs of its running jobs plus the equivalents of its running slice jobs) with it
stay within the department's limit; a build or inference job only within its guarantee. A slice job beyond
the guarantee starts over quota (borrowed).

Reclaim, as the engine reclaims borrowed GPUs: a slice job within its department's guarantee that finds no
free devices of its profile takes them back from borrowed (over-quota) slice jobs of other departments. On
the tray where the fewest of them free enough devices of its profile (with the free ones there), the newest
borrowers first, they are preempted (their backend jobs cancelled, their devices given back, back in the
queue, their submitters told) and the job starts on the freed devices in the same pass. A whole-GPU job never
takes a MIG device, so it reclaims none, and a slice job never preempts whole-GPU work.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from django.db.models import Exists, F, OuterRef, Sum
from django.db.models.functions import Lower

from core.audit import update_recorded
from core.enqueue import enqueue
from core.notifications.recording import enabled_subscriptions
from core.task_names import DISPATCH_JOB
from inventory.choices import TrayState
from inventory.mig_layouts import COMPUTE_SLICES, WHOLE_GPU_LAYOUTS
from inventory.models import MigDevice
from scheduling import slices
from scheduling.choices import HOLDING_STATES, JobEventKind, JobState
from scheduling.engine.mig import FRAGMENTATION_AWARE, FreeInstance, SliceProfile, choose
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES
from scheduling.engine.words import CLAUSES, WAITING, say
from scheduling.models import Job, JobEvent, SliceAllocation
from scheduling.services.actions import notify_job
from scheduling.services.pass_writes import REQUEUED, cancel_preempted
from scheduling.words import (
    BACK_IN_QUEUE,
    IN_QUOTA,
    NO_FREE_SLICE,
    NO_SLICE_TRAY,
    NO_TRAY_WITH_SLICES,
    PLACED_SLICES,
    RECLAIMED_BY,
    SLICES_BORROWED,
    SLICES_OVER_GUARANTEE,
    SLICES_OVER_LIMIT,
)
from tenancy.models import Department


@dataclass(frozen=True)
class Device:
    """A MIG device on a tray in service whose layout offers its profile: its UUID, GPU (pk, index), tray,
    placement, and whether a job holds it."""

    uuid: str
    gpu_id: int
    gpu_index: int
    tray: str
    start: int
    profile: str
    held: bool = False


def mig_devices() -> list[Device]:
    """MIG devices on trays in service whose layout offers their profile, held or not (one query)."""
    held = SliceAllocation.objects.annotate(key=Lower("mig_uuid")).filter(key=Lower(OuterRef("uuid")))
    rows = (
        MigDevice.objects.filter(gpu__tray__state=TrayState.UP)
        .exclude(gpu__tray__mig_layout__in=WHOLE_GPU_LAYOUTS)
        .annotate(held=Exists(held))
        .values_list(
            "uuid",
            "gpu_id",
            "gpu__index",
            "gpu__tray__hostname",
            "placement_start",
            "profile",
            "held",
            "gpu__tray__mig_layout_devices",
        )
        .order_by("gpu__tray__rack__name", "gpu__tray__slot", "gpu__index", "placement_start")
    )
    return [
        Device(uuid, gpu, index, tray, start, profile, is_held)
        for uuid, gpu, index, tray, start, profile, is_held, layout in rows
        if profile in (layout or {})  # a device left from an older layout: not given
    ]


@dataclass(frozen=True)
class Borrowed:
    """A borrowed (over-quota) slice job holding MIG devices: what a reclaim may take back."""

    job_id: int
    department_id: int
    placed_at: datetime | None
    equivalents: Fraction
    uuids: frozenset[str]  # its devices' MIG UUIDs, lower-case


_BORROWED_COLUMNS = (
    "job_id",
    "job__department_id",
    "job__placed_at",
    "job__mig_slices",
    "job__mig_compute_slices",
    "mig_uuid",
)


def borrowed_slice_jobs() -> list[Borrowed]:
    """Every borrowed slice job holding devices, newest placed first (the order a reclaim takes them). One
    query."""
    held = SliceAllocation.objects.filter(job__state__in=HOLDING_STATES, job__over_quota=True)
    rows = held.values_list(*_BORROWED_COLUMNS)
    jobs: dict[int, tuple] = {}
    uuids: dict[int, set[str]] = defaultdict(set)
    for job_id, department, placed_at, count, g, uuid in rows:
        jobs[job_id] = (department, placed_at, Fraction(count * g, COMPUTE_SLICES))
        uuids[job_id].add(uuid.lower())
    borrowed = [Borrowed(pk, d, at, eq, frozenset(uuids[pk])) for pk, (d, at, eq) in jobs.items()]
    newest = sorted(borrowed, key=lambda b: (b.placed_at.timestamp() if b.placed_at else 0.0, b.job_id))
    return newest[::-1]


def _reclaim(
    job: Job,
    request: SliceProfile,
    devices: list[Device],
    everything: list[Device],
    borrowed: list[Borrowed],
    profiles: dict,
    mix: dict[str, float],
) -> tuple[list[Device], list[Borrowed]]:
    """For an in-quota job that found no free devices: the devices it takes and the borrowed slice jobs of
    other departments to preempt for them (module docstring), or ([], []) when no reclaim gives it enough."""
    on_device = {d.uuid.lower(): d for d in everything}
    options = []
    for tray in dict.fromkeys(d.tray for d in everything if d.profile == job.mig_profile):
        free = [d for d in devices if d.tray == tray and d.profile == job.mig_profile]
        victims: list[Borrowed] = []
        freed: list[Device] = []
        for other in borrowed:
            if len(free) + len(freed) >= job.mig_slices:
                break
            if other.department_id == job.department_id:
                continue
            held = [on_device[u] for u in other.uuids if u in on_device]
            mine = [d for d in held if d.tray == tray and d.profile == job.mig_profile]
            if mine:
                victims.append(other)
                freed += held
        if victims and len(free) + sum(d.profile == job.mig_profile for d in freed) >= job.mig_slices:
            options.append((len(victims), sum(v.equivalents for v in victims), tray, victims, freed))
    if not options:
        return [], []
    _, _, tray, victims, freed = min(options, key=lambda o: o[:3])
    pool = [d for d in devices if d.tray == tray] + [
        Device(d.uuid, d.gpu_id, d.gpu_index, d.tray, d.start, d.profile) for d in freed
    ]
    taken, _ = _pick(job, request, pool, everything, profiles, mix)
    return taken, victims


def _held_equivalents() -> dict[int, Fraction]:
    """GPU-equivalents each department holds: whole GPUs of its holding jobs and its slice jobs' slices
    (g/7 each: Job.mig_compute_slices). One query."""
    rows = (
        Job.objects.filter(state__in=HOLDING_STATES)
        .values("department_id")
        .annotate(gpus=Sum("gpus"), slice_g=Sum(F("mig_slices") * F("mig_compute_slices")))
        .order_by()
    )
    held: dict[int, Fraction] = defaultdict(Fraction)
    for row in rows:
        held[row["department_id"]] = (row["gpus"] or 0) + Fraction(row["slice_g"] or 0, COMPUTE_SLICES)
    return held


def _pick(
    job: Job,
    request: SliceProfile,
    devices: list[Device],
    everything: list[Device],
    profiles: dict,
    mix: dict[str, float],
) -> tuple[list[Device], str]:
    """The devices the job takes (all on one tray) of the free `devices`, or ([], why it waits);
    `everything`: the devices held or not."""
    mine = [d for d in devices if d.profile == job.mig_profile]
    if not mine:
        held = sum(1 for d in everything if d.profile == job.mig_profile)
        if held:
            return [], say(NO_FREE_SLICE, profile=job.mig_profile, total=held)
        return [], say(NO_SLICE_TRAY, profile=job.mig_profile)
    per_tray: dict[str, list[Device]] = defaultdict(list)
    for device in mine:
        per_tray[device.tray].append(device)
    fitting = {tray for tray, free in per_tray.items() if len(free) >= job.mig_slices}
    if not fitting:
        most = max(len(free) for free in per_tray.values())
        return [], say(NO_TRAY_WITH_SLICES, profile=job.mig_profile, count=job.mig_slices, most=most)
    gpu_order = {gpu: n for n, gpu in enumerate(dict.fromkeys(d.gpu_id for d in devices))}
    gpu_free: dict[int, int] = defaultdict(int)
    for device in devices:
        gpu_free[device.gpu_id] += (
            profiles[device.profile].compute_slices if device.profile in profiles else 0
        )
    by_key = {(d.gpu_id, d.start): d for d in mine}
    taken: list[Device] = []
    candidates = [d for d in mine if d.tray in fitting]
    while len(taken) < job.mig_slices:
        free = [FreeInstance(d.gpu_id, d.start, request, gpu_order[d.gpu_id]) for d in candidates]
        chosen = choose(free, request, FRAGMENTATION_AWARE, mix=mix, profiles=profiles, gpu_free=gpu_free)
        device = by_key[(chosen.gpu, chosen.start)]
        taken.append(device)
        gpu_free[device.gpu_id] -= request.compute_slices
        candidates = [d for d in candidates if d.tray == device.tray and d is not device]
    return taken, ""


def _quota_words(job: Job, department: Department, held: Fraction, eq: Fraction) -> tuple[str, bool]:
    """(why it waits, "" when it may start; whether it starts over quota)."""
    after = held + eq
    shown = f"{float(after):.2f}".rstrip("0").rstrip(".")
    if department.limit_gpus is not None and after > department.limit_gpus:
        return say(SLICES_OVER_LIMIT, eq=shown, limit=department.limit_gpus), False
    over = after > department.guaranteed_gpus
    if over and job.priority_class not in PREEMPTIBLE_CLASSES:
        return say(SLICES_OVER_GUARANTEE, eq=shown, guarantee=department.guaranteed_gpus), False
    return "", over


@dataclass
class SliceDecision:
    """What the pass decides for one pending slice job: the devices it takes and its standing, or why it
    waits."""

    job: Job
    taken: list[Device]
    over: bool = False
    why: str = ""
    victims: list[Borrowed] = field(default_factory=list)  # borrowed slice jobs it reclaims from


def decide(pending: list[Job]) -> list[SliceDecision]:
    """The decision for each pending slice job, in the order given (oldest first), as if the ones before
    took their devices. Reads only (the job form's preview asks it with a proposed job at the end)."""
    offer = slices.slice_offer()
    profiles = dict(offer.profiles)
    everything = mig_devices()
    devices = [d for d in everything if not d.held]
    held = _held_equivalents()
    borrowed = borrowed_slice_jobs()
    departments = Department.objects.in_bulk({job.department_id for job in pending})
    mix: dict[str, float] = defaultdict(float)
    for job in pending:
        if job.mig_profile in profiles:
            mix[job.mig_profile] += job.mig_slices
    decisions = []
    for job in pending:
        request = profiles.get(job.mig_profile)
        eq = Fraction(job.mig_compute_slices * job.mig_slices, COMPUTE_SLICES)
        why, over = _quota_words(job, departments[job.department_id], held[job.department_id], eq)
        taken: list[Device] = []
        victims: list[Borrowed] = []
        if not why:
            if request is None:
                why = say(NO_SLICE_TRAY, profile=job.mig_profile)
            else:
                taken, why = _pick(job, request, devices, everything, profiles, mix)
                if why and not over:
                    taken, victims = _reclaim(job, request, devices, everything, borrowed, profiles, mix)
                    why = "" if taken else why
        decisions.append(SliceDecision(job, taken, over, why, victims))
        if why:
            continue
        if victims:  # their devices free again (those the job does not take), their holdings gone
            gone = {v.job_id for v in victims}
            borrowed = [b for b in borrowed if b.job_id not in gone]
            back = {u for v in victims for u in v.uuids}
            devices += [
                Device(d.uuid, d.gpu_id, d.gpu_index, d.tray, d.start, d.profile)
                for d in everything
                if d.uuid.lower() in back
            ]
            for victim in victims:
                held[victim.department_id] -= victim.equivalents
        mix[job.mig_profile] -= job.mig_slices
        if mix[job.mig_profile] <= 0:
            del mix[job.mig_profile]
        held[job.department_id] += eq
        used = {d.uuid for d in taken}
        devices = [d for d in devices if d.uuid not in used]
    return decisions


def place_slice_jobs(now) -> tuple[int, int]:
    """Place the pending slice jobs that fit now (their rows locked); set the others' reasons. (started,
    waiting); one query when no slice job waits."""
    pending = list(
        Job.objects.select_for_update(of=("self",))
        .filter(state=JobState.PENDING, mig_slices__gte=1)
        .order_by("created_at", "pk")
    )
    if not pending:
        return 0, 0
    started = 0
    reasons: dict[str, list[int]] = defaultdict(list)  # a changed reason -> its jobs: one UPDATE each
    for decision in decide(pending):
        job = decision.job
        if decision.why:
            reason = say(WAITING, reason=decision.why)[:500]
            if job.pending_reason != reason:
                reasons[reason].append(job.pk)
            continue
        if decision.victims:
            _preempt(decision.victims, job)
        _start(job, decision.taken, decision.over, now)
        started += 1
    for reason, pks in reasons.items():
        Job.objects.filter(pk__in=pks).update(pending_reason=reason)
    return started, len(pending) - started


def _preempt(victims: list[Borrowed], for_job: Job) -> None:
    """Stop each borrowed slice job `for_job` reclaims from in its backend, give back its devices and put it
    back in the queue, as the pass preempts whole-GPU borrowers (pass_writes.preempt)."""
    rows = list(
        Job.objects.select_for_update(of=("self",)).filter(
            pk__in=[v.job_id for v in victims], state__in=HOLDING_STATES
        )
    )
    if not rows:
        return
    departments = {for_job.department_id, *(r.department_id for r in rows)}
    slugs = dict(Department.objects.filter(pk__in=departments).values_list("pk", "slug"))
    reclaimer = slugs[for_job.department_id]
    cancel_preempted(rows, {r.pk: for_job.pk for r in rows})
    subscriptions = enabled_subscriptions()
    JobEvent.objects.bulk_create(
        JobEvent(
            job=r,
            kind=JobEventKind.PREEMPTED,
            message=(
                f"preempted: its MIG slices were borrowed (over quota) and {reclaimer} reclaimed them for "
                f"job #{for_job.pk} within its guarantee; back in the queue"
            )[:500],
            placement=r.placement,
        )
        for r in rows
    )
    for r in rows:
        notify_job(
            r,
            JobEventKind.PREEMPTED,
            say(RECLAIMED_BY, department=reclaimer) + CLAUSES + BACK_IN_QUEUE,
            department_slug=slugs[r.department_id],
            subscriptions=subscriptions,
        )
    pks = [r.pk for r in rows]
    SliceAllocation.objects.filter(job_id__in=pks).delete()
    update_recorded(Job.objects.filter(pk__in=pks), **REQUEUED, preemptions=F("preemptions") + 1)


def slices_words(taken: list[Device]) -> str:
    """ "gb-r01-t07 GPU 0 1g.23gb (MIG-…), …": where a slice job's devices are."""
    return ", ".join(f"{d.tray} GPU {d.gpu_index} {d.profile} ({d.uuid})" for d in taken)


def _start(job: Job, taken: list[Device], over: bool, now) -> None:
    SliceAllocation.objects.bulk_create(
        SliceAllocation(job=job, gpu_id=d.gpu_id, mig_uuid=d.uuid, profile=d.profile) for d in taken
    )
    hosts = sorted({d.tray for d in taken})
    job.state = JobState.STARTING
    job.placed_at = now
    job.placement = hosts
    job.over_quota = over
    job.pending_reason = ""
    job.backend_message = ""
    job.dispatch_attempts = 0
    job.next_dispatch_at = None
    job.save(
        update_fields=[
            "state",
            "placed_at",
            "placement",
            "over_quota",
            "pending_reason",
            "backend_message",
            "dispatch_attempts",
            "next_dispatch_at",
            "updated_at",
        ]
    )
    standing = SLICES_BORROWED if over else IN_QUOTA
    JobEvent.objects.create(
        job=job,
        kind=JobEventKind.PLACED,
        message=(say(PLACED_SLICES, standing=standing, slices=slices_words(taken)))[:500],
        placement=hosts,
    )
    enqueue(DISPATCH_JOB, job.pk)
