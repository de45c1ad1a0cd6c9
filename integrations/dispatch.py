"""Handing placed jobs to their backend, and keeping their state true.

* `dispatch(job_id)`: a STARTING job is submitted to Slurm (slurmrestd) or Kubernetes under its row lock;
  the adapter adopts a job it already made for this run (a reply lost on the way back never makes a
  second one). Unreachable backend: the job stays STARTING with the reason and the next attempt's time
  (backoff), retried by the task or by `sync_jobs`. Refused: the job fails with the backend's words and
  its GPUs are freed. Refused for a while (BackendNotReady: a tray's MIG devices not registered again in
  Slurm after a reconfigure): retried the same way, and failed with the backend's words once the attempts
  of that spell (about a minute; counted afresh after the backend was unreachable) are spent.
* `sync_jobs()` (beat): stops backend jobs that must stop (BackendCancel rows, retried until confirmed),
  sends due dispatch retries, and reads every running job's state from its backend; finished jobs free
  their GPUs and trigger a pass.

Which backend: the first enabled Slurm target with a slurmrestd URL, or the first enabled Kubernetes
target. Without one (the embedded default, `make run`), jobs are rendered to files under
RACKPLANE_RENDER_DIR/jobs (the exact slurmrestd request or Kubernetes objects) and shown as running there.

Every job runs as its person: the request carries the submitter's POSIX identity (`run_as`, from
tenancy.PosixAccount). A live backend (Slurm, Kubernetes) never gets a job without one: such a job fails
with the reason (the person lost their identity after submitting; submission itself refuses a person
without one, scheduling.services.admission, through `needs_identity`). A backend that acts as the person
(`acts_as_person`: Slurm, whose slurmrestd takes the person's name with a SlurmUser token) also reads and
stops each job as the person who submitted it.

Slurm QOS (`job_qos`): a department has two (integrations.state.department_qos), its own holding its
guarantee and `<department>--borrowed`. A job goes under its department's own when the engine admitted it in
quota and it fits beside the GPUs its department's running jobs already hold under that QOS (what Slurm
counts); otherwise under the borrowed one. Counting Slurm's side, not only the engine's flags, keeps Slurm
from holding a job the engine started: a running job the engine later counts as borrowed (its guarantee was
lowered) still uses the guarantee QOS in Slurm. Two of a department's jobs dispatched at the same moment may
both take the last room there; Slurm then holds the second (QOSGrpGRES) until GPUs free, and its page
shows why.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from core import claims, posix
from core.moments import utc_words
from core.sentences import CLAUSES, say
from integrations import registry
from integrations.embedded import PREFIX as RENDERED_PREFIX
from integrations.embedded import RenderedJobBackend
from integrations.jobs import (
    FINISHED_BACKEND_STATES,
    BackendError,
    BackendJobState,
    BackendNotReady,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
    JobBackend,
)
from integrations.models import ConfigTarget
from integrations.state import slurm_partition_of
from integrations.words import (
    BACKEND_STATE,
    BACKEND_STATE_EXIT,
    BACKEND_STATE_SAYING,
    BACKEND_STATE_SAYING_EXIT,
    BACKEND_UNREACHABLE,
    RENDERED_FILES,
    RUNNING_ON,
    STATE_NOT_UPDATED,
    SUBMITTED_TO,
)
from inventory.models import ComputeTray
from scheduling.choices import JobEventKind, JobState
from scheduling.models import BackendCancel, Job, JobEvent
from scheduling.services.actions import finish_job, notify_job
from tenancy import naming
from tenancy.models.accounts import posix_identity_of

logger = logging.getLogger(__name__)

# A STARTING job never tried for this long lost its task (broker down, worker killed mid-dispatch).
NOT_READY = "cannot take it yet"  # how a job's backend_message says its backend refused it for a while
LOST_AFTER = timedelta(seconds=settings.RACKPLANE_DISPATCH_LOST_AFTER_SECONDS)


def backend_for(backend: str, backend_id: str = "") -> tuple[JobBackend, str, dict]:
    """(job backend, label for messages, its target's settings) for Job.backend `backend`: the first
    enabled target of a kind that runs such jobs, else the embedded renderer (files under
    RACKPLANE_RENDER_DIR/jobs). A job the renderer took (`backend_id` "rendered/...") stays the renderer's
    when a live target is added later: the new target never knew it, and asking it would fail the job."""
    kinds = {kind.name: kind for kind in registry.kinds() if kind.backend == backend}
    targets = ConfigTarget.objects.filter(kind__in=kinds, enabled=True).order_by("pk")
    if backend_id.startswith(RENDERED_PREFIX):
        targets = targets.none()
    for target in targets:
        kind = kinds[target.kind]
        values = target.connection_settings()  # with its outbound allowance (core.outbound)
        job_backend = kind.job_backend(values) if kind.job_backend else None
        if job_backend is not None:
            return job_backend, f"{kind.short_label or kind.label} ({target.name})", values
    renderer = next((kind for kind in kinds.values() if kind.render_job), None)
    if renderer is None:
        raise BackendUnavailable(f"no integration renders or runs {backend} jobs")
    directory = settings.RACKPLANE_RENDER_DIR / "jobs"
    rendered = RenderedJobBackend(
        directory, backend, renderer.render_job, renderer.job_file_suffix, submits_qos=renderer.job_qos
    )
    return rendered, RENDERED_FILES, {}


def needs_identity(backend: str) -> bool:
    """Whether jobs of `backend` run on a live scheduler now (a Slurm target with slurmrestd, a Kubernetes
    cluster), which runs them as their person: then a person without a POSIX identity cannot submit. The
    embedded renderer (`make run`) needs none."""
    try:
        job_backend, _label, _values = backend_for(backend)
    except BackendError:
        return False  # no backend at all: dispatch says so
    close = getattr(job_backend, "close", None)
    if close is not None:
        close()
    return not isinstance(job_backend, RenderedJobBackend)


posix.register_identity_requirement(needs_identity)


def _acts_as_person(backend) -> bool:
    return bool(getattr(backend, "acts_as_person", False))


def segment_size(hosts: list[str], trays: dict[str, dict]) -> int | None:
    """The trays per segment (Slurm `--segment`): all of them when they share one NVLink partition; for a job
    the engine placed across partitions, the largest size that splits every partition's share into whole
    segments (9 + 9 trays: 9; 8 + 4: 4); None for one tray, a tray outside any partition, or shares with no
    common size above 1 (9 + 7)."""
    counts: dict[int, int] = {}
    for host in hosts:
        partition = trays.get(host, {}).get("partition_id")
        if partition is None:
            return None
        counts[partition] = counts.get(partition, 0) + 1
    size = math.gcd(*counts.values()) if counts else 0
    return size if size > 1 else None


def job_qos(job: Job) -> str:
    """The QOS a job is submitted under (see the module doc): its department's own when the engine admitted
    it in quota and it fits the guarantee beside what its department's running jobs on the same backend
    hold there. Slurm runs it under that QOS; the Kubernetes backend does not use it."""
    department = job.department
    own = naming.department_qos(department.slug)
    if job.over_quota:
        return naming.department_borrowed_qos(department.slug)
    held = (
        Job.objects.filter(department_id=department.pk, backend=job.backend, state=JobState.RUNNING, qos=own)
        .exclude(pk=job.pk)
        .aggregate(gpus=Sum("gpus"))["gpus"]
        or 0
    )
    return (
        own
        if held + job.gpus <= department.guaranteed_gpus
        else naming.department_borrowed_qos(department.slug)
    )


def dispatch_request(job: Job, target_settings: dict, *, qos: bool = False) -> DispatchRequest:
    """The request for a placed job; `qos`: its backend runs it under a department QOS (`job_qos`)."""
    hosts = list(job.placement)
    trays = {
        t["hostname"]: t
        for t in ComputeTray.objects.filter(hostname__in=hosts).values(
            "hostname",
            "partition_id",
            "partition__clique_id",
            "partition__service_tier",
            "partition__dedication__department__slug",
            "rack__cluster_uuid",
        )
    }
    first = trays.get(hosts[0], {}) if hosts else {}
    one_partition = len({trays.get(h, {}).get("partition_id") for h in hosts}) == 1
    clique = ""
    if one_partition and first.get("rack__cluster_uuid"):
        clique = f"{first['rack__cluster_uuid']}.{first['partition__clique_id']}"
    return DispatchRequest(
        job_id=job.pk,
        name=job.name,
        department=job.department.slug,
        project=job.project.scheduling_slug if job.project_id else "",
        priority_class=job.priority_class,
        hostnames=tuple(hosts),
        gpus_per_tray=job.gpus if len(hosts) == 1 else job.gpus // len(hosts),
        mig_profile=job.mig_profile,
        mig_slices=job.mig_slices,
        time_limit_minutes=job.time_limit_minutes,
        work=job.work,
        # A slice job runs on a tray in MIG mode: that tray's MIG partition (`<tier>--mig`), where jobs
        # share the node; the whole-tray partitions give a job every GRES of its node.
        service_tier=slurm_partition_of(
            first.get("partition__service_tier") or "",
            first.get("partition__dedication__department__slug"),
            mig=bool(job.mig_slices),
        ),
        segment=segment_size(hosts, trays),
        clique=clique,
        imex=bool(target_settings.get("imex")),
        attempt=job.preemptions,
        run_as=posix_identity_of(job.submitted_by),
        qos=job_qos(job) if qos else "",
    )


def dispatch(job_id: int) -> str:
    """Submit one STARTING job; returns what happened ('submitted', 'retry', 'rejected', 'skipped')."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(of=("self",))  # submitted_by is nullable: an outer join
            .select_related("department", "submitted_by")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.state != JobState.STARTING:
            return "skipped"
        backend, label, target_settings = backend_for(job.backend)
        try:
            request = dispatch_request(job, target_settings, qos=bool(getattr(backend, "submits_qos", False)))
            if request.run_as is None and not isinstance(backend, RenderedJobBackend):
                # Never sent as anyone else (the target's own user, another person): refused with the reason.
                who = (
                    job.submitted_by.get_username() if job.submitted_by_id else "nobody (the account is gone)"
                )
                raise BackendRejected(
                    f"the job's person, {who}, has no POSIX identity (uid/gid) to run it as. "
                    + posix.no_identity_message(label)
                )
            backend_id = backend.submit(request)
        except BackendUnavailable as error:
            not_ready = isinstance(error, BackendNotReady)
            if not_ready and not job.backend_message.startswith(f"{label} {NOT_READY}"):
                # A new spell of "not yet" (the first, or after the backend was unreachable: a controller
                # back from a restart is when its nodes register again): its attempts count from one.
                job.dispatch_attempts = 0
            job.dispatch_attempts += 1
            if not_ready and job.dispatch_attempts >= error.attempts_allowed:
                finish_job(
                    job,
                    JobState.FAILED,
                    f"refused by {label}: {error} (still after {job.dispatch_attempts} attempts)",
                )
                return "rejected"
            retry = claims.retry_later(job.dispatch_attempts, timezone.now())
            wait, job.next_dispatch_at = retry.delay, retry.at
            if not_ready:
                said = f"{label} {NOT_READY}: {error}; attempt {job.dispatch_attempts} of "
                said += f"{error.attempts_allowed}, next in {wait} s (the job keeps its GPUs)"
            else:
                said = f"{label} unreachable: {error}; attempt {job.dispatch_attempts}, next in {wait} s "
                said += "(the job keeps its GPUs)"
            job.backend_message = said[:500]
            job.save(update_fields=["dispatch_attempts", "next_dispatch_at", "backend_message", "updated_at"])
            if job.dispatch_attempts == 1:
                JobEvent.objects.create(
                    job=job, kind=JobEventKind.DISPATCH_RETRY, message=job.backend_message
                )
            return "retry"
        except (BackendRejected, BackendError, ValueError) as error:
            finish_job(job, JobState.FAILED, f"refused by {label}: {error}")
            return "rejected"
        job.state = JobState.RUNNING
        job.backend_id = backend_id
        job.qos = request.qos
        job.started_at = timezone.now()
        job.next_dispatch_at = None
        job.backend_message = ""
        job.save()
        JobEvent.objects.create(
            job=job,
            kind=JobEventKind.DISPATCHED,
            message=say(SUBMITTED_TO, backend=label, backend_id=backend_id),
        )
        notify_job(job, JobEventKind.STARTED, say(RUNNING_ON, backend=label, backend_id=backend_id))
    return "submitted"


def backend_state_words(label: str, status) -> str:
    """A job's state as its backend reports it, with the backend's message and the exit code when there are
    any (Job.backend_message, the finished event): templates of integrations.words, read back on its page."""
    values = {"backend": label, "backend_state": str(status.state)}
    if status.message:
        values["message"] = status.message
    if status.exit_code is not None:
        values["code"] = status.exit_code
    template = {
        (False, False): BACKEND_STATE,
        (True, False): BACKEND_STATE_SAYING,
        (False, True): BACKEND_STATE_EXIT,
        (True, True): BACKEND_STATE_SAYING_EXIT,
    }[bool(status.message), status.exit_code is not None]
    return say(template, **values)


def due_dispatches(now=None) -> list[int]:
    """STARTING jobs whose retry is due, or whose task was lost (placed over a minute ago, never tried)."""
    now = now or timezone.now()
    starting = Job.objects.filter(state=JobState.STARTING)
    return claims.due(
        starting, now, lost_after=LOST_AFTER, next_attempt="next_dispatch_at", since="placed_at__lte"
    )


def process_cancels() -> int:
    """Tell backends to stop the jobs that must stop; rows stay until the backend confirms."""
    done = 0
    rows = BackendCancel.objects.filter(done_at__isnull=True).select_related("job__submitted_by")
    for row in rows.order_by("pk")[:200]:
        backend, label, _ = backend_for(row.backend, row.backend_id)
        try:
            if _acts_as_person(backend):
                # Stopped as the person it runs as (a job of another Unix user is never signalled).
                backend.cancel(row.backend_id, run_as=posix_identity_of(row.job.submitted_by))
            else:
                backend.cancel(row.backend_id)
        except BackendError as error:
            row.attempts += 1
            row.error = f"{label}: {error}"[:500]
            row.save(update_fields=["attempts", "error"])
            continue
        row.done_at = timezone.now()
        row.error = ""
        row.save(update_fields=["done_at", "error"])
        done += 1
    return done


_FINAL = {
    BackendJobState.COMPLETED: JobState.COMPLETED,
    BackendJobState.FAILED: JobState.FAILED,
    BackendJobState.CANCELLED: JobState.CANCELLED,
}


def sync_states() -> dict:
    """Read every running job's state from its backend; finish the ones that ended."""
    finished = unreachable = 0
    for kind in registry.backends():
        running = list(
            Job.objects.filter(state=JobState.RUNNING, backend=kind)
            .exclude(backend_id="")
            .select_related("submitted_by")
        )
        # Jobs the embedded renderer took are read from it, the rest from the live target (backend_for).
        rendered = [job for job in running if job.backend_id.startswith(RENDERED_PREFIX)]
        live = [job for job in running if not job.backend_id.startswith(RENDERED_PREFIX)]
        for group, first_id in ((rendered, RENDERED_PREFIX), (live, "")):
            if group:
                done, lost = _sync_group(kind, group, first_id)
                finished += done
                unreachable += lost
    return {"finished": finished, "unreachable": unreachable}


def _sync_group(kind: str, running: list[Job], backend_id: str) -> tuple[int, int]:
    """sync_states for RUNNING jobs of one backend (`backend_id`: one of theirs, see backend_for):
    (finished, unreachable)."""
    finished = 0
    jobs = {job.backend_id: job.pk for job in running}
    backend, label, _ = backend_for(kind, backend_id)
    try:
        if _acts_as_person(backend):
            # Each person's jobs are read as that person (Slurm PrivateData shows a user their own).
            identities: dict = {}
            people: dict = {}
            for job in running:
                if job.submitted_by_id not in identities:
                    identities[job.submitted_by_id] = posix_identity_of(job.submitted_by)
                people.setdefault(identities[job.submitted_by_id], []).append(job.backend_id)
            statuses = {}
            for identity, ids in people.items():
                statuses.update(backend.status(ids, run_as=identity))
        else:
            statuses = backend.status(list(jobs))
    except BackendError as error:
        unreachable = say(BACKEND_UNREACHABLE, backend=label, at=utc_words(timezone.now()), error=error)
        note = CLAUSES.join([unreachable, say(STATE_NOT_UPDATED)])[:500]
        Job.objects.filter(pk__in=jobs.values()).update(backend_message=note)
        return 0, len(jobs)
    for job_backend_id, status in statuses.items():
        job_id = jobs.get(job_backend_id)
        if job_id is None:
            continue
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.RUNNING).first()
            if job is None or job.backend_id != job_backend_id:
                continue
            if status.state in FINISHED_BACKEND_STATES:
                words = backend_state_words(label, status)
                finish_job(job, _FINAL[status.state], words, status.exit_code)
                finished += 1
            elif status.state == BackendJobState.UNKNOWN:
                finish_job(
                    job,
                    JobState.FAILED,
                    f"{label} no longer knows {job_backend_id}: it ended while Rackplane was not watching "
                    "(outcome unknown)",
                )
                finished += 1
            else:
                message = backend_state_words(label, status)
                if job.backend_message != message[:500]:
                    job.backend_message = message[:500]
                    job.save(update_fields=["backend_message", "updated_at"])
    return finished, 0
