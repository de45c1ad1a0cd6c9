
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("integrations", "0001_initial"),
        ('scheduling', '0005_jobs_dispatch_events'),
    ]

    operations = [
        # ConfigTarget and ConfigPush moved to integrations with their tables (integrations 0001).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='ConfigPush',
                ),
                migrations.DeleteModel(
                    name='ConfigTarget',
                ),
            ],
            database_operations=[],
        ),
    ]
