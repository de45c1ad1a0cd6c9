
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def move_content_types(apps, schema_editor):
    """Keep permissions and admin history: the content types follow the models to their new app."""
    _relabel_content_types(apps, ('configtarget', 'configpush'), from_app="scheduling", to_app="integrations")


def move_content_types_back(apps, schema_editor):
    """Unapplying gives the content types back to scheduling, where the previous release looks for them."""
    _relabel_content_types(apps, ('configtarget', 'configpush'), from_app="integrations", to_app="scheduling")


def _relabel_content_types(apps, model_names, from_app, to_app):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in model_names:
        if not ContentType.objects.filter(app_label=to_app, model=model).exists():
            ContentType.objects.filter(app_label=from_app, model=model).update(app_label=to_app)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduling", "0005_jobs_dispatch_events"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The tables were created by scheduling (0003); only Django's picture of them moves here.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ConfigTarget',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=64)),
                        ('kind', models.CharField(choices=[('directory', 'Directory (rendered files)'), ('slurm', 'Slurm controller'), ('kubernetes', 'Kubernetes API server'), ('fabric', 'NVLink fabric manager')], max_length=16)),
                        ('enabled', models.BooleanField(default=True, help_text='Disabled targets are left out of pushes.')),
                        ('settings', models.JSONField(blank=True, default=dict)),
                        ('follow_up', models.JSONField(blank=True, editable=False, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'verbose_name': 'configuration target',
                        'db_table': 'scheduling_configtarget',
                        'ordering': ['name'],
                        'constraints': [models.UniqueConstraint(fields=('name',), name='scheduling_configtarget_unique_name'), models.CheckConstraint(condition=models.Q(('kind__in', ['directory', 'slurm', 'kubernetes', 'fabric'])), name='scheduling_configtarget_kind_valid')],
                    },
                ),
                migrations.CreateModel(
                    name='ConfigPush',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('payload', models.JSONField(blank=True, default=dict)),
                        ('payload_hash', models.CharField(blank=True, max_length=64)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('superseded', 'Superseded')], default='queued', max_length=16)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('log', models.TextField(blank=True)),
                        ('error', models.TextField(blank=True)),
                        ('reason', models.CharField(blank=True, max_length=255)),
                        ('plan_id', models.PositiveBigIntegerField(blank=True, null=True)),
                        ('next_attempt_at', models.DateTimeField(blank=True, help_text='A queued push that failed transiently is retried from then on.', null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('updated_at', models.DateTimeField(auto_now=True, help_text='Last progress (log line or status change).')),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('superseded_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='supersedes', to='integrations.configpush')),
                        ('target', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='pushes', to='integrations.configtarget')),
                    ],
                    options={
                        'verbose_name': 'configuration push',
                        'db_table': 'scheduling_configpush',
                        'ordering': ['-created_at', '-pk'],
                        'indexes': [models.Index(fields=['target', 'status'], name='scheduling_push_target_status')],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('status__in', ('queued', 'running'))), fields=('target',), name='scheduling_configpush_one_active_per_target', violation_error_message='This target already has a queued or running push.'), models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'succeeded', 'failed', 'superseded'])), name='scheduling_configpush_status_valid')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
