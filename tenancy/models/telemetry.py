"""Telemetry: where GPU utilization comes from, DCGM exporters, GPU activity and bounded utilization
history, department quota snapshots."""

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, gettext_lazy

from core.destinations import check_outbound_url
from core.moments import dated
from tenancy.choices import MetricsSourceKind
from tenancy.models.departments import Department


class MetricsSource(models.Model):
    """Where GPU utilization comes from (tenancy.metrics_source). One row (pk=1).

    Direct: the exporter endpoints below are scraped into 5-minute buckets (small sites). Prometheus: the
    site's Prometheus (or Thanos, Mimir, VictoriaMetrics) is asked with PromQL; Rackplane keeps only the idle
    state it derives, no per-GPU history. The token and password are stored as given and never shown back.
    """

    kind = models.CharField(
        max_length=12,
        choices=MetricsSourceKind.choices,
        default=MetricsSourceKind.DIRECT,
        verbose_name=gettext_lazy("kind"),
    )
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text=gettext_lazy(
            "The query API's base address, e.g. https://prometheus.example.org:9090 (Rackplane adds "
            "/api/v1/query); with a path prefix for Thanos, Mimir (/prometheus) or VictoriaMetrics."
        ),
        verbose_name=gettext_lazy("url"),
    )
    bearer_token = models.CharField(
        max_length=4096,
        blank=True,
        help_text=gettext_lazy("Sent as 'Authorization: Bearer'."),
        verbose_name=gettext_lazy("bearer token"),
    )
    username = models.CharField(
        max_length=200,
        blank=True,
        help_text=gettext_lazy("HTTP basic authentication."),
        verbose_name=gettext_lazy("username"),
    )
    password = models.CharField(max_length=200, blank=True, verbose_name=gettext_lazy("password"))
    ca_file = models.CharField(
        max_length=500,
        blank=True,
        help_text=gettext_lazy(
            "Absolute path of the CA bundle (PEM) that signed the server's certificate; empty for the "
            "system's."
        ),
        verbose_name=gettext_lazy("ca file"),
    )
    timeout_seconds = models.PositiveSmallIntegerField(
        default=10, verbose_name=gettext_lazy("timeout seconds")
    )
    # The outbound guard (core.outbound, docs/outbound.md): the site's Prometheus is usually an internal
    # service, and only platform admins edit the source, so private and loopback addresses are allowed by
    # default; link-local (cloud metadata) ones never are, nor a redirect to another host.
    allow_private_address = models.BooleanField(
        default=True,
        help_text=gettext_lazy(
            "The address may be a private or loopback one (an internal Prometheus). Link-local and "
            "metadata addresses are refused whatever this says."
        ),
    )
    window_seconds = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(2)],
        help_text=gettext_lazy(
            "Utilization is averaged over this window; a GPU with no sample in it has no data (never "
            "idle). At least twice the exporters' scrape interval."
        ),
        verbose_name=gettext_lazy("window seconds"),
    )
    metric = models.CharField(
        max_length=200, default="DCGM_FI_DEV_GPU_UTIL", verbose_name=gettext_lazy("metric")
    )
    uuid_label = models.CharField(
        max_length=100,
        default="UUID",
        help_text=gettext_lazy("The label holding the GPU UUID (dcgm-exporter: UUID)."),
        verbose_name=gettext_lazy("uuid label"),
    )
    gpu_label = models.CharField(
        max_length=100,
        default="gpu",
        help_text=gettext_lazy("The GPU index label."),
        verbose_name=gettext_lazy("gpu label"),
    )
    hostname_label = models.CharField(
        max_length=100,
        default="Hostname",
        help_text=gettext_lazy("The node name label."),
        verbose_name=gettext_lazy("hostname label"),
    )
    selector = models.CharField(
        max_length=500,
        blank=True,
        help_text=gettext_lazy(
            'Extra label matchers for this site\'s exporters, e.g. cluster="gb-east",job="dcgm".'
        ),
        verbose_name=gettext_lazy("selector"),
    )
    last_polled_at = models.DateTimeField(null=True, blank=True, verbose_name=gettext_lazy("last polled at"))
    last_error = models.TextField(blank=True, verbose_name=gettext_lazy("last error"))
    last_series_count = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("last series count"))

    class Meta:
        verbose_name = gettext_lazy("metrics source")
        verbose_name_plural = gettext_lazy("metrics source")
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(kind="direct") | ~Q(url=""),
                name="%(app_label)s_%(class)s_prometheus_has_url",
                violation_error_message=gettext_lazy("A Prometheus source needs the query API's address."),
            ),
            models.CheckConstraint(
                condition=Q(bearer_token="") | (Q(username="") & Q(password="")),
                name="%(app_label)s_%(class)s_one_credential",
                violation_error_message=gettext_lazy(
                    "Give a bearer token or a user name and password, not both."
                ),
            ),
        ]

    def __str__(self):
        # The viewer's language (the admin's titles); audit records keep it in English (core.audit).
        return str(self.get_kind_display())

    @classmethod
    def load(cls) -> "MetricsSource":
        return cls.objects.get_or_create(pk=1)[0]

    @property
    def is_prometheus(self) -> bool:
        return self.kind == MetricsSourceKind.PROMETHEUS

    def clean(self):
        super().clean()
        if self.is_prometheus and self.url:
            try:
                check_outbound_url(self.url, allow_private_address=self.allow_private_address)
            except ValidationError as error:
                raise ValidationError({"url": error.messages}) from error


