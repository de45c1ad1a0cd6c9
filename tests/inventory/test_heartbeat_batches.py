"""Heartbeats batched on the task broker (inventory.ingest.heartbeats): the web request only hands the
tray's last-seen time to the broker; the beat's flush writes every queued time in one batch, each tray its
own; nothing queued is lost across a flush, a failed flush, a restarted web process or a broker that is
away; a tray that stops reporting still goes silent on time.

Brokers: kombu's filesystem transport (the embedded default of `make run`, no server: a queue of messages)
always, and the real Redis of scripts/services.sh when CELERY_TEST_BROKER_URL is set (`make test`: a hash)."""

from __future__ import annotations

import os
import socket
import threading
from datetime import timedelta

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from kombu import Connection

from inventory.ingest import heartbeats
from inventory.models import ComputeTray, Gpu
from inventory.staleness import SilentPolicy, silent_tray_pks
from tests.factories import node_report, token_client

URL = "/api/v1/discovery/reports/"
HOST = "gb-r02-t10"


@pytest.fixture(params=["filesystem", "redis"])
def broker(request, settings, tmp_path):
    """A real broker the heartbeats go through, empty at the start."""
    if request.param == "filesystem":
        folders = {name: tmp_path / name for name in ("queue", "processed", "control")}
        for folder in folders.values():
            folder.mkdir()
        settings.CELERY_BROKER_URL = "filesystem://"
        settings.CELERY_BROKER_TRANSPORT_OPTIONS = {
            "data_folder_in": str(folders["queue"]),
            "data_folder_out": str(folders["queue"]),
            "store_processed": True,
            "processed_folder": str(folders["processed"]),
            "control_folder": str(folders["control"]),
        }
    else:
        url = os.environ.get("CELERY_TEST_BROKER_URL")
        if not url:
            pytest.skip("no Redis: CELERY_TEST_BROKER_URL is set by scripts/services.sh (make test)")
        # A database of its own per pytest-xdist worker: a flush takes every message of its queue.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
        settings.CELERY_BROKER_URL = f"{url.rsplit('/', 1)[0]}/{2 + int(worker or 0) % 14}"
        settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    settings.RACKPLANE_HEARTBEAT_BATCH_S = 5
    if request.param == "redis":
        redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(
            heartbeats.HASH, heartbeats.TAKEN, heartbeats.LOCK
        )
    else:
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        with Connection(settings.CELERY_BROKER_URL, transport_options=options) as c:
            c.SimpleQueue(heartbeats.QUEUE).clear()
    yield request.param
    heartbeats.reset_pools()


@pytest.fixture
def trays(transactional_db):
    from inventory.demo import seed_datacenter

    seed_datacenter(racks=3)
    return list(ComputeTray.objects.order_by("pk")[:6])


def seen(tray: ComputeTray):
    return ComputeTray.objects.get(pk=tray.pk).last_report_at


def test_a_hash_only_report_writes_nothing_and_survives_a_web_restart(broker, trays, node_agent):
    client = token_client(node_agent)
    tray = ComputeTray.objects.select_related("rack", "partition").get(hostname=HOST)
    sha256 = client.post(URL, node_report(tray, 2), format="json").json()["report_sha256"]
    before = seen(tray)
    with CaptureQueriesContext(connection) as queries:
        answer = client.post(URL, {"host": HOST, "report_sha256": sha256}, format="json")
    assert answer.status_code == 200 and answer.json()["unchanged"] is True
    writes = [
        q["sql"] for q in queries.captured_queries if not q["sql"].lstrip().upper().startswith("SELECT")
    ]
    assert writes == []
    assert seen(tray) == before
    # The web process's connections gone, as in a restart: the message is on the broker.
    heartbeats.reset_pools()
    heard = timezone.now()
    assert heartbeats.flush_heartbeats() == 1
    after = seen(tray)
    assert before < after <= heard  # the heartbeat's own time, not the flush's
    assert set(Gpu.objects.filter(tray=tray).values_list("last_report_at", flat=True)) == {after}
    assert heartbeats.flush_heartbeats() == 0


def test_each_tray_gets_its_own_time_and_a_silent_one_goes_silent_on_time(broker, trays):
    start = timezone.now().replace(microsecond=0) + timedelta(seconds=1)  # after the seed's last-seen times
    quiet, talking = trays[0], trays[1]
    heartbeats.record(quiet.pk, start)
    for minute in range(6):  # one every minute, all in one batch
        heartbeats.record(talking.pk, start + timedelta(minutes=minute))
    heartbeats.record(talking.pk, start + timedelta(seconds=30))  # late, out of order: never goes back
    assert heartbeats.flush_heartbeats() == 2
    assert seen(quiet) == start
    assert seen(talking) == start + timedelta(minutes=5)
    policy = SilentPolicy(after=timedelta(seconds=300), hold=True)
    # Silent exactly `after` past its own last heartbeat, not the batch's latest.
    assert silent_tray_pks(policy, start + timedelta(seconds=300)) & {quiet.pk, talking.pk} == set()
    assert silent_tray_pks(policy, start + timedelta(seconds=301)) & {quiet.pk, talking.pk} == {quiet.pk}
    assert silent_tray_pks(policy, start + timedelta(minutes=10)) & {quiet.pk, talking.pk} == {quiet.pk}
    assert silent_tray_pks(policy, start + timedelta(minutes=10, seconds=1)) & {quiet.pk, talking.pk} == {
        quiet.pk,
        talking.pk,
    }


