"""`make run`'s filesystem broker (portal.broker): a message is written whole before a consumer can take it.

kombu's own transport created the message's file under its final name and wrote it after; `make run`'s worker
claimed one in between, read nothing and stopped (JSONDecodeError: kombu issue 1551). These tests use real
kombu channels on a temporary folder, producer and consumer as `make run` has them (one folder both ways).
"""

import os
import subprocess
import sys
from queue import Empty

import pytest
from kombu import Connection

from portal import broker
from tests.fresh_clone import REPO_ROOT, shell_env


@pytest.fixture
def connection(tmp_path):
    folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
    for folder in folders.values():
        folder.mkdir()
    options = {
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "store_processed": True,
        "processed_folder": str(folders["processed"]),
        "control_folder": str(folders["control"]),
    }
    with Connection("filesystem://", transport=broker.Transport, transport_options=options) as conn:
        yield conn, folders["queue"]


def test_a_message_is_only_seen_once_written_whole(connection, monkeypatch):
    conn, queue = connection
    producer, consumer = conn.channel(), conn.channel()
    seen_while_writing = []
    rename = os.replace

    def watched(source, target):  # the moment between the write and the rename: what a consumer sees
        seen_while_writing.append(sorted(os.listdir(queue)))
        with pytest.raises(Empty):
            consumer._get("tasks")
        rename(source, target)

    monkeypatch.setattr(broker.os, "replace", watched)
    producer._put("tasks", {"body": "x" * 100_000, "n": 1})
    assert len(seen_while_writing) == 1 and seen_while_writing[0][0].endswith(".tasks.msg.part")
    assert consumer._get("tasks") == {"body": "x" * 100_000, "n": 1}
    assert os.listdir(queue) == []


def test_every_message_goes_through_a_queue_once(connection):
    # First in, first out by the millisecond the message was put (kombu's file names); within one
    # millisecond by the names' random part, as kombu's own transport.
    conn, queue = connection
    with conn.SimpleQueue("work") as work:
        for n in range(5):
            work.put({"n": n})
        got = []
        for _ in range(5):
            message = work.get(timeout=2)
            got.append(message.payload["n"])
            message.ack()
        with pytest.raises(Empty):
            work.get(timeout=0.2)
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert os.listdir(queue) == []


@pytest.mark.slow(reason="a fresh Python")
def test_make_runs_celery_uses_it(tmp_path):
    env = shell_env(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DEBUG="1",
        CELERY_BROKER_URL="filesystem://",
    )
    code = "from portal.celery import app; print(app.connection_for_write().transport_cls)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "portal.broker:Transport"
