"""The overview page, and the error pages every URL can end on.

Error pages never fail: they render their template with a small context of plain values (no request, so no
context processors, no database, no `request.resolver_match`), fall back to plain text if even that breaks,
and answer JSON ({"detail": ...}) under /api/, like Django REST framework does.
"""

import logging

from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

from inventory import selectors

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
CSRF_REASON = (
    "The form's security token was missing or out of date (the page may have been open a long time, or "
    "cookies are blocked). Reload the page and try again."
)


def home(request):
    """The overview: the whole fleet at a glance, a fixed handful of aggregate queries."""
    return render(request, "portal/home.html", {"overview": selectors.overview(request.user)})


def error_response(request, status: int, template_name: str, detail: str, context: dict | None = None):
    """JSON under /api/, else `template_name` rendered without the request (plain text if that fails)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": detail}, status=status)
    try:
        body = loader.get_template(template_name).render({"detail": detail, **(context or {})})
    except Exception:
        logger.exception("the %s error page did not render", status)
        body = f"{status}: {detail}"
        return HttpResponse(body, status=status, content_type="text/plain; charset=utf-8")
    return HttpResponse(body, status=status)


def bad_request(request, exception=None):
    return error_response(request, 400, "400.html", "Bad request.")


def permission_denied(request, exception=None):
    """403 with the reason the code gave (PermissionDenied("...")), or a general one."""
    reason = str(exception or "") or "You may not open this page."
    return error_response(request, 403, "403.html", reason)


def page_not_found(request, exception=None):
    return error_response(request, 404, "404.html", "Not found.", {"path": request.path})


def server_error(request):
    return error_response(request, 500, "500.html", "Server error.")


def csrf_failure(request, reason=""):
    """settings.CSRF_FAILURE_VIEW: the 403 page, saying what to do (Django's reason is in the log)."""
    logger.warning("CSRF check failed for %s: %s", request.path, reason)
    return error_response(request, 403, "403.html", CSRF_REASON)
