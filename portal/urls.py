"""Every URL of the site, composed here (the project shell is the one layer that sees every app).

A page lives in the lowest app that can import all it shows, and its URL name is in that app's namespace:
`inventory` (the rack list, GPU and tray pages, agent tokens), `scheduling` (jobs, the rack view, the jobs
and utilization of GPUs and trays, departments, people and projects, the admin dashboard), `integrations`
(targets, pushes, tray actions, a job's logs, department settings, the partition wizard). Each app's urls.py
lists its pages with their whole paths, so the sections users see (/inventory/, /tenancy/, /scheduling/) do
not change when a page moves between apps. The site's own pages (home, search, account, audit, notifications,
probes) are the shell's (portal.pages, portal.ops), without a namespace. The API is one router under /api/v1/;
/api/ itself points to it (portal.api.index).
"""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog, set_language
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from integrations.api import ConfigTargetViewSet, JobLogsView
from integrations.plans.api import PartitionPlanViewSet
from inventory.api import views as inventory_api
from inventory.api.discovery import DiscoveryReportView
from portal.api.audit import AuditEventViewSet
from portal.api.index import ApiIndexView
from portal.ops import health
from portal.pages import account, audit, home, my_notifications, notifications, search
from scheduling.api.departments import DepartmentMemberViewSet, DepartmentViewSet
from scheduling.api.views import JobViewSet
from tenancy.api.projects import ProjectViewSet
from tenancy.auth import OIDCCallbackView, OIDCSignInView

router = DefaultRouter()
router.register("racks", inventory_api.RackViewSet, basename="rack")
router.register("trays", inventory_api.ComputeTrayViewSet, basename="tray")
router.register("gpus", inventory_api.GpuViewSet, basename="gpu")
router.register("partitions", inventory_api.NVLinkPartitionViewSet, basename="partition")
router.register("partition-plans", PartitionPlanViewSet, basename="partition-plan")
router.register("departments", DepartmentViewSet, basename="department")
router.register("projects", ProjectViewSet, basename="project")
router.register("audit-events", AuditEventViewSet, basename="audit-event")
router.register("jobs", JobViewSet, basename="job")
router.register("config-targets", ConfigTargetViewSet, basename="config-target")

members = DepartmentMemberViewSet.as_view({"get": "list", "post": "create"})
member = DepartmentMemberViewSet.as_view(
    {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}
)

api_v1 = [
    *router.urls,
    path("telemetry/", include("tenancy.api.telemetry")),
    path("tokens/rotate/", account.TokenRotateView.as_view(), name="token-rotate"),
    path("jobs/<int:pk>/logs/", JobLogsView.as_view(), name="job-logs"),
    path("departments/<slug:department_slug>/members/", members, name="department-member-list"),
    path(
        "departments/<slug:department_slug>/members/<str:username>/", member, name="department-member-detail"
    ),
]

urlpatterns = [
    # First: every node reports here once a minute (3,000 requests/s at 10,000 racks), and Django tries the
    # patterns in order (after the apps' pages this address took ~0.4 ms of matching; first, ~0.01 ms).
    path("api/v1/discovery/reports/", DiscoveryReportView.as_view(), name="discovery-report"),
    path("", home.home, name="home"),
    # Probes and metrics: answered by portal.ops.health.ProbeMiddleware before the host check; here for
    # reverse().
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says: send them to the SVG.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
        name="favicon",
    ),
    # The language switch (a POST that sets the language cookie) and the scripts' strings in that language;
    # both before sign-in too (the login page has the switch).
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path("i18n/catalog.js", login_not_required(JavaScriptCatalog.as_view()), name="javascript-catalog"),
    path("search/", search.search_page, name="search"),
    path("search/suggest/", search.suggest, name="search-suggest"),
    path("login/", account.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on (tenancy.auth; 404 while it is not configured): the button, and the provider's return.
    path("oidc/authenticate/", OIDCSignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", OIDCCallbackView.as_view(), name="oidc_authentication_callback"),
    path("account/tokens/", account.personal_tokens, name="personal-tokens"),
    path("account/tokens/new/", account.personal_token_new, name="personal-token-new"),
    path("account/tokens/<int:pk>/revoke/", account.personal_token_revoke, name="personal-token-revoke"),
    path("account/api-token/", account.api_token_page, name="api-token"),
    path("account/api-token/new/", account.api_token_new, name="api-token-new"),
    path("account/notifications/", my_notifications.my_subscriptions, name="my-notifications"),
    path(
        "account/notifications/<int:pk>/delete/",
        my_notifications.my_subscription_delete,
        name="my-notification-delete",
    ),
    path("account/inbox/", my_notifications.inbox_list, name="my-inbox"),
    path("account/inbox/read/", my_notifications.inbox_read, name="my-inbox-read"),
    path("account/inbox/bell/", my_notifications.bell, name="my-inbox-bell"),
    path("admin/", admin.site.urls),
    # The apps' pages, each app's under its own namespace with whole paths (see the docstring).
    path("", include("inventory.urls")),
    path("", include("scheduling.urls")),
    path("", include("integrations.urls")),
    # The short addresses the menu and old links use.
    path(
        "jobs/new/",
        RedirectView.as_view(pattern_name="scheduling:job-new", query_string=True),
        name="job-new-short",
    ),
    path(
        "jobs/",
        RedirectView.as_view(pattern_name="scheduling:job-list", query_string=True),
        name="job-list-short",
    ),
    path("audit/", audit.audit_list, name="audit-list"),
    # Notifications (platform admins): webhook endpoints, email recipients, deliveries.
    path("notifications/", notifications.notification_list, name="notification-list"),
    path("notifications/new/<str:channel>/", notifications.subscription_new, name="notification-new"),
    path("notifications/<int:pk>/edit/", notifications.subscription_edit, name="notification-edit"),
    path("notifications/<int:pk>/secret/", notifications.subscription_secret, name="notification-secret"),
    path("notifications/<int:pk>/toggle/", notifications.subscription_toggle, name="notification-toggle"),
    path("notifications/<int:pk>/delete/", notifications.subscription_delete, name="notification-delete"),
    path("notifications/<int:pk>/test/", notifications.subscription_test, name="notification-test"),
    path("notifications/deliveries/<int:pk>/", notifications.delivery_detail, name="notification-delivery"),
    # /api/ itself, with or without its slash: a browser to the documentation, a client a JSON index.
    re_path(r"^api/?$", ApiIndexView.as_view(), name="api-index"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's setup script as its own URL: no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]

# Error pages that never fail (portal.pages.home): JSON under /api/, HTML elsewhere.
handler400 = home.bad_request
handler403 = home.permission_denied
handler404 = home.page_not_found
handler500 = home.server_error
