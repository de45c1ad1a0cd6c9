"""Admin of departments and the NVLink partitions dedicated to them, saved through tenancy.services
(tenancy.admin.checked)."""

from django.contrib import admin
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tenancy.admin.checked import ServiceCheckedForm
from tenancy.labels import labelled_form, labels_for
from tenancy.models import DedicatedPartition, Department, Membership
from tenancy.services import ISOLATION_FIELDS, QUOTA_FIELDS, dedicate_partition, save_department


class DepartmentAdminForm(ServiceCheckedForm):
    class Meta:
        model = Department
        fields = [*QUOTA_FIELDS, *ISOLATION_FIELDS]
        labels = labels_for(Department)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ISOLATION_FIELDS:
            field = self.fields[name]
            field.required = False
            field.help_text = (
                _("%(help)s Leave empty to allocate from the pools.")
                % {"help": str(field.help_text).rstrip(".")}
                if field.help_text
                else _("Leave empty to allocate from the pools.")
            )
        if self.instance.pk is None:
            # Empty, so the service applies the tenancy settings' default quota.
            self.fields["storage_quota_gib"].initial = None
            self.fields["storage_quota_gib"].help_text = _("Leave empty for the tenancy settings' default.")

    def _get_validation_exclusions(self):
        # Model validation is the service's: its own checks name the field with clearer messages ("the
        # limit (8) may not be below the guarantee (16)", "VLAN ID 100 is already assigned to Research"),
        # then it calls full_clean() (field validators, uniqueness, constraints) itself.
        return super()._get_validation_exclusions() | set(self.fields)

    def run_service(self, instance):
        save_department(instance)


class MembershipInline(admin.TabularInline):
    """Read-only here: members are added and removed on the membership pages, which keep a lead."""

    model = Membership
    form = labelled_form(Membership)
    fields = ["user", "role", "origin", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user")


class DedicatedPartitionInline(admin.TabularInline):
    model = DedicatedPartition
    form = labelled_form(DedicatedPartition)
    fields = ["partition", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = gettext_lazy(
        "dedicated NVLink partitions (add them on the dedicated partition page)"
    )

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("partition__rack")


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    form = DepartmentAdminForm
    list_display = [
        "name",
        "slug",
        "guaranteed_gpus",
        "limit_gpus",
        "over_quota_weight",
        "priority",
        "vlan_id",
        "vxlan_vni",
        "pkey_hex",
        "network_cidr",
        "export_path",
    ]
    search_fields = ["name", "slug", "network_cidr", "export_path"]
    list_filter = ["priority"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["pkey_hex", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "slug"]}),
        (
            gettext_lazy("GPU quota"),
            {"fields": ["guaranteed_gpus", "over_quota_weight", "limit_gpus", "priority"]},
        ),
        (
            gettext_lazy("Network isolation"),
            {"fields": ["vlan_id", "vxlan_vni", "ib_pkey", "pkey_hex", "network_cidr"]},
        ),
        (gettext_lazy("Storage isolation"), {"fields": ["export_path", "storage_quota_gib"]}),
        (gettext_lazy("Record"), {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]
    inlines = [MembershipInline, DedicatedPartitionInline]

    @admin.display(description=gettext_lazy("P_Key"), ordering="ib_pkey")
    def pkey_hex(self, obj):
        return obj.pkey_hex if obj.ib_pkey is not None else "—"

    def save_model(self, request, obj, form, change):
        save_department(obj)


class DedicatedPartitionAdminForm(ServiceCheckedForm):
    class Meta:
        model = DedicatedPartition
        fields = ["partition", "department"]
        labels = labels_for(DedicatedPartition)

    def run_service(self, instance):
        dedicate_partition(instance.department, instance.partition)


@admin.register(DedicatedPartition)
class DedicatedPartitionAdmin(admin.ModelAdmin):
    form = DedicatedPartitionAdminForm
    list_display = ["partition", "department", "created_at"]
    list_filter = ["department"]
    search_fields = ["partition__name", "partition__rack__name", "department__name"]
    list_select_related = ["partition__rack", "department"]
    autocomplete_fields = ["partition", "department"]

    def get_readonly_fields(self, request, obj=None):
        # Giving the partition to another department: remove this dedication, then add the new one.
        return ["partition", "department", "created_at"] if obj is not None else ["created_at"]

    def save_model(self, request, obj, form, change):
        if change:
            return
        dedication = dedicate_partition(obj.department, obj.partition)
        obj.pk, obj.created_at = dedication.pk, dedication.created_at
        obj._state.adding = False
