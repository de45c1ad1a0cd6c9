import contextlib
import functools
import logging
import zoneinfo

from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import TooManyFieldsSent
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpResponse, JsonResponse
from django.templatetags.static import static
from django.urls import get_resolver
from django.utils import timezone
from django.utils.html import escape
from django.utils.translation import get_language, gettext, gettext_lazy
from django_htmx.http import HttpResponseClientRedirect

from core.filters import unknown_parameters

log = logging.getLogger(__name__)


class LoginRequiredMiddleware(DjangoLoginRequiredMiddleware):
    """Login required for every page except the login page.

    The API is left to Django REST framework, which authenticates sessions *and* tokens and answers
    401/403 in JSON; a redirect to the HTML login page would be wrong for a REST client. An htmx request
    whose session expired gets an HX-Redirect, so the whole page goes to the login form instead of the
    login form being swapped into a panel.
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)

    def handle_no_permission(self, request, view_func):
        if getattr(request, "htmx", False):
            page = request.htmx.current_url_abs_path or request.get_full_path()
            login = redirect_to_login(page, self.get_login_url(view_func))
            return HttpResponseClientRedirect(login["Location"])
        return super().handle_no_permission(request, view_func)


class NullCharacterMiddleware:
    """A NUL (`%00`) in the path or the query string is a 400 before any view runs.

    PostgreSQL's text cannot hold U+0000: a view that looks a path part or a query parameter up (a rack's
    name, a department's slug, a member's username) would otherwise end in a DataError and a 500, on
    PostgreSQL only (SQLite takes it). Filters refuse it field by field; this is the one place that covers
    every URL, the API's and the pages'. No name Rackplane keeps can hold one (core.textrule). An address
    with more query parameters than Django reads is a 400 here as well."""

    DETAIL = "The address holds a NUL character (%00): no name or value in Rackplane contains one."

    def __init__(self, get_response):
        self.get_response = get_response

    TOO_MANY = (
        "The address holds more than {limit} query parameters (DATA_UPLOAD_MAX_NUMBER_FIELDS): send fewer."
    )

    def __call__(self, request):
        try:
            query = request.GET.lists()
        except TooManyFieldsSent:
            # Answered here: Django makes it a 400 too, except with DEBUG on, where its technical error page
            # reads the query again and fails with a 500 (`make run`).
            return self._refuse(request, self.TOO_MANY.format(limit=settings.DATA_UPLOAD_MAX_NUMBER_FIELDS))
        if "\x00" in request.path or any(
            "\x00" in key or any("\x00" in value for value in values) for key, values in query
        ):
            return self._refuse(request, self.DETAIL)
        return self.get_response(request)

    @staticmethod
    def _refuse(request, detail: str):
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=400)
        return HttpResponse(detail, status=400, content_type="text/plain; charset=utf-8")


class KnownQueryParameters:
    """An API operation given a query parameter it does not read answers 400 naming it, before the view runs
    (core.filters.unknown_parameters), so nothing is listed as if it had filtered and nothing is written as
    if it had been read. The DRF views of /api/v1/ (not the schema and docs views beside it, which read
    their own). A request with no credentials at all (no signed-in session, no Authorization header) is left
    to the view, which answers 401 (no /api/v1/ view lets anyone in): what an operation reads is told to
    callers only."""

    PREFIX = "/api/v1/"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        cls = getattr(view_func, "cls", None)
        if cls is None or not request.path.startswith(self.PREFIX) or not request.GET:
            return None
        user = getattr(request, "user", None)
        if not (user is not None and user.is_authenticated) and "HTTP_AUTHORIZATION" not in request.META:
            return None
        body = unknown_parameters(request, view_func)
        return None if body is None else JsonResponse(body, status=400)


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY on every response that does not set its own.

    Django 5.2 has no CSP of its own. Admin pages and the error pages get the same policy as the portal.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        technical = (
            settings.DEBUG
            and response.status_code in (404, 500)
            and not getattr(response, "portal_error_page", False)
        )
        if self.policy and not technical:
            # With DEBUG on, a 500 (and a 404 asked for with ?technical=1: DevErrorPages) is Django's
            # technical page, whose inline styles the policy would block: a developer's tool, never served in
            # production.
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response


# --- the database gone mid-request --------------------------------------------------------------------------

DATABASE_ERRORS = (OperationalError, InterfaceError)
DATABASE_DETAIL = gettext_lazy(
    "The database is not answering right now, so this request was not completed and nothing of it was saved. "
    "Try again in a moment; if it keeps happening, tell your platform administrators."
)
DATABASE_RETRY_AFTER_S = 5


def is_database_unavailable(error: BaseException | None) -> bool:
    """Whether `error` says the database cannot be reached (restarted, failed over, connection dropped)."""
    return isinstance(error, DATABASE_ERRORS)


def database_unavailable(request, error: BaseException) -> HttpResponse:
    """503 with the reason: JSON under /api/ ({"detail", "reason"}), else a short page; Retry-After set.

    The connection is dropped so that the next request on this thread opens a fresh one."""
    log.warning("database unavailable during %s %s: %s", request.method, request.path, error)
    with contextlib.suppress(Exception):
        connection.close()
    if request.path.startswith("/api/"):
        response = JsonResponse(
            {"detail": str(DATABASE_DETAIL), "reason": "database_unavailable"}, status=503
        )
    else:
        # Plain text in a fixed frame (no template: the templates' tags may need the database).
        title, heading = gettext("Unavailable"), gettext("The database is not answering")
        response = HttpResponse(
            f'<!doctype html><html lang="{escape(get_language() or "en")}"><head><meta charset="utf-8">'
            f"<title>{escape(title)} · Rackplane</title>"
            f'<link rel="stylesheet" href="{static("css/portal.css")}"></head><body><main id="content">'
            f'<section class="card"><h1>{escape(heading)}</h1>'
            f"<p>{escape(DATABASE_DETAIL)}</p></section></main></body></html>",
            status=503,
        )
    response.headers["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
    response.headers["Cache-Control"] = "no-store"
    return response


class DatabaseUnavailableMiddleware:
    """A view that loses the database answers 503 with the reason instead of a 500 and a traceback in the log;
    errors outside views (middleware reading the session) get the same answer from handler500
    (portal.pages.home.server_error)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if is_database_unavailable(exception):
            return database_unavailable(request, exception)
        return None


