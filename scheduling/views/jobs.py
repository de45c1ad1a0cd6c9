"""Job pages (everyone, for the jobs they may see): list, detail with live status, cancel.

Configuration targets and pushes have their pages in integrations.views.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.html import conditional_escape, strip_tags
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling
from hostlist import collect_hostlist

from core.hardware import GPUS_PER_TRAY
from core.htmx import confirm_plain_post
from core.sentences_i18n import begins_with_value
from core.tables import Column, Table
from inventory.fabric import rack_place_in_use
from inventory.fabric import span as fabric_span
from inventory.models import ComputeTray
from scheduling.choices import Backend, JobEventKind, JobState, PriorityClass, Topology
from scheduling.filters import JobFilter
from scheduling.models import Allocation, Job
from scheduling.queue_standing import queue_standing
from scheduling.resubmit import resubmit_offer, with_resubmit_facts
from scheduling.services.actions import cancel_job, may_cancel
from scheduling.services.pass_writes import WHY_HERE
from scheduling.words import translate as scheduler_words
from scheduling.words import translate_html as scheduler_words_html
from tenancy.models import Department, Project
from tenancy.models.accounts import posix_identity_of

# --- jobs -----------------------------------------------------------------------------------------------
# Everyone sees the jobs `Job.objects.visible_to` allows (their departments'; staff: all). The list and a
# job's status poll every few seconds while something shown can still change, and are told to stop (HTTP
# 286) once nothing can. Cancelling goes through scheduling.services (may_cancel, cancel_job).

JOBS_PER_PAGE = 50
JOB_POLL_SECONDS = 2  # long work polls every 2 s (htmx), as every progress page does
TOPOLOGY_WORDS = {
    Topology.PARTITION: gettext_lazy("in one NVLink partition"),
    Topology.RACK: gettext_lazy("in one rack (one NVLink domain)"),
    Topology.ANY: gettext_lazy("anywhere in the cluster"),
}


def _hostlist(hosts) -> str:
    return collect_hostlist(list(hosts)) if hosts else ""


JOB_SORTS = {
    "id": ("pk",),
    "name": ("name",),
    "department": ("department__name",),
    # Jobs without a project sort together (NULL names: first ascending on SQLite, last on PostgreSQL).
    "project": ("project__name",),
    "gpus": ("gpus",),
    "topology": ("topology",),
    "class": ("priority_class",),
    "state": ("state",),
    # "Where / why waiting": pending jobs by their reason; placed ones (no reason) by their first host.
    "where": ("pending_reason", "placement__0"),
    "created": ("created_at",),
    "started": ("started_at",),
}
JOB_COLUMNS = [
    Column("id", lambda j: j.pk),
    Column("name", lambda j: j.name),
    Column("department", lambda j: j.department.slug),
    Column("project", lambda j: j.project.slug if j.project_id else ""),
    Column("submitted_by", lambda j: j.submitted_by.get_username() if j.submitted_by else ""),
    Column("backend", lambda j: j.backend),
    Column("gpus", lambda j: j.gpus),
    Column("topology", lambda j: j.topology),
    Column("priority_class", lambda j: j.priority_class),
    Column("state", lambda j: j.state),
    Column("over_quota", lambda j: j.over_quota),
    Column("pending_reason", lambda j: j.pending_reason),
    Column("placement", lambda j: _hostlist(j.placement)),
    Column("exit_code", lambda j: j.exit_code),
    Column("created_at", lambda j: j.created_at),
    Column("started_at", lambda j: j.started_at),
    Column("finished_at", lambda j: j.finished_at),
]


def job_list(request):
    """Jobs the user may see, filtered (JobFilter, as in the API), sorted and paginated (core.tables);
    `?export=csv|json`: every filtered job; `request.htmx`: the table only (the page polls it while a shown
    job is pending, starting or running)."""
    table = Table(request, "jobs", JOB_SORTS, "-created", per_page=JOBS_PER_PAGE)
    queryset = table.order(
        Job.objects.visible_to(request.user)
        .select_related("department", "submitted_by", "project")
        .defer("work", "backend_message")
    )
    filterset, jobs, status = _filtered(request, queryset)
    if table.export_format and status == 200:
        return table.export(JOB_COLUMNS, jobs)
    page = table.page(jobs)
    _annotate_rows(request.user, page.object_list)
    polling = any(job.is_active for job in page.object_list)
    context = {
        "page": page,
        "table": table,
        "filter": filterset,
        "polling": polling,
        "poll_seconds": JOB_POLL_SECONDS,
        "filtered": any(request.GET.getlist(name) for name in filterset.filters),
    }
    if request.htmx:
        response = render(request, "scheduling/_job_table.html", context, status=status)
        if not polling:
            response = HttpResponseStopPolling(response.content)
        patch_vary_headers(response, ["HX-Request"])
        return response
    context.update(
        {
            "departments": Department.objects.visible_to(request.user).order_by("name").only("slug", "name"),
            "states": JobState.choices,
            "backends": Backend.choices,
            "priority_classes": PriorityClass.choices,
            "selected_states": request.GET.getlist("state"),
        }
    )
    return render(request, "scheduling/job_list.html", context, status=status)


def _filtered(request, queryset):
    """(the JobFilter, the jobs it matches, the status to answer with). A value it refuses (another
    department's project, a state that is none) is reported with the form's error (the page shows
    `filter.form.errors`) and answers 400 with no job: never every job as if it had matched."""
    filterset = JobFilter(request.GET, queryset=queryset, request=request)
    if filterset.is_bound and not filterset.is_valid():
        return filterset, queryset.none(), 400
    return filterset, filterset.qs, 200


def _annotate_rows(user, jobs) -> None:
    """Each shown job's `where` (its placement as a host list) and `project_linked`: the Project column links
    to the project's row on its department page for the projects the user may see there
    (Project.objects.visible_to); a job of another project of the department shows its name."""
    shown_projects = {job.project_id for job in jobs if job.project_id}
    linked = set()
    if shown_projects:
        visible = Project.objects.visible_to(user).filter(pk__in=shown_projects)
        linked = set(visible.values_list("pk", flat=True))
    for job in jobs:
        job.where = _hostlist(job.placement)
        job.project_linked = job.project_id in linked


def _visible_job(request, pk, resubmit_facts: bool = False) -> Job:
    jobs = Job.objects.visible_to(request.user).select_related(
        "department", "submitted_by__posix_account", "project"
    )
    if resubmit_facts:  # what the page's Resubmit button needs, in the same query (scheduling.resubmit)
        jobs = with_resubmit_facts(jobs, request.user)
    return get_object_or_404(jobs, pk=pk)


def _times(n: int) -> str:
    return ngettext("%(n)s time", "%(n)s times", n) % {"n": n}


def _requeued_words(job: Job) -> list[str]:
    """How often a pending job was preempted, requeued after a fault or for a partition plan, and that it
    kept its place. Requeues count as preemptions too (each run has its own backend name): told apart
    here (whole sentences: the page joins them as its language does)."""
    preempted, requeued, planned = preempted_only(job), job.fault_requeues, job.plan_requeues
    if preempted > 0 and requeued:
        sentence = _(
            "It was preempted %(preempted)s and requeued %(requeued)s after a fault on its trays and "
            "kept its place in the queue (queued by submission time)."
        )
    elif requeued:
        sentence = _(
            "It was requeued %(requeued)s after a fault on its trays and kept its place in the queue "
            "(queued by submission time)."
        )
    elif preempted > 0:
        sentence = _(
            "It was preempted %(preempted)s and kept its place in the queue (queued by submission time)."
        )
    else:
        sentence = ""
    sentences = [sentence] if sentence else []
    if planned and sentence:
        sentences.append(_("It was also requeued %(planned)s for a partition plan."))
    elif planned:
        sentences.append(
            _(
                "It was requeued %(planned)s for a partition plan and kept its place in the queue (queued "
                "by submission time)."
            )
        )
    counts = {"preempted": _times(preempted), "requeued": _times(requeued), "planned": _times(planned)}
    return [text % counts for text in sentences]


def preempted_only(job: Job) -> int:
    """How often the job was preempted by a pass (its `preemptions` count its requeues too)."""
    return max(0, job.preemptions - job.fault_requeues - job.plan_requeues)


def _waiting_words(job: Job) -> list[str]:
    """Why a pending job waits, in sentences: the scheduler's reason first, then what the job asks for."""
    reason = job.pending_reason.strip()
    if reason.lower().startswith("waiting:"):
        reason = reason[len("waiting:") :].strip()
    if reason:
        # The engine's words, stored in English, in the viewer's language (scheduling.words); a sentence
        # that starts with a value ("inference jobs run only ...") keeps it as the jobs list shows it.
        # As HTML: its moments (a fabric wait's since/until) in the viewer's zone, named (core.moments).
        stored, reason = reason, scheduler_words_html(reason)
        if not begins_with_value(stored) and not reason.startswith("<"):
            reason = mark_safe(reason[:1].upper() + reason[1:])
        words = [
            reason
            if strip_tags(reason).endswith((".", "!", "?", "。"))
            else mark_safe(conditional_escape(_("%(message)s.")) % {"message": reason})
        ]
    else:
        words = [_("It waits for the next scheduling pass.")]
    trays = job.gpus // GPUS_PER_TRAY
    where = TOPOLOGY_WORDS.get(job.topology, "")
    if job.gpus > GPUS_PER_TRAY:
        asks = _("It asks for %(gpus)s GPUs (%(trays)s whole trays) %(where)s.")
    else:
        asks = ngettext(
            "It asks for %(gpus)s GPU %(where)s.", "It asks for %(gpus)s GPUs %(where)s.", job.gpus
        )
    words.append(asks % {"gpus": job.gpus, "trays": trays, "where": where})
    if job.preemptions:
        words.extend(_requeued_words(job))
    return words


def _held_by_tray(job: Job) -> dict[int, list[int]]:
    """The GPU indexes the job holds now, per tray id. One query."""
    held: dict[int, list[int]] = {}
    for tray_id, index in (
        Allocation.objects.filter(job=job).order_by("gpu__index").values_list("gpu__tray_id", "gpu__index")
    ):
        held.setdefault(tray_id, []).append(index)
    return held


def _placement(job: Job) -> list[dict]:
    """The job's trays grouped by rack: hostnames (compressed), partitions, GPUs held now, each rack's place
    in the fabric in use (spine group, scalable unit; issue 33). Two queries."""
    if not job.placement:
        return []
    trays = {
        tray.hostname: tray
        for tray in ComputeTray.objects.filter(hostname__in=job.placement)
        .select_related("rack", "partition")
        .annotate(**rack_place_in_use())
    }
    held = _held_by_tray(job)
    racks: dict[str, dict] = {}
    for hostname in job.placement:
        tray = trays.get(hostname)
        name = tray.rack.name if tray else ""
        group = racks.setdefault(
            name,
            {
                "rack": name,
                "trays": [],
                "partitions": [],
                "place": (tray.fabric_spine, tray.fabric_unit) if tray else (None, None),
            },
        )
        group["trays"].append(
            {
                "hostname": hostname,
                "tray": tray,
                "partition": tray.partition.name if tray and tray.partition else "",
                "gpus": held.get(tray.pk, []) if tray else [],
            }
        )
        if tray and tray.partition and tray.partition.name not in group["partitions"]:
            group["partitions"].append(tray.partition.name)
    for group in racks.values():
        group["hostlist"] = _hostlist(row["hostname"] for row in group["trays"])
    return sorted(racks.values(), key=lambda group: group["rack"])


def _why_here(events: list) -> str:
    """Why the job went where it is: the engine's sentence in its last placement event
    (scheduling.engine.placement.explain, written after WHY_HERE by scheduling.services.pass_writes); ""
    when none gives one."""
    for event in reversed(events):
        if event.kind == JobEventKind.PLACED:
            return scheduler_words(event.message.partition(WHY_HERE)[2])
    return ""


def _job_status_context(request, job: Job, **extra) -> dict:
    events = list(job.events.all())
    for event in events:
        event.hostlist = _hostlist(event.placement)
    placement = _placement(job)
    return {
        "job": job,
        "can_cancel": job.is_active and may_cancel(request.user, job),
        "waiting_words": _waiting_words(job) if job.state == JobState.PENDING else [],
        "preempted": preempted_only(job),
        "standing": queue_standing(job.pk) if job.state == JobState.PENDING else None,
        "placement": placement,
        "fabric_span": fabric_span({group["rack"]: group["place"] for group in placement if group["rack"]}),
        "why_here": _why_here(events),
        "hostlist": _hostlist(job.placement),
        "events": events,
        "poll_seconds": JOB_POLL_SECONDS,
        # The Unix user a live backend runs (and stops) the submitter's jobs as (integrations.dispatch).
        "run_as": posix_identity_of(job.submitted_by, getattr(job.submitted_by, "posix_account", None)),
        **extra,
    }


def _job_status_response(request, job: Job, **extra):
    """The live part of a job's page (state, why, placement, events, cancel): 286 once it has finished."""
    response = render(request, "scheduling/_job_status.html", _job_status_context(request, job, **extra))
    if job.is_finished:
        response = HttpResponseStopPolling(response.content)
    patch_vary_headers(response, ["HX-Request"])
    return response


def job_detail(request, pk):
    """Everything about a job; `request.htmx`: its live status only (polled while it is active)."""
    job = _visible_job(request, pk, resubmit_facts=not request.htmx)
    if request.htmx:
        return _job_status_response(request, job)
    context = _job_status_context(request, job)
    context["work"] = [
        (key, value if isinstance(value, str) else json.dumps(value, indent=2))
        for key, value in (job.work or {}).items()
    ]
    # The Resubmit button tells the truth before the click (scheduling.resubmit).
    context["resubmit"] = resubmit_offer(request.user, job)
    context["slices"] = list(job.slice_allocations.select_related("gpu__tray")) if job.mig_slices else []
    return render(request, "scheduling/job_detail.html", context)


@require_POST
def job_cancel(request, pk):
    """Cancel a job (its submitter, its department's leads, staff). htmx: the status partial, with the
    outcome in words; a plain form post: back to the job's page with a message."""
    job = _visible_job(request, pk)
    if job.is_active and may_cancel(request.user, job):
        asked = confirm_plain_post(
            request,
            question_template="scheduling/_job_cancel_question.html",
            context={"job": job},
            title=_("Cancel job #%(pk)s?") % {"pk": job.pk},
            action=_("Cancel job"),
            back_url=reverse("scheduling:job-detail", args=[job.pk]),
        )
        if asked:
            return asked
    error = ""
    if not may_cancel(request.user, job):
        error = _("Only the job's submitter, its department's leads and platform admins may cancel it.")
    else:
        try:
            job = cancel_job(job, request.user)
        except ValidationError as refused:
            error = _("Not cancelled: %(why)s.") % {"why": " ".join(refused.messages)}
        else:
            job = _visible_job(request, pk)
    if request.htmx:
        notice = "" if error else _("Cancelled: its GPUs are free again.")
        return _job_status_response(request, job, cancel_error=error, cancel_notice=notice)
    if error:
        messages.error(request, error)
    else:
        messages.success(
            request,
            _("Job #%(pk)s %(name)s cancelled: its GPUs are free again.") % {"pk": job.pk, "name": job.name},
        )
    return redirect("scheduling:job-detail", pk=job.pk)
