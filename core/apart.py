"""Queries read at once while the caller goes on (PostgreSQL): on other connections, and on this connection in
a thread of its own.

A cold read of large tables is mostly waiting: the server scans, sorts and groups while the process waits,
then the process decodes the rows while the server waits. `AtOnce(groups, here)` sends each group of
queries on a new connection (a thread each) and the `here` queries on the request's own connection (a thread
too); the caller takes each result when it needs it (`group(i)`, `here()`), building from the first ones
while the others are still read. On a machine with more than one core the server's work, the decoding and
the caller's own work overlap.

Each other connection reads in a read-only transaction of its own (READ COMMITTED): what others had
committed when its query started, as a query of this transaction would (this one reads committed too, each
statement from its own moment), except this transaction's own uncommitted changes, which no other
connection sees. The caller therefore puts in `groups` only queries of tables it has not changed (the
scheduling pass knows that from its change log, scheduling.pass_cache) and the rest in `here`. (A snapshot
exported from this transaction would pin the groups to one moment, but PostgreSQL exports none from a
savepoint, where a pass often runs; the pass needs no such moment: scheduling.pass_cache._mark.)

While the results are read the caller must not use the connection itself (the `here` thread does). When a
group cannot be read apart (a connection refused: a server at max_connections) it is read here after the
`here` queries; on another database, or outside a transaction, every query is read here, in order, when its
result is asked for: the same rows, later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper

logger = logging.getLogger(__name__)

Query = tuple[str, Sequence[Any]]  # SQL with %s placeholders, and its parameters
Rows = list[tuple]


class AtOnce:
    """`groups` (each: queries read in order on one connection) and `here` read at once (module docstring);
    `apart`: the groups may be read on other connections (else on this one, before `here`);
    `here_settings`: PostgreSQL settings for the `here` queries only (SET LOCAL, set back after). A context
    manager: leaving it waits for every thread, so nothing uses the connection afterwards."""

    def __init__(
        self,
        groups: Sequence[Sequence[Query]],
        here: Sequence[Query],
        apart: bool = True,
        here_settings: dict[str, str] | None = None,
        using: str = DEFAULT_DB_ALIAS,
    ):
        self.connection = connection = connections[using]
        self.groups, self.here_queries = [list(group) for group in groups], list(here)
        self.pools: list[ThreadPoolExecutor] = []
        self.futures: list[Future] = []
        self.here_future: Future | None = None
        if connection.vendor != "postgresql" or not connection.in_atomic_block:
            return  # read here when asked
        connection.ensure_connection()
        self.raw = connection.connection
        # This connection's reads, one after the other in the order sent: a thread of its own.
        self.on_this = ThreadPoolExecutor(max_workers=1, thread_name_prefix="at-once-here")
        self.pools.append(self.on_this)
        if not apart:
            self.futures = [self.on_this.submit(self._read_here, group) for group in self.groups]
        else:
            others = ThreadPoolExecutor(max_workers=len(self.groups), thread_name_prefix="at-once-apart")
            self.pools.append(others)
            # The backend's own parameters (a metrics wrapper's override makes a cursor class per call).
            params = PostgresWrapper.get_connection_params(connection)
            self.futures = [others.submit(_read_apart, params, group) for group in self.groups]
        self.here_future = self.on_this.submit(self._read_here, self.here_queries, here_settings or {})

    def __enter__(self) -> AtOnce:
        return self

    def __exit__(self, *exc) -> None:
        for pool in self.pools:
            pool.shutdown(wait=True)

    def group(self, i: int) -> list[Rows]:
        """The rows of each query of group `i`."""
        if not self.pools:
            return [_read(self.connection, query) for query in self.groups[i]]
        rows = self.futures[i].result()
        if rows is None:  # no other connection: read on this one, after what was sent to it before
            return self.on_this.submit(self._read_here, self.groups[i]).result()
        return rows

    def here(self) -> list[Rows]:
        """The rows of each `here` query."""
        if self.here_future is None:
            return [_read(self.connection, query) for query in self.here_queries]
        return self.here_future.result()

    def _read_here(self, queries: list[Query], settings: dict[str, str] | None = None) -> list[Rows]:
        """`queries` read on this connection, under `settings` (planner settings: set for them only, in
        this transaction, and set back after)."""
        with psycopg.Cursor(self.raw) as cursor:
            before = {}
            for name, value in (settings or {}).items():
                cursor.execute("SELECT current_setting(%s), set_config(%s, %s, true)", [name, name, value])
                (before[name], _) = cursor.fetchall()[0]
            rows = _fetched(cursor, queries)
            for name, value in before.items():
                cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
            return rows


def _fetched(cursor, queries: list[Query]) -> list[Rows]:
    """Each query's rows, sent with its parameters bound by the server and read in binary (arrays of
    hundreds of thousands of ids decode faster than as text)."""
    rows = []
    for sql, params in queries:
        cursor.execute(sql, params, binary=True)
        rows.append(cursor.fetchall())
    return rows


def _read(connection, query: Query) -> Rows:
    with connection.cursor() as cursor:
        cursor.execute(*query)
        return cursor.fetchall()


def _read_apart(params: dict, group: list[Query]) -> list[Rows] | None:
    """`group`'s rows read on a new connection; None when no connection could be made (the caller reads
    them on its own). Any other error (a query's) is raised: it would fail there too."""
    try:
        # The driver's own connect, as Django's backend calls it (not the backend's: it would set the
        # wrapper's isolation level from this thread, take a pooled connection, and, wrapped for metrics,
        # make a class per connection that only the cyclic collector frees).
        other = psycopg.connect(**params)
    except psycopg.OperationalError as error:
        logger.warning("read at once: no other connection to the database (%s); reading on this one", error)
        return None
    try:
        other.autocommit = True  # the transaction below is explicit
        with other.cursor() as cursor:
            cursor.execute("BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY")
            rows = _fetched(psycopg.Cursor(other), group)
            cursor.execute("COMMIT")
        return rows
    finally:
        other.close()
