from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from inventory.api.discovery import DiscoveryReportView
from portal import audit_views, views

api_v1 = [
    path("", include("inventory.api.urls")),
    path("discovery/reports/", DiscoveryReportView.as_view(), name="discovery-report"),
    path("telemetry/", include("tenancy.api.telemetry")),
    path("", include("tenancy.api.urls")),
    path("", include("portal.api.audit")),
    path("", include("scheduling.api.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("inventory/", include("inventory.urls")),
    path("tenancy/", include("tenancy.urls")),
    path("scheduling/", include("scheduling.urls")),
    path("audit/", audit_views.audit_list, name="audit-list"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
