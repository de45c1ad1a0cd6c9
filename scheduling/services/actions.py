"""What is done to one job after its submission: cancel it, finish it (its backend reported the end), stop
it in its backend, give its GPUs back, tell its subscribers. A backend job that must be stopped (cancelled
or preempted) becomes a BackendCancel row that the sync task retries until the backend confirms.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _

from core.access import leads
from core.enqueue import enqueue
from core.models import NotificationEvent
from core.notifications.recording import notify
from core.task_names import FOLLOW_ACTIVE_PLANS, SYNC_JOBS
from inventory.choices import TrayState
from scheduling import words
from scheduling.choices import FINISHED_STATES, HOLDING_STATES, JobEventKind, JobState
from scheduling.engine.words import say
from scheduling.models import Allocation, BackendCancel, Job, JobEvent, SliceAllocation
from scheduling.services.pass_requests import request_pass
from tenancy.models import Department

# Tasks are started by name (core.enqueue): the job sync and the plans belong to integrations, which this
# layer does not import.


def may_cancel(user, job: Job) -> bool:
    """The job's submitter, its department's leads and platform admins may cancel it."""
    if job.submitted_by_id is not None and job.submitted_by_id == user.pk:
        return True
    return leads(user, job.department_id)


# --- cancel ------------------------------------------------------------------------------------------


def release_gpus(job: Job) -> None:
    """Give the job's GPUs back (its allocations deleted). A partition plan waiting for a drained tray to
    empty moves on at once."""
    allocations = Allocation.objects.filter(job=job)
    if allocations.filter(gpu__tray__state=TrayState.DRAIN).exists():
        enqueue(FOLLOW_ACTIVE_PLANS)
    allocations.delete()
    SliceAllocation.objects.filter(job=job).delete()  # a slice job's MIG devices


def stop_in_backend(job: Job, reason: str) -> None:
    """Ask the backend to stop the job, if it has a backend job: a BackendCancel row the sync task retries
    until the backend confirms (one per backend job; `reason` kept for the record)."""
    if job.backend_id:
        BackendCancel.objects.get_or_create(
            backend=job.backend, backend_id=job.backend_id, defaults={"job": job, "reason": reason[:200]}
        )
        enqueue(SYNC_JOBS)


def cancel_job(job: Job, user=None) -> Job:
    """Cancel a pending, starting or running job. Its GPUs are free at once; a backend job is stopped by
    the sync task (retried until the backend confirms)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in FINISHED_STATES:
            raise ValidationError(
                _("job %(pk)s has already ended (%(state)s)")
                % {"pk": job.pk, "state": job.get_state_display().lower()}
            )
        who = user.get_username() if user is not None and user.is_authenticated else ""
        stop_in_backend(job, f"cancelled by {who}" if who else "cancelled")
        release_gpus(job)
        was = job.state
        job.state = JobState.CANCELLED
        job.finished_at = timezone.now()
        job.pending_reason = ""
        # What the backend last said was about the live job ("running on ..."): not true of a cancelled one
        # (the job page and `rp watch` showed it as the last word). Why it ended is the event below.
        job.backend_message = ""
        job.next_dispatch_at = None
        job.save()
        message = cancelled_words(who, was)
        JobEvent.objects.create(job=job, kind=JobEventKind.CANCELLED, message=message)
        if user is None or job.submitted_by_id != user.pk:
            # Its submitter did not do it (a lead, an admin, the system): they hear of it. Their own
            # cancel needs no notice.
            notify_job(job, JobEventKind.CANCELLED, message)
        if was in HOLDING_STATES:
            request_pass(f"cancelled job {job.pk}")
    return job


def cancelled_words(who: str, was: str) -> str:
    """A cancelled job's event: by whom (a user name, or "" when no one signed in did it) while in which
    state (scheduling.words; a state without a template is written as before)."""
    template = (words.CANCELLED_BY_WHILE if who else words.CANCELLED_WHILE).get(was)
    if template is None:
        return f"cancelled{f' by {who}' if who else ''} while {was}"
    return say(template, owner=who) if who else template


# Job events people subscribe to (core.notifications; portal.pages.my_notifications): JobEventKind -> event.
JOB_NOTICES = {
    JobEventKind.STARTED: NotificationEvent.JOB_STARTED,
    JobEventKind.PREEMPTED: NotificationEvent.JOB_PREEMPTED,
    JobEventKind.COMPLETED: NotificationEvent.JOB_FINISHED,
    JobEventKind.FAILED: NotificationEvent.JOB_FAILED,
    JobEventKind.CANCELLED: NotificationEvent.JOB_CANCELLED,
    # Put back in the queue (scheduling.requeue): after a fault on its trays, or for a partition plan.
    JobEventKind.REQUEUED: NotificationEvent.JOB_PUT_BACK,
    JobEventKind.PLAN_REQUEUED: NotificationEvent.JOB_PUT_BACK,
}


def notify_job(
    job: Job, kind: str, message: str = "", *, department_slug: str | None = None, subscriptions=None
) -> None:
    """Tell the job's subscribers (its submitter's own subscriptions: scope user:<id>; its department's:
    department:<slug>; this job's: job:<id>) that it started, was preempted, finished, failed, was
    cancelled by someone else or was requeued (a fault, a partition plan). Recorded in the caller's
    transaction, sent after it commits."""
    event = JOB_NOTICES.get(kind)
    if event is None:
        return
    slug = (
        department_slug or Department.objects.filter(pk=job.department_id).values_list("slug", flat=True)[0]
    )
    plain, saying = {
        NotificationEvent.JOB_STARTED: (words.JOB_STARTED, words.JOB_STARTED_SAYING),
        NotificationEvent.JOB_PREEMPTED: (words.JOB_PREEMPTED, words.JOB_PREEMPTED_SAYING),
        NotificationEvent.JOB_FINISHED: (words.JOB_FINISHED, words.JOB_FINISHED_SAYING),
        NotificationEvent.JOB_FAILED: (words.JOB_FAILED, words.JOB_FAILED_SAYING),
        NotificationEvent.JOB_CANCELLED: (words.JOB_CANCELLED, words.JOB_CANCELLED_SAYING),
        NotificationEvent.JOB_PUT_BACK: (words.JOB_PUT_BACK, words.JOB_PUT_BACK_SAYING),
    }[event]
    scope = [f"job:{job.pk}", f"department:{slug}"]
    if job.submitted_by_id:
        scope.insert(0, f"user:{job.submitted_by_id}")
    notify(
        event,
        say(saying, job_title=job.name, job=job.pk, message=message)
        if message
        else say(plain, job_title=job.name, job=job.pk),
        {"job": job.pk, "name": job.name, "department": slug, "event": event, "message": message[:500]},
        scope=scope,
        link=reverse("scheduling:job-detail", args=[job.pk]),
        subscriptions=subscriptions,
    )


def finish_job(job: Job, state: str, message: str = "", exit_code: int | None = None) -> None:
    """A holding job ended in its backend: record it, free its GPUs, ask for a pass. Caller holds the lock."""
    kind = {
        JobState.COMPLETED: JobEventKind.COMPLETED,
        JobState.FAILED: JobEventKind.FAILED,
        JobState.CANCELLED: JobEventKind.CANCELLED,
    }[state]
    release_gpus(job)
    job.state = state
    job.finished_at = timezone.now()
    job.exit_code = exit_code
    job.backend_message = message[:500]
    job.next_dispatch_at = None
    job.save()
    JobEvent.objects.create(job=job, kind=kind, message=message)
    notify_job(job, kind, message)
    request_pass(f"job {job.pk} {state}")
