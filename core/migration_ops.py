"""Migration operations that keep an upgrade from holding writes (docs/deployment/operations.md, Upgrading):
indexes built and dropped CONCURRENTLY on PostgreSQL, where a migration that uses them sets `atomic = False`;
plain elsewhere (SQLite) and inside a transaction (a test's)."""

from django.db import migrations


def concurrently(schema_editor) -> bool:
    """Whether this schema editor may build or drop an index CONCURRENTLY."""
    return schema_editor.connection.vendor == "postgresql" and not schema_editor.connection.in_atomic_block


class AddIndexConcurrentlyOnPostgreSQL(migrations.AddIndex):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not concurrently(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)


class RemoveIndexConcurrentlyOnPostgreSQL(migrations.RemoveIndex):
    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not concurrently(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.remove_index(model, index, concurrently=True)
