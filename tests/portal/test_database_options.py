"""The PostgreSQL connection's options (portal.settings): no JIT compilation for the portal's queries."""

import pytest
from django.db import connection

postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own setting")


@postgresql
@pytest.mark.django_db
def test_queries_run_without_jit_compilation():
    """JIT compiled the dashboards' aggregates over the running jobs on every request (issue 32)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
