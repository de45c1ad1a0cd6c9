from django.contrib import admin, messages
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.admin_words import stored_sentence
from inventory import agent_tokens
from inventory.health import returns as health_returns
from inventory.health.actions import HealthError
from inventory.models import (
    AgentToken,
    ComputeTray,
    FabricGroup,
    FabricImport,
    Gpu,
    GpuRail,
    HealthAction,
    HealthCheckResult,
    HealthEvent,
    HealthRule,
    HealthSettings,
    NVLinkPartition,
    Rack,
    RackPlace,
)


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
    list_display = ["hostname", "rack", "slot", "state", "state_reason_words", "partition", "reported_clique"]
    list_filter = ["state", "rack__system_model"]
    search_fields = ["hostname", "rack__name"]
    list_select_related = ["rack", "partition__rack"]
    raw_id_fields = ["rack", "partition"]
    # The MIG layout is chosen on the tray page (scheduling.services.mig_layouts checks it against the
    # reported profiles, the tray's jobs and the other trays' layouts), never typed here.
    readonly_fields = [
        "healthy_since",
        "agent_version",
        "agent_interval_s",
        "mig_layout",
        "mig_layout_devices",
    ]
    actions = ["return_to_service"]
    # A reason Rackplane wrote (a drain's, with its moment in UTC), as the tray page shows it.
    state_reason_words = stored_sentence(ComputeTray, "state_reason")

    @admin.action(
        description=gettext_lazy("Return the selected trays to service (drained by Rackplane's health rules)")
    )
    def return_to_service(self, request, queryset):
        for tray in queryset:
            try:
                health_returns.return_to_service(tray, actor=request.user, force=True, note="from the admin")
            except HealthError as error:
                self.message_user(request, str(error), messages.WARNING)
            else:
                self.message_user(request, _("%(host)s is back in service.") % {"host": tray.hostname})


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

    @admin.action(description=gettext_lazy("Revoke the selected agent tokens"))
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True):
            agent_tokens.revoke(token)


@admin.register(HealthSettings)
class HealthSettingsAdmin(admin.ModelAdmin):
    """One row: dry run, circuit breaker, return to service, repeat offenders. Clear "breaker tripped at"
    to let the rules drain again."""

    fieldsets = [
        (None, {"fields": ["dry_run", "dedup_window_s"]}),
        (
            gettext_lazy("Circuit breaker"),
            {"fields": [("breaker_percent", "breaker_window_s"), ("breaker_tripped_at", "breaker_note")]},
        ),
        (gettext_lazy("Return to service"), {"fields": ["auto_return", "return_after_s", "return_check"]}),
        (gettext_lazy("Repeat offenders"), {"fields": [("repeat_faults", "repeat_days")]}),
    ]
    list_display = ["__str__", "dry_run", "breaker_percent", "breaker_tripped_at", "return_after_s"]
    readonly_fields = ["breaker_note"]

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not HealthSettings.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(HealthRule)
class HealthRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "enabled", "kind", "xid_first", "xid_last", "code", "threshold", "action"]
    list_editable = ["enabled", "action"]
    list_filter = ["enabled", "kind", "action"]
    search_fields = ["name", "code", "note"]


@admin.register(HealthEvent)
class HealthEventAdmin(admin.ModelAdmin):
    """Recorded by the agents, DCGM and the rules; read here, not edited."""

    list_display = ["__str__", "tray", "source", "kind", "code", "count", "first_seen", "last_seen", "drains"]
    list_filter = ["source", "kind", "drains", "degrades", "warns"]
    search_fields = ["tray__hostname", "gpu_uuid", "code", "mnemonic"]
    list_select_related = ["tray"]
    date_hierarchy = "last_seen"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(HealthAction)
class HealthActionAdmin(admin.ModelAdmin):
    list_display = ["created_at", "tray", "kind", "dry_run", "rule_name", "reason_words", "actor"]
    list_filter = ["kind", "dry_run"]
    search_fields = ["tray__hostname", "reason", "rule_name"]
    list_select_related = ["tray", "actor"]
    date_hierarchy = "created_at"
    reason_words = stored_sentence(HealthAction, "reason")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(HealthCheckResult)
class HealthCheckResultAdmin(admin.ModelAdmin):
    list_display = ["tray", "name", "exit_status", "started", "seconds", "received_at"]
    list_filter = ["name", "exit_status"]
    search_fields = ["tray__hostname", "name"]
    list_select_related = ["tray"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class _Imported(admin.ModelAdmin):
    """The fabric is imported (the Fabric page's import, `manage.py import_fabric`), never typed here: its
    rows are read-only; an import is deleted whole (its groups, places and rails with it)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(FabricImport)
class FabricImportAdmin(_Imported):
    list_display = ["source", "in_use", "label", "imported_at", "imported_by"]
    list_select_related = ["imported_by"]


@admin.register(FabricGroup)
class FabricGroupAdmin(_Imported):
    list_display = ["name", "level", "parent", "fabric"]
    list_filter = ["fabric__source", "level"]
    search_fields = ["name"]
    list_select_related = ["parent", "fabric"]

    def has_delete_permission(self, request, obj=None):
        return False  # an import is all or nothing


@admin.register(RackPlace)
class RackPlaceAdmin(FabricGroupAdmin):
    list_display = ["rack", "unit", "fabric"]
    list_filter = ["fabric__source"]
    search_fields = ["rack__name", "unit__name"]
    list_select_related = ["rack", "unit", "fabric"]


@admin.register(GpuRail)
class GpuRailAdmin(FabricGroupAdmin):
    list_display = ["tray", "gpu_index", "rail", "leaf", "fabric"]
    list_filter = ["fabric__source", "rail"]
    search_fields = ["tray__hostname", "leaf"]
    list_select_related = ["tray", "fabric"]
