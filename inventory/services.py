"""Inventory workflows that change several rows at once: reconciling what a node reports.

Discovery is the source of truth for what *is* (GPU UUIDs, where they sit, their fabric state); the
inventory is the source of truth for what is *intended* (which partition a tray belongs to). Reconciling a
node report updates the first and flags any disagreement with the second as drift, on the tray, visibly.

Reports cost what they change. A report whose canonical hash (inventory.discovery.report_hash) is the one
the tray's last reconciled report had, with the inventory intending the same (rack, cluster UUID,
partition), is a heartbeat (`heartbeat`): one indexed read, and the tray's and its GPUs' last-seen time
queued in this process and written for every tray of the batch in two UPDATEs per
`RACKPLANE_HEARTBEAT_BATCH_S` (default 1 s; 0 writes at once). A crash loses at most that window's
last-seen times, nothing else (the next heartbeat a minute later sets them again). A tray with open health
business (not healthy, drained by the rules, its partition degraded, a GPU contested, drift or problems) has
no key: its every report is reconciled in full, so the health rules see it.

Reports speak only for their credential's trays. A report authenticated by a rack's or a host's agent token
(`scope`) may list only GPUs the inventory does not know, GPUs on the token's trays, and GPUs detached from
one of them (Gpu.detached_from): a GPU on, or last on, any other tray would be moved onto the reporting tray,
which is the token reaching outside its rack. Such a report raises OutOfScope before anything is written,
and nothing of it is applied (inventory.api.discovery answers 403 and audits the attempt on the token). A
fleet token (scope None) may move any GPU: a real RMA moves GPUs between racks.

Nodes that stop reporting: a tray whose node has reported before but not for
HealthSettings.node_silent_after_s is "silent" (stale). Computed when read, never written: the rack view,
the tray page, the API and the scheduler compare last-seen with now (`silent_policy`, `is_silent`).
"""

import atexit
import json
import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.audit import record_bulk_change
from inventory import health as health_rules
from inventory.choices import HealthKind, RuleAction, TrayState
from inventory.discovery.faults import HealthReport
from inventory.discovery.nvidia_smi import NodeReport, ReportedGpu, summarize, validate_report
from inventory.discovery.report_hash import report_hash, report_key
from inventory.models import AgentToken, ComputeTray, Gpu, HealthRule, HealthSettings, NVLinkPartition, Rack

log = logging.getLogger(__name__)

# A GPU another tray reported within this window is still that tray's: see _contested.
CLAIM_WINDOW = timedelta(minutes=15)

# The GPU columns whose bulk changes are announced (attname -> field name where they differ); freshness,
# serial, product and memory are not decisions' inputs.
_ANNOUNCED = (
    "tray_id",
    "index",
    "health",
    "fabric_state",
    "fabric_status",
    "reported_cluster_uuid",
    "reported_clique_id",
)
_FIELD_NAME = {"tray_id": "tray"}


class UnknownHost(LookupError):
    """The report is for a host the inventory does not have."""


# How many refused GPUs an OutOfScope message names (all are in `offenders` and in the audit event).
NAMED_OFFENDERS = 10


class OutOfScope(PermissionError):
    """A scoped agent token's report lists GPUs that are on, or were last on, a tray outside its scope.

    `offenders`: [{"gpu", "tray", "rack", "where"}], `where` being "on" (the GPU sits on that tray),
    "detached from" (it is on no tray and left that one) or "unknown" (on no tray, and the tray it left is
    not known: detached before Rackplane remembered it, so only a fleet token or an operator places it).
    """

    def __init__(self, token: AgentToken, host: str, offenders: list[dict]):
        self.token, self.host, self.offenders = token, host, offenders
        super().__init__(self.message)

    @property
    def message(self) -> str:
        named = []
        for offender in self.offenders[:NAMED_OFFENDERS]:
            gpu, tray, rack = offender["gpu"], offender["tray"], offender["rack"]
            if offender["where"] == "on":
                named.append(f"GPU {gpu} belongs to tray {tray} of rack {rack}")
            elif offender["where"] == "detached from":
                named.append(f"GPU {gpu} was detached from tray {tray} of rack {rack}")
            else:
                named.append(f"GPU {gpu} is on no tray and the tray it left is not known")
        more = len(self.offenders) - NAMED_OFFENDERS
        if more > 0:
            named.append(f"and {more} more")
        return (
            f"{'; '.join(named)}; this token speaks for {self.token.scope}. Nothing of the report for "
            f"{self.host} was applied. A GPU that really moved is placed by an operator (a fleet token's "
            "report, or the inventory's admin): see docs/security.md."
        )

    def as_detail(self) -> dict:
        """What the audit event records (core.audit.record_refused)."""
        return {
            "token": self.token.prefix,
            "scope": self.token.scope,
            "host": self.host,
            "refused_gpus": self.offenders,
        }


