"""Admin of telemetry: the metrics source, DCGM exporters, and what the scrapers wrote (read-only)."""

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from core.enqueue import send_now
from core.task_names import SCRAPE_EXPORTER
from tenancy.labels import FIELD_LABELS, labelled_form, labels_for
from tenancy.metrics_source import check_connection
from tenancy.models import ExporterEndpoint, GpuActivity, GpuUtilization, MetricsSource, QuotaSnapshot
from tenancy.prometheus import PrometheusError, QueryConfig


@admin.register(ExporterEndpoint)
class ExporterEndpointAdmin(admin.ModelAdmin):
    form = labelled_form(ExporterEndpoint)
    list_display = ["url", "enabled", "last_scraped_at", "last_sample_count", "short_error"]
    list_filter = ["enabled"]
    search_fields = ["url"]
    readonly_fields = ["last_scraped_at", "last_sample_count", "last_error"]
    actions = ["scrape_now", "enable", "disable"]

    @admin.display(description=gettext_lazy("Last error"))
    def short_error(self, obj):
        if not obj.last_error:
            return "—"
        text = obj.last_error if len(obj.last_error) <= 80 else obj.last_error[:79] + "…"
        return format_html('<span title="{}">{}</span>', obj.last_error, text)

    @admin.action(description=gettext_lazy("Scrape selected exporters now"))
    def scrape_now(self, request, queryset):
        ids = list(queryset.filter(enabled=True).values_list("pk", flat=True))
        queued = sum(send_now(SCRAPE_EXPORTER, endpoint_id) for endpoint_id in ids)
        self.message_user(
            request,
            ngettext(
                "Queued %(count)s scrape (disabled skipped).",
                "Queued %(count)s scrapes (disabled skipped).",
                queued,
            )
            % {"count": queued},
        )
        if queued < len(ids):
            self.message_user(
                request,
                _(
                    "%(count)s not queued: the task queue could not be reached (the next scrape every minute "
                    "covers them)."
                )
                % {"count": len(ids) - queued},
                messages.WARNING,
            )

    @admin.action(description=gettext_lazy("Enable selected exporters"))
    def enable(self, request, queryset):
        for endpoint in queryset.filter(enabled=False):  # save(), so each change is audited
            endpoint.enabled = True
            endpoint.save(update_fields=["enabled"])

    @admin.action(description=gettext_lazy("Disable selected exporters"))
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
        label=FIELD_LABELS["url"],
        help_text=MetricsSource._meta.get_field("url").help_text,
    )
    bearer_token = forms.CharField(
        required=False,
        label=FIELD_LABELS["bearer_token"],
        widget=forms.PasswordInput(render_value=False),
        help_text=gettext_lazy("Sent as 'Authorization: Bearer'. Leave empty to keep the saved one."),
    )
    password = forms.CharField(
        required=False,
        label=FIELD_LABELS["password"],
        widget=forms.PasswordInput(render_value=False),
        help_text=gettext_lazy("Leave empty to keep the saved one."),
    )
    clear_credentials = forms.BooleanField(
        required=False,
        label=gettext_lazy("Clear credentials"),
        help_text=gettext_lazy("Remove the saved token, user name and password."),
    )

    class Meta:
        model = MetricsSource
        labels = labels_for(MetricsSource)
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
            self.add_error(
                "ca_file", _("Give the CA bundle's absolute path, e.g. /etc/ssl/certs/site-ca.pem.")
            )
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
            gettext_lazy("Prometheus query API"),
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
            gettext_lazy("What to ask for"),
            {
                "fields": [
                    "metric",
                    "window_seconds",
                    ("uuid_label", "gpu_label", "hostname_label"),
                    "selector",
                ]
            },
        ),
        (gettext_lazy("Last cycle"), {"fields": ["last_polled_at", "last_series_count", "last_error"]}),
    ]

    @admin.display(description=gettext_lazy("Saved credentials"))
    def credentials(self, obj):
        if obj.bearer_token:
            return _("A bearer token (not shown).")
        if obj.username:
            return _("User %(username)s and a password (not shown).") % {"username": obj.username}
        return _("None.")

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
                _("Saved. The direct source has no connection to test: choose Prometheus."),
                messages.WARNING,
            )
        else:
            try:
                self.message_user(request, _("Saved. %(result)s") % {"result": check_connection(obj)})
            except PrometheusError as error:
                failed = (
                    _("Saved, but the test failed: %(error)s (%(advice)s).")
                    if error.what_to_do
                    else _("Saved, but the test failed: %(error)s.")
                )
                self.message_user(
                    request, failed % {"error": error, "advice": error.what_to_do}, messages.ERROR
                )
        return HttpResponseRedirect(request.path)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Telemetry written by the scrapers: viewable and prunable, never typed in by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(GpuActivity)
class GpuActivityAdmin(ReadOnlyAdmin):
    form = labelled_form(GpuActivity)
    list_display = ["gpu", "hostname", "utilization", "sampled_at", "low_since"]
    list_select_related = ["gpu__tray"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname"]
    ordering = ["-sampled_at"]
    show_full_result_count = False

    @admin.display(description=gettext_lazy("Tray"), ordering="gpu__tray__hostname")
    def hostname(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


@admin.register(GpuUtilization)
class GpuUtilizationAdmin(ReadOnlyAdmin):
    form = labelled_form(GpuUtilization)
    list_display = ["gpu", "hostname", "bucket_start", "mean", "peak", "samples"]
    list_select_related = ["gpu__tray"]
    search_fields = ["gpu__uuid", "gpu__tray__hostname"]
    ordering = ["-bucket_start"]
    show_full_result_count = False

    @admin.display(description=gettext_lazy("Tray"), ordering="gpu__tray__hostname")
    def hostname(self, obj):
        return obj.gpu.tray.hostname if obj.gpu.tray_id else "—"


@admin.register(QuotaSnapshot)
class QuotaSnapshotAdmin(ReadOnlyAdmin):
    form = labelled_form(QuotaSnapshot)
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