class DevErrorPages:
    """With DEBUG on (`make run`), a 404 is the portal's own page, with the menu, as in production: Django's
    technical 404 lists every URL pattern of the portal to whoever mistypes an address. `?technical=1` still
    shows Django's page to a developer who wants it. Off with DEBUG off (Django uses the handler itself)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and not getattr(response, "portal_error_page", False)
            and response.get("Content-Type", "").startswith("text/html")
            and "technical" not in request.GET
        ):
            return get_resolver().resolve_error_handler(404)(request)  # the handler404 production uses
        return response


TIMEZONE_COOKIE = "rackplane_tz"  # set by static/portal/ux.js from the browser's Intl time zone


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def viewer_timezone(value: str | None) -> zoneinfo.ZoneInfo | None:
    """The IANA time zone a cookie names, or None: anything else (unknown, too long, a path) is ignored, never
    opened as a file (zoneinfo would read any name under its search path)."""
    if not value or len(value) > 64 or value not in _zones():
        return None
    return zoneinfo.ZoneInfo(value)


class ViewerTimezoneMiddleware:
    """Times in the viewer's own zone: the browser's time zone (the `rackplane_tz` cookie ux.js keeps equal to
    `Intl.DateTimeFormat().resolvedOptions().timeZone`) is made current for the request, so every `date`
    filter and form field (a maintenance window typed in) speaks it, and the pages print its name next to
    times. Without the cookie (the first page, a script, the API) times stay in UTC, as stored."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = viewer_timezone(request.COOKIES.get(TIMEZONE_COOKIE))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
