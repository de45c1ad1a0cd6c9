"""Django admin as the portal's: its titles, and the portal's own 403 page for a signed-in person who may not
use it (Django's admin would show its login form again, saying "You are authenticated as bob, but are not
authorized to access this page"). Installed as the default admin site (Django's documented way to override
it: INSTALLED_APPS names `portal.admin_site.RackplaneAdminConfig` in place of `django.contrib.admin`)."""

from axes.apps import AppConfig as AxesAppConfig
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext_lazy


class RackplaneAdminSite(admin.AdminSite):
    site_header = gettext_lazy("Rackplane administration")
    site_title = gettext_lazy("Rackplane admin")
    index_title = gettext_lazy("Rackplane administration")
    site_url = "/"

    @login_not_required  # as Django's own (the portal's LoginRequiredMiddleware would send it to /login/)
    def login(self, request, extra_context=None):
        if request.user.is_authenticated and not self.has_permission(request):
            raise PermissionDenied
        return super().login(request, extra_context)


class RackplaneAdminConfig(AdminConfig):
    default_site = "portal.admin_site.RackplaneAdminSite"


class SignInLockoutConfig(AxesAppConfig):
    """django-axes (sign-in lockout) with a name the admin's index shows in the viewer's language: axes has
    none of its own (its app reads "Axes"); installed in its place (INSTALLED_APPS), label "axes" as before.
    Its models' and fields' names are axes' own, marked for translation by it: their Japanese is the
    portal's catalogue's (portal/admin.py)."""

    verbose_name = gettext_lazy("Sign-in lockout")
