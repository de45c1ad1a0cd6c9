"""Fleet-wide counts kept between requests and counted again only when the inventory changed (issue 32: at
10,000 racks a count of 720,000 GPUs is 140-360 ms, and the shortfall banner of every admin page and both
dashboards asked for it on every request).

A count kept here is a function of inventory columns the triggers of migration scheduling 0010 watch
(scheduling.pass_cache.CACHED_COLUMNS: a transaction that changes one of them, inserts or deletes rows, is
logged). It is kept in Django's cache (Redis where CACHE_URL names it: shared by every web process) with the
snapshot it was counted under. Each read is one statement: it asks whether a logged transaction that
snapshot did not see has committed since (the pass's own check, scheduling.pass_cache), and only then
counts again, under the statement's own snapshot, which it keeps with the new figure. So the figure shown
is always the one a count would give now, never an earlier one: no "as of".

Counted every time: on SQLite (the embedded default: no triggers) and inside a transaction that has written
(its changes are its own until it commits; a GET never writes).
"""

from __future__ import annotations

import functools

from django.core.cache import cache
from django.db import connection
from django.db.models import Func, IntegerField, QuerySet

from inventory import selectors
from inventory.models import Gpu
from scheduling.pass_cache import CHANGE_LOG
from tenancy.services import schedulable_gpus as count_schedulable_gpus
from tenancy.services import unschedulable_gpus

# Whether the kept snapshot still sees the inventory as it is: this transaction wrote nothing, the server
# is the one it was counted on, the log was not pruned past it, and no logged transaction it did not see
# is visible now (one not yet committed is not visible to this statement either: its changes are not).
_STILL = f"""
    txid_current_if_assigned() IS NULL
    AND pg_postmaster_start_time() = %s
    AND COALESCE((SELECT seq FROM {CHANGE_LOG} WHERE xid = 0), 0) <= %s
    AND NOT EXISTS (
        SELECT 1 FROM {CHANGE_LOG} WHERE xid >= %s AND NOT txid_visible_in_snapshot(xid, %s::txid_snapshot)
    )
"""


def _count_sql(queryset: QuerySet) -> tuple[str, list]:
    """``(SELECT COUNT(*) ...)`` of `queryset` as SQL and its parameters."""
    counted = queryset.order_by().annotate(counted=Func(template="COUNT(*)", output_field=IntegerField()))
    sql, params = counted.values("counted").query.sql_with_params()
    return f"({sql})", list(params)


def _key(name: str) -> str:
    settings = connection.settings_dict
    return (
        f"rackplane:fleet-count:{name}:{settings.get('HOST')}:{settings.get('PORT')}:{settings.get('NAME')}"
    )


def kept_count(name: str, sql: str, params: list) -> int:
    """The count `sql` (a scalar expression, e.g. `_count_sql`'s) gives, kept under `name` while the
    inventory is unchanged (module docstring): it must read only columns the change log watches. One
    query."""
    count, *_none = kept_count_with(name, sql, params)
    return count


def kept_count_with(
    name: str, sql: str, params: list, also: str = "", also_from: str = "", also_params: list | None = None
) -> tuple:
    """(`kept_count`'s count, then the values of `also`, SQL expressions read every time, over `also_from`
    when given, e.g. `FROM (SELECT ...) alias`) in one statement, so under one snapshot: e.g. the GPUs
    kept and a count of rows that go with them read now."""
    also = f", {also} {also_from}" if also else ""
    if connection.vendor != "postgresql":  # no change log (migration scheduling 0010)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {sql}{also}", params + (also_params or []))
            return tuple(cursor.fetchone())
    key = _key(name)
    kept = cache.get(key)
    still, still_params = ("FALSE", []) if kept is None else (_STILL, _still_params(kept))
    with connection.cursor() as cursor:
        # An uncorrelated subquery in a CASE branch not taken is never run (PostgreSQL evaluates it lazily).
        cursor.execute(
            "SELECT txid_current_snapshot()::text, pg_postmaster_start_time(), txid_current_if_assigned(), "
            f"CASE WHEN {still} THEN NULL ELSE {sql} END{also}",
            still_params + params + (also_params or []),
        )
        snapshot, postmaster, own, count, *rest = cursor.fetchone()
    if count is None:
        return (kept["count"], *rest)
    if own is None:  # counted under a snapshot every other transaction shares: keep it
        cache.set(key, {**_mark(snapshot, postmaster), "count": count}, None)
    return (count, *rest)


def gpus_with(also: str, also_from: str, also_params: list) -> tuple:
    """(every GPU of the fleet, counted when the inventory changed, else kept; then `also`'s values over
    `also_from`, read now), in one statement (`kept_count_with`)."""
    return kept_count_with("gpus", *_all_gpus_sql(), also, also_from, also_params)


@functools.cache
def _all_gpus_sql() -> tuple[str, list]:
    return _count_sql(Gpu.objects.all())


def _mark(snapshot: str, postmaster) -> dict:
    return {"snapshot": snapshot, "xmin": int(snapshot.split(":", 1)[0]), "postmaster": postmaster}


def _still_params(kept: dict) -> list:
    return [kept["postmaster"], kept["xmin"], kept["xmin"], kept["snapshot"]]


def schedulable_gpus() -> int:
    """tenancy.services.schedulable_gpus, kept while the inventory is unchanged (`kept_count`): the
    capacity the dashboards, the department list and the shortfall banner show. A write that must hold
    the figure under a lock (tenancy.services.save_department) counts it itself."""
    if connection.vendor != "postgresql":
        return count_schedulable_gpus()
    return kept_count("schedulable-gpus", *_schedulable_sql())


@functools.cache
def _schedulable_sql() -> tuple[str, list]:
    """All GPUs less the unschedulable ones (as tenancy.services.schedulable_gpus counts them), compiled
    once per process (the querysets are constant; compiling them was most of a kept read's time)."""
    everything, params = _count_sql(Gpu.objects.all())
    less, less_params = _count_sql(unschedulable_gpus())
    return f"{everything} - {less}", params + less_params


def kept_figures(name: str, compute):
    """`compute()` (figures read only from inventory columns the change log watches, e.g. several ORM
    aggregates), kept under `name` while the inventory is unchanged (module docstring): one query when
    kept, else that query and `compute`'s. Inside a transaction (a test's, a write's) it is computed every
    time: what that transaction wrote is not anyone else's yet."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return compute()
    key = _key(name)
    kept = cache.get(key)
    still, still_params = ("FALSE", []) if kept is None else (_STILL, _still_params(kept))
    with connection.cursor() as cursor:
        # Taken before `compute` reads: a change committed in between is read and also counts as unseen
        # (computed again next time: never a figure older than its snapshot).
        cursor.execute(
            f"SELECT txid_current_snapshot()::text, pg_postmaster_start_time(), {still}", still_params
        )
        snapshot, postmaster, unchanged = cursor.fetchone()
    if unchanged:
        return kept["figures"]
    figures = compute()
    cache.set(key, {**_mark(snapshot, postmaster), "figures": figures}, None)
    return figures


def overview_counts(user) -> dict:
    """inventory.selectors.overview_counts: the same figures for every signed-in user (the inventory is
    shared with them all), kept while the inventory is unchanged (`kept_figures`; issue 32: about 1 s of
    the overview at 10,000 racks)."""
    if not user.is_authenticated:
        return selectors.overview_counts(user)
    return kept_figures("overview", lambda: selectors.overview_counts(user))
