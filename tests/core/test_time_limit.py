"""core.time_limit.within: a read stopped after so many milliseconds on PostgreSQL, the connection and any
outer transaction left usable, and the server's own limit set back."""

import pytest
from django.db import DataError, connection, transaction

from core.time_limit import within

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="statement_timeout is PostgreSQL's"
)


def fetch(sql: str):
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def test_a_limit_is_at_least_one_millisecond():
    with pytest.raises(ValueError):
        within(0, lambda: 1)


@pytest.mark.django_db
def test_a_read_within_its_time_is_returned():
    assert within(5_000, lambda: fetch("SELECT 41 + 1")) == (42, True)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_read_past_its_time_is_stopped_and_the_connection_stays_usable():
    before = fetch("SHOW statement_timeout")
    assert within(50, lambda: fetch("SELECT pg_sleep(5)::text")) == (None, False)
    assert fetch("SHOW statement_timeout") == before
    assert fetch("SELECT 1") == 1  # not left in an aborted transaction


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_limit_ends_with_the_call_and_the_transaction_goes_on():
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '7s'")
            cursor.execute("CREATE TEMPORARY TABLE written (n int)")
            cursor.execute("INSERT INTO written VALUES (1)")
        assert within(5_000, lambda: fetch("SELECT 1")) == (1, True)
        assert fetch("SHOW statement_timeout") == "7s"  # released, not left at 5 s
        assert within(50, lambda: fetch("SELECT pg_sleep(5)::text")) == (None, False)
        assert fetch("SHOW statement_timeout") == "7s"
        assert fetch("SELECT count(*) FROM written") == 1  # what the transaction wrote before is kept


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_other_errors_are_raised_and_the_limit_is_set_back():
    before = fetch("SHOW statement_timeout")
    with pytest.raises(DataError):
        within(5_000, lambda: fetch("SELECT 1 / 0"))
    assert fetch("SHOW statement_timeout") == before


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_cancel_after_the_read_is_a_stop_too_and_the_limit_goes_with_the_savepoint(monkeypatch):
    """Setting the limit back (and releasing the savepoint) run under the same short limit: on a busy server
    PostgreSQL cancelled one of them now and then (5 in 20,000 calls at 1 ms). Such a cancel is a stop, not
    an error. A stand-in makes the server's cancel happen at that statement every time."""
    import psycopg
    from django.db.backends.utils import CursorWrapper

    execute = CursorWrapper.execute

    def cancelled_at_set_back(self, sql, params=None):
        if "set_config" in sql and params and params[0] != "5000ms":
            with self.db.wrap_database_errors:
                raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        return execute(self, sql, params)

    before = fetch("SHOW statement_timeout")
    monkeypatch.setattr(CursorWrapper, "execute", cancelled_at_set_back)
    assert within(5_000, lambda: fetch("SELECT 1")) == (None, False)
    monkeypatch.setattr(CursorWrapper, "execute", execute)
    assert fetch("SHOW statement_timeout") == before  # rolled back with the savepoint
    assert fetch("SELECT 1") == 1
