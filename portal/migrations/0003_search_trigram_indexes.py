"""The global search's trigram indexes (portal.pages.search_indexes): PostgreSQL's pg_trgm extension and a
GIN index on UPPER(column) per searched name (and a b-tree for job name prefixes), built CONCURRENTLY so that an upgrade does not hold writes to
the jobs or the inventory while they build (hence `atomic = False`). Nothing on other databases. A role that
may not create the extension gets a warning naming what to run, and the migration still succeeds with the
b-tree alone: search then scans for substrings (`manage.py search_indexes` makes the rest later)."""

import sys

from django.db import migrations

from portal.pages import search_indexes


def create(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    reason = search_indexes.create_extension(connection)
    if reason is not None:
        sys.stderr.write(search_indexes.missing_extension_message(connection, reason) + "\n")
    concurrently = not connection.in_atomic_block
    search_indexes.create_indexes(connection, concurrently=concurrently, trigram=reason is None)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        search_indexes.drop_indexes(schema_editor.connection)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("portal", "0002_audit_moved_to_core"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("inventory", "0016_maintenance_action"),
        ("scheduling", "0018_watch_gpu_mig_mode"),
        ("tenancy", "0011_text_rule_validators"),
    ]

    operations = [migrations.RunPython(create, drop)]
