"""The outside-world side of requeueing work on a failing tray (the decisions are scheduling.requeue's).

* `tray_drained`: receiver of inventory.health's `tray_health_changed` (connected by integrations.signals):
  a tray taken out of service by a fault (the rules, or an admin's drain or needs-service) has its running
  jobs handled by their class's policy (scheduling.requeue.handle_drained_tray). Returning to service does
  nothing here.
* `signal_job(job_id, signal)` (task `integrations.tasks.signal_job`): the checkpoint request to a job's
  backend: Slurm sends the signal to the job's processes (slurmrestd, `scancel --full --signal`); Kubernetes
  annotates the Job and its pods (`rackplane.io/checkpoint-by`, the deadline). What happened goes into the
  job's backend message; a failure does not stop the requeue when the grace period ends.
* `requeue_due()`: jobs whose grace period is over are requeued (integrations.tasks.sync_jobs, every 30 s);
  their backend jobs are then stopped by the BackendCancel rows the same task processes: Slurm cancels the
  job, Kubernetes deletes the Job, and the next run is a new Slurm job / a new Job `rp-<id>-<n>`.
"""

from __future__ import annotations

import inspect
import logging

from django.db import transaction
from django.utils import timezone

from integrations.dispatch import backend_for
from integrations.jobs import BackendError
from inventory.choices import ActionKind
from inventory.models import ComputeTray
from scheduling import requeue as decisions
from scheduling.choices import HOLDING_STATES
from scheduling.models import Job
from tenancy.models.accounts import posix_identity_of

logger = logging.getLogger(__name__)

# The drains whose running jobs are handled here: a fault's, a hand drain, and a maintenance drain (whose
# jobs scheduling.requeue lets finish: it reads the reason).
OUT_BY_FAULT = (ActionKind.DRAIN, ActionKind.MAINTENANCE, ActionKind.NEEDS_SERVICE)


def tray_drained(sender, tray_id: int, state: str, reason: str, action: str = "", **kwargs) -> list:
    """tray_health_changed receiver: handle the running jobs of a tray drained by a fault. Never raises
    into the commit that sent it: a failure is logged (the jobs then finish or fail in their backend)."""
    if action not in OUT_BY_FAULT:
        return []
    host = ComputeTray.objects.filter(pk=tray_id).values_list("hostname", flat=True).first()
    if host is None:
        return []
    try:
        handled = decisions.handle_drained_tray(tray_id, host, reason)
    except Exception:
        logger.exception("tray %s drained (%s): its running jobs could not be handled", host, reason)
        return []
    for item in handled:
        logger.info("tray %s drained: job %s: %s", host, item.job_id, item.message)
    return handled


def signal_job(job_id: int, signal: str = decisions.DEFAULT_SIGNAL) -> str:
    """Ask a job waiting for its requeue to checkpoint; returns 'signalled', 'gone', 'skipped' or 'failed'."""
    job = Job.objects.filter(pk=job_id, state__in=HOLDING_STATES).first()
    if job is None or job.requeue_at is None or not job.backend_id:
        return "skipped"
    try:
        backend, label, _ = backend_for(job.backend, job.backend_id)
    except BackendError as error:
        return _note(job, f"could not ask it to checkpoint: {error}", "failed")
    send = getattr(backend, "signal", None)
    if send is None:
        return _note(
            job, f"{label} cannot signal a job: it is requeued when the grace period ends", "skipped"
        )
    deadline = job.requeue_at.astimezone(timezone.get_fixed_timezone(0)).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        if "deadline" in inspect.signature(send).parameters:  # Kubernetes: the annotation says by when
            done = send(job.backend_id, signal, deadline=deadline)
        elif getattr(backend, "acts_as_person", False):  # Slurm: signalled as the person it runs as
            done = send(job.backend_id, signal, run_as=posix_identity_of(job.submitted_by))
        else:
            done = send(job.backend_id, signal)
    except BackendError as error:
        return _note(job, f"{label}: could not ask it to checkpoint (SIG{signal}): {error}", "failed")
    if not done:
        return _note(job, f"{label}: {job.backend_id} was gone when asked to checkpoint", "gone")
    return _note(job, f"{label}: asked to checkpoint (SIG{signal}) by {deadline}", "signalled")


def _note(job: Job, message: str, outcome: str) -> str:
    with transaction.atomic():
        Job.objects.filter(pk=job.pk, state__in=HOLDING_STATES).update(
            backend_message=message[:500], updated_at=timezone.now()
        )
    logger.log(logging.WARNING if outcome == "failed" else logging.INFO, "job %s: %s", job.pk, message)
    return outcome


def requeue_due() -> list[int]:
    """Requeue the jobs whose checkpoint grace period is over (scheduling.requeue.requeue_due)."""
    return decisions.requeue_due()
