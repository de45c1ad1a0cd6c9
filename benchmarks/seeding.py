"""Seeding at 10,000 racks in minutes: the demo's own seed functions, their rows written with PostgreSQL's
`COPY ... FROM STDIN` (psycopg's `cursor.copy()`) instead of multi-row INSERTs.

`copy_seeding()` routes `QuerySet.bulk_create` through `copy_create` while it is open, in this process only:
`inventory.demo.seed_datacenter` and `portal.demo.seeding.seed_tenants` run unchanged, drawing the same
random numbers in the same order, so a seed through COPY holds the same rows as one through bulk_create
(tests/test_benchmarks.py compares them) and the 1,000-rack figures stay comparable with earlier runs.

`copy_create` does what bulk_create does for the seed's calls: each field's value as Django saves it
(`pre_save`, `get_db_prep_save`), primary keys taken from the table's own sequence beforehand (as many as
rows, in one query) and set on the objects, which are then saved objects (`_state.adding` False). A call
it does not cover (another database than PostgreSQL, conflict handling, a model with parents, unsaved
related objects) goes to bulk_create itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connections
from django.db.models.query import QuerySet

_bulk_create = QuerySet.bulk_create


def copy_create(queryset: QuerySet, objs, batch_size: int | None = None, **options) -> list:
    """`queryset.bulk_create(objs, batch_size)` through COPY (PostgreSQL); see the module's docstring."""
    objs = list(objs)
    model = queryset.model
    opts = model._meta
    connection = connections[queryset.db]
    if connection.vendor != "postgresql" or any(options.values()) or opts.parents or not objs:
        return _bulk_create(queryset, objs, batch_size=batch_size, **options)
    for obj in objs:
        obj._prepare_related_fields_for_save(operation_name="bulk_create")
    fields = [field for field in opts.concrete_fields if not getattr(field, "generated", False)]
    pk = opts.pk
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        unnumbered = [obj for obj in objs if obj.pk is None]
        if unnumbered:
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
                [opts.db_table, pk.column, len(unnumbered)],
            )
            for obj, (number,) in zip(unnumbered, cursor.fetchall(), strict=True):
                setattr(obj, pk.attname, number)
        columns = ", ".join(quote(field.column) for field in fields)
        # The driver's own cursor (psycopg 3): Django's wrapper has no copy().
        with cursor.cursor.copy(f"COPY {quote(opts.db_table)} ({columns}) FROM STDIN") as copy:
            for obj in objs:
                copy.write_row(
                    [
                        field.get_db_prep_save(field.pre_save(obj, True), connection=connection)
                        for field in fields
                    ]
                )
    for obj in objs:
        obj._state.adding = False
        obj._state.db = queryset.db
    return objs


@contextlib.contextmanager
def copy_seeding() -> Iterator[None]:
    """While open, every `bulk_create` in this process goes through `copy_create`."""

    def bulk_create(self, objs, batch_size=None, **options):
        return copy_create(self, objs, batch_size, **options)

    QuerySet.bulk_create = bulk_create  # type: ignore[method-assign]
    try:
        yield
    finally:
        QuerySet.bulk_create = _bulk_create  # type: ignore[method-assign]
