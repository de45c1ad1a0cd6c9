"""A page's address opened with a method it does not take (a GET on a POST-only action: a link followed, an
address typed or bookmarked) answers with the portal's page, with the menu, words and a link back, status 405
and its Allow header kept. Django's `require_POST` answers with an empty body, which Chromium replaces with an
error page of its own. The API's 405 (DRF's JSON) and any 405 that has a body of its own are left alone."""

from __future__ import annotations

from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _

from portal.pages.home import API_PREFIX, error_response


class MethodNotAllowedPage:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code != 405 or response.content or request.path.startswith(API_PREFIX):
            return response
        back = request.headers.get("Referer", "")
        if not url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
            back = ""
        allowed = response.get("Allow", "")
        page = error_response(
            request,
            405,
            "405.html",
            _("This address takes no %(method)s request.") % {"method": request.method},
            {"path": request.path, "allowed": allowed, "back": back},
            with_request=True,
        )
        if allowed:
            page["Allow"] = allowed
        return page
