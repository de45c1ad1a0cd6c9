"""The home page (the fleet overview for platform admins, a lead's or member's work for them), and the error
pages every URL can end on.

Error pages never fail: they render their template with a small context of plain values (no request, so no
context processors, no database, no `request.resolver_match`), fall back to plain text if even that breaks,
and answer JSON ({"detail": ...}) under /api/, like Django REST framework does, unless a browser asks for a
page there (wants_page: a person who typed an unknown /api/... address gets the portal's page).
"""

import logging
import sys
from dataclasses import dataclass

from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.access import is_admin
from inventory import selectors
from portal.web.middleware import database_unavailable, is_database_unavailable
from scheduling import fleet_counts
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Job
from scheduling.usage import (
    Position,
    department_list,
    idle_as_listed,
    idle_gpus_queryset,
    longest_idle,
    without_data_of,
)
from scheduling.views.departments import link_idle_gpus

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
CSRF_REASON = gettext_lazy(
    "The form's security token was missing or out of date (the page may have been open a long time, or "
    "cookies are blocked). Reload the page and try again."
)


WORK_LIMIT = 20  # jobs and idle GPUs listed on a lead's or member's home; the rest is counted


@dataclass
class WorkHome:
    """What a lead or member sees first: their departments' quota, their idle GPUs and their jobs."""

    positions: list[Position]
    idle_gpus: list  # Gpu rows annotated by scheduling.usage.idle_gpus_queryset
    running_jobs: list[Job]
    pending_jobs: list[Job]
    no_data: int = 0  # GPUs their jobs hold with no recent utilization (scheduling.usage.held_without_data)

    def _sum(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.positions)

    @property
    def guaranteed(self) -> int:
        return self._sum("guaranteed")

    @property
    def in_use(self) -> int:
        return self._sum("in_use")

    @property
    def borrowed(self) -> int:
        return self._sum("borrowed")

    @property
    def in_quota(self) -> int:
        """In use within the guarantee (in use = in quota + borrowed, scheduling.usage)."""
        return self._sum("in_quota")

    @property
    def several(self) -> bool:
        """Whether the person is in more than one department: only then do the job rows name theirs."""
        return len(self.positions) > 1

    @property
    def idle(self) -> int:
        return self._sum("idle")

    @property
    def idle_more(self) -> int:
        return max(0, self.idle - len(self.idle_gpus))

    @property
    def reporting(self) -> int:
        """Held GPUs with recent utilization data (idle or working)."""
        return max(0, self.in_use - self.no_data)

    @property
    def running_more(self) -> int:
        return max(0, self._sum("running_jobs") - len(self.running_jobs))

    @property
    def pending_more(self) -> int:
        return max(0, self._sum("pending_jobs") - len(self.pending_jobs))


def work_home(user) -> WorkHome:
    """A fixed number of queries whatever the fleet's or the departments' size: the departments' positions
    (scheduling.usage.department_list), one bounded query each for idle GPUs, running and pending jobs, and
    one count of the held GPUs without utilization data."""
    positions = department_list(user)
    ids = [p.department.pk for p in positions]
    # Longest idle first, as the department page and the admin dashboard list them (one table for all three:
    # scheduling/_idle_gpus.html, with the person holding each).
    idle = longest_idle(
        idle_gpus_queryset().filter(department_id__in=ids),
        WORK_LIMIT,
        *("department_name", "hostname", "index"),
    )
    idle_as_listed(positions, idle, WORK_LIMIT)
    link_idle_gpus(idle)
    jobs = (
        Job.objects.visible_to(user)
        .filter(department_id__in=ids)
        .select_related("department", "submitted_by")
    )
    running = list(jobs.filter(state__in=HOLDING_STATES).order_by("-started_at", "-pk")[:WORK_LIMIT])
    pending = list(jobs.filter(state=JobState.PENDING).order_by("created_at", "pk")[:WORK_LIMIT])
    return WorkHome(
        positions=positions,
        idle_gpus=idle,
        running_jobs=running,
        pending_jobs=pending,
        no_data=without_data_of(positions),
    )


def home(request):
    """Platform admins (and accounts in no department): the whole fleet at a glance, a fixed handful of
    aggregate queries. Leads and members: their work (work_home), not the fleet's hardware."""
    user = request.user
    roles = set()
    if not is_admin(user):
        roles = set(user.memberships.values_list("role", flat=True))
        user._menu_roles = roles  # the menu reads them too (core.templatetags.access)
    if not is_admin(user) and roles:
        return render(request, "portal/work_home.html", {"work": work_home(user)})
    # The fleet-wide counts kept while the inventory is unchanged (scheduling.fleet_counts).
    overview = selectors.overview(user, counts=fleet_counts.overview_counts(user))
    return render(request, "portal/home.html", {"overview": overview})


def wants_page(request) -> bool:
    """Whether the request asks for a page rather than JSON: a browser, whose Accept puts text/html before
    the `*/*` that stands for application/json. A client that sends no Accept, `*/*` (curl, requests) or
    application/json gets JSON, as REST clients expect of an error."""
    return request.get_preferred_type(["application/json", "text/html"]) == "text/html"


def error_response(
    request,
    status: int,
    template_name: str,
    detail: str,
    context: dict | None = None,
    *,
    with_request: bool = False,
):
    """JSON under /api/ (unless a browser asks for a page there: wants_page), else `template_name` rendered:
    with the request (`with_request`: the menu and the signed-in person, for 403 and 404 pages), falling
    back to without it, then to plain text. Under /api/ the answer varies with Accept, and says so."""
    api = request.path.startswith(API_PREFIX)
    if api and not wants_page(request):
        response = JsonResponse({"detail": detail}, status=status)
        patch_vary_headers(response, ["Accept"])
        return response
    values = {"detail": detail, **(context or {})}
    body = None
    if with_request:
        try:
            body = loader.get_template(template_name).render(values, request)
        except Exception:
            logger.exception("the %s error page did not render with the request", status)
    if body is None:
        try:
            body = loader.get_template(template_name).render(values)
        except Exception:
            logger.exception("the %s error page did not render", status)
            body = f"{status}: {detail}"
            return HttpResponse(body, status=status, content_type="text/plain; charset=utf-8")
    response = HttpResponse(body, status=status)
    response.portal_error_page = True  # not Django's technical page (portal.web.middleware.DevErrorPages)
    if api:
        patch_vary_headers(response, ["Accept"])
    return response


def bad_request(request, exception=None):
    return error_response(request, 400, "400.html", _("Bad request."))


def permission_denied(request, exception=None):
    """403 with the reason the code gave (PermissionDenied("...")), or a general one."""
    reason = str(exception or "") or _("You may not open this page.")
    return error_response(request, 403, "403.html", reason, with_request=True)


def page_not_found(request, exception=None):
    return error_response(
        request, 404, "404.html", _("Not found."), {"path": request.path}, with_request=True
    )


def server_error(request):
    # Called inside Django's `except` block: a database that went away is a 503 with the reason.
    error = sys.exc_info()[1]
    if is_database_unavailable(error):
        return database_unavailable(request, error)
    return error_response(request, 500, "500.html", _("Server error."))


def csrf_failure(request, reason=""):
    """settings.CSRF_FAILURE_VIEW: the 403 page, saying what to do (Django's reason is in the log)."""
    logger.warning("CSRF check failed for %s: %s", request.path, reason)
    return error_response(request, 403, "403.html", str(CSRF_REASON))
