from django.contrib import admin

from core.access import is_admin
from core.models import AuditEvent

# The Django admin lets in the portal's platform admins (core.access), not staff alone: the "Admin" link in
# the portal's menu and the door it leads to follow the same rule.
admin.site.has_permission = lambda request: is_admin(request.user)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit log is evidence: readable by staff, never added, edited or deleted by hand."""

    list_display = ["at", "actor_name", "source", "action", "object_type", "object_repr", "department_id"]
    list_filter = ["source", "action", "object_type"]
    search_fields = ["actor_name", "object_repr", "object_id"]
    date_hierarchy = "at"
    show_full_result_count = False
    fields = [
        "at",
        "actor",
        "actor_name",
        "source",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "department_id",
        "before",
        "after",
        "labels",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
