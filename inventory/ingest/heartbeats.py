"""Unchanged reports: heartbeats.

Reports cost what they change. A report whose canonical hash (inventory.discovery.report_hash) is the one
the tray's last reconciled report had, with the inventory intending the same (rack, cluster UUID,
partition), is a heartbeat (`heartbeat`): one indexed read and no database write in the request. The tray's
last-seen time is held by the task broker, not the web process (a restarted web process loses nothing): on
Redis (production) in one hash, tray -> latest time heard (one round trip per heartbeat); on any other broker
(kombu's filesystem transport under `make run`) as one message on the `rackplane.heartbeats` queue. The
beat's `flush-heartbeats` entry (every `RACKPLANE_HEARTBEAT_BATCH_S`, default 5 s) takes the batch in a
worker and writes every tray's and its GPUs' last-seen time in two UPDATEs per 5,000 trays, each tray its own
latest time; what a flush that fails took is written by the next one. A tray whose node stops reporting goes
silent exactly `node_silent_after_s` after its last heartbeat (inventory.staleness); the write lags the
heartbeat by at most one interval plus the time the task waits for a worker.

Without a broker (eager Celery: tests, commands), inside a transaction, with `RACKPLANE_HEARTBEAT_BATCH_S`
0, or when the broker cannot be reached, the time is written at once. A tray with open health business (not
healthy, drained by the rules, its partition degraded, a GPU contested, drift or problems) has no key: its
every report is reconciled in full, so the health rules see it (inventory.ingest.reports).
"""

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from amqp.exceptions import ChannelError
from celery import current_app
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from kombu import Connection, Queue, pools
from kombu.exceptions import OperationalError
from kombu.message import Message

from inventory.choices import TrayState
from inventory.discovery.report_hash import report_key
from inventory.health.actions import REASON_PREFIX
from inventory.ingest.results import UnknownHost
from inventory.models import AgentToken, ComputeTray, Gpu, NVLinkPartition, Rack

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


_TRAY_COLUMNS = """
t.id, t.hostname, t.state, t.state_reason, t.healthy_since, t.report_key, t.fabric_problems,
r.id, r.name, r.cluster_uuid, p.id, p.name, p.clique_id, p.degraded_reason"""
_HEARTBEAT_SQL = """
SELECT {columns}
FROM {tray} t JOIN {rack} r ON r.id = t.rack_id LEFT JOIN {partition} p ON p.id = t.partition_id
WHERE t.hostname = %s
"""
# A hash-only report's agent token and its tray in one read (inventory.api.hash_only): the token's row, and
# the tray's columns (all NULL when the inventory has no such host). The rack is joined LEFT only so that a
# host the inventory lacks still gives the token's row (a tray always has its rack).
_TOKEN_HEARTBEAT_SQL = """
SELECT a.id, a.rack_id, a.hostname, a.revoked_at, a.last_used_at, {columns}
FROM {token} a LEFT JOIN {tray} t ON t.hostname = %s LEFT JOIN {rack} r ON r.id = t.rack_id
LEFT JOIN {partition} p ON p.id = t.partition_id
WHERE a.secret_hash = %s
"""
_TABLES = {
    "columns": _TRAY_COLUMNS,
    "token": AgentToken._meta.db_table,
    "tray": ComputeTray._meta.db_table,
    "rack": Rack._meta.db_table,
    "partition": NVLinkPartition._meta.db_table,
}


def heartbeat(host: str, sha256: str, now: datetime | None = None) -> Heartbeat | None:
    """The tray's last reconciled report had this hash and nothing else needs a full report: queue its
    last-seen time (see `flush_heartbeats`) and return what to answer. None: reconcile the full report.

    One read (plain SQL: this is the path 18,000 nodes take every minute), no write in the caller's
    transaction. UnknownHost for a host the inventory does not have."""
    with connection.cursor() as cursor:
        cursor.execute(_HEARTBEAT_SQL.format(**_TABLES), [host])
        row = cursor.fetchone()
    if row is None:
        raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
    return _beat(row, sha256, now)