def _require_in_scope(scope: AgentToken | None, tray: ComputeTray | None, host: str, known) -> None:
    """OutOfScope when `scope` (an agent token; None: a fleet token) may not speak for one of `known`, the
    inventory's rows of the GPUs a report for `host` (its tray `tray`, None if unknown) lists.

    A row is in scope when it sits on, or was detached from, the reporting tray or (rack tokens) a tray of
    the token's rack. No query unless a GPU is elsewhere (one, for the trays it names)."""
    if scope is None:
        return
    here = tray.pk if tray is not None else None
    where = {gpu.uuid: gpu.tray_id if gpu.tray_id is not None else gpu.detached_from_id for gpu in known}
    elsewhere = {uuid: pk for uuid, pk in where.items() if pk is None or pk != here}
    if not elsewhere:
        return
    trays = {
        pk: (hostname, rack_id, rack)
        for pk, hostname, rack_id, rack in ComputeTray.objects.filter(
            pk__in={pk for pk in elsewhere.values() if pk is not None}
        ).values_list("pk", "hostname", "rack_id", "rack__name")
    }
    offenders = []
    on_tray = {gpu.uuid for gpu in known if gpu.tray_id is not None}
    for uuid_, pk in sorted(elsewhere.items()):
        if pk is None:
            offenders.append({"gpu": uuid_, "tray": None, "rack": None, "where": "unknown"})
            continue
        hostname, rack_id, rack = trays[pk]
        if scope.rack_id is not None and rack_id == scope.rack_id:
            continue  # a rack token speaks for every tray of its rack
        where_ = "on" if uuid_ in on_tray else "detached from"
        offenders.append({"gpu": uuid_, "tray": hostname, "rack": rack, "where": where_})
    if offenders:
        raise OutOfScope(scope, host, offenders)


@dataclass
class IngestResult:
    report: NodeReport
    applied: bool
    drift: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    learned_cluster_uuid: str | None = None
    health: health_rules.HealthOutcome | None = None
    contested: int = 0  # GPUs another tray still holds (not moved)
    report_sha256: str = ""

    def changes(self) -> dict:
        return {
            "applied": self.applied,
            "drift": self.drift,
            "created_gpus": self.created,
            "moved_gpus": self.moved,
            "removed_gpus": self.removed,
            "learned_cluster_uuid": self.learned_cluster_uuid,
            "health": self.health.as_dict() if self.health is not None else None,
            "unchanged": False,
            "report_sha256": self.report_sha256,
        }


def _expected_cluster(tray: ComputeTray | None) -> str | None:
    return str(tray.rack.cluster_uuid) if tray is not None and tray.rack.cluster_uuid else None


def check_report(
    host: str, fmt: str, gpus: list[ReportedGpu], *, scope: AgentToken | None = None
) -> IngestResult:
    """Judge a report without writing anything; works for hosts the inventory does not know yet.

    ReportError (from validate_report) for a report that ingest_report would refuse; OutOfScope for one
    `scope` may not send (a dry run is refused as the report itself would be, and learns no other rack's
    hosts from the contested-GPU problems).
    """
    gpus = validate_report(gpus)
    tray = ComputeTray.objects.select_related("rack", "partition").filter(hostname=host).first()
    known = list(Gpu.objects.filter(uuid__in=[g.uuid for g in gpus]))
    _require_in_scope(scope, tray, host, known)
    report = summarize(host, fmt, gpus, expected_cluster_uuid=_expected_cluster(tray))
    if tray is not None:
        claims = _contested(tray, gpus, known, timezone.now())
        report.problems.extend(claims.values())
    drift = _drift(tray, report) if tray is not None else []
    return IngestResult(report=report, applied=False, drift=drift)


