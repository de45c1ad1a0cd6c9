
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def move_content_types(apps, schema_editor):
    """Keep permissions and admin history: the content types follow the models to their new app."""
    _relabel_content_types(apps, ('auditevent',), from_app="portal", to_app="core")


def move_content_types_back(apps, schema_editor):
    """Unapplying gives the content types back to portal, where the previous release looks for them."""
    _relabel_content_types(apps, ('auditevent',), from_app="core", to_app="portal")


def _relabel_content_types(apps, model_names, from_app, to_app):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in model_names:
        if not ContentType.objects.filter(app_label=to_app, model=model).exists():
            ContentType.objects.filter(app_label=from_app, model=model).update(app_label=to_app)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("portal", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # The table was created by portal (0001); only Django's picture of it moves here.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AuditEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('at', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('actor_name', models.CharField(blank=True, help_text='Kept when the user is deleted.', max_length=150)),
                        ('source', models.CharField(choices=[('ui', 'Web UI'), ('api', 'REST API'), ('admin', 'Django admin'), ('task', 'Background task'), ('command', 'Command line')], max_length=10)),
                        ('action', models.CharField(choices=[('create', 'Created'), ('update', 'Updated'), ('delete', 'Deleted')], max_length=10)),
                        ('object_type', models.CharField(help_text='app_label.model', max_length=100)),
                        ('object_id', models.CharField(max_length=64)),
                        ('object_repr', models.CharField(max_length=200)),
                        ('department_id', models.PositiveBigIntegerField(blank=True, db_index=True, null=True)),
                        ('before', models.JSONField(blank=True, null=True)),
                        ('after', models.JSONField(blank=True, null=True)),
                        ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'portal_auditevent',
                        'ordering': ['-at', '-pk'],
                        'indexes': [models.Index(fields=['object_type', 'object_id'], name='portal_audit_object_idx')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, move_content_types_back),
    ]