def test_a_failed_flush_gives_every_heartbeat_back(broker, trays, monkeypatch):
    at = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    for offset, tray in enumerate(trays):
        heartbeats.record(tray.pk, at - timedelta(seconds=offset))
    real = heartbeats._write_last_seen

    def database_gone(pending):
        raise heartbeats.transaction.DatabaseError("the database went away mid-flush")

    monkeypatch.setattr(heartbeats, "_write_last_seen", database_gone)
    with pytest.raises(heartbeats.transaction.DatabaseError):
        heartbeats.flush_heartbeats()
    monkeypatch.setattr(heartbeats, "_write_last_seen", real)
    assert [seen(t) for t in trays] == [t.last_report_at for t in trays]  # nothing written
    heartbeats.record(trays[0].pk, at + timedelta(seconds=30))  # heard after the failed flush took its batch
    assert heartbeats.flush_heartbeats() >= len(trays)  # Redis: the batch left, then the one heard since
    assert seen(trays[0]) == at + timedelta(seconds=30)
    assert [seen(t) for t in trays[1:]] == [at - timedelta(seconds=n) for n in range(1, len(trays))]
    assert heartbeats.flush_heartbeats() == 0 and heartbeats.queued() == 0


def test_a_flush_takes_at_most_its_limit_and_leaves_the_rest(broker, trays):
    if broker == "redis":
        pytest.skip("Redis holds one entry per tray (180,000 at most): a flush takes them all")
    at = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    for tray in trays:
        heartbeats.record(tray.pk, at)
    assert heartbeats.flush_heartbeats(limit=2) == 2
    assert heartbeats.flush_heartbeats() == len(trays) - 2
    assert all(seen(t) == at for t in trays)


def test_no_heartbeat_is_lost_while_flushes_run(broker, trays):
    """Heartbeats published from another thread (a web worker) while flushes run over and over: after the
    last flush every tray has the latest time it sent. On Redis: kombu's filesystem transport can read a
    message file while it is being written (kombu issue 1551; the embedded mode may lose such a heartbeat)."""
    if broker != "redis":
        pytest.skip("the filesystem transport reads files as they are written (kombu issue 1551)")
    base = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    latest: dict[int, object] = {}
    done = threading.Event()

    def web():
        try:
            for n in range(120):
                tray = trays[n % len(trays)]
                at = base + timedelta(seconds=n)
                heartbeats.record(tray.pk, at)
                latest[tray.pk] = at
        finally:
            done.set()

    thread = threading.Thread(target=web)
    thread.start()
    flushes = 0
    while not done.is_set():
        heartbeats.flush_heartbeats()
        flushes += 1
    thread.join()
    heartbeats.flush_heartbeats()
    assert flushes >= 1
    assert {t.pk: seen(t) for t in trays} == latest


def test_what_is_not_a_heartbeat_is_dropped_not_retried(broker, trays):
    url = django_settings.CELERY_BROKER_URL
    if broker == "redis":
        client = redis.Redis.from_url(url)
        client.hset(heartbeats.HASH, mapping={"1; DROP TABLE": "1.0", str(trays[0].pk): "soon", "7": "1e30"})
    else:
        with Connection(url, transport_options=django_settings.CELERY_BROKER_TRANSPORT_OPTIONS) as c:
            queue = c.SimpleQueue(heartbeats.QUEUE)
            for body in (
                {"tray": "1; DROP", "at": 1.0},
                {"tray": trays[0].pk},
                [1, 2],
                {"tray": 1, "at": 1e30},
            ):
                queue.put(body, serializer="json")
            queue.close()
    at = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    heartbeats.record(trays[1].pk, at)
    assert heartbeats.flush_heartbeats() == 1
    assert seen(trays[1]) == at
    assert heartbeats.flush_heartbeats() == 0 and heartbeats.queued() == 0


def test_a_broker_that_is_away_means_the_time_is_written_at_once(settings, trays):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    settings.RACKPLANE_HEARTBEAT_BATCH_S = 5
    at = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    try:
        heartbeats.record(trays[0].pk, at)
    finally:
        heartbeats.reset_pools()
    assert seen(trays[0]) == at


def test_without_a_broker_or_with_no_window_the_time_is_written_at_once(settings, trays):
    at = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    settings.CELERY_BROKER_URL = ""
    heartbeats.record(trays[0].pk, at)
    assert seen(trays[0]) == at
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.RACKPLANE_HEARTBEAT_BATCH_S = 0
    heartbeats.record(trays[1].pk, at)
    assert seen(trays[1]) == at


def test_the_beat_flushes_every_window_through_the_task(broker, trays):
    from inventory import tasks

    entry = django_settings.CELERY_BEAT_SCHEDULE["flush-heartbeats"]
    assert entry["task"] == "inventory.tasks.flush_heartbeats"
    assert entry["schedule"] == django_settings.RACKPLANE_HEARTBEAT_BATCH_S
    at = timezone.now().replace(microsecond=0) + timedelta(seconds=1)
    heartbeats.record(trays[2].pk, at)
    assert tasks.flush_heartbeats() == 1
    assert seen(trays[2]) == at
