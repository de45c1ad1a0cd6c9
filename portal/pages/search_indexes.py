"""The global search's trigram indexes (PostgreSQL's pg_trgm), made by migration portal 0003 and, after a
database role could not make the extension there, by `manage.py search_indexes`.

Each index is on `UPPER(column::text)`, the very expression Django's `icontains` and `istartswith` compare
on PostgreSQL (`UPPER("t"."c"::text) LIKE UPPER('%q%')`): a GIN index with `gin_trgm_ops` per searched
name, so a substring search of three characters or more (portal.pages.search.MIN_SUBSTRING) reads the rows
holding its trigrams instead of the table; and for job names also a b-tree with `text_pattern_ops`, which
answers `LIKE 'Q%'` as a range: a trigram index finds every name *holding* "pretrain" for the prefix
"pretrain" (a tenth of a year's jobs) and throws most away. Departments are left out: a site has tens of
them, and scanning them is cheaper than an index.

On any other database (SQLite: `make run`'s embedded default) nothing is made: search uses the same
`icontains` there, by scanning. PostgreSQL 13 and later let a database owner create pg_trgm (a trusted
extension); a role that may not gets a warning, not a failed migration, and search scans until the
extension and the indexes are made (docs/deployment/operations.md).

Migration 0003 builds from this module's list, so the list only grows: a new index goes here and into a new
migration calling `create_indexes` (it makes only the missing ones); removing one needs a migration that
drops it, and its line stays here until that migration is squashed.
"""

from __future__ import annotations

from django.db import DatabaseError, transaction

EXTENSION = "pg_trgm"
# (index name, table, column, how). how: TRIGRAM (GIN, gin_trgm_ops) or PREFIX (b-tree, text_pattern_ops);
# named <table>_<column>_trgm_idx and _prefix_idx, as the project names its indexes.
TRIGRAM, PREFIX = (
    "USING gin ((UPPER({column}::text)) gin_trgm_ops)",
    "((UPPER({column}::text)) text_pattern_ops)",
)
SEARCHED = {  # table: the columns searched inside
    "inventory_rack": ("name", "location"),
    "inventory_computetray": ("hostname",),
    "inventory_gpu": ("uuid", "serial"),
    "scheduling_job": ("name",),
    "tenancy_project": ("name", "slug"),
    "auth_user": ("username", "first_name", "last_name"),
}
INDEXES = (
    *(
        (f"{table}_{column}_trgm_idx", table, column, TRIGRAM)
        for table, cs in SEARCHED.items()
        for column in cs
    ),
    ("scheduling_job_name_prefix_idx", "scheduling_job", "name", PREFIX),
)


def has_extension(connection) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_extension WHERE extname = %s", [EXTENSION])
        return cursor.fetchone() is not None


def create_extension(connection) -> str | None:
    """Make pg_trgm when it is missing; None when it is there, else why it could not be made (the role's
    right to CREATE on the database, or the contrib package not installed)."""
    if has_extension(connection):
        return None
    try:
        # In a savepoint (or its own transaction): the failure leaves nothing behind.
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(f"CREATE EXTENSION IF NOT EXISTS {EXTENSION}")
    except DatabaseError as error:
        return str(error).strip().splitlines()[0]
    return None


def create_indexes(connection, concurrently: bool, trigram: bool = True) -> list[str]:
    """Make the missing indexes (an invalid one left by an interrupted concurrent build is made again);
    returns the names made. `concurrently`: without blocking writes (outside a transaction only);
    `trigram=False`: only those that need no pg_trgm (the prefix b-tree)."""
    made = []
    concurrent = "CONCURRENTLY " if concurrently else ""
    with connection.cursor() as cursor:
        for name, table, column, how in INDEXES:
            if how == TRIGRAM and not trigram:
                continue
            cursor.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = %s",
                [name],
            )
            found = cursor.fetchone()
            if found is not None and found[0]:
                continue
            if found is not None:
                cursor.execute(f"DROP INDEX {concurrent}IF EXISTS {name}")
            cursor.execute(f"CREATE INDEX {concurrent}{name} ON {table} {how.format(column=column)}")
            made.append(name)
    return made


def drop_indexes(connection) -> None:
    """The indexes gone (the extension stays: something else may use it)."""
    with connection.cursor() as cursor:
        for name, *_ in INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")


def missing_extension_message(connection, reason: str) -> str:
    database = connection.settings_dict.get("NAME")
    return (
        f"Search: PostgreSQL's {EXTENSION} extension could not be created ({reason}). Search still finds "
        "every match, by scanning the tables (slower at scale). To index it: a superuser runs "
        f'`CREATE EXTENSION {EXTENSION};` in the database "{database}", then `manage.py search_indexes` '
        "(docs/deployment/operations.md, Search indexes)."
    )
