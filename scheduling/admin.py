from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.admin_words import stored_sentence
from inventory.admin import HealthSettingsAdmin
from inventory.models import HealthSettings
from scheduling import requeue
from scheduling.models import (
    Allocation,
    BackendCancel,
    FaultPolicy,
    IdleCount,
    Job,
    JobEvent,
    SchedulerState,
    SchedulingRequest,
    SliceAllocation,
    UsageRollup,
    WhatIfLayout,
    WhatIfRun,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the scheduler writes: shown, never edited by hand (that would bypass its locks and rules)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    """Rows the scheduler writes, shown under their job."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["at", "kind", "message_words", "placement"]
    readonly_fields = fields
    # As the job page's history shows it: in the viewer's language.
    message_words = stored_sentence(JobEvent, "message")


class AllocationInline(ReadOnlyInline):
    """The GPUs a job holds: written by the scheduler, shown here."""

    model = Allocation
    fields = ["gpu", "tray", "created_at"]
    readonly_fields = fields

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("gpu__tray")
            .order_by("gpu__tray__hostname", "gpu__index")
        )

    @admin.display(description=gettext_lazy("Tray"))
    def tray(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


class SliceAllocationInline(ReadOnlyInline):
    """The MIG devices a slice job holds (scheduling.services.slices)."""

    model = SliceAllocation
    fields = ["profile", "mig_uuid", "gpu", "created_at"]
    readonly_fields = fields


@admin.register(SliceAllocation)
class SliceAllocationAdmin(ReadOnlyAdmin):
    list_display = ["mig_uuid", "profile", "gpu", "job", "created_at"]
    search_fields = ["mig_uuid", "gpu__uuid", "gpu__tray__hostname", "job__name"]
    list_select_related = ["gpu", "job__department"]


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
    readonly_fields = ["created_at", "placed_at", "started_at", "finished_at", "backend_id", "preemptions"]
    date_hierarchy = "created_at"
    inlines = [AllocationInline, SliceAllocationInline, JobEventInline]


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["gpu", "tray", "job", "department", "created_at"]
    list_filter = ["job__department"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname", "job__name"]
    list_select_related = ["gpu__tray", "job__department"]
    raw_id_fields = ["job", "gpu"]
    readonly_fields = ["created_at"]

    @admin.display(description=gettext_lazy("Tray"), ordering="gpu__tray__hostname")
    def tray(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"

    @admin.display(description=gettext_lazy("Department"), ordering="job__department__name")
    def department(self, obj):
        return obj.job.department


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "job", "kind", "message_words"]
    list_filter = ["kind"]
    # As the job page's history shows it: in the viewer's language.
    message_words = stored_sentence(JobEvent, "message")
    exclude = ["message"]
    readonly_fields = ["message_words"]
    list_select_related = ["job__department"]
    search_fields = ["job__name", "message"]


@admin.register(BackendCancel)
class BackendCancelAdmin(ReadOnlyAdmin):
    list_display = ["backend", "backend_id", "job", "reason", "attempts", "error", "created_at", "done_at"]
    list_filter = ["backend"]
    list_select_related = ["job__department"]


@admin.register(SchedulerState)
class SchedulerStateAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "last_pass_at", "last_pass_ms", "last_summary"]


@admin.register(SchedulingRequest)
class SchedulingRequestAdmin(ReadOnlyAdmin):
    list_display = ["pk", "reason", "created_at"]


@admin.register(UsageRollup)
class UsageRollupAdmin(ReadOnlyAdmin):
    """The finished jobs' decayed usage the beat rolls up every five minutes (scheduling.usage)."""

    list_display = ["department", "project", "usage", "through", "half_life_s"]
    list_select_related = ["department", "project"]


@admin.register(IdleCount)
class IdleCountAdmin(ReadOnlyAdmin):
    """Each department's idle GPUs as the beat counts them every minute (scheduling.usage)."""

    list_display = ["department", "idle", "no_data", "taken_at"]
    list_select_related = ["department"]


class WhatIfLayoutInline(ReadOnlyInline):
    model = WhatIfLayout
    fields = ("position", "label", "state", "error", "started_at", "finished_at")


@admin.register(WhatIfRun)
class WhatIfRunAdmin(ReadOnlyAdmin):
    """What-ifs the partition wizard ran (scheduling.whatif_runs); their replayed jobs and trays, which can
    be large, are not shown."""

    list_display = ("pk", "created_at", "created_by", "rack", "days", "jobs", "state")
    list_filter = ("state",)
    exclude = ("history", "trays")
    inlines = [WhatIfLayoutInline]


@admin.register(WhatIfLayout)
class WhatIfLayoutAdmin(ReadOnlyAdmin):
    list_display = ("run", "position", "label", "state")
    list_filter = ("state",)


@admin.register(FaultPolicy)
class FaultPolicyAdmin(admin.ModelAdmin):
    """Per priority class: what happens to running jobs when a tray they run on is drained by a fault
    (scheduling.requeue). Shown on the Health settings page too."""

    list_display = ["priority_class", "action", "grace_s", "signal"]
    list_editable = ["action", "grace_s", "signal"]


class HealthSettingsWithJobPolicies(HealthSettingsAdmin):
    """The Health settings page, with the running-work policies (scheduling's, so added from here: the
    inventory app does not know about jobs)."""

    fieldsets = [
        *HealthSettingsAdmin.fieldsets,
        (gettext_lazy("Running work on a failing tray"), {"fields": ["job_policies"]}),
    ]
    readonly_fields = [*HealthSettingsAdmin.readonly_fields, "job_policies"]

    @admin.display(description=gettext_lazy("Policy per priority class"))
    def job_policies(self, obj):
        rows = format_html_join("", "<li>{}: {}</li>", ((p["label"], p["words"]) for p in requeue.policies()))
        link = reverse("admin:scheduling_faultpolicy_changelist")
        return format_html(
            '<ul class="fault-policies">{}</ul><a href="{}">{}</a>', rows, link, _("Edit the policies")
        )


admin.site.unregister(HealthSettings)
admin.site.register(HealthSettings, HealthSettingsWithJobPolicies)
