"""Placeholder in this session's migration chain; its owner fills in the operations (or leaves it empty)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0004_metrics_source")]

    operations = []
