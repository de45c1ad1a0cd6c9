from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0007_job_idempotency_fingerprint"),
    ]

    operations = [
        migrations.AlterField(
            model_name="jobevent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("submitted", "Submitted"),
                    ("placed", "Placed"),
                    ("dispatched", "Handed to its backend"),
                    ("dispatch_retry", "Backend unreachable, retrying"),
                    ("started", "Started"),
                    ("preempted", "Preempted"),
                    ("quota", "In quota / borrowed changed"),
                    ("completed", "Completed"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                max_length=20,
            ),
        ),
    ]
