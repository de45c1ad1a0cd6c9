"""Placeholder in this session's migration chain; its owner fills in the operations (or leaves it empty)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0003_projects")]

    operations = []
