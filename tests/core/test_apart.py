"""core.apart.AtOnce: queries read at once on other connections (read committed, read only), and on this
connection in a thread; read here, in order, when they cannot be."""

import socket

import pytest
from django.db import connection, transaction

from core import apart
from core.apart import AtOnce
from inventory.models import Rack

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="other connections under an exported snapshot: PostgreSQL's"
)

PID = ("SELECT pg_backend_pid()", [])
RACKS = ("SELECT name FROM inventory_rack WHERE name LIKE %s ORDER BY name", ["apart-%"])


def fetch(sql: str):
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchone()[0]


def racks(*names: str) -> None:
    for name in names:
        Rack.objects.create(name=name)


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_groups_are_read_on_other_connections_in_savepoints_too():
    racks("apart-a", "apart-b")  # committed
    with transaction.atomic(), transaction.atomic():  # a savepoint, as a pass in a request's transaction
        here_pid = fetch("SELECT pg_backend_pid()")
        with AtOnce(
            [[PID, RACKS, ("SELECT current_setting('transaction_read_only')", [])], [PID]],
            [PID, ("SELECT current_setting('enable_nestloop')", [])],
            here_settings={"enable_nestloop": "off"},
        ) as reads:
            ((first_pid,),), first_racks, ((read_only,),) = reads.group(0)
            (((second_pid,),),) = reads.group(1)
            (((pid,),), ((nestloop,),)) = reads.here()
        assert fetch("SHOW enable_nestloop") == "on"  # set for the `here` queries only
    assert first_racks == [("apart-a",), ("apart-b",)]
    assert read_only == "on"
    assert len({first_pid, second_pid, here_pid}) == 3  # two other connections
    assert pid == here_pid and nestloop == "off"


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_not_apart_this_transactions_own_changes_are_read():
    with transaction.atomic():
        racks("apart-uncommitted")
        here_pid = fetch("SELECT pg_backend_pid()")
        with AtOnce([[RACKS, PID]], [PID], apart=False) as reads:
            rows, ((pid,),) = reads.group(0)
            (((other,),),) = reads.here()
        assert rows == [("apart-uncommitted",)]
        assert pid == other == here_pid


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_apart_other_connections_do_not_see_this_transactions_own_changes():
    """Why the caller says which groups may go apart: no other connection sees uncommitted rows."""
    with transaction.atomic():
        racks("apart-uncommitted")
        with AtOnce([[RACKS]], [RACKS]) as reads:
            assert reads.group(0) == [[]]
            assert reads.here() == [[("apart-uncommitted",)]]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_refused_connection_reads_the_group_here(monkeypatch):
    """A server that refuses a new connection (here: a port nothing listens on, a real refusal) costs time,
    not rows."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    params = {**connection.get_connection_params(), "host": "127.0.0.1", "port": closed_port}
    monkeypatch.setattr(apart.PostgresWrapper, "get_connection_params", lambda self: params)
    racks("apart-a")
    with transaction.atomic():
        here_pid = fetch("SELECT pg_backend_pid()")
        with AtOnce([[PID, RACKS]], [PID]) as reads:
            ((pid,),), rows = reads.group(0)
            assert reads.here() == [[(here_pid,)]]
    assert pid == here_pid and rows == [("apart-a",)]


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_or_postgresql_every_query_is_read_here_when_asked():
    racks("apart-a")
    with AtOnce([[RACKS]], [RACKS]) as reads:  # autocommit: no snapshot to export
        assert reads.pools == []
        assert reads.here() == [[("apart-a",)]]
        assert reads.group(0) == [[("apart-a",)]]
