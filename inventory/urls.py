"""Inventory's pages, in the `inventory` namespace: the rack list, a GPU's and a tray's page, agent tokens,
the health centre.

Paths are whole (included by portal/urls.py at the root): an app's pages sit in the site's sections by what
users look for, its namespace says which app owns them (the rack view, which shows jobs, is scheduling's).
"""

from django.urls import path

from inventory.views import agent_tokens, fabric, health, racks, recarving

app_name = "inventory"
urlpatterns = [
    path("inventory/racks/", racks.rack_list, name="rack-list"),
    path("inventory/gpus/<int:pk>/", racks.gpu_detail, name="gpu-detail"),
    path("inventory/trays/<int:pk>/", racks.tray_detail, name="tray-detail"),
    path("inventory/racks/<str:name>/recarving/", recarving.recarve_policy, name="recarve-policy"),
    path("inventory/fabric/import/", fabric.fabric_import_page, name="fabric-import"),
    path("inventory/fabric/import/<int:pk>/apply/", fabric.fabric_import_apply, name="fabric-import-apply"),
    path("inventory/fabric/use/", fabric.fabric_use, name="fabric-use"),
    path("inventory/agent-tokens/", agent_tokens.agent_token_list, name="agent-token-list"),
    path(
        "inventory/agent-tokens/<int:pk>/issued/", agent_tokens.agent_token_issued, name="agent-token-issued"
    ),
    path(
        "inventory/agent-tokens/<int:pk>/revoke/", agent_tokens.agent_token_revoke, name="agent-token-revoke"
    ),
    path("inventory/health/", health.health_events, name="health-events"),
    path("inventory/health/offenders/", health.health_offenders, name="health-offenders"),
    path("inventory/health/service/", health.health_service, name="health-service"),
    path("inventory/health/service/trays/<int:pk>/", health.tray_service, name="health-tray-service"),
]