def _beat(row, sha256: str, now: datetime | None) -> Heartbeat | None:
    """`heartbeat`'s judgement of one tray row (_TRAY_COLUMNS): queue the last-seen time, or None."""
    pk, hostname, state, reason, healthy_since, key, problems, rack_id, rack_name, cluster = row[:10]
    partition_id, partition_name, clique_id, degraded = row[10:]
    basis = basis_of(rack_id, rack_name, cluster, partition_id, partition_name, clique_id)
    if not key or key != report_key(sha256, basis):
        return None
    if not quiet(healthy_since, state, reason, degraded or ""):
        return None
    record(pk, now or timezone.now())
    if isinstance(problems, str):  # SQLite hands JSON back as text
        problems = json.loads(problems)
    return Heartbeat(
        host=hostname,
        report_sha256=sha256,
        problems=list(problems or []),
        cluster_uuid=str(uuid.UUID(str(cluster))) if cluster else None,
    )


@dataclass
class TokenHeartbeat:
    """A hash-only report whose agent token may speak for its host: the token (for its last-used time) and
    the heartbeat (None: the tray needs the full report, a 409)."""

    token: AgentToken
    beat: Heartbeat | None


def heartbeat_for_token(
    secret_hash: str, host: str, sha256: str, now: datetime | None = None
) -> TokenHeartbeat | None:
    """`heartbeat` for a report authenticated by the agent token whose secret has this hash, the token and
    its scope read with the tray in the same query (one read in all). None when the token and the host are
    not plainly fine: no such token, a revoked one, a host outside its scope, a host the inventory lacks.
    The caller then answers through the whole request path, which refuses each of them in its words (401,
    403, 400); nothing was recorded. Revocation takes effect on the very next report (nothing is cached)."""
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_HEARTBEAT_SQL.format(**_TABLES), [host, secret_hash])
        row = cursor.fetchone()
    if row is None:
        return None
    token_id, token_rack_id, token_hostname, revoked_at, last_used_at = row[:5]
    tray = row[5:]
    if revoked_at is not None or tray[0] is None:
        return None
    in_scope = tray[7] == token_rack_id if token_rack_id is not None else tray[1] == token_hostname
    if not in_scope:
        return None
    if last_used_at is not None and timezone.is_naive(last_used_at):  # SQLite: UTC, without its zone
        last_used_at = timezone.make_aware(last_used_at, UTC)
    token = AgentToken(id=token_id, rack_id=token_rack_id, hostname=token_hostname, last_used_at=last_used_at)
    return TokenHeartbeat(token=token, beat=_beat(tray, sha256, now))


# --- the batch, held by the broker and written by the beat's task ---------------------------------------

# Redis: one hash, tray pk -> the latest time heard (epoch seconds); a flush renames it to TAKEN (atomic:
# heartbeats from then on start a new hash), writes TAKEN and deletes it. A flush that fails leaves TAKEN for
# the next one, which writes it first. One flush at a time (a Redis lock that expires if its worker dies).
HASH = "rackplane:heartbeats"
TAKEN = "rackplane:heartbeats:taken"
LOCK = "rackplane:heartbeats:flush"
FLUSH_LOCK_S = 900
# Keeps the later time when a tray's heartbeats arrive out of order (one round trip).
_RECORD_LUA = """
local seen = redis.call('HGET', KEYS[1], ARGV[1])
if not seen or tonumber(seen) < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
"""
# Any other broker (kombu's filesystem transport under `make run`): one message per heartbeat on this queue,
# on the default exchange (routed by its name: no binding to keep), acknowledged once written.
QUEUE = Queue("rackplane.heartbeats", routing_key="rackplane.heartbeats")
# Messages one flush takes at most (3,000 heartbeats a second for a minute is 180,000); the rest wait for the
# next flush.
FLUSH_LIMIT = 200_000
# Rows per UPDATE (two parameters each: well under SQLite's 32,766).
CHUNK = 5_000
# As core.enqueue: one retry at once, then the time is written directly.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
REDIS_TIMEOUTS = {"socket_connect_timeout": 2, "socket_timeout": 3}  # as portal.celery's for the broker

_brokers: dict[tuple, Connection] = {}
_redis: dict[str, tuple[redis.Redis, object]] = {}


def window() -> float:
    return float(getattr(settings, "RACKPLANE_HEARTBEAT_BATCH_S", 5.0))


