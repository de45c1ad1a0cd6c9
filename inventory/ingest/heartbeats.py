"""Unchanged reports: heartbeats.

Reports cost what they change. A report whose canonical hash (inventory.discovery.report_hash) is the one
the tray's last reconciled report had, with the inventory intending the same (rack, cluster UUID,
partition), is a heartbeat (`heartbeat`): one indexed read, and the tray's and its GPUs' last-seen time
queued in this process and written for every tray of the batch in two UPDATEs per
`RACKPLANE_HEARTBEAT_BATCH_S` (default 1 s; 0 writes at once). A crash loses at most that window's
last-seen times, nothing else (the next heartbeat a minute later sets them again). A tray with open health
business (not healthy, drained by the rules, its partition degraded, a GPU contested, drift or problems) has
no key: its every report is reconciled in full, so the health rules see it (inventory.ingest.reports).
"""

import atexit
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from inventory.choices import TrayState
from inventory.discovery.report_hash import report_key
from inventory.health.actions import REASON_PREFIX
from inventory.ingest.results import UnknownHost
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

log = logging.getLogger(__name__)


def report_basis(tray: ComputeTray) -> str:
    """What the inventory intends for the tray, as far as reconciling a report depends on it."""
    rack, partition = tray.rack, tray.partition
    return basis_of(
        rack.pk,
        rack.name,
        rack.cluster_uuid,
        *((partition.pk, partition.name, partition.clique_id) if partition is not None else (None, "", None)),
    )


def basis_of(rack_id, rack_name, cluster_uuid, partition_id, partition_name, clique_id) -> str:
    cluster = str(uuid.UUID(str(cluster_uuid))) if cluster_uuid else "-"
    where = f"{partition_id}:{partition_name}:{clique_id}" if partition_id is not None else "-"
    return f"{rack_id}:{rack_name}:{cluster}|{where}"


def quiet(healthy_since, state: str, state_reason: str, degraded_reason: str) -> bool:
    owned = state != TrayState.UP and state_reason.startswith(REASON_PREFIX)  # owned_by_rules
    return healthy_since is not None and not owned and not degraded_reason


@dataclass
class Heartbeat:
    """What an unchanged report did: the tray's last-seen time queued, nothing else."""

    host: str
    report_sha256: str
    problems: list[str]
    cluster_uuid: str | None = None  # the rack's, as ingest_report expects it

    def as_dict(self) -> dict:
        return {"host": self.host, "unchanged": True, "report_sha256": self.report_sha256}


_HEARTBEAT_SQL = """
SELECT t.id, t.hostname, t.state, t.state_reason, t.healthy_since, t.report_key, t.fabric_problems,
       r.id, r.name, r.cluster_uuid, p.id, p.name, p.clique_id, p.degraded_reason
FROM {tray} t JOIN {rack} r ON r.id = t.rack_id LEFT JOIN {partition} p ON p.id = t.partition_id
WHERE t.hostname = %s
"""


def heartbeat(host: str, sha256: str, now: datetime | None = None) -> Heartbeat | None:
    """The tray's last reconciled report had this hash and nothing else needs a full report: queue its
    last-seen time (see `flush_heartbeats`) and return what to answer. None: reconcile the full report.

    One read (plain SQL: this is the path 18,000 nodes take every minute), no write in the caller's
    transaction. UnknownHost for a host the inventory does not have."""
    sql = _HEARTBEAT_SQL.format(
        tray=ComputeTray._meta.db_table, rack=Rack._meta.db_table, partition=NVLinkPartition._meta.db_table
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [host])
        row = cursor.fetchone()
    if row is None:
        raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
    pk, hostname, state, reason, healthy_since, key, problems, rack_id, rack_name, cluster = row[:10]
    partition_id, partition_name, clique_id, degraded = row[10:]
    basis = basis_of(rack_id, rack_name, cluster, partition_id, partition_name, clique_id)
    if not key or key != report_key(sha256, basis):
        return None
    if not quiet(healthy_since, state, reason, degraded or ""):
        return None
    _heartbeats.add(pk, now or timezone.now())
    if isinstance(problems, str):  # SQLite hands JSON back as text
        problems = json.loads(problems)
    return Heartbeat(
        host=hostname,
        report_sha256=sha256,
        problems=list(problems or []),
        cluster_uuid=str(uuid.UUID(str(cluster))) if cluster else None,
    )


class _Heartbeats:
    """Last-seen times queued in this process and written in one batch per window by a background thread
    (its own database connection), or at once when the window is 0."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[int, datetime] = {}
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.pid = None

    @staticmethod
    def window() -> float:
        return float(getattr(settings, "RACKPLANE_HEARTBEAT_BATCH_S", 1.0))

    def add(self, tray_pk: int, at: datetime) -> None:
        window = self.window()
        # A caller inside a transaction (a test, a command, ATOMIC_REQUESTS) gets the write in it, now.
        if window <= 0 or connection.in_atomic_block:
            _write_last_seen({tray_pk: at})
            return
        with self.lock:
            self.pending[tray_pk] = max(at, self.pending.get(tray_pk, at))
            self._ensure_thread()

    def take(self) -> dict[int, datetime]:
        with self.lock:
            pending, self.pending = self.pending, {}
        return pending

    def _ensure_thread(self) -> None:
        import os

        if self.thread is not None and self.thread.is_alive() and self.pid == os.getpid():
            return
        self.pid = os.getpid()  # a forked worker starts its own
        self.thread = threading.Thread(target=self._run, name="rackplane-heartbeats", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                self.wake.wait(self.window())
                self.wake.clear()
                try:
                    flush_heartbeats()
                except Exception:  # the database is away: the times come back with the next heartbeats
                    log.exception("could not write the queued node heartbeats")
                    connection.close()
        finally:
            connection.close()


_heartbeats = _Heartbeats()


def _write_last_seen(pending: dict[int, datetime]) -> int:
    """Two UPDATEs for the whole batch: the trays' and their GPUs' last-seen time (GPUs too: a GPU another
    tray claims stays with the tray that reports it within CLAIM_WINDOW, heartbeats included). Each tray gets
    the batch's latest time (at most one window late); a time never goes back."""
    if not pending:
        return 0
    at = max(pending.values())
    pks = sorted(pending)
    with transaction.atomic():
        trays = (
            ComputeTray.objects.filter(pk__in=pks)
            .filter(Q(last_report_at__lt=at) | Q(last_report_at__isnull=True))
            .update(last_report_at=at)
        )
        Gpu.objects.filter(tray_id__in=pks).filter(
            Q(last_report_at__lt=at) | Q(last_report_at__isnull=True)
        ).update(last_report_at=at)
    return trays


def flush_heartbeats() -> int:
    """Write the queued last-seen times now (the batch thread does this every window; call it at shutdown
    or in tests). Returns how many trays were updated."""
    return _write_last_seen(_heartbeats.take())


atexit.register(lambda: _heartbeats.pending and flush_heartbeats())
