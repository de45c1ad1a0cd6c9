"""What the processes' kept copies of database rows share (scheduling.pass_cache's cluster,
integrations.kept_rows' render rows): the key of the database in use, and whether it holds a change log
(PostgreSQL with the triggers of a migration; SQLite has none and every read is cold)."""

from __future__ import annotations

from django.db import connection

_exists: dict[tuple, bool] = {}  # (database, table) -> whether the table is there (checked once a process)


def database_key() -> tuple:
    """The database the default connection uses: a kept copy belongs to one."""
    settings = connection.settings_dict
    return (connection.alias, settings.get("NAME"), settings.get("HOST"), settings.get("PORT"))


def has_log(table: str) -> bool:
    """Whether the database in use is PostgreSQL and holds the change log `table`."""
    if connection.vendor != "postgresql":
        return False
    key = (*database_key(), table)
    if key not in _exists:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
            _exists[key] = bool(cursor.fetchone()[0])
    return _exists[key]
