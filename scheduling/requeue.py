"""Running work on a failing tray: what happens to the jobs placed on a tray the health rules (or an admin,
for a fault) drain.

Per priority class an admin sets a policy (FaultPolicy, Django admin; shown on the Health settings page):

* `wait`: the job is left to finish on the drained tray (no new work lands there);
* `checkpoint`: the job is signalled to checkpoint (Slurm: the policy's signal, e.g. USR1, sent to the
  job's processes; Kubernetes: an annotation on its pods, `rackplane.io/checkpoint-by`) and requeued after
  `grace_s` unless it ends first;
* `stop`: the job is requeued at once.

A drain for maintenance (the operators' "maintenance" action) always waits: planned work lets jobs finish.

Requeued means, for the whole gang (every tray of a multi-tray job, not only the failing one): its backend
job is stopped (a BackendCancel row the sync task retries until the backend confirms: Slurm cancels the job,
Kubernetes deletes the Job), its GPUs are freed, it goes back to pending with its place in line (its
submission time, which orders the queue) and `preemptions` and `fault_requeues` counted, so the next run
has its own backend name (`rp-<id>-<n>`: a new Slurm job, a new Kubernetes Job) and the pass places it on
trays that are in service. Its history (JobEvent `requeued`) says why, e.g. ``requeued: XID 79
(GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-... drained gb-r01-t03 (policy checkpoint, grace 5 min)``, and a
`job_requeued` notification is sent (core.notifications).

A partition plan's "Requeue now" (integrations.plans.requeue_now) asks the same of the jobs in its way, but
only of checkpointable ones (`checkpointable`: their class's policy is `checkpoint`): they are asked to
checkpoint and requeued after the grace period, through the same path (`requeue_for_plan`); the others are
left to finish.

`decide` is the pure policy function; `handle_drained_tray`, `requeue_for_plan` and `requeue_due` are the
services (rows locked, one transaction each). The effects outside (the signal) are integrations'
(integrations.requeue), asked for by task name on commit; the cancel goes through the BackendCancel rows
integrations.dispatch processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.audit import record_bulk_change
from core.enqueue import enqueue
from core.models import NotificationEvent
from core.moments import utc_words
from core.notifications.recording import notify
from core.task_names import SIGNAL_JOB, SYNC_JOBS  # SIGNAL_JOB: the checkpoint signal
from scheduling.choices import HOLDING_STATES, FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.engine.words import CLAUSES, WAITING, say
from scheduling.models import Allocation, FaultPolicy, Job, JobEvent, SliceAllocation
from scheduling.services.actions import notify_job, release_gpus, stop_in_backend
from scheduling.services.pass_requests import request_pass
from scheduling.words import (
    ASKED_TO_CHECKPOINT,
    BACK_IN_QUEUE_IN_PLACE,
    FAULT_DRAINED,
    GRACE_SECONDS,
    ITS_TRAYS,
    JOB_REQUEUED,
    LEFT_TO_FINISH,
    MAINTENANCE_LETS_FINISH,
    PLAN_RECARVES,
    POLICY_LETS_FINISH,
    REQUEUE_GRACE,
    REQUEUE_NOW,
    REQUEUE_POLICY,
    REQUEUED_AFTER_FAULT,
    REQUEUED_AT,
    REQUEUED_BY_A_FAULT,
    REQUEUED_FOR_A_PLAN,
    REQUEUED_FOR_PLAN,
    REQUEUED_SAYING,
    WAIT_MINUTES,
)

# A class without a FaultPolicy row (the same as migration scheduling 0013 seeds).
DEFAULTS: dict[str, tuple[str, int]] = {
    PriorityClass.TRAIN: (FaultAction.CHECKPOINT, 300),
    PriorityClass.BUILD: (FaultAction.STOP, 300),
    PriorityClass.INFERENCE: (FaultAction.STOP, 300),
}
DEFAULT_SIGNAL = "USR1"
NOTE_LIMIT = 500

WAIT, SIGNAL, REQUEUE = "wait", "signal", "requeue"
# How the requeue note of a partition plan's "Requeue now" starts (requeue_due tells it from a fault's).
# (REQUEUED_SAYING around PLAN_RECARVES.)
PLAN_NOTE = "requeued: plan #"
# What a requeue changes that the audit log records (as a pass's preemption does).
AUDITED_FIELDS = (
    "state",
    "backend_id",
    "preemptions",
    "fault_requeues",
    "plan_requeues",
    "placed_at",
    "started_at",
    "over_quota",
)


@dataclass(frozen=True)
class Decision:
    """What to do with one running job: `what` is WAIT, SIGNAL (then requeue after `grace_s`) or REQUEUE."""

    what: str
    grace_s: int = 0
    policy: str = ""
    why: str = ""


def decide(
    action: str, grace_s: int, *, maintenance: bool, in_backend: bool, signal_pending: bool = False
) -> Decision:
    """The policy for one job whose tray was drained (pure).

    `action` is the job's class's FaultAction; `maintenance` a drain for planned maintenance (always wait);
    `in_backend` whether the job runs in its backend yet (a job still being handed over has nothing to
    checkpoint: it is requeued at once); `signal_pending` whether it was already asked to checkpoint (by
    another of its trays: the first deadline stands)."""
    if maintenance:
        return Decision(WAIT, policy=FaultAction.WAIT, why=MAINTENANCE_LETS_FINISH)
    if action == FaultAction.WAIT:
        return Decision(WAIT, policy=action, why=POLICY_LETS_FINISH)
    if action == FaultAction.CHECKPOINT and in_backend:
        if signal_pending:
            return Decision(WAIT, policy=action, grace_s=grace_s, why="already asked to checkpoint")
        return Decision(SIGNAL, grace_s=max(0, int(grace_s)), policy=action, why="checkpoint first")
    if action == FaultAction.CHECKPOINT:
        return Decision(REQUEUE, policy=action, grace_s=grace_s, why="not started in its backend yet")
    return Decision(REQUEUE, policy=FaultAction.STOP, why="its class's policy requeues it at once")


def policy_for(priority_class: str) -> tuple[str, int, str]:
    """(action, grace seconds, signal) of a priority class: its FaultPolicy row, else DEFAULTS."""
    row = (
        FaultPolicy.objects.filter(priority_class=priority_class)
        .values("action", "grace_s", "signal")
        .first()
    )
    if row is not None:
        return row["action"], row["grace_s"], row["signal"] or DEFAULT_SIGNAL
    action, grace = DEFAULTS.get(priority_class, (FaultAction.STOP, 0))
    return action, grace, DEFAULT_SIGNAL


def policies() -> list[dict]:
    """Every class's policy, in words (the Health settings page)."""
    out = []
    for value, label in PriorityClass.choices:
        action, grace, signal = policy_for(value)
        words = FaultAction(action).label
        if action == FaultAction.CHECKPOINT:
            words += f" (SIG{signal}, grace {_minutes(grace)})"
        out.append({"priority_class": value, "label": label, "action": action, "words": words})
    return out


