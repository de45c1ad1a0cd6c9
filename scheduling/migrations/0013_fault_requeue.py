"""Running work on a failing tray (scheduling.requeue) and degraded NVLink partitions in placement.

* Job: `fault_requeues`, `requeue_at`, `requeue_note`; JobEvent kinds `fault` and `requeued`.
* FaultPolicy: per priority class, what happens to running jobs when a tray they run on is drained by a
  fault; the default rows are created here (scheduling.requeue.DEFAULTS: training checkpoints with 5
  minutes' grace, build and inference are requeued at once).
* PostgreSQL: the pass's cluster is built from NVLinkPartition.degraded_reason too (a degraded partition
  takes no job spanning trays), so the inventory change trigger of migration 0010 on that table watches it
  (scheduling.pass_cache.CACHED_COLUMNS).
"""

from django.db import migrations, models

TRIGGER = "scheduling_inventory_changed"
PARTITION_TABLE = "inventory_nvlinkpartition"
BEFORE = ("rack_id", "clique_id", "name")
AFTER = ("rack_id", "clique_id", "name", "degraded_reason")

DEFAULTS = (("train", "checkpoint", 300), ("build", "stop", 300), ("inference", "stop", 300))


def _partition_trigger(schema_editor, columns) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    arguments = ", ".join(f"'{column}'" for column in columns)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_update ON {PARTITION_TABLE}")
    schema_editor.execute(
        f"CREATE TRIGGER {TRIGGER}_update AFTER UPDATE ON {PARTITION_TABLE} "
        f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}({arguments})"
    )


def watch_degraded(apps, schema_editor):
    _partition_trigger(schema_editor, AFTER)


def unwatch_degraded(apps, schema_editor):
    _partition_trigger(schema_editor, BEFORE)


def seed(apps, schema_editor):
    FaultPolicy = apps.get_model("scheduling", "FaultPolicy")
    for priority_class, action, grace in DEFAULTS:
        FaultPolicy.objects.get_or_create(
            priority_class=priority_class, defaults={"action": action, "grace_s": grace}
        )


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0012_job_project"), ("inventory", "0006_health")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="fault_requeues",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="requeue_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="requeue_note",
            field=models.CharField(blank=True, max_length=500),
        ),
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
                    ("fault", "Its tray failed"),
                    ("requeued", "Requeued after a fault"),
                ],
                max_length=20,
            ),
        ),
        migrations.CreateModel(
            name="FaultPolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "priority_class",
                    models.CharField(
                        choices=[
                            ("train", "Training (preemptible)"),
                            ("build", "Build / interactive (non-preemptible)"),
                            ("inference", "Inference (non-preemptible)"),
                        ],
                        max_length=16,
                        unique=True,
                    ),
                ),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("wait", "Let it finish"),
                            ("checkpoint", "Signal it to checkpoint, requeue after a grace period"),
                            ("stop", "Requeue it at once"),
                        ],
                        default="checkpoint",
                        max_length=16,
                    ),
                ),
                (
                    "grace_s",
                    models.PositiveIntegerField(
                        default=300, help_text="Checkpoint: seconds between the signal and the requeue."
                    ),
                ),
                (
                    "signal",
                    models.CharField(
                        default="USR1",
                        help_text="Checkpoint: the signal Slurm sends to the job (Kubernetes pods get an "
                        "annotation).",
                        max_length=16,
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "fault policies",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("action__in", ["wait", "checkpoint", "stop"])),
                        name="scheduling_faultpolicy_action_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("signal__regex", "^[A-Z0-9]{1,12}$")),
                        name="scheduling_faultpolicy_signal_name",
                    ),
                ],
            },
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
        migrations.RunPython(watch_degraded, unwatch_degraded, elidable=False),
    ]
