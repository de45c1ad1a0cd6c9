"""Users' own notifications: job and department events, the portal channel (the bell: InboxItem)
and an idle-GPU threshold on subscriptions."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0004_notifications"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="InboxItem",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "event",
                    models.CharField(
                        choices=[
                            ("tray_drained", "Tray drained"),
                            ("breaker_tripped", "Circuit breaker tripped"),
                            ("job_requeued", "Job requeued by a fault"),
                            ("tray_returned", "Tray back in service"),
                            ("needs_service", "Tray needs service"),
                            ("job_started", "Job started"),
                            ("job_preempted", "Job preempted"),
                            ("job_finished", "Job finished"),
                            ("job_failed", "Job failed"),
                            ("guarantee_short", "Department short of its guarantee"),
                            ("idle_gpus", "Idle GPUs above a threshold"),
                            ("push_failed", "Configuration push failed"),
                            ("test", "Test notification"),
                        ],
                        max_length=40,
                    ),
                ),
                ("subject", models.CharField(max_length=200)),
                ("payload", models.JSONField(blank=True, default=dict)),
                (
                    "link",
                    models.CharField(
                        blank=True, help_text="Where the subject is in the portal.", max_length=300
                    ),
                ),
                ("created_at", models.DateTimeField()),
                ("read_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "ordering": ["-created_at", "-pk"],
            },
        ),
        migrations.RemoveConstraint(
            model_name="notificationsubscription",
            name="core_notificationsubscription_destination_matches_channel",
        ),
        migrations.AddField(
            model_name="notificationsubscription",
            name="threshold",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="notification",
            name="channel",
            field=models.CharField(
                choices=[("webhook", "Webhook"), ("email", "Email"), ("portal", "In the portal (bell)")],
                max_length=10,
            ),
        ),
        migrations.AlterField(
            model_name="notification",
            name="event",
            field=models.CharField(
                choices=[
                    ("tray_drained", "Tray drained"),
                    ("breaker_tripped", "Circuit breaker tripped"),
                    ("job_requeued", "Job requeued by a fault"),
                    ("tray_returned", "Tray back in service"),
                    ("needs_service", "Tray needs service"),
                    ("job_started", "Job started"),
                    ("job_preempted", "Job preempted"),
                    ("job_finished", "Job finished"),
                    ("job_failed", "Job failed"),
                    ("guarantee_short", "Department short of its guarantee"),
                    ("idle_gpus", "Idle GPUs above a threshold"),
                    ("push_failed", "Configuration push failed"),
                    ("test", "Test notification"),
                ],
                max_length=40,
            ),
        ),
        migrations.AlterField(
            model_name="notificationsubscription",
            name="channel",
            field=models.CharField(
                choices=[("webhook", "Webhook"), ("email", "Email"), ("portal", "In the portal (bell)")],
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="notificationsubscription",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("channel", "webhook"), models.Q(("url", ""), _negated=True), ("email", "")),
                    models.Q(
                        ("channel", "email"),
                        models.Q(("email", ""), _negated=True),
                        ("url", ""),
                        ("secret", ""),
                    ),
                    models.Q(
                        ("channel", "portal"),
                        ("url", ""),
                        ("email", ""),
                        ("secret", ""),
                        ("owner__isnull", False),
                    ),
                    _connector="OR",
                ),
                name="core_notificationsubscription_destination_matches_channel",
            ),
        ),
        migrations.AddField(
            model_name="inboxitem",
            name="subscription",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="core.notificationsubscription",
            ),
        ),
        migrations.AddField(
            model_name="inboxitem",
            name="user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.AddIndex(
            model_name="inboxitem",
            index=models.Index(fields=["user", "read_at"], name="core_inbox_user_read_idx"),
        ),
    ]