HEALTH_ONLY = "health"  # the format of a report that carries no GPU listing (nvidia-smi failed on the node)


def ingest_health(host: str, health: HealthReport, *, dry_run: bool = False) -> IngestResult:
    """A report with XIDs or check results but no GPU listing: when a GPU falls off the bus, `nvidia-smi`
    itself fails on the node, and the agent still sends what the kernel logged. Nothing about the GPUs is
    reconciled (none is detached for not being listed); the health events are recorded and judged as in
    ingest_report. Without a listing the tray is never counted healthy (it cannot earn its return)."""
    report = NodeReport(host=host, format=HEALTH_ONLY, gpus=[], tray_clique=None)
    if dry_run:
        if not ComputeTray.objects.filter(hostname=host).exists():
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        return IngestResult(report=report, applied=False)
    now = timezone.now()
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().filter(hostname=host).first()
        if tray is None:
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        tray.rack = Rack.objects.select_for_update().get(pk=tray.rack_id)  # the lock order of ingest_report
        result = IngestResult(report=report, applied=True)
        result.health = health_rules.record_report_health(tray, [], health, now, gpus_listed=False)
        tray.save(update_fields=["healthy_since", "agent_version", "agent_interval_s"])
    return result


def ingest_report(
    host: str,
    fmt: str,
    gpus: list[ReportedGpu],
    health: HealthReport | None = None,
    *,
    scope: AgentToken | None = None,
) -> IngestResult:
    """Reconcile one node's report with the inventory, atomically.

    Creates GPUs the inventory has never seen, follows GPUs that moved (to another tray or index),
    detaches GPUs the node no longer reports (kept, not deleted), learns the rack's cluster UUID from its
    first consistent report, and records problems and drift on the tray. Fabric values a GPU reports only
    when healthy (cluster UUID, clique ID) keep their last good value when a report lacks them. GPUs changed
    in bulk (detached, moved, new health, fabric state or clique) are announced with `bulk_changed`.

    A report validate_report refuses raises ReportError before anything is read or written. A GPU another
    tray still reports is not moved: see _contested.

    `health` (XIDs, active checks, the agent; inventory.discovery.faults.validate_health made it) and the
    GPUs' recovery actions and fabric health flags are recorded as health events and judged by the health
    rules in the same transaction (inventory.health.record_report_health): a drain decided here commits
    with the report, or neither does.

    `scope`: the agent token the report came with (None: a fleet token, a command). A report listing a GPU
    outside it raises OutOfScope, judged on the locked rows before the first write (see the module
    docstring): nothing of the report is applied, its health included.
    """
    gpus = validate_report(gpus)
    now = timezone.now()
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().filter(hostname=host).first()
        if tray is None:
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        rack = Rack.objects.select_for_update().get(pk=tray.rack_id)
        tray.rack = rack
        report = summarize(host, fmt, gpus, expected_cluster_uuid=_expected_cluster(tray))
        result = IngestResult(report=report, applied=True)

        _reconcile_gpus(tray, gpus, now, result, scope)

        if rack.cluster_uuid is None and report.tray_clique and not report.problems:
            learned = report.tray_clique.split(".")[0]
            owner = Rack.objects.filter(cluster_uuid=learned).exclude(pk=rack.pk).first()
            if owner is None:
                rack.cluster_uuid = uuid.UUID(learned)
                rack.save(update_fields=["cluster_uuid", "updated_at"])
                result.learned_cluster_uuid = learned
            else:
                report.problems.append(
                    f"cluster UUID {learned} is already the cluster UUID of rack {owner.name}; "
                    f"{rack.name} did not learn it"
                )

        result.drift = _drift(tray, report)
        tray.fabric_problems = report.problems + result.drift
        if report.tray_clique:
            tray.reported_clique = report.tray_clique
        tray.last_report = report.as_dict()
        tray.last_report_at = now
        result.health = health_rules.record_report_health(tray, gpus, health, now)
        result.report_sha256 = report_sha256(fmt, gpus, health)
        tray.report_key = report_key(result.report_sha256, _basis(tray)) if _settled(tray, result) else ""
        tray.save(
            update_fields=[
                "fabric_problems",
                "reported_clique",
                "last_report",
                "last_report_at",
                "healthy_since",
                "agent_version",
                "agent_interval_s",
                "report_key",
            ]
        )
    return result


