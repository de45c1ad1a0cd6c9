from django.contrib import admin

from scheduling.models import Allocation, Job


class AllocationInline(admin.TabularInline):
    """The GPUs a job holds: written by the scheduler, shown here."""

    model = Allocation
    fields = ["gpu", "tray", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("gpu__tray")
            .order_by("gpu__tray__hostname", "gpu__index")
        )

    @admin.display(description="Tray")
    def tray(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "department",
        "state",
        "gpus",
        "topology",
        "priority_class",
        "backend",
        "over_quota",
        "submitted_by",
        "created_at",
    ]
    list_filter = ["state", "backend", "priority_class", "topology", "over_quota", "department"]
    search_fields = ["name", "department__name", "submitted_by__username"]
    list_select_related = ["department", "submitted_by"]
    autocomplete_fields = ["department", "submitted_by"]
    readonly_fields = ["created_at"]
    date_hierarchy = "created_at"
    inlines = [AllocationInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["gpu", "tray", "job", "department", "created_at"]
    list_filter = ["job__department"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname", "job__name"]
    list_select_related = ["gpu__tray", "job__department"]
    raw_id_fields = ["job", "gpu"]
    readonly_fields = ["created_at"]

    @admin.display(description="Tray", ordering="gpu__tray__hostname")
    def tray(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"

    @admin.display(description="Department", ordering="job__department__name")
    def department(self, obj):
        return obj.job.department