def _url() -> str:
    return getattr(settings, "CELERY_BROKER_URL", "")


def _on_redis(url: str) -> tuple[redis.Redis, object] | None:
    """The broker's Redis (a client with its own thread- and fork-safe pool, and the record script), or
    None when the broker is not Redis."""
    if not url.startswith(("redis://", "rediss://")):
        return None
    found = _redis.get(url)
    if found is None:
        client = redis.Redis.from_url(url, **REDIS_TIMEOUTS)
        found = _redis[url] = (client, client.register_script(_RECORD_LUA))
    return found


class _Producers(pools.Producers):
    def create(self, connection, limit):
        return pools.ProducerPool(_connections[connection], limit=limit)


# The heartbeats' own pools, not kombu.pools' global groups: Celery's app keeps its producer pool from those,
# so closing them (kombu.pools.reset) would leave Celery's task sends failing ("Acquire on closed pool") for
# the rest of the process. Per process; closed after a fork, as kombu's own are.
_connections = pools.Connections(limit=16)
_producers = _Producers(limit=16)


def reset_pools() -> None:
    """Close the heartbeats' broker connections (a process's, as a restart does); Celery's are left alone."""
    for group in (_producers, _connections):
        for pool in list(group.values()):
            pool.force_close_all()
        group.clear()


def _broker() -> Connection:
    """The task broker's connection settings for kombu (its pools are per process)."""
    url = _url()
    options = {
        **(current_app.conf.broker_transport_options or {}),  # portal.celery's socket timeouts
        **(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}),
    }
    key = (url, repr(sorted(options.items())))
    found = _brokers.get(key)
    if found is None:
        found = _brokers[key] = Connection(url, transport_options=options)
    return found


def record(tray_pk: int, at: datetime) -> None:
    """Queue the tray's last-seen time on the broker (see the module's text), or write it at once."""
    url = _url()
    # A caller inside a transaction (a test, a command, ATOMIC_REQUESTS) gets the write in it, now.
    if not url or window() <= 0 or connection.in_atomic_block:
        _write_last_seen({tray_pk: at})
        return
    try:
        on_redis = _on_redis(url)
        if on_redis is not None:
            on_redis[1](keys=[HASH], args=[tray_pk, repr(at.timestamp())])
            return
        with _producers[_broker()].acquire(block=True, timeout=5) as producer:
            producer.publish(
                {"tray": tray_pk, "at": at.timestamp()},
                exchange="",
                routing_key=QUEUE.name,
                declare=[QUEUE],
                serializer="json",
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
            )
    except (OperationalError, OSError, redis.RedisError) as error:  # the broker is away: not lost
        log.warning(
            "heartbeat of tray %s written directly: the broker could not be reached (%s)", tray_pk, error
        )
        _write_last_seen({tray_pk: at})


