"""`scratch_database`: the test's default connection on an empty database of its own, for migration tests.

A test of a migration needs the database at the migrations before it. Migrating the suite's test database
back there unapplies every later migration of every app that depends on it (most of the project), and the
test must then migrate it all forward again for the tests after it: a minute or more per test on 2 cores.
On an empty database the same test migrates forward only to the migrations it starts from (the small graph
they depend on), then through the migrations it tests, as a site's database made by that release would; the
suite's test database is never touched.

The fixture points Django's default connection at a new database on the same server (PostgreSQL: `CREATE
DATABASE`; SQLite: a file in the test's tmp_path) for the test, and back at the test database after it
(the test database's own connection is kept aside meanwhile, not closed: an in-memory SQLite database would
be lost), then drops the scratch database. It asks for a transactional test (`transaction=True`): no
transaction of the test database is open while the connection points elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

import pytest

_numbers = itertools.count()


@contextlib.contextmanager
def on_scratch_database(folder: Path):
    """Django's default connection on a new, empty database (SQLite: a file in `folder`) until the block
    ends; then on the test database again, and the scratch database dropped. Yields its name."""
    from django.contrib.contenttypes.models import ContentType
    from django.db import connection

    quote = connection.ops.quote_name
    postgres = connection.vendor == "postgresql"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = (
        f"test_scratch_{worker}_{os.getpid()}_{next(_numbers)}"
        if postgres
        else str(folder / "scratch.sqlite3")
    )
    if postgres:
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
            cursor.execute(f"CREATE DATABASE {quote(name)}")
    kept_name, kept_connection = connection.settings_dict["NAME"], connection.connection
    connection.connection = None  # the test database's connection, kept aside
    connection.settings_dict["NAME"] = name
    ContentType.objects.clear_cache()
    try:
        yield name
    finally:
        connection.close()
        connection.settings_dict["NAME"] = kept_name
        connection.connection = kept_connection
        ContentType.objects.clear_cache()
        if postgres:
            with connection._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")


@pytest.fixture
def scratch_database(transactional_db, tmp_path):
    with on_scratch_database(tmp_path) as name:
        yield name
