"""The metrics source (direct scrape or the site's Prometheus) and the length of a utilization bucket."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0003_projects")]

    operations = [
        migrations.AddField(
            model_name="gpuutilization",
            name="seconds",
            field=models.PositiveIntegerField(
                default=300, help_text="The bucket's length: 300, or 3600 once downsampled (past a day)."
            ),
        ),
        migrations.CreateModel(
            name="MetricsSource",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("direct", "Direct: Rackplane scrapes the DCGM exporters (or nodes push)"),
                            ("prometheus", "The site's Prometheus-compatible query API"),
                        ],
                        default="direct",
                        max_length=12,
                    ),
                ),
                (
                    "url",
                    models.URLField(
                        blank=True,
                        help_text="The query API's base address, e.g. "
                        "https://prometheus.example.org:9090 (Rackplane adds /api/v1/query); with a path "
                        "prefix for Thanos, Mimir (/prometheus) or VictoriaMetrics.",
                        max_length=500,
                    ),
                ),
                (
                    "bearer_token",
                    models.CharField(
                        blank=True, help_text="Sent as 'Authorization: Bearer'.", max_length=4096
                    ),
                ),
                (
                    "username",
                    models.CharField(blank=True, help_text="HTTP basic authentication.", max_length=200),
                ),
                ("password", models.CharField(blank=True, max_length=200)),
                (
                    "ca_file",
                    models.CharField(
                        blank=True,
                        help_text="Absolute path of the CA bundle (PEM) that signed the server's "
                        "certificate; empty for the system's.",
                        max_length=500,
                    ),
                ),
                ("timeout_seconds", models.PositiveSmallIntegerField(default=10)),
                (
                    "window_seconds",
                    models.PositiveIntegerField(
                        default=300,
                        help_text="Utilization is averaged over this window; a GPU with no sample in it has "
                        "no data (never idle). At least twice the exporters' scrape interval.",
                        validators=[django.core.validators.MinValueValidator(2)],
                    ),
                ),
                ("metric", models.CharField(default="DCGM_FI_DEV_GPU_UTIL", max_length=200)),
                (
                    "uuid_label",
                    models.CharField(
                        default="UUID",
                        help_text="The label holding the GPU UUID (dcgm-exporter: UUID).",
                        max_length=100,
                    ),
                ),
                (
                    "gpu_label",
                    models.CharField(default="gpu", help_text="The GPU index label.", max_length=100),
                ),
                (
                    "hostname_label",
                    models.CharField(default="Hostname", help_text="The node name label.", max_length=100),
                ),
                (
                    "selector",
                    models.CharField(
                        blank=True,
                        help_text="Extra label matchers for this site's exporters, e.g. "
                        'cluster="gb-east",job="dcgm".',
                        max_length=500,
                    ),
                ),
                ("last_polled_at", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True)),
                ("last_series_count", models.PositiveIntegerField(default=0)),
            ],
            options={
                "verbose_name": "metrics source",
                "verbose_name_plural": "metrics source",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("pk", 1)), name="tenancy_metricssource_singleton"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("kind", "direct"), models.Q(("url", ""), _negated=True), _connector="OR"
                        ),
                        name="tenancy_metricssource_prometheus_has_url",
                        violation_error_message="A Prometheus source needs the query API's address.",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("bearer_token", ""),
                            models.Q(("username", ""), ("password", "")),
                            _connector="OR",
                        ),
                        name="tenancy_metricssource_one_credential",
                        violation_error_message="Give a bearer token or a user name and password, not both.",
                    ),
                ],
            },
        ),
    ]
