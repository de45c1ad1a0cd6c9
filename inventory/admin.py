from django.contrib import admin

from inventory import agent_tokens
from inventory.models import AgentToken, ComputeTray, Gpu, NVLinkPartition, Rack


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin):
    list_display = ["name", "system_model", "cluster_uuid", "location"]
    list_filter = ["system_model"]
    search_fields = ["name", "cluster_uuid", "location"]


@admin.register(NVLinkPartition)
class NVLinkPartitionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "rack", "clique_id", "name"]
    list_filter = ["rack"]
    search_fields = ["name", "rack__name"]
    list_select_related = ["rack"]


@admin.register(ComputeTray)
class ComputeTrayAdmin(admin.ModelAdmin):
    list_display = ["hostname", "rack", "slot", "state", "state_reason", "partition", "reported_clique"]
    list_filter = ["state", "rack__system_model"]
    search_fields = ["hostname", "rack__name"]
    list_select_related = ["rack", "partition__rack"]
    raw_id_fields = ["rack", "partition"]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["uuid", "tray", "index", "product", "health", "fabric_state", "reported_clique_id"]
    list_filter = ["health", "fabric_state", "product"]
    search_fields = ["uuid", "serial", "tray__hostname"]
    list_select_related = ["tray"]
    raw_id_fields = ["tray"]


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    """Listed and revoked here too; issued on the portal's agent tokens page or by `manage.py
    discovery_agent_token`, which show the secret once (the admin could not: only its hash is stored)."""

    list_display = ["prefix", "rack", "hostname", "description", "created_by", "last_used_at", "revoked_at"]
    list_filter = ["rack"]
    search_fields = ["prefix", "hostname", "rack__name", "description"]
    list_select_related = ["rack", "created_by"]
    fields = [*list_display, "created_at"]
    readonly_fields = ["prefix", "rack", "hostname", "created_by", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected agent tokens")
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True):
            agent_tokens.revoke(token)
