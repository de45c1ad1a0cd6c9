
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("core", "0001_initial"),
        ('portal', '0001_initial'),
    ]

    operations = [
        # AuditEvent moved to core with its table (core 0001).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='AuditEvent',
                ),
            ],
            database_operations=[],
        ),
    ]
