"""A job's logs: read from the backend that ran it (integrations.logs), so integrations' page (the
`integrations` namespace, at /scheduling/jobs/<pk>/logs/, loaded by the job page with htmx)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from core.access import is_admin
from core.sentences_i18n import translate_html
from integrations import words as integrations_words  # noqa: F401  (a backend's sentences: registered)
from integrations.logs import DEFAULT_LIMIT as LOG_LIMIT
from integrations.logs import job_logs as read_job_logs
from scheduling import words as scheduling_words  # noqa: F401  (a job's events: registered)
from scheduling.models import Job


def _exit_words(job: Job) -> SafeString | str:
    """How the job ended, in one sentence: its state, exit code (and signal), and the backend's or its
    last event's word (a stored sentence, read back in the viewer's language: HTML, its data marked)."""
    if not job.is_finished:
        return ""
    words = str(job.get_state_display())
    if job.exit_code is not None:
        if job.exit_code > 128:
            words = _("%(state)s with exit code %(code)s (killed by signal %(signal)s)") % {
                "state": words,
                "code": job.exit_code,
                "signal": job.exit_code - 128,
            }
        else:
            words = _("%(state)s with exit code %(code)s") % {"state": words, "code": job.exit_code}
    last = job.events.filter(kind__in=["completed", "failed", "cancelled"]).order_by("-at", "-pk").first()
    reason = (last.message if last and last.message else "") or job.backend_message
    if not reason:
        return _("%(state)s.") % {"state": words}
    return mark_safe(
        escape(_("%(state)s: %(reason)s")) % {"state": escape(words), "reason": translate_html(reason)}
    )


def job_logs(request, pk):
    """The job's output, bounded (the last 64 KiB of each stream, escaped in a <pre>); `?download=1`: all of
    it as a text file (capped at integrations.job_output.MAX_DOWNLOAD)."""
    job = get_object_or_404(Job.objects.visible_to(request.user).select_related("department"), pk=pk)
    show_paths = is_admin(request.user)  # files on the portal's own disk: their paths for admins only
    if request.GET.get("download"):
        logs = read_job_logs(job, limit=None, show_paths=show_paths)
        if logs.error and not logs.parts:
            return HttpResponse(logs.error + "\n", content_type="text/plain; charset=utf-8", status=404)
        response = HttpResponse(logs.as_text(), content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
        response["X-Content-Type-Options"] = "nosniff"
        return response
    logs = read_job_logs(job, limit=LOG_LIMIT, show_paths=show_paths)
    response = render(
        request,
        "integrations/_job_logs.html",
        {"job": job, "logs": logs, "limit_kib": LOG_LIMIT // 1024, "exit_words": _exit_words(job)},
    )
    patch_vary_headers(response, ["HX-Request"])
    return response
