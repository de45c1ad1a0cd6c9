"""A read that may take at most so long: PostgreSQL's statement_timeout on the statements of one call.

`within(ms, read)` runs `read()` in a savepoint with `SET LOCAL statement_timeout`; when PostgreSQL
cancels a statement of it for the time (SQLSTATE 57014, query_canceled) the savepoint is rolled back, the
connection stays usable, and `within` says so instead of raising. The limit ends with the call: the
setting in force before it (the server's, or an outer caller's) is set back, inside a request's
transaction too. Other databases (SQLite, `make run`'s few rows) have no such limit: `read()` simply runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction

T = TypeVar("T")

QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled (statement_timeout, a cancel)


def within(ms: int, read: Callable[[], T], using: str = DEFAULT_DB_ALIAS) -> tuple[T | None, bool]:
    """`read()` and True, or None and False when PostgreSQL cancelled a statement for the time (of the
    read, or the setting back and the savepoint's release after it, which run under the same limit: then
    the savepoint is rolled back, and the setting with it). PostgreSQL only; `ms` at least 1."""
    if ms < 1:
        raise ValueError("a time limit is at least 1 ms (0 would mean none)")
    connection = connections[using]
    if connection.vendor != "postgresql":
        return read(), True
    try:
        with transaction.atomic(using=using):
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('statement_timeout')")
                before = cursor.fetchone()[0]
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{int(ms)}ms"])
            result = read()
            with connection.cursor() as cursor:
                # Released into an outer transaction, SET LOCAL would outlive the savepoint: set back.
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    except OperationalError as error:
        if getattr(error.__cause__, "sqlstate", None) == QUERY_CANCELED:
            return None, False
        raise
    return result, True
