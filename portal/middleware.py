from django.conf import settings
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequiredMiddleware
from django.contrib.auth.views import redirect_to_login
from django_htmx.http import HttpResponseClientRedirect


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


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY on every response that does not set its own.

    Django 5.2 has no CSP of its own. Admin pages and the error pages get the same policy as the portal.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and not (settings.DEBUG and response.status_code in (404, 500)):
            # With DEBUG on, 404 and 500 are Django's technical pages, whose inline styles the policy
            # would block: they are a developer's tool and never served in production.
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