def is_maintenance(reason: str) -> bool:
    """Whether a drain reason is the operators' maintenance action (tray_actions.maintenance_reason: with a
    window, "maintenance window <start> to <end> UTC: ...")."""
    return bool(re.search(r"(^|: )maintenance(:| \(| window \d)", reason or "", re.IGNORECASE))


def cause(reason: str) -> str:
    """The fault a drain reason names, without the owner prefix and the time:
    ``rackplane: XID 79 (X) on GPU-1 at 2026-01-01 00:00:00 UTC`` -> ``XID 79 (X) on GPU-1``."""
    text = re.sub(r"^rackplane:\s*(needs service:\s*)?", "", (reason or "").strip())
    text = re.sub(r"\s+at \d{4}-\d\d-\d\d[ T][\d:]+(\s*UTC|Z)?$", "", text)
    return text or "a fault"


def _minutes(seconds: int) -> str:
    """A grace period in words: "5 min", "90 s" (templates of scheduling.words: read back in the viewer's
    language)."""
    if seconds and seconds % 60 == 0:
        return say(WAIT_MINUTES, minutes=seconds // 60)
    return say(GRACE_SECONDS, seconds=seconds)


def requeue_words(reason: str, host: str, decision: Decision) -> str:
    what = say(FAULT_DRAINED, fault=cause(reason), host=host)
    if decision.policy == FaultAction.CHECKPOINT:
        why = say(REQUEUE_GRACE, what=what, grace=_minutes(decision.grace_s))
    else:
        why = say(REQUEUE_POLICY, what=what, policy=decision.policy)
    return say(REQUEUED_SAYING, reason=why)[:NOTE_LIMIT]


@dataclass(frozen=True)
class Handled:
    job_id: int
    what: str  # WAIT, SIGNAL or REQUEUE
    message: str


def _job_ids_on(tray_id: int) -> list[int]:
    """The holding jobs on the tray: whole GPUs, or MIG devices (slice jobs)."""
    on_tray = {"gpu__tray_id": tray_id, "job__state__in": HOLDING_STATES}
    return sorted(
        {
            *Allocation.objects.filter(**on_tray).values_list("job_id", flat=True),
            *SliceAllocation.objects.filter(**on_tray).values_list("job_id", flat=True),
        }
    )


def handle_drained_tray(
    tray_id: int, host: str, reason: str, *, now: datetime | None = None
) -> list[Handled]:
    """Apply each running job's policy after its tray `host` (pk `tray_id`) was drained for `reason`; see
    the module doc. Each job is locked; a job that ended meanwhile is left alone."""
    now = now or timezone.now()
    maintenance = is_maintenance(reason)
    handled = []
    with transaction.atomic():
        ids = _job_ids_on(tray_id)
        for job in (
            Job.objects.select_for_update().filter(pk__in=ids, state__in=HOLDING_STATES).order_by("pk")
        ):
            action, grace, signal = policy_for(job.priority_class)
            decision = _decide_for(job, action, grace, maintenance=maintenance)
            handled.append(_apply(job, decision, host, reason, signal, now))
    return handled


@dataclass(frozen=True)
class Planned:
    """What a drain for `reason` would do to one job holding GPUs on the tray (preview_drain): `what` is
    WAIT, SIGNAL or REQUEUE, `grace_s` the checkpoint grace period, `signal` the checkpoint signal."""

    job: Job
    what: str
    grace_s: int
    signal: str
    why: str


def preview_drain(tray_id: int, reason: str) -> list[Planned]:
    """What draining the tray (pk `tray_id`) for `reason` would do to each job holding GPUs on it, by the
    same decisions handle_drained_tray takes; reads only (a page asks before the drain is applied)."""
    maintenance = is_maintenance(reason)
    planned = []
    jobs = (
        Job.objects.filter(pk__in=_job_ids_on(tray_id), state__in=HOLDING_STATES)
        .select_related("submitted_by", "department")
        .order_by("pk")
    )
    for job in jobs:
        action, grace, signal = policy_for(job.priority_class)
        decision = _decide_for(job, action, grace, maintenance=maintenance)
        planned.append(Planned(job, decision.what, decision.grace_s, signal, decision.why))
    return planned


def _decide_for(job: Job, action: str, grace: int, *, maintenance: bool) -> Decision:
    """`decide` for one locked holding job, from what its row says."""
    return decide(
        action,
        grace,
        maintenance=maintenance,
        in_backend=job.state == JobState.RUNNING and bool(job.backend_id),
        signal_pending=job.requeue_at is not None,
    )


def _apply(job: Job, decision: Decision, host: str, reason: str, signal: str, now: datetime) -> Handled:
    if decision.what == REQUEUE:
        message = requeue_words(reason, host, decision)
        requeue(job, message, host=host)
        return Handled(job.pk, REQUEUE, message)
    if decision.what == SIGNAL:
        return _ask_to_checkpoint(
            job,
            requeue_words(reason, host, decision),
            say(FAULT_DRAINED, fault=cause(reason), host=host),
            decision,
            signal,
            now,
        )
    if decision.why == "already asked to checkpoint":
        return Handled(job.pk, WAIT, decision.why)
    what = say(FAULT_DRAINED, fault=cause(reason), host=host)
    message = say(LEFT_TO_FINISH, what=what, why=decision.why)[:NOTE_LIMIT]
    JobEvent.objects.create(job=job, kind=JobEventKind.FAULT, message=message, placement=job.placement)
    return Handled(job.pk, WAIT, message)


def _ask_to_checkpoint(
    job: Job,
    note: str,
    what: str,
    decision: Decision,
    signal: str,
    now: datetime,
    kind: str = JobEventKind.FAULT,
) -> Handled:
    """Ask a holding job (locked) to checkpoint: requeued by requeue_due at the end of its grace period with
    `note`; `what` says why, first in its history's line (an event of `kind`: a fault's, or a plan's). The
    moment is written with its date in UTC (core.moments.utc_words): a page reads it in the viewer's zone."""
    at = now + timedelta(seconds=decision.grace_s)
    job.requeue_at = at
    job.requeue_note = note[:NOTE_LIMIT]
    job.save(update_fields=["requeue_at", "requeue_note", "updated_at"])
    message = (
        say(ASKED_TO_CHECKPOINT, what=what, signal=signal)
        + CLAUSES
        + say(REQUEUED_AT, at=utc_words(at), grace=_minutes(decision.grace_s))
    )[:NOTE_LIMIT]
    JobEvent.objects.create(job=job, kind=kind, message=message, placement=job.placement)
    enqueue(SIGNAL_JOB, job.pk, signal)  # sent when the transaction commits
    if decision.grace_s == 0:
        enqueue(SYNC_JOBS)
    return Handled(job.pk, SIGNAL, message)


def checkpointable(priority_class: str) -> bool:
    """Whether a class's running jobs may be stopped for planned work and requeued: its policy (FaultPolicy,
    the Health settings page) checkpoints them. Jobs of other classes are waited for."""
    return policy_for(priority_class)[0] == FaultAction.CHECKPOINT


def requeue_for_plan(
    job_ids: list[int], plan_id: int, rack: str, *, now: datetime | None = None
) -> list[Handled]:
    """A partition plan's "Requeue now": each checkpointable job of `job_ids` still holding GPUs is asked to
    checkpoint and requeued after its class's grace period (at once when it does not run in its backend
    yet); the others are left to finish (WAIT). Jobs locked in id order, in the caller's transaction (which
    holds the rack's and the plan's locks first, as the plan service does)."""
    now = now or timezone.now()
    handled = []
    for job in (
        Job.objects.select_for_update().filter(pk__in=job_ids, state__in=HOLDING_STATES).order_by("pk")
    ):
        action, grace, signal = policy_for(job.priority_class)
        if action != FaultAction.CHECKPOINT:
            handled.append(Handled(job.pk, WAIT, "not checkpointable: left to finish"))
            continue
        decision = _decide_for(job, action, grace, maintenance=False)
        what = say(PLAN_RECARVES, plan=plan_id, rack=rack)
        note = say(REQUEUED_SAYING, reason=say(REQUEUE_NOW, what=what, grace=_minutes(grace)))
        if decision.what == REQUEUE:
            requeue(job, note, pending=_plan_pending(note))
            handled.append(Handled(job.pk, REQUEUE, note))
        elif decision.what == SIGNAL:
            handled.append(
                _ask_to_checkpoint(job, note, what, decision, signal, now, kind=JobEventKind.PLAN_CHECKPOINT)
            )
        else:
            handled.append(Handled(job.pk, WAIT, decision.why))
    return handled


def _plan_pending(note: str) -> str:
    """A job's pending reason after a plan's "Requeue now" (from its requeue note), in the scheduler's
    templates (scheduling.words) so a page shows it in the viewer's language."""
    match = re.match(rf"{re.escape(PLAN_NOTE)}(\d+) re-carves (\S+)", note)
    reason = say(REQUEUED_FOR_PLAN, plan=match[1], rack=match[2]) if match else REQUEUED_FOR_A_PLAN
    return say(WAITING, reason=reason) + CLAUSES + BACK_IN_QUEUE_IN_PLACE


def requeue(job: Job, message: str, *, host: str = "", pending: str = "") -> None:
    """Put a holding job (locked by the caller) back in the queue after a fault, or for a partition plan
    (`pending`: its pending reason then; counted in `plan_requeues`, its history's event a plan's and no
    fault is notified); see the module doc. Its submitter's "job requeued" subscriptions hear of both."""
    for_plan = bool(pending)
    stop_in_backend(job, message)
    release_gpus(job)
    placement = list(job.placement)
    before = {name: getattr(job, name) for name in AUDITED_FIELDS}
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PENDING,
        over_quota=False,
        backend_id="",
        backend_message="",
        placed_at=None,
        started_at=None,
        next_dispatch_at=None,
        requeue_at=None,
        requeue_note="",
        pending_reason=(
            pending
            or say(WAITING, reason=say(REQUEUED_AFTER_FAULT, host=host or ITS_TRAYS))
            + CLAUSES
            + BACK_IN_QUEUE_IN_PLACE
        )[:500],
        preemptions=F("preemptions") + 1,
        **(
            {"plan_requeues": F("plan_requeues") + 1}
            if for_plan
            else {"fault_requeues": F("fault_requeues") + 1}
        ),
        updated_at=timezone.now(),
    )
    job.refresh_from_db()
    record_bulk_change(
        Job, {job.pk: {k: (v, getattr(job, k)) for k, v in before.items() if v != getattr(job, k)}}
    )
    # A plan's event says what it is (its kind "Requeued for a partition plan"), without "requeued: ".
    kind = JobEventKind.PLAN_REQUEUED if for_plan else JobEventKind.REQUEUED
    said = message.removeprefix("requeued: ")
    JobEvent.objects.create(job=job, kind=kind, message=said if for_plan else message, placement=placement)
    notify_job(job, kind, said)
    if for_plan:  # planned work: not a fault (the health subscriptions' "Job requeued by a fault")
        request_pass(f"job {job.pk} requeued for a partition plan")
        return
    notify(
        NotificationEvent.JOB_REQUEUED,
        say(JOB_REQUEUED, job=job.pk, job_title=job.name, message=said),
        {
            "job": job.pk,
            "name": job.name,
            "department": job.department.slug,
            "priority_class": job.priority_class,
            "trays": placement,
            "tray": host,
            "message": message,
            "requeues": job.fault_requeues,
        },
        scope=[f"department:{job.department.slug}", *(f"tray:{h}" for h in placement)],
    )
    request_pass(f"job {job.pk} requeued after a fault")


def requeue_due(now: datetime | None = None) -> list[int]:
    """Requeue the jobs whose checkpoint grace period is over (sync_jobs, every 30 s); their ids."""
    now = now or timezone.now()
    done = []
    for pk in Job.objects.filter(requeue_at__lte=now, state__in=HOLDING_STATES).values_list("pk", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(pk=pk, state__in=HOLDING_STATES).first()
            if job is None or job.requeue_at is None or job.requeue_at > now:
                continue
            note = job.requeue_note or say(REQUEUED_SAYING, reason=REQUEUED_BY_A_FAULT)
            if note.startswith(PLAN_NOTE):
                requeue(job, note, pending=_plan_pending(note))
            else:
                host = next(iter(re.findall(r"drained (\S+) \(policy", note)), "")
                requeue(job, note, host=host)
            done.append(pk)
    return done
