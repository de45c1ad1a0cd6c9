"""Placeholder in this session's migration chain; its owner fills in the operations (or leaves it empty)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("core", "0004_notifications")]

    operations = []