class ExporterEndpoint(models.Model):
    """A DCGM exporter's /metrics URL, scraped on the Celery beat schedule."""

    url = models.URLField(max_length=500, verbose_name=gettext_lazy("url"))
    enabled = models.BooleanField(default=True, verbose_name=gettext_lazy("enabled"))
    last_scraped_at = models.DateTimeField(
        null=True, blank=True, verbose_name=gettext_lazy("last scraped at")
    )
    last_error = models.TextField(blank=True, verbose_name=gettext_lazy("last error"))
    last_sample_count = models.PositiveIntegerField(default=0, verbose_name=gettext_lazy("last sample count"))

    class Meta:
        verbose_name = gettext_lazy("exporter endpoint")
        verbose_name_plural = gettext_lazy("exporter endpoints")
        ordering = ["url"]
        constraints = [models.UniqueConstraint(fields=["url"], name="%(app_label)s_%(class)s_unique_url")]

    def __str__(self):
        return self.url


class GpuActivity(models.Model):
    """The latest utilization of one GPU, and since when it has stayed under the idle threshold."""

    gpu = models.OneToOneField(
        "inventory.Gpu",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="activity",
        verbose_name=gettext_lazy("gpu"),
    )
    utilization = models.FloatField(
        help_text=gettext_lazy("Percent, 0-100, latest sample"), verbose_name=gettext_lazy("utilization")
    )
    sampled_at = models.DateTimeField(verbose_name=gettext_lazy("sampled at"))
    low_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text=gettext_lazy("Start of the current run of samples under the idle threshold."),
        verbose_name=gettext_lazy("low since"),
    )

    class Meta:
        verbose_name = gettext_lazy("GPU activity")
        verbose_name_plural = gettext_lazy("GPU activity")
        indexes = [models.Index(fields=["low_since"], name="tenancy_gpuactivity_low_idx")]

    def __str__(self):
        return gettext("GPU %(gpu)s: %(utilization)s%% at %(at)s") % {
            "gpu": self.gpu_id,
            "utilization": f"{self.utilization:.0f}",
            "at": dated(self.sampled_at),
        }


class GpuUtilization(models.Model):
    """Utilization of one GPU over a 5-minute bucket, hourly past a day (tenancy.activity.downsample_history);
    kept for utilization_history_hours, at most MAX_ROWS_PER_GPU rows per GPU. Direct source only."""

    BUCKET_SECONDS = 300

    gpu = models.ForeignKey(
        "inventory.Gpu",
        on_delete=models.CASCADE,
        related_name="utilization_buckets",
        verbose_name=gettext_lazy("gpu"),
    )
    bucket_start = models.DateTimeField(verbose_name=gettext_lazy("bucket start"))
    mean = models.FloatField(verbose_name=gettext_lazy("mean"))
    peak = models.FloatField(verbose_name=gettext_lazy("peak"))
    samples = models.PositiveIntegerField(default=1, verbose_name=gettext_lazy("samples"))
    seconds = models.PositiveIntegerField(
        default=BUCKET_SECONDS,
        help_text=gettext_lazy("The bucket's length: 300, or 3600 once downsampled (past a day)."),
        verbose_name=gettext_lazy("seconds"),
    )

    class Meta:
        verbose_name = gettext_lazy("GPU utilization")
        verbose_name_plural = gettext_lazy("GPU utilizations")
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "bucket_start"], name="%(app_label)s_%(class)s_unique_bucket"
            ),
        ]
        indexes = [models.Index(fields=["bucket_start"], name="tenancy_gpuutil_bucket_idx")]

    def __str__(self):
        return gettext("GPU %(gpu)s %(at)s: %(mean)s%%") % {
            "gpu": self.gpu_id,
            "at": dated(self.bucket_start),
            "mean": f"{self.mean:.0f}",
        }


class QuotaSnapshotQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(department__in=Department.objects.visible_to(user))


class QuotaSnapshot(models.Model):
    """A department's quota position at one moment; the dashboards' history (kept quota_history_days)."""

    department = models.ForeignKey(
        Department,
        on_delete=models.CASCADE,
        related_name="quota_snapshots",
        verbose_name=gettext_lazy("department"),
    )
    taken_at = models.DateTimeField(verbose_name=gettext_lazy("taken at"))
    guaranteed = models.PositiveIntegerField(verbose_name=gettext_lazy("guaranteed"))
    in_use = models.PositiveIntegerField(verbose_name=gettext_lazy("in use"))
    in_quota = models.PositiveIntegerField(verbose_name=gettext_lazy("in quota"))
    borrowed = models.PositiveIntegerField(verbose_name=gettext_lazy("borrowed"))
    fair_share = models.PositiveIntegerField(verbose_name=gettext_lazy("fair share"))
    pending_demand = models.PositiveIntegerField(verbose_name=gettext_lazy("pending demand"))
    idle = models.PositiveIntegerField(verbose_name=gettext_lazy("idle"))

    objects = QuotaSnapshotQuerySet.as_manager()

    class Meta:
        verbose_name = gettext_lazy("quota snapshot")
        verbose_name_plural = gettext_lazy("quota snapshots")
        ordering = ["taken_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["department", "taken_at"], name="%(app_label)s_%(class)s_unique_time"
            ),
        ]
        indexes = [models.Index(fields=["taken_at"], name="tenancy_quotasnap_time_idx")]

    def __str__(self):
        return gettext("%(department)s at %(at)s: %(in_use)s/%(guaranteed)s") % {
            "department": self.department_id,
            "at": dated(self.taken_at),
            "in_use": self.in_use,
            "guaranteed": self.guaranteed,
        }