def _parse(tray_pk, at) -> tuple[int, datetime] | None:
    """(tray pk, time) from what the broker held, None for anything else (dropped, never retried)."""
    try:
        if isinstance(tray_pk, bytes):  # Redis: both are text
            tray_pk, at = int(tray_pk), float(at)
        if type(tray_pk) is not int or type(at) not in (int, float):
            return None
        return tray_pk, datetime.fromtimestamp(at, tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _latest(pairs) -> dict[int, datetime]:
    pending: dict[int, datetime] = {}
    for tray_pk, at in pairs:
        parsed = _parse(tray_pk, at)
        if parsed is None:
            log.warning("dropped a queued heartbeat that is not (tray, time): %r", (tray_pk, at))
            continue
        tray_pk, seen = parsed
        pending[tray_pk] = max(seen, pending.get(tray_pk, seen))
    return pending


def flush_heartbeats(limit: int = FLUSH_LIMIT) -> int:
    """Write the queued heartbeats' last-seen times (see the module's text); what a failed write took stays
    for the next flush. Returns how many trays were updated. The beat's flush-heartbeats entry runs it in a
    worker (inventory.tasks). `limit`: messages one flush takes at most (the queue of other brokers)."""
    url = _url()
    if not url:
        return 0
    on_redis = _on_redis(url)
    if on_redis is not None:
        return _flush_redis(on_redis[0])
    return _flush_queue(limit)


def _flush_redis(client: redis.Redis) -> int:
    written = 0
    # The lock outlives a slow flush (a whole fleet's minute on a busy database takes minutes): a second
    # flush meanwhile would write the same batch again, never lose one.
    lock = client.lock(LOCK, timeout=FLUSH_LOCK_S, blocking_timeout=0)
    if not lock.acquire():
        return 0
    try:
        for _ in range(2):  # a batch a failed flush left, then the one heard since
            if not client.exists(TAKEN):
                try:
                    client.rename(HASH, TAKEN)
                except redis.ResponseError:  # no heartbeat since the last flush
                    break
            written += _write_last_seen(_latest(client.hgetall(TAKEN).items()))
            client.delete(TAKEN)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockNotOwnedError:  # it expired during the flush: nothing to release
            log.warning("the heartbeat flush outlasted its lock (%s s)", FLUSH_LOCK_S)
    return written


def _flush_queue(limit: int) -> int:
    with _connections[_broker()].acquire(block=True, timeout=30) as conn:
        queue = conn.SimpleQueue(QUEUE, no_ack=False)
        try:
            messages: list[Message] = []
            while len(messages) < limit:
                try:
                    messages.append(queue.get(block=False))
                except queue.Empty:
                    break
                except ValueError:
                    # kombu's filesystem transport (the embedded broker) can read a message file its producer
                    # is still writing (kombu issue 1551): that heartbeat is gone, the tray's next one sets
                    # its time.
                    log.warning("a heartbeat message could not be read; writing the ones taken")
                    break
            bodies = [message.payload for message in messages]
            pending = _latest(
                (body.get("tray"), body.get("at")) if isinstance(body, dict) else (None, None)
                for body in bodies
            )
            try:
                written = _write_last_seen(pending)
            except Exception:
                for message in messages:
                    message.requeue()
                raise
            for message in messages:
                message.ack()
        finally:
            queue.close()
    return written


def queued() -> int:
    """Heartbeats waiting (Redis: trays heard since the last flush; other brokers: messages), 0 without a
    broker."""
    url = _url()
    if not url:
        return 0
    on_redis = _on_redis(url)
    if on_redis is not None:
        return on_redis[0].hlen(HASH) + on_redis[0].hlen(TAKEN)
    with _connections[_broker()].acquire(block=True, timeout=30) as conn:
        try:
            return conn.default_channel.queue_declare(QUEUE.name, passive=True).message_count
        except ChannelError:  # no such queue
            return 0


def _write_last_seen(pending: dict[int, datetime]) -> int:
    """Two UPDATEs per CHUNK trays: the trays' and their GPUs' last-seen time (GPUs too: a GPU another tray
    claims stays with the tray that reports it within CLAIM_WINDOW, heartbeats included), each tray its own
    time; a time never goes back."""
    if not pending:
        return 0
    quote = connection.ops.quote_name
    adapt = connection.ops.adapt_datetimefield_value
    tray_table, gpu_table = quote(ComputeTray._meta.db_table), quote(Gpu._meta.db_table)
    items = sorted(pending.items())
    updated = 0
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, len(items), CHUNK):
            chunk = items[start : start + CHUNK]
            values = ", ".join(["(%s, %s)"] * len(chunk))
            params = [p for pk, at in chunk for p in (pk, adapt(at))]
            # VALUES' columns are column1, column2 in PostgreSQL and SQLite alike.
            seen = f"(SELECT column1 AS pk, column2 AS at FROM (VALUES {values}) AS heard) AS seen"
            cursor.execute(
                f"UPDATE {tray_table} SET last_report_at = seen.at FROM {seen} "
                f"WHERE {tray_table}.id = seen.pk "
                f"AND ({tray_table}.last_report_at IS NULL OR {tray_table}.last_report_at < seen.at)",
                params,
            )
            updated += cursor.rowcount
            cursor.execute(
                f"UPDATE {gpu_table} SET last_report_at = seen.at FROM {seen} "
                f"WHERE {gpu_table}.tray_id = seen.pk "
                f"AND ({gpu_table}.last_report_at IS NULL OR {gpu_table}.last_report_at < seen.at)",
                params,
            )
    return updated
