import hashlib
import json

from django.db import migrations, models


def fingerprint_jobs_with_a_key(apps, schema_editor):
    """Jobs submitted with an Idempotency-Key before this field get the fingerprint of what they were
    submitted with (a Job keeps every field of its submission): the same canonical form and hash as
    scheduling.services.admission.submission_fingerprint (tests/scheduling/test_idempotency.py checks they agree)."""
    Job = apps.get_model("scheduling", "Job")
    jobs = Job.objects.exclude(idempotency_key="").filter(idempotency_fingerprint="")
    for job in jobs.iterator():
        canonical = {
            "department": job.department_id,
            "name": job.name,
            "gpus": job.gpus,
            "topology": job.topology,
            "priority_class": job.priority_class,
            "backend": job.backend,
            "time_limit_minutes": job.time_limit_minutes,
            "work": job.work,
        }
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
        Job.objects.filter(pk=job.pk).update(idempotency_fingerprint=fingerprint)  # updated_at unchanged


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0006_config_targets_moved_to_integrations"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="idempotency_fingerprint",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.RunPython(fingerprint_jobs_with_a_key, migrations.RunPython.noop, elidable=True),
    ]
