"""Every URL of the portal, composed here (the project shell is the one layer that sees every app).

Page namespaces are the sections users see: `inventory` (racks, trays, GPUs and the partition wizard),
`tenancy` (departments and dashboards), `scheduling` (jobs), `integrations` (targets and pushes). The API
is one router under /api/v1/.
"""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from integrations.api import ConfigTargetViewSet
from integrations.plans import urls as plan_urls
from integrations.plans.api import PartitionPlanViewSet
from inventory import urls as inventory_urls
from inventory.api import views as inventory_api
from inventory.api.discovery import DiscoveryReportView
from portal import (
    account,
    audit_views,
    departments,
    gpu_life,
    health,
    job_form,
    my_notifications,
    notifications,
    people,
    projects,
    racks,
    search,
    tray_actions,
    utilization,
    views,
)
from portal.api.audit import AuditEventViewSet
from portal.api.departments import DepartmentMemberViewSet, DepartmentViewSet
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
    path("discovery/reports/", DiscoveryReportView.as_view(), name="discovery-report"),
    path("telemetry/", include("tenancy.api.telemetry")),
    path("tokens/rotate/", account.TokenRotateView.as_view(), name="token-rotate"),
    path("departments/<slug:department_slug>/members/", members, name="department-member-list"),
    path(
        "departments/<slug:department_slug>/members/<str:username>/", member, name="department-member-detail"
    ),
]

inventory_pages = [
    path("racks/", racks.rack_list, name="rack-list"),
    path("racks/<str:name>/", racks.rack_detail, name="rack-detail"),
    path("gpus/<int:pk>/", racks.gpu_detail, name="gpu-detail"),
    path("gpus/<int:pk>/utilization/", utilization.gpu_utilization, name="gpu-utilization"),
    path("trays/<int:pk>/", racks.tray_detail, name="tray-detail"),
    path("trays/<int:pk>/drain/", tray_actions.tray_drain, name="tray-drain"),
    path("trays/<int:pk>/return/", tray_actions.tray_return, name="tray-return"),
    path("trays/<int:pk>/maintenance/", tray_actions.tray_maintenance, name="tray-maintenance"),
    path("racks/<str:name>/trays/", tray_actions.tray_bulk, name="tray-bulk"),
    path("racks/<str:name>/trays/result/", tray_actions.tray_bulk_result, name="tray-bulk-result"),
    *plan_urls.urlpatterns,
    *inventory_urls.urlpatterns,
]

tenancy_pages = [
    path("departments/", departments.department_list, name="department-list"),
    path("departments/<slug:slug>/", departments.department_detail, name="department-detail"),
    path("departments/<slug:slug>/edit/", departments.department_edit, name="department-edit"),
    path("departments/<slug:slug>/members/", departments.member_set, name="member-set"),
    path("departments/<slug:slug>/members/<int:pk>/remove/", departments.member_remove, name="member-remove"),
    path("departments/<slug:slug>/people/search/", people.people_search, name="people-search"),
    path("departments/<slug:slug>/projects/", projects.project_create, name="project-create"),
    path("departments/<slug:slug>/projects/<int:pk>/", projects.project_update, name="project-update"),
    path("departments/<slug:slug>/projects/<int:pk>/delete/", projects.project_delete, name="project-delete"),
    path(
        "departments/<slug:slug>/projects/<int:pk>/people/",
        projects.project_member_set,
        name="project-member-set",
    ),
    path(
        "departments/<slug:slug>/project-people/<int:pk>/move/",
        projects.project_member_move,
        name="project-member-move",
    ),
    path(
        "departments/<slug:slug>/project-people/<int:pk>/remove/",
        projects.project_member_remove,
        name="project-member-remove",
    ),
    path("dashboard/", departments.admin_dashboard, name="admin-dashboard"),
]

urlpatterns = [
    path("", views.home, name="home"),
    # Probes and metrics: answered by portal.health.ProbeMiddleware before the host check; here for reverse().
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # Browsers ask for /favicon.ico whatever the page's <link rel="icon"> says: send them to the SVG.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
        name="favicon",
    ),
    path("search/", search.search_page, name="search"),
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
    path("inventory/", include((inventory_pages, "inventory"))),
    path("tenancy/", include((tenancy_pages, "tenancy"))),
    # The job form (portal.job_form): beside the jobs list, and at the short address the menu names.
    path("scheduling/jobs/new/", job_form.job_new, name="job-new"),
    path("scheduling/jobs/new/preview/", job_form.job_preview, name="job-preview"),
    path("jobs/new/", RedirectView.as_view(pattern_name="job-new", query_string=True), name="job-new-short"),
    path(
        "jobs/",
        RedirectView.as_view(pattern_name="scheduling:job-list", query_string=True),
        name="job-list-short",
    ),
    path("scheduling/jobs/<int:pk>/utilization/", utilization.job_utilization, name="job-utilization"),
    # The GPUs' life (portal.gpu_life): a job's logs and resubmit; the jobs that held a GPU or a tray.
    path("scheduling/jobs/<int:pk>/logs/", gpu_life.job_logs, name="job-logs"),
    path("scheduling/jobs/<int:pk>/resubmit/", gpu_life.job_resubmit, name="job-resubmit"),
    path("inventory/gpus/<int:pk>/jobs/", gpu_life.held_jobs, {"kind": "gpu"}, name="gpu-held-jobs"),
    path("inventory/trays/<int:pk>/jobs/", gpu_life.held_jobs, {"kind": "tray"}, name="tray-held-jobs"),
    path("inventory/trays/<int:pk>/utilization/", gpu_life.tray_utilization, name="tray-utilization"),
    path("tenancy/departments/<slug:slug>/quota-chart/", gpu_life.quota_chart, name="quota-chart"),
    path("scheduling/", include("scheduling.urls")),
    path("scheduling/", include("integrations.urls")),
    path("audit/", audit_views.audit_list, name="audit-list"),
    # Notifications (platform admins): webhook endpoints, email recipients, deliveries.
    path("notifications/", notifications.notification_list, name="notification-list"),
    path("notifications/new/<str:channel>/", notifications.subscription_new, name="notification-new"),
    path("notifications/<int:pk>/edit/", notifications.subscription_edit, name="notification-edit"),
    path("notifications/<int:pk>/secret/", notifications.subscription_secret, name="notification-secret"),
    path("notifications/<int:pk>/toggle/", notifications.subscription_toggle, name="notification-toggle"),
    path("notifications/<int:pk>/delete/", notifications.subscription_delete, name="notification-delete"),
    path("notifications/<int:pk>/test/", notifications.subscription_test, name="notification-test"),
    path("notifications/deliveries/<int:pk>/", notifications.delivery_detail, name="notification-delivery"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's setup script as its own URL: no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]

# Error pages that never fail (portal.views): JSON under /api/, HTML elsewhere.
handler400 = views.bad_request
handler403 = views.permission_denied
handler404 = views.page_not_found
handler500 = views.server_error
