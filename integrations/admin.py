import json

from django.contrib import admin
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.admin_words import stored_log, stored_sentence
from integrations.models import ConfigPush, ConfigTarget, PlanWindow


@admin.register(ConfigTarget)
class ConfigTargetAdmin(admin.ModelAdmin):
    """Settings are edited on the portal's target form (it keeps tokens out of pages); shown masked here."""

    list_display = ["name", "kind", "enabled", "updated_at"]
    list_filter = ["kind", "enabled"]  # kinds: integrations.registry
    search_fields = ["name"]
    fields = ["name", "kind", "enabled", "settings_masked", "follow_up", "created_at", "updated_at"]
    readonly_fields = ["kind", "settings_masked", "follow_up", "created_at", "updated_at"]

    @admin.display(
        description=gettext_lazy("Settings (secrets masked; edit on the Config pushes > Targets page)")
    )
    def settings_masked(self, obj):
        return (
            json.dumps(obj.masked_settings(), indent=2, sort_keys=True, ensure_ascii=False) if obj.pk else "—"
        )

    def has_add_permission(self, request):
        return False  # the portal form validates the settings per kind


@admin.register(ConfigPush)
class ConfigPushAdmin(admin.ModelAdmin):
    """Pushes are written by integrations.pushes and its task: read-only here (the payload is not shown: it
    can be megabytes; its hash and size are)."""

    fields = [
        "target",
        "status",
        "attempts",
        "reason_words",
        "plan_id",
        "requested_by",
        "superseded_by",
        "payload_hash",
        "payload_size",
        "error",
        "log_words",
        "next_attempt_at",
        "created_at",
        "started_at",
        "updated_at",
        "finished_at",
    ]
    readonly_fields = fields
    list_display = ["id", *fields[:6], "created_at"]  # target ... requested_by
    list_filter = ["status", "target"]
    search_fields = ["reason", "target__name", "error"]
    list_select_related = ["target", "requested_by"]
    date_hierarchy = "created_at"
    # The reason and the log as the push page shows them: words read back, stamps in the viewer's zone.
    reason_words = stored_sentence(ConfigPush, "reason")
    log_words = stored_log(ConfigPush, "log")

    def get_queryset(self, request):
        return super().get_queryset(request).defer("payload")

    @admin.display(description=gettext_lazy("Payload"))
    def payload_size(self, obj):
        if not obj.pk:
            return "—"
        payload = ConfigPush.objects.filter(pk=obj.pk).values_list("payload", flat=True).first() or {}
        keys = ", ".join(payload) or _("empty")
        return _("%(size)s bytes of JSON (%(keys)s)") % {
            "size": f"{len(json.dumps(payload)):,}",
            "keys": keys,
        }

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(PlanWindow)
class PlanWindowAdmin(admin.ModelAdmin):
    """Maintenance windows are made in the partition wizard and moved on by the beat
    (integrations.plans.windows): read-only here."""

    list_display = ["plan", "starts_at", "ends_at", "requeue", "state", "created_by"]
    list_filter = ["state"]
    list_select_related = ["plan__rack", "created_by"]
    fields = [
        "plan",
        "starts_at",
        "ends_at",
        "requeue",
        "state",
        "reason_words",
        "created_by",
        "created_at",
        "updated_at",
    ]
    readonly_fields = fields
    reason_words = stored_sentence(PlanWindow, "reason")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
