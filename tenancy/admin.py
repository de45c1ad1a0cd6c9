"""Admin for tenancy: departments, memberships and dedicated partitions are saved through tenancy.services.

The admin validates a form before saving it, and a service's ValidationError raised while saving would be a
server error. So the forms run the service during validation, in a savepoint that is rolled back, and show
its errors on the form (under the field it names); `save_model` then runs it for real. The TenancySettings
row is locked first, for the rest of the admin's transaction, so nobody can change the picture between the
check and the save.
"""

import copy
import ipaddress

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from core.enqueue import send_now
from tenancy.metrics_source import check_connection
from tenancy.models import (
    DedicatedPartition,
    Department,
    ExporterEndpoint,
    ExternalIdentity,
    GpuActivity,
    GpuUtilization,
    GroupRoleRule,
    Membership,
    MetricsSource,
    PosixAccount,
    PosixSource,
    Project,
    ProjectMembership,
    QuotaSnapshot,
    TenancySettings,
)
from tenancy.projects import create_project, delete_project, set_project_member, update_project
from tenancy.prometheus import PrometheusError, QueryConfig
from tenancy.services import (
    ISOLATION_FIELDS,
    QUOTA_FIELDS,
    dedicate_partition,
    remove_membership,
    save_department,
    set_membership,
)


class _DryRun(Exception):
    """Raised to roll back the savepoint a service ran in while validating a form."""


def _lock_pools() -> None:
    # Inside the admin's transaction (changeform_view is atomic) the lock lasts until the save commits.
    if transaction.get_connection().in_atomic_block:
        TenancySettings.objects.select_for_update().get(pk=TenancySettings.load().pk)


class ServiceCheckedForm(forms.ModelForm):
    """A ModelForm whose validation includes what the service would refuse."""

    def run_service(self, instance):
        raise NotImplementedError

    def _post_clean(self):
        super()._post_clean()
        if self._errors:  # field errors first: the service would only repeat or confuse them
            return
        _lock_pools()
        try:
            with transaction.atomic():
                # A copy: the service fills in allocated values and a primary key we must not keep.
                self.run_service(copy.copy(self.instance))
                raise _DryRun
        except _DryRun:
            pass
        except ValidationError as error:
            self._update_errors(error)


# --- departments -----------------------------------------------------------------------------------------


