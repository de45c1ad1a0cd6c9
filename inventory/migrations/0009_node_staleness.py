"""Placeholder in this session's migration chain; its owner fills in the operations (or leaves it empty)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("inventory", "0008_fault_requeue")]

    operations = []