def report_sha256(fmt: str, gpus: list[ReportedGpu], health: HealthReport | None) -> str:
    """The hash ingest_report gives this report (inventory.discovery.report_hash: the GPUs, the format and
    the agent's version and interval as sent)."""
    agent = health.agent if health is not None else None
    return report_hash(fmt, gpus, agent.version if agent else "", agent.interval_s if agent else None)


def _basis(tray: ComputeTray) -> str:
    """What the inventory intends for the tray, as far as reconciling a report depends on it."""
    rack, partition = tray.rack, tray.partition
    return _basis_of(
        rack.pk,
        rack.name,
        rack.cluster_uuid,
        *((partition.pk, partition.name, partition.clique_id) if partition is not None else (None, "", None)),
    )


def _basis_of(rack_id, rack_name, cluster_uuid, partition_id, partition_name, clique_id) -> str:
    cluster = str(uuid.UUID(str(cluster_uuid))) if cluster_uuid else "-"
    where = f"{partition_id}:{partition_name}:{clique_id}" if partition_id is not None else "-"
    return f"{rack_id}:{rack_name}:{cluster}|{where}"


def _no_health_business(tray: ComputeTray) -> bool:
    """Nothing the health rules must look at again on this tray's next report: it counts healthy, the rules
    did not take it out (return to service needs reports), its partition is not degraded (recovery needs
    reports)."""
    partition = tray.partition
    return _quiet(
        tray.healthy_since, tray.state, tray.state_reason, partition.degraded_reason if partition else ""
    )


def _quiet(healthy_since, state: str, state_reason: str, degraded_reason: str) -> bool:
    owned = state != TrayState.UP and state_reason.startswith(health_rules.REASON_PREFIX)  # owned_by_rules
    return healthy_since is not None and not owned and not degraded_reason


def _settled(tray: ComputeTray, result: IngestResult) -> bool:
    """Whether the same report again may be a heartbeat (see the module docstring)."""
    outcome = result.health
    return (
        _no_health_business(tray)
        and outcome is not None
        and outcome.healthy
        and not outcome.actions
        and not result.contested
        and not result.report.problems
        and not result.drift
    )


# --- unchanged reports: heartbeats ----------------------------------------------------------------------


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
    basis = _basis_of(rack_id, rack_name, cluster, partition_id, partition_name, clique_id)
    if not key or key != report_key(sha256, basis):
        return None
    if not _quiet(healthy_since, state, reason, degraded or ""):
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


# --- nodes that stop reporting ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SilentPolicy:
    """When a tray counts as silent and what the scheduler does then (the node_silent health rule)."""

    after: timedelta
    hold: bool  # an enabled node_silent rule says "hold": no new work on silent trays

    def cutoff(self, now: datetime) -> datetime:
        return now - self.after

    def is_silent(self, last_report_at: datetime | None, now: datetime) -> bool:
        return is_silent(last_report_at, now, self.after)