class DepartmentAdminForm(ServiceCheckedForm):
    class Meta:
        model = Department
        fields = [*QUOTA_FIELDS, *ISOLATION_FIELDS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ISOLATION_FIELDS:
            field = self.fields[name]
            field.required = False
            field.help_text = " ".join(
                filter(None, [str(field.help_text).rstrip("."), "Leave empty to allocate from the pools."])
            )
        if self.instance.pk is None:
            # Empty, so the service applies the tenancy settings' default quota.
            self.fields["storage_quota_gib"].initial = None
            self.fields["storage_quota_gib"].help_text = "Leave empty for the tenancy settings' default."

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
    fields = ["partition", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = "dedicated NVLink partitions (add them on the dedicated partition page)"

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
        ("GPU quota", {"fields": ["guaranteed_gpus", "over_quota_weight", "limit_gpus", "priority"]}),
        ("Network isolation", {"fields": ["vlan_id", "vxlan_vni", "ib_pkey", "pkey_hex", "network_cidr"]}),
        ("Storage isolation", {"fields": ["export_path", "storage_quota_gib"]}),
        ("Record", {"fields": ["created_at", "updated_at"], "classes": ["collapse"]}),
    ]
    inlines = [MembershipInline, DedicatedPartitionInline]

    @admin.display(description="P_Key", ordering="ib_pkey")
    def pkey_hex(self, obj):
        return obj.pkey_hex if obj.ib_pkey is not None else "—"

    def save_model(self, request, obj, form, change):
        save_department(obj)


# --- memberships -----------------------------------------------------------------------------------------


class MembershipAdminForm(ServiceCheckedForm):
    class Meta:
        model = Membership
        fields = ["user", "department", "role"]

    def run_service(self, instance):
        set_membership(instance.department, instance.user.get_username(), instance.role)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    form = MembershipAdminForm
    list_display = ["user", "department", "role", "origin", "created_at"]
    list_filter = ["role", "origin", "department"]
    search_fields = ["user__username", "user__email", "department__name", "department__slug"]
    list_select_related = ["user", "department"]
    autocomplete_fields = ["user", "department"]
    actions = ["remove_selected"]

    def get_readonly_fields(self, request, obj=None):
        # Moving a membership to another user or department is a removal and an addition.
        # The origin follows from who saves: by hand here (tenancy.services.set_membership).
        return ["user", "department", "origin", "created_at"] if obj is not None else ["origin", "created_at"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # bulk deletes would skip the last-lead rule
        return actions

    def save_model(self, request, obj, form, change):
        membership = set_membership(obj.department, obj.user.get_username(), obj.role)
        obj.pk, obj.created_at = membership.pk, membership.created_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        remove_membership(obj)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return HttpResponseRedirect(
                reverse("admin:tenancy_membership_change", args=[object_id], current_app=self.admin_site.name)
            )

    @admin.action(description="Remove selected memberships (keeps every department's last lead)")
    def remove_selected(self, request, queryset):
        removed, refused = 0, []
        for membership in queryset.select_related("user", "department"):
            try:
                remove_membership(membership)
            except ValidationError as error:
                refused.extend(error.messages)
            else:
                removed += 1
        if removed:
            self.message_user(request, f"Removed {removed} membership{'s' if removed != 1 else ''}.")
        for message in refused:
            self.message_user(request, message, messages.ERROR)


# --- projects (tenancy.projects: guarantees that fit the department's, names, members of the department) ----

PROJECT_FIELDS = ["name", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus"]


def _save_project(user, instance: Project) -> Project:
    values = {name: getattr(instance, name) for name in PROJECT_FIELDS}
    if instance.pk:
        return update_project(user, Project.objects.get(pk=instance.pk), **values)
    return create_project(user, instance.department, **values)


class ProjectAdminForm(ServiceCheckedForm):
    saved_by = None  # the admin saving it (ProjectAdmin.get_form)

    class Meta:
        model = Project
        fields = ["department", *PROJECT_FIELDS]

    def run_service(self, instance):
        _save_project(self.saved_by, instance)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    form = ProjectAdminForm
    list_display = ["name", "department", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus"]
    list_filter = ["department"]
    search_fields = ["name", "slug", "department__name"]
    list_select_related = ["department"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.saved_by = request.user
        return form

    def get_readonly_fields(self, request, obj=None):
        return ["department"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        project = _save_project(request.user, obj)
        obj.pk, obj.created_at, obj.updated_at = project.pk, project.created_at, project.updated_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        delete_project(request.user, obj)


class ProjectMembershipAdminForm(ServiceCheckedForm):
    saved_by = None  # the admin saving it (ProjectMembershipAdmin.get_form)

    class Meta:
        model = ProjectMembership
        fields = ["user", "project", "role"]

    def run_service(self, instance):
        set_project_member(self.saved_by, instance.project, instance.user, instance.role)


@admin.register(ProjectMembership)
class ProjectMembershipAdmin(admin.ModelAdmin):
    form = ProjectMembershipAdminForm
    list_display = ["user", "project", "role", "origin", "created_at"]
    list_filter = ["role", "origin", "project__department"]
    search_fields = ["user__username", "project__name"]
    list_select_related = ["user", "project__department"]
    autocomplete_fields = ["user"]

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        form.saved_by = request.user
        return form

    def save_model(self, request, obj, form, change):
        membership = set_project_member(request.user, obj.project, obj.user, obj.role)
        obj.pk, obj.created_at = membership.pk, membership.created_at
        obj._state.adding = False


# --- identity providers: group rules and linked identities (tenancy.identity) ------------------------------


@admin.register(GroupRoleRule)
class GroupRoleRuleAdmin(admin.ModelAdmin):
    """Which identity-provider group gives which role. Applied at each sign-in through OpenID Connect or LDAP:
    a change here takes effect at the person's next sign-in."""

    list_display = ["group", "role", "department", "project", "description", "created_at"]
    list_filter = ["role", "department"]
    search_fields = ["group", "description", "department__name", "project__name"]
    autocomplete_fields = ["department", "project"]
    readonly_fields = ["created_at"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    """Who signs in as whom. Add one to link an identity provider's user to an account that exists already
    (their first sign-in would otherwise be refused, its username being taken)."""

    list_display = ["provider", "subject", "user", "granted_admin", "last_sign_in_at"]
    list_filter = ["provider", "granted_admin"]
    search_fields = ["subject", "user__username", "user__email"]
    autocomplete_fields = ["user"]
    readonly_fields = ["granted_admin", "groups", "last_sign_in_at", "created_at"]


class PosixAccountForm(forms.ModelForm):
    """The supplementary groups as "20100, 20101" rather than JSON."""

    groups = forms.CharField(
        required=False,
        label="Supplementary group ids",
        help_text="gid numbers separated by commas (posixGroup gidNumbers), e.g. 20100, 20101.",
    )

    class Meta:
        model = PosixAccount
        fields = ["user", "name", "uid", "gid", "groups"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["groups"] = ", ".join(str(g) for g in self.instance.groups or [])

    def clean_groups(self):
        text = self.cleaned_data.get("groups") or ""
        parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
        bad = [p for p in parts if not p.isdigit()]
        if bad:
            raise ValidationError(f"not a group id number: {', '.join(bad)}")
        return [int(p) for p in parts]


@admin.register(PosixAccount)
class PosixAccountAdmin(admin.ModelAdmin):
    """The Unix user each person's jobs run as (Slurm: submitted as `login name`; Kubernetes: runAsUser,
    runAsGroup, supplementalGroups). Saved here, a mapping is an administrator's: LDAP and OpenID Connect
    sign-ins never overwrite it (delete it to let the provider's come back at the next sign-in)."""

    form = PosixAccountForm
    list_display = ["name", "uid", "gid", "user", "source", "updated_at"]
    list_filter = ["source"]
    search_fields = ["name", "user__username", "user__email", "=uid"]
    autocomplete_fields = ["user"]
    readonly_fields = ["source", "updated_at"]

    def save_model(self, request, obj, form, change):
        obj.source = PosixSource.ADMIN
        super().save_model(request, obj, form, change)


# --- dedicated partitions --------------------------------------------------------------------------------


class DedicatedPartitionAdminForm(ServiceCheckedForm):
    class Meta:
        model = DedicatedPartition
        fields = ["partition", "department"]

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


# --- settings and telemetry ------------------------------------------------------------------------------


class TenancySettingsForm(forms.ModelForm):
    class Meta:
        model = TenancySettings
        fields = [
            "vlan_first",
            "vlan_last",
            "vni_first",
            "vni_last",
            "pkey_first",
            "pkey_last",
            "tenant_supernet",
            "tenant_prefix",
            "export_root",
            "nfs_server",
            "default_storage_quota_gib",
            "idle_threshold_percent",
            "idle_window_minutes",
            "utilization_history_hours",
            "quota_history_days",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.instance.pk = 1  # the singleton row

    def clean(self):
        data = super().clean()
        supernet, prefix = data.get("tenant_supernet"), data.get("tenant_prefix")
        if supernet:
            try:
                network = ipaddress.ip_network(supernet, strict=True)
            except ValueError as error:
                self.add_error("tenant_supernet", f"not a network address: {error}")
            else:
                if prefix is not None and not network.prefixlen <= prefix <= network.max_prefixlen:
                    self.add_error(
                        "tenant_prefix",
                        f"a tenant network must fit in {network}: between /{network.prefixlen} and "
                        f"/{network.max_prefixlen}",
                    )
        return data


@admin.register(TenancySettings)
class TenancySettingsAdmin(admin.ModelAdmin):
    form = TenancySettingsForm
    fieldsets = [
        (
            "Network isolation pools",
            {
                "fields": [
                    ("vlan_first", "vlan_last"),
                    ("vni_first", "vni_last"),
                    ("pkey_first", "pkey_last"),
                    ("tenant_supernet", "tenant_prefix"),
                ]
            },
        ),
        ("Storage", {"fields": ["export_root", "nfs_server", "default_storage_quota_gib"]}),
        (
            "Telemetry",
            {
                "fields": [
                    "idle_threshold_percent",
                    "idle_window_minutes",
                    "utilization_history_hours",
                    "quota_history_days",
                ]
            },
        ),
    ]

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not TenancySettings.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        # One row: the list is the row.
        settings = TenancySettings.objects.first()
        if settings is not None and self.has_view_or_change_permission(request, settings):
            return HttpResponseRedirect(
                reverse(
                    "admin:tenancy_tenancysettings_change",
                    args=[settings.pk],
                    current_app=self.admin_site.name,
                )
            )
        return super().changelist_view(request, extra_context)


@admin.register(ExporterEndpoint)
class ExporterEndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "enabled", "last_scraped_at", "last_sample_count", "short_error"]
    list_filter = ["enabled"]
    search_fields = ["url"]
    readonly_fields = ["last_scraped_at", "last_sample_count", "last_error"]
    actions = ["scrape_now", "enable", "disable"]

    @admin.display(description="Last error")
    def short_error(self, obj):
        if not obj.last_error:
            return "—"
        text = obj.last_error if len(obj.last_error) <= 80 else obj.last_error[:79] + "…"
        return format_html('<span title="{}">{}</span>', obj.last_error, text)

    @admin.action(description="Scrape selected exporters now")
    def scrape_now(self, request, queryset):
        ids = list(queryset.filter(enabled=True).values_list("pk", flat=True))
        queued = sum(send_now("tenancy.tasks.scrape_exporter", endpoint_id) for endpoint_id in ids)
        self.message_user(request, f"Queued {queued} scrape{'s' if queued != 1 else ''} (disabled skipped).")
        if queued < len(ids):
            self.message_user(
                request,
                f"{len(ids) - queued} not queued: the task queue could not be reached (the next scrape "
                "every minute covers them).",
                messages.WARNING,
            )

    @admin.action(description="Enable selected exporters")
    def enable(self, request, queryset):
        for endpoint in queryset.filter(enabled=False):  # save(), so each change is audited
            endpoint.enabled = True
            endpoint.save(update_fields=["enabled"])

    @admin.action(description="Disable selected exporters")
    def disable(self, request, queryset):
        for endpoint in queryset.filter(enabled=True):
            endpoint.enabled = False
            endpoint.save(update_fields=["enabled"])


class MetricsSourceForm(forms.ModelForm):
    """The token and password are write-only: never shown back; left empty, the saved one stays."""

    url = forms.URLField(
        required=False,
        max_length=500,
        assume_scheme="https",
        help_text=MetricsSource._meta.get_field("url").help_text,
    )
    bearer_token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Sent as 'Authorization: Bearer'. Leave empty to keep the saved one.",
    )
    password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the saved one.",
    )
    clear_credentials = forms.BooleanField(
        required=False, help_text="Remove the saved token, user name and password."
    )

    class Meta:
        model = MetricsSource
        fields = [
            "kind",
            "url",
            "bearer_token",
            "username",
            "password",
            "ca_file",
            "allow_private_address",
            "timeout_seconds",
            "window_seconds",
            "metric",
            "uuid_label",
            "gpu_label",
            "hostname_label",
            "selector",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.instance.pk = 1  # the singleton row
        self._saved = (self.instance.bearer_token, self.instance.password)

    def clean(self):
        data = super().clean()
        if data.get("clear_credentials"):
            data["bearer_token"], data["username"], data["password"] = "", "", ""
        else:
            data["bearer_token"] = data.get("bearer_token") or (
                self._saved[0] if not data.get("username") else ""
            )
            data["password"] = data.get("password") or (self._saved[1] if data.get("username") else "")
        self.instance.bearer_token, self.instance.password = data["bearer_token"], data["password"]
        ca_file = (data.get("ca_file") or "").strip()
        if ca_file and not ca_file.startswith("/"):
            self.add_error("ca_file", "Give the CA bundle's absolute path, e.g. /etc/ssl/certs/site-ca.pem.")
        config = QueryConfig(
            metric=data.get("metric") or "",
            uuid_label=data.get("uuid_label") or "",
            gpu_label=data.get("gpu_label") or "",
            hostname_label=data.get("hostname_label") or "",
            selector=data.get("selector") or "",
        )
        for problem in config.problems():
            self.add_error(None, problem[0].upper() + problem[1:] + ".")
        return data


@admin.register(MetricsSource)
class MetricsSourceAdmin(admin.ModelAdmin):
    """Where GPU utilization comes from (tenancy.metrics_source); "Save and test connection" runs the
    cycle's query and says what it found."""

    form = MetricsSourceForm
    change_form_template = "admin/tenancy/metricssource/change_form.html"
    readonly_fields = ["credentials", "last_polled_at", "last_series_count", "last_error"]
    fieldsets = [
        (None, {"fields": ["kind"]}),
        (
            "Prometheus query API",
            {
                "fields": [
                    "url",
                    "credentials",
                    "bearer_token",
                    ("username", "password"),
                    "clear_credentials",
                    "ca_file",
                    "timeout_seconds",
                ]
            },
        ),
        (
            "What to ask for",
            {
                "fields": [
                    "metric",
                    "window_seconds",
                    ("uuid_label", "gpu_label", "hostname_label"),
                    "selector",
                ]
            },
        ),
        ("Last cycle", {"fields": ["last_polled_at", "last_series_count", "last_error"]}),
    ]

    @admin.display(description="Saved credentials")
    def credentials(self, obj):
        if obj.bearer_token:
            return "A bearer token (not shown)."
        if obj.username:
            return f"User {obj.username} and a password (not shown)."
        return "None."

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not MetricsSource.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        source = MetricsSource.load()
        if self.has_view_or_change_permission(request, source):
            return HttpResponseRedirect(
                reverse(
                    "admin:tenancy_metricssource_change", args=[source.pk], current_app=self.admin_site.name
                )
            )
        return super().changelist_view(request, extra_context)

    def response_change(self, request, obj):
        if "_test_connection" not in request.POST:
            return super().response_change(request, obj)
        if not obj.is_prometheus:
            self.message_user(
                request,
                "Saved. The direct source has no connection to test: choose Prometheus.",
                messages.WARNING,
            )
        else:
            try:
                self.message_user(request, "Saved. " + check_connection(obj))
            except PrometheusError as error:
                advice = f" ({error.what_to_do})" if error.what_to_do else ""
                self.message_user(request, f"Saved, but the test failed: {error}{advice}.", messages.ERROR)
        return HttpResponseRedirect(request.path)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Telemetry written by the scrapers: viewable and prunable, never typed in by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(GpuActivity)
class GpuActivityAdmin(ReadOnlyAdmin):
    list_display = ["gpu", "hostname", "utilization", "sampled_at", "low_since"]
    list_select_related = ["gpu__tray"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname"]
    ordering = ["-sampled_at"]
    show_full_result_count = False

    @admin.display(description="Tray", ordering="gpu__tray__hostname")
    def hostname(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


@admin.register(GpuUtilization)
class GpuUtilizationAdmin(ReadOnlyAdmin):
    list_display = ["gpu", "hostname", "bucket_start", "mean", "peak", "samples"]
    list_select_related = ["gpu__tray"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname"]
    ordering = ["-bucket_start"]
    show_full_result_count = False

    @admin.display(description="Tray", ordering="gpu__tray__hostname")
    def hostname(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


@admin.register(QuotaSnapshot)
class QuotaSnapshotAdmin(ReadOnlyAdmin):
    list_display = [
        "department",
        "taken_at",
        "guaranteed",
        "in_use",
        "in_quota",
        "borrowed",
        "fair_share",
        "pending_demand",
        "idle",
    ]
    list_filter = ["department"]
    list_select_related = ["department"]
    date_hierarchy = "taken_at"
    ordering = ["-taken_at"]
    show_full_result_count = False
