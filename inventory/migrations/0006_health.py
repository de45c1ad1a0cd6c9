"""Health: events, rules, decisions, check results, health settings; the tray's health and agent fields, the
partition's degradation, and the "needs service" tray state.

SQLite rebuilds inventory_computetray and inventory_nvlinkpartition to add NOT NULL columns, which drops
the same-rack triggers of 0002 (and the rebuild fails while they name the other table): they are dropped
first and installed again last, as 0003 does."""

import importlib

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


SAME_RACK = "inventory.migrations.0002_tray_partition_same_rack"


def drop_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK).backwards(apps, schema_editor)


def install_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK)._sqlite_install(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0005_agent_tokens'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(drop_sqlite_triggers, install_sqlite_triggers, elidable=False),
        migrations.AddField(
            model_name='computetray',
            name='agent_interval_s',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='computetray',
            name='agent_version',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name='computetray',
            name='healthy_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='nvlinkpartition',
            name='degraded_reason',
            field=models.CharField(blank=True, help_text='Why the health rules marked it degraded; empty when not.', max_length=255),
        ),
        migrations.AddField(
            model_name='nvlinkpartition',
            name='degraded_since',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='computetray',
            name='state',
            field=models.CharField(choices=[('up', 'Up'), ('drain', 'Drain'), ('down', 'Down'), ('maintenance', 'Maintenance'), ('needs_service', 'Needs service')], default='up', max_length=16),
        ),
        migrations.CreateModel(
            name='HealthEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('gpu_uuid', models.CharField(blank=True, help_text='Kept if the GPU row goes.', max_length=64)),
                ('source', models.CharField(choices=[('agent', 'Node agent'), ('dcgm', 'DCGM'), ('admin', 'Admin')], max_length=16)),
                ('kind', models.CharField(choices=[('xid', 'XID'), ('recovery_action', 'Recovery action'), ('fabric', 'Fabric health'), ('dcgm_field', 'DCGM field'), ('check_failed', 'Active check failed')], max_length=20)),
                ('code', models.CharField(help_text='XID number, recovery action, fabric flag, DCGM field or check name.', max_length=128)),
                ('xid', models.PositiveSmallIntegerField(blank=True, null=True)),
                ('mnemonic', models.CharField(blank=True, max_length=64)),
                ('value', models.FloatField(blank=True, help_text='DCGM field value, check exit status.', null=True)),
                ('message', models.TextField(blank=True, help_text="The kernel line or the check's output tail.")),
                ('first_seen', models.DateTimeField()),
                ('last_seen', models.DateTimeField()),
                ('count', models.PositiveIntegerField(default=1)),
                ('drains', models.BooleanField(default=False)),
                ('degrades', models.BooleanField(default=False)),
                ('warns', models.BooleanField(default=False)),
                ('gpu', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='health_events', to='inventory.gpu')),
                ('tray', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='health_events', to='inventory.computetray')),
            ],
            options={
                'ordering': ['-last_seen', '-pk'],
            },
        ),
        migrations.CreateModel(
            name='HealthRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100)),
                ('enabled', models.BooleanField(default=True)),
                ('kind', models.CharField(choices=[('xid', 'XID'), ('recovery_action', 'Recovery action'), ('fabric', 'Fabric health'), ('dcgm_field', 'DCGM field'), ('check_failed', 'Active check failed')], help_text='What the event is.', max_length=20)),
                ('xid_first', models.PositiveSmallIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(999)])),
                ('xid_last', models.PositiveSmallIntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(999)])),
                ('code', models.CharField(blank=True, help_text='Recovery action (GPU_RESET ...), fabric flag (ROUTE_UNHEALTHY ...), DCGM field or check name; empty matches any.', max_length=128)),
                ('threshold', models.FloatField(blank=True, help_text="DCGM fields: the event's value must be at least this.", null=True)),
                ('action', models.CharField(choices=[('drain', 'Drain the tray'), ('degrade', 'Mark the NVLink partition degraded'), ('warn', 'Warn only')], max_length=16)),
                ('note', models.CharField(blank=True, help_text="Why; NVIDIA's immediate action.", max_length=300)),
            ],
            options={
                'ordering': ['kind', 'xid_first', 'code', 'pk'],
                'constraints': [models.UniqueConstraint(fields=('name',), name='inventory_healthrule_unique_name'), models.CheckConstraint(condition=models.Q(models.Q(('kind', 'xid'), _negated=True), models.Q(('xid_first__isnull', False), ('xid_last__isnull', False)), _connector='OR'), name='inventory_healthrule_xid_range_set', violation_error_message='An XID rule needs its first and last XID.'), models.CheckConstraint(condition=models.Q(('xid_first__isnull', True), ('xid_last__gte', models.F('xid_first')), _connector='OR'), name='inventory_healthrule_xid_range_order', violation_error_message='The last XID cannot come before the first.')],
            },
        ),
        migrations.CreateModel(
            name='HealthAction',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('drain', 'Drained'), ('needs_service', 'Needs service'), ('degrade', 'Partition degraded'), ('recover', 'Partition no longer degraded'), ('warn', 'Warning'), ('return', 'Returned to service'), ('would_drain', 'Would drain (dry run)'), ('would_needs_service', 'Would mark needs service (dry run)'), ('would_degrade', 'Would degrade the partition (dry run)'), ('would_return', 'Would return to service (dry run)'), ('blocked', 'Blocked by the circuit breaker'), ('breaker_tripped', 'Circuit breaker tripped'), ('not_ours', 'Left as another owner set it')], max_length=24)),
                ('rule_name', models.CharField(blank=True, max_length=100)),
                ('dry_run', models.BooleanField(default=False)),
                ('reason', models.CharField(max_length=500)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('partition', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='inventory.nvlinkpartition')),
                ('tray', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='health_actions', to='inventory.computetray')),
                ('event', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='actions', to='inventory.healthevent')),
                ('rule', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='inventory.healthrule')),
            ],
            options={
                'ordering': ['-created_at', '-pk'],
            },
        ),
        migrations.CreateModel(
            name='HealthSettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('dry_run', models.BooleanField(default=False, help_text='Record what the rules would do (would-drain decisions) and change nothing.')),
                ('dedup_window_s', models.PositiveIntegerField(default=3600, help_text="Repeats of one fault on one GPU within this many seconds update the event's count.", validators=[django.core.validators.MinValueValidator(1)])),
                ('breaker_percent', models.PositiveSmallIntegerField(default=10, help_text='Circuit breaker: at most this % of all trays (at least one) taken out per window.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)])),
                ('breaker_window_s', models.PositiveIntegerField(default=3600, validators=[django.core.validators.MinValueValidator(1)])),
                ('breaker_tripped_at', models.DateTimeField(blank=True, help_text='Set when the breaker tripped; clear it to let the rules drain again.', null=True)),
                ('breaker_note', models.CharField(blank=True, max_length=500)),
                ('auto_return', models.BooleanField(default=True, help_text='Return trays the rules drained once they qualify (else only record it).')),
                ('return_after_s', models.PositiveIntegerField(default=1800, help_text="A drained tray's agent must report it healthy for this many seconds.")),
                ('return_check', models.CharField(blank=True, help_text='Active check that must pass after the fault before return (e.g. "dcgmi diag -r 2"); empty: none needed.', max_length=128)),
                ('repeat_faults', models.PositiveSmallIntegerField(default=3, help_text='A tray drained this many times within repeat_days needs service instead.', validators=[django.core.validators.MinValueValidator(1)])),
                ('repeat_days', models.PositiveSmallIntegerField(default=7, validators=[django.core.validators.MinValueValidator(1)])),
            ],
            options={
                'verbose_name': 'health settings',
                'verbose_name_plural': 'health settings',
                'constraints': [models.CheckConstraint(condition=models.Q(('pk', 1)), name='inventory_healthsettings_singleton'), models.CheckConstraint(condition=models.Q(('breaker_percent__gte', 1), ('breaker_percent__lte', 100)), name='inventory_healthsettings_breaker_percent_range')],
            },
        ),
        migrations.CreateModel(
            name='HealthCheckResult',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=128)),
                ('exit_status', models.SmallIntegerField()),
                ('output', models.TextField(blank=True)),
                ('started', models.DateTimeField()),
                ('seconds', models.FloatField()),
                ('received_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('tray', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='health_checks', to='inventory.computetray')),
            ],
            options={
                'ordering': ['-started', '-pk'],
                'constraints': [models.UniqueConstraint(fields=('tray', 'name', 'started'), name='inventory_healthcheckresult_unique_run')],
            },
        ),
        migrations.AddIndex(
            model_name='healthevent',
            index=models.Index(fields=['tray', 'kind', 'code', 'gpu_uuid', 'last_seen'], name='inventory_health_dedup'),
        ),
        migrations.AddIndex(
            model_name='healthevent',
            index=models.Index(fields=['gpu', 'last_seen'], name='inventory_health_gpu'),
        ),
        migrations.AddConstraint(
            model_name='healthevent',
            constraint=models.CheckConstraint(condition=models.Q(('count__gte', 1)), name='inventory_healthevent_count_positive'),
        ),
        migrations.AddConstraint(
            model_name='healthevent',
            constraint=models.CheckConstraint(condition=models.Q(('last_seen__gte', models.F('first_seen'))), name='inventory_healthevent_seen_order'),
        ),
        migrations.AddIndex(
            model_name='healthaction',
            index=models.Index(fields=['tray', 'created_at'], name='inventory_healthaction_tray'),
        ),
        migrations.AddIndex(
            model_name='healthaction',
            index=models.Index(fields=['kind', 'created_at'], name='inventory_healthaction_kind'),
        ),
        migrations.AddField(
            model_name='computetray',
            name='scheduler_state',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='computetray',
            name='scheduler_state_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(install_sqlite_triggers, drop_sqlite_triggers, elidable=False),
    ]