def silent_policy() -> SilentPolicy:
    """HealthSettings.node_silent_after_s (its default while the row does not exist) and whether an
    enabled node_silent rule holds: one query."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT node_silent_after_s FROM {HealthSettings._meta.db_table} WHERE id = 1), "
            f"EXISTS (SELECT 1 FROM {HealthRule._meta.db_table} "
            "WHERE kind = %s AND action = %s AND enabled = %s)",
            [HealthKind.NODE_SILENT.value, RuleAction.HOLD.value, True],
        )
        after, hold = cursor.fetchone()
    if after is None:
        after = HealthSettings._meta.get_field("node_silent_after_s").default
    return SilentPolicy(after=timedelta(seconds=after), hold=bool(hold))


def is_silent(last_report_at: datetime | None, now: datetime, after: timedelta) -> bool:
    """A tray whose node reported before but not within `after` (a tray that never reported has no agent
    yet: not silent)."""
    return last_report_at is not None and last_report_at < now - after


def silent_q(cutoff: datetime) -> Q:
    """ComputeTray rows that are silent at `cutoff` (= now - after)."""
    return Q(last_report_at__lt=cutoff)


def silent_tray_pks(policy: SilentPolicy, now: datetime, pks=None) -> set[int]:
    """The pks of the silent trays (one query); `pks` limits it."""
    trays = ComputeTray.objects.filter(silent_q(policy.cutoff(now)))
    if pks is not None:
        trays = trays.filter(pk__in=pks)
    return set(trays.values_list("pk", flat=True))


def _contested(tray: ComputeTray, gpus: list[ReportedGpu], known, now) -> dict[str, str]:
    """GPUs of this report that another tray still holds, as {uuid: problem naming both hosts}.

    Rule: a GPU that another tray reported within CLAIM_WINDOW stays on that tray; this report leaves it
    alone and gets a problem instead (recorded on the tray with the others). A GPU physically moved is
    followed once its old tray stops reporting it: that tray's next report detaches it, or the window runs
    out. The report is still answered 200 and the rest of it applied, not refused with a 409: the agent
    cannot fix a duplicate claim by retrying, two hosts claiming one UUID is a fact about the fleet an
    operator must see on the tray, and refusing would also drop this node's health and clique updates.
    """
    reported = {gpu.uuid: gpu for gpu in gpus}
    since = now - CLAIM_WINDOW
    holders = [
        gpu
        for gpu in known
        if gpu.uuid in reported
        and gpu.tray_id not in (None, tray.pk)
        and gpu.last_report_at is not None
        and gpu.last_report_at >= since
    ]
    hosts = dict(
        ComputeTray.objects.filter(pk__in={gpu.tray_id for gpu in holders}).values_list("pk", "hostname")
    )
    return {
        gpu.uuid: (
            f"GPU {reported[gpu.uuid].index} ({gpu.uuid}) is also reported by {hosts[gpu.tray_id]}, which "
            f"reported it at {gpu.last_report_at:%Y-%m-%d %H:%M:%S %Z}; it stays on {hosts[gpu.tray_id]} and "
            f"is not moved to {tray.hostname} until {hosts[gpu.tray_id]} stops reporting it"
        )
        for gpu in holders
    }


def _reconcile_gpus(
    tray: ComputeTray, gpus: list[ReportedGpu], now, result: IngestResult, scope: AgentToken | None = None
) -> None:
    locked = list(
        Gpu.objects.select_for_update()
        .filter(Q(uuid__in=[gpu.uuid for gpu in gpus]) | Q(tray=tray))
        .order_by("pk")
    )
    listed = {gpu.uuid for gpu in gpus}
    _require_in_scope(scope, tray, tray.hostname, [gpu for gpu in locked if gpu.uuid in listed])
    claims = _contested(tray, gpus, locked, now)
    result.report.problems.extend(claims.values())
    result.contested = len(claims)
    gpus = [gpu for gpu in gpus if gpu.uuid not in claims]
    reported = {gpu.uuid: gpu for gpu in gpus}
    known = {gpu.uuid: gpu for gpu in locked if gpu.uuid not in claims}

    # What each known GPU held before this report, for `bulk_changed` (the rows are loaded already).
    before = {gpu.pk: {name: getattr(gpu, name) for name in _ANNOUNCED} for gpu in known.values()}
    after = {pk: dict(values) for pk, values in before.items()}

    # GPUs that left this tray, and GPUs about to take a new place, first give up their (tray, index) so the
    # unique constraint never sees two GPUs on one position mid-update; each remembers the tray it left
    # (detached_from, cleared again for those placed below) for the scope check of later reports.
    vacate = []
    for gpu in known.values():
        wanted = reported.get(gpu.uuid)
        if wanted is None:
            result.removed.append(gpu.uuid)
            vacate.append(gpu)
        elif (gpu.tray_id, gpu.index) != (tray.pk, wanted.index):
            if gpu.tray_id not in (None, tray.pk):
                result.moved.append(gpu.uuid)
            vacate.append(gpu)
    vacated = {gpu.pk for gpu in vacate}
    if vacated:
        Gpu.objects.filter(pk__in=vacated).update(
            detached_from=Coalesce(F("tray"), F("detached_from")), tray=None, index=None
        )
        for pk in vacated:
            after[pk].update(tray_id=None, index=None)

    # One statement per kind of change whatever the GPUs: when every GPU changed alike (nothing but
    # freshness, or the whole tray's clique) one plain UPDATE; otherwise one UPDATE of the freshness of all
    # and one bulk_update (CASE per row) of the GPUs that changed, with the fields any of them changed.
    changes: dict[tuple, list[int]] = {}
    created = []
    for wanted in gpus:
        values = {
            "tray_id": tray.pk,
            "index": wanted.index,
            "health": wanted.health.value,
            "fabric_state": wanted.state.value,
            "fabric_status": wanted.status or "",
            "detached_from_id": None,
        }
        if wanted.cluster_uuid is not None and wanted.clique_id is not None:
            values["reported_cluster_uuid"] = uuid.UUID(wanted.cluster_uuid)
            values["reported_clique_id"] = wanted.clique_id
        for name in ("serial", "product", "memory_mib"):
            if getattr(wanted, name):
                values[name] = getattr(wanted, name)
        gpu = known.get(wanted.uuid)
        if gpu is None:
            created.append(Gpu(uuid=wanted.uuid, last_report_at=now, **values))
            result.created.append(wanted.uuid)
            continue
        if gpu.pk in vacated:  # as the database has it now
            gpu.detached_from_id = gpu.tray_id if gpu.tray_id is not None else gpu.detached_from_id
            gpu.tray_id = gpu.index = None
        changed = tuple(
            sorted((name, value) for name, value in values.items() if getattr(gpu, name) != value)
        )
        changes.setdefault(changed, []).append(gpu.pk)
        after[gpu.pk].update((name, value) for name, value in changed if name in _ANNOUNCED)
    if len(changes) == 1:
        ((changed, pks),) = changes.items()
        Gpu.objects.filter(pk__in=pks).update(last_report_at=now, **dict(changed))
    elif changes:
        Gpu.objects.filter(pk__in=[pk for pks in changes.values() for pk in pks]).update(last_report_at=now)
        rows, fields = [], set()
        by_pk = {gpu.pk: gpu for gpu in known.values()}
        for changed, pks in changes.items():
            if not changed:
                continue
            fields.update(name for name, _ in changed)
            for pk in pks:
                gpu = by_pk[pk]
                for name, value in changed:
                    setattr(gpu, name, value)
                rows.append(gpu)
        # Each row writes every field any changed: its others as loaded (locked above; vacated rows were
        # set to no tray above, as the database has them).
        Gpu.objects.bulk_update(rows, sorted(fields))
    if created:
        Gpu.objects.bulk_create(created)
    announced = {}
    for pk, old in before.items():
        diff = {_FIELD_NAME.get(k, k): (v, after[pk][k]) for k, v in old.items() if v != after[pk][k]}
        if diff:
            announced[pk] = diff
    record_bulk_change(Gpu, announced)


def _drift(tray: ComputeTray, report: NodeReport) -> list[str]:
    """Where the node's reported clique is not the partition the inventory intends for the tray."""
    partition = tray.partition
    if partition is None:
        return []
    intended = f"{tray.rack.name} {partition.name} (clique {partition.clique_id})"
    if report.tray_clique:
        clique_id = int(report.tray_clique.rsplit(".", 1)[1])
        if clique_id != partition.clique_id:
            return [f"drift: the node reports clique {clique_id}, the inventory intends {intended}"]
        return []
    return [
        f"drift: GPU {gpu.index} ({gpu.uuid}) reports clique {gpu.clique_id}, "
        f"the inventory intends {intended}"
        for gpu in report.gpus
        if gpu.clique_id is not None and gpu.clique_id != partition.clique_id
    ]


def mark_silent(trays, policy: SilentPolicy | None = None, now: datetime | None = None) -> int:
    """Set `silent` (bool), `silent_for` (how long since the node last reported, when silent) and
    `silent_holds` (the scheduler places no new work there) on each tray, as the rack view, the tray page
    and the scheduler judge it; returns how many are silent. One query (the policy) unless given."""
    policy = policy or silent_policy()
    now = now or timezone.now()
    count = 0
    for tray in trays:
        tray.silent = policy.is_silent(tray.last_report_at, now)
        tray.silent_for = now - tray.last_report_at if tray.silent else None
        tray.silent_holds = tray.silent and policy.hold
        count += tray.silent
    return count
