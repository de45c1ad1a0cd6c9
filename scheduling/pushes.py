"""Configuration pushes: a row first, a Celery message second.

`queue_pushes` renders the desired state once (scheduling.configstate), and for every enabled target saves a
`ConfigPush` with the payload for that target's kind, then queues `scheduling.tasks.push_config(pk)` with
`transaction.on_commit`. The task `claim`s the row (an atomic UPDATE from queued to running: whoever else
holds the same message does nothing), runs the target's adapter, appends timestamped lines to the push's log
as it goes (each line committed at once, so the progress page can follow it) and records the outcome.

Rules, and why:

* One queued-or-running push per target (a partial unique constraint): a target is never applied twice at
  once. A newer request supersedes a push that is still queued (it would push an older state). A request
  that arrives while a push is running is kept on the target (`follow_up`) and pushed, rendered afresh, as
  soon as that push finishes.
* Idempotent: a push whose payload is the same as the target's last successful push (and nothing failed
  since) is recorded as succeeded at once, log "unchanged", and nothing is sent. Re-running a push that has
  finished does nothing: only a queued push can be claimed.
* Transient errors (the target did not answer: SlurmUnavailable, KubernetesUnavailable, FabricUnavailable,
  a refused or timed-out connection) put the push back to queued with `next_attempt_at` = now + 2**attempts
  seconds, up to MAX_ATTEMPTS attempts. With a worker the task schedules itself again; with eager Celery
  (no broker: `make run`) nothing sleeps in the request: the push stays queued with a "retrying" note and
  the next `retry_stale_pushes` (beat) or `manage.py push_configs` run retries it.
* Permanent errors (refused configuration, bad target settings, a state the scheduler cannot express)
  fail the push with the error and a "What to do:" sentence. Every adapter leaves the previous live
  configuration in place when it fails (Slurm rolls back; the directory target switches versions only
  when every file is written); Kubernetes and the fabric have no transactions: a failure part-way is
  logged with what was done, and the next push only does what is missing.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from scheduling import configstate
from scheduling.backends.fabric import (
    FabricError,
    FabricPartition,
    FabricUnavailable,
    GpuLocation,
    NmxFabricManager,
    SimulatedFabricManager,
)
from scheduling.backends.kubernetes.target import KubernetesError, KubernetesTarget, KubernetesUnavailable
from scheduling.backends.slurm.target import SlurmError, SlurmTarget, SlurmUnavailable
from scheduling.models import (
    ConfigPush,
    ConfigTarget,
    ConfigTargetKind,
    PushStatus,
    clean_settings,
)

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
# A running push whose log has not moved for this long lost its worker (killed, machine gone): requeued.
# Long enough for the slowest single step (an NMX-M operation may take up to 15 minutes).
STALE_RUNNING = timedelta(minutes=30)
# A queued push with no retry scheduled whose message never ran (broker down at commit time): sent again.
LOST_QUEUED = timedelta(minutes=5)
CLAIM_SLACK = timedelta(seconds=2)  # a countdown message may arrive a moment before next_attempt_at
K8S_LOG_LINES = 200  # per-object lines kept in the log of a Kubernetes push (the counts are always there)

TRANSIENT_ERRORS = (SlurmUnavailable, KubernetesUnavailable, FabricUnavailable, ConnectionError, TimeoutError)

WHAT_TO_DO = {
    ConfigTargetKind.DIRECTORY: (
        "check that the directory is writable by the portal and has free space, then retry the push"
    ),
    ConfigTargetKind.SLURM: (
        "check the Slurm target's settings and slurmctld's log, fix the cause and retry the push; "
        "slurmctld keeps running the previous configuration"
    ),
    ConfigTargetKind.KUBERNETES: (
        "check the Kubernetes target's API URL, token and CA, fix the cause and retry the push"
    ),
    ConfigTargetKind.FABRIC: (
        "check the fabric manager and the NVLink partitions of the rack named above, then retry the push "
        "(it only does what is still missing)"
    ),
}


# --- helpers ------------------------------------------------------------------------------------------


def canonical_json(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def payload_hash(payload: Any) -> str:
    """sha256 of the payload's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def _stamp(now=None) -> str:
    return (now or timezone.now()).strftime("%Y-%m-%d %H:%M:%S")


def _lines(messages: Iterable[Any], now=None) -> str:
    stamp = _stamp(now)
    out = []
    for message in messages:
        for line in str(message).splitlines() or [""]:
            out.append(f"{stamp} {line}\n")
    return "".join(out)


def _concat_log(text: str):
    return Concat(F("log"), Value(text), output_field=models.TextField())


def append_log(push_id: int, *messages: Any) -> None:
    """Append timestamped lines to a push's log: one UPDATE, committed at once outside a transaction."""
    now = timezone.now()
    ConfigPush.objects.filter(pk=push_id).update(log=_concat_log(_lines(messages, now)), updated_at=now)


def error_text(error: BaseException, kind: str) -> str:
    """The error in plain words, always ending with what to do next."""
    text = str(error).strip() or type(error).__name__
    if isinstance(error, ValidationError):
        if hasattr(error, "error_dict"):
            text = "; ".join(f"{key}: {m}" for key, msgs in error.message_dict.items() for m in msgs)
        else:
            text = "; ".join(error.messages)
    if "What to do:" not in text:
        what = getattr(error, "what_to_do", "") or WHAT_TO_DO.get(kind, "fix the cause and retry the push")
        text += f"\nWhat to do: {what}"
    return text


def what_to_do(error: str) -> str:
    """The "What to do:" sentence of a recorded error (empty if none)."""
    for line in reversed(error.splitlines()):
        if line.startswith("What to do:"):
            return line.removeprefix("What to do:").strip()
    return ""


def directory_path(values: dict) -> Path:
    """Where a directory target writes: absolute as given, relative under var/; empty: RACKPLANE_RENDER_DIR
    (var/rendered by default)."""
    raw = (values or {}).get("path") or ""
    if not raw:
        return Path(settings.RACKPLANE_RENDER_DIR)
    path = Path(raw)
    return path if path.is_absolute() else Path(settings.VAR_DIR) / path


def _display_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(settings.BASE_DIR))
    return str(path)


def target_summary(target: ConfigTarget) -> str:
    """One line saying where a target points (never a secret)."""
    values = target.masked_settings()
    if target.kind == ConfigTargetKind.DIRECTORY:
        return _display_path(directory_path(values))
    if target.kind == ConfigTargetKind.SLURM:
        return f"{values.get('config_dir')} via {values.get('scontrol')}"
    if target.kind == ConfigTargetKind.KUBERNETES:
        return f"{values.get('api_url')}" + (" (dry run only)" if values.get("dry_run") else "")
    if target.kind == ConfigTargetKind.FABRIC:
        if values.get("kind") == "nmx":
            return f"NMX-M at {values.get('base_url')}"
        return "simulated fabric (in memory, this process)"
    return ""


# --- rendering once per request -----------------------------------------------------------------------


class Rendered:
    """The desired state rendered lazily and at most once, whatever the number of targets."""

    def __init__(self, *, fabric: bool = False):
        self._fabric = fabric
        self._cache: dict[str, Any] = {}

    def _get(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            try:
                self._cache[key] = (True, make())
            except (ValueError, ValidationError) as error:
                self._cache[key] = (False, error)
        ok, value = self._cache[key]
        if not ok:
            raise value
        return value

    @property
    def state(self) -> configstate.ConfigState:
        return self._get("state", lambda: configstate.build_state(fabric=self._fabric))

    def objects(self) -> list[dict[str, Any]]:
        return self._get("objects", lambda: configstate.kubernetes_objects(self.state))

    def files(self) -> dict[str, str]:
        return self._get("files", lambda: configstate.render_files(self.state, self.objects()))

    def slurm(self, values: dict) -> dict[str, str]:
        overrides = {
            "cpus": values.get("cpus"),
            "memory_mb": values.get("memory_mb"),
            "node_hostname": values.get("node_hostname") or "",
            "node_address": values.get("node_address") or "",
            "node_port_base": values.get("node_port_base"),
        }
        key = "slurm:" + json.dumps(overrides, sort_keys=True)
        return self._get(key, lambda: configstate.slurm_files(self.state, **overrides))

    def payload_for(self, target: ConfigTarget) -> dict[str, Any]:
        values = clean_settings(target.kind, target.settings or {})
        if target.kind == ConfigTargetKind.DIRECTORY:
            return {"files": self.files()}
        if target.kind == ConfigTargetKind.SLURM:
            return {
                "files": self.slurm(values),
                "qos": [{"name": q.name, "gpu_limit": q.gpu_limit} for q in self.state.qos],
            }
        if target.kind == ConfigTargetKind.KUBERNETES:
            return {"objects": self.objects()}
        if target.kind == ConfigTargetKind.FABRIC:
            if self.state.fabric is None:  # a caller that did not ask for the fabric up front
                self._fabric = True
                self._cache.pop("state", None)
            return {"racks": self._get("fabric", lambda: configstate.fabric_racks(self.state))}
        raise ValueError(f"unknown target kind {target.kind!r}")


# --- queueing -----------------------------------------------------------------------------------------


def _dispatch(push_id: int) -> None:
    """Send the task (after commit). A broker that cannot be reached leaves the push queued; the beat's
    retry_stale_pushes sends it again."""
    from scheduling.tasks import push_config

    try:
        push_config.delay(push_id)
    except Exception as error:  # kombu raises several types; none may lose the saved row
        if getattr(push_config.app.conf, "task_always_eager", False):
            raise
        logger.warning("push %s: could not reach the task queue: %s", push_id, error)
        append_log(push_id, f"could not reach the task queue ({error}); retry_stale_pushes sends it again")


def queue_pushes(
    *,
    reason: str,
    user=None,
    plan_id: int | None = None,
    targets: Iterable[ConfigTarget | int] | None = None,
    force: bool = False,
) -> list[ConfigPush]:
    """Render once and save one push per enabled target (or per enabled target of `targets`), each task
    queued on commit. Returns the pushes created: queued, already succeeded ("unchanged"), or failed when
    the state cannot be rendered for that target. A target with a running push gets no new row: the request
    is kept as its follow-up (see the module docstring). `force` pushes even an unchanged configuration
    (e.g. to repair hand-made changes on the target)."""
    reason = (reason or "").strip()[:255] or "configuration push"
    with transaction.atomic():
        locked = ConfigTarget.objects.select_for_update().filter(enabled=True).order_by("pk")
        if targets is not None:
            ids = [t.pk if isinstance(t, ConfigTarget) else int(t) for t in targets]
            locked = locked.filter(pk__in=ids)
        locked = list(locked)
        rendered = Rendered(fabric=any(t.kind == ConfigTargetKind.FABRIC for t in locked))
        created = []
        for target in locked:
            push = _queue_one(target, rendered, reason=reason, user=user, plan_id=plan_id, force=force)
            if push is not None:
                created.append(push)
    return created


def _queue_one(
    target: ConfigTarget, rendered: Rendered, *, reason: str, user, plan_id, force: bool
) -> ConfigPush | None:
    try:
        payload = rendered.payload_for(target)
        digest = payload_hash(payload)
        render_error = None
    except (ValueError, ValidationError) as error:
        payload, digest, render_error = {}, "", error
    now = timezone.now()
    user_id = user.pk if user is not None and getattr(user, "is_authenticated", False) else None

    running = ConfigPush.objects.filter(target=target, status=PushStatus.RUNNING).first()
    if running is not None:
        if render_error is None and running.payload_hash == digest and not force:
            append_log(
                running.pk, f"a new request ({reason}) asks for what this push applies: nothing to add"
            )
            return None
        target.follow_up = {
            "reason": reason,
            "plan_id": plan_id,
            "requested_by": user_id,
            "requested_at": now.isoformat(),
        }
        target.save(update_fields=["follow_up", "updated_at"])
        append_log(running.pk, f"a newer change arrived ({reason}): pushed as soon as this push finishes")
        return None

    older = list(
        ConfigPush.objects.filter(target=target, status=PushStatus.QUEUED).values_list("pk", flat=True)
    )
    if older:
        ConfigPush.objects.filter(pk__in=older, status=PushStatus.QUEUED).update(
            status=PushStatus.SUPERSEDED, finished_at=now, updated_at=now, next_attempt_at=None
        )
    fields: dict[str, Any] = {
        "target": target,
        "payload": payload,
        "payload_hash": digest,
        "requested_by_id": user_id,
        "reason": reason,
        "plan_id": plan_id,
    }
    if render_error is not None:
        error = error_text(render_error, target.kind)
        if isinstance(render_error, ValidationError):
            error = f"the target's settings are not valid: {error}"
        else:
            error = f"the configuration cannot be rendered for this target: {error}"
        push = ConfigPush.objects.create(
            **fields,
            status=PushStatus.FAILED,
            error=error,
            finished_at=now,
            log=_lines([f"requested: {reason}", "failed before sending anything:", error], now),
        )
    elif not force and _last_outcome_hash(target) == digest:
        push = ConfigPush.objects.create(
            **fields,
            status=PushStatus.SUCCEEDED,
            started_at=now,
            finished_at=now,
            log=_lines(
                [
                    f"requested: {reason}",
                    "unchanged: the target's last successful push has the same configuration; nothing sent",
                ],
                now,
            ),
        )
    else:
        try:
            with transaction.atomic():
                push = ConfigPush.objects.create(
                    **fields,
                    status=PushStatus.QUEUED,
                    log=_lines([f"queued: {reason}" + (" (forced)" if force else "")], now),
                )
        except IntegrityError:
            # Someone else holds an active push for this target after all (the row lock makes this rare):
            # keep the request as the target's follow-up instead of failing the caller.
            target.follow_up = {"reason": reason, "plan_id": plan_id, "requested_by": user_id}
            target.save(update_fields=["follow_up", "updated_at"])
            return None
        transaction.on_commit(lambda pk=push.pk: _dispatch(pk))
    if older:
        ConfigPush.objects.filter(pk__in=older).update(
            superseded_by=push, log=_concat_log(_lines([f"superseded by push #{push.pk} ({reason})"], now))
        )
    if target.follow_up:
        target.follow_up = None  # this push renders the newest state: it covers the waiting request
        target.save(update_fields=["follow_up", "updated_at"])
    return push


def _last_outcome_hash(target: ConfigTarget) -> str | None:
    """Hash of the target's last successful push, when nothing failed after it (a failed push may have
    changed part of the target: then an equal payload is pushed again rather than assumed live)."""
    last = (
        ConfigPush.objects.filter(target=target, status__in=[PushStatus.SUCCEEDED, PushStatus.FAILED])
        .exclude(payload_hash="")
        .order_by("-finished_at", "-pk")
        .values_list("status", "payload_hash")
        .first()
    )
    if last is None or last[0] != PushStatus.SUCCEEDED:
        return None
    return last[1]


# --- running ------------------------------------------------------------------------------------------


def claim(push_id: int) -> bool:
    """queued -> running in one UPDATE; False when the push is not queued (someone else has it, it finished,
    or its retry is not due yet)."""
    now = timezone.now()
    return (
        ConfigPush.objects.filter(pk=push_id, status=PushStatus.QUEUED)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + CLAIM_SLACK))
        .update(
            status=PushStatus.RUNNING,
            started_at=now,
            updated_at=now,
            finished_at=None,
            next_attempt_at=None,
            attempts=F("attempts") + 1,
        )
        == 1
    )


@dataclass(frozen=True)
class Outcome:
    """What one run of a push did: `status` is the push's status after it; `retry_in` seconds when queued
    again after a transient error."""

    push_id: int
    status: str
    retry_in: int | None = None
    message: str = ""


def execute(push_id: int, *, can_schedule_retry: bool = False) -> Outcome:
    """Claim and run one push. Never raises for the target's errors: they are recorded on the row.

    `can_schedule_retry`: the caller (a task on a worker) will send itself again after `retry_in` seconds;
    otherwise (eager Celery, a command) a transient failure leaves the push queued for retry_stale_pushes.
    """
    if not claim(push_id):
        status = ConfigPush.objects.filter(pk=push_id).values_list("status", flat=True).first()
        return Outcome(
            push_id, status or "missing", message="not claimed: not queued (or its retry is not due)"
        )
    push = ConfigPush.objects.select_related("target").get(pk=push_id)
    target = push.target
    log = _Log(push.pk)
    log(f"attempt {push.attempts} of {MAX_ATTEMPTS}: pushing to {target.kind} target {target.name}")
    try:
        adapter = adapter_for(target)
        summary = adapter.apply(push.payload, log, push)
    except TRANSIENT_ERRORS as error:
        return _transient(push, error, log, can_schedule_retry)
    except Exception as error:
        if not isinstance(error, SlurmError | KubernetesError | FabricError | ValueError | OSError):
            logger.exception("push %s to %s failed unexpectedly", push.pk, target.name)
        return _finish(push, PushStatus.FAILED, log, error=error_text(error, target.kind))
    return _finish(push, PushStatus.SUCCEEDED, log, summary=summary)


class _Log:
    """Callable that appends timestamped lines to the push's log, committed at most every FLUSH_SECONDS
    (the progress page polls every 2 s) and always before the push's status changes. One UPDATE per line
    would rewrite the row thousands of times for a 1,000-rack fabric push (on SQLite, with its payload)."""

    FLUSH_SECONDS = 1.0

    def __init__(self, push_id: int):
        self.push_id = push_id
        self._pending: list[str] = []
        self._flushed_at = float("-inf")  # the first line goes out at once: the page shows it started

    def __call__(self, *messages: Any) -> None:
        self._pending.append(_lines(messages))
        if time.monotonic() - self._flushed_at >= self.FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            now = timezone.now()
            text = "".join(self._pending)
            self._pending = []
            ConfigPush.objects.filter(pk=self.push_id).update(log=_concat_log(text), updated_at=now)
        self._flushed_at = time.monotonic()


def _transient(push: ConfigPush, error: BaseException, log: _Log, can_schedule_retry: bool) -> Outcome:
    text = error_text(error, push.target.kind)
    if push.attempts >= MAX_ATTEMPTS:
        return _finish(
            push,
            PushStatus.FAILED,
            log,
            error=f"gave up after {push.attempts} attempts; the target did not answer:\n{text}",
        )
    delay = 2**push.attempts
    now = timezone.now()
    if can_schedule_retry:
        note = f"retrying in {delay}s (attempt {push.attempts + 1} of {MAX_ATTEMPTS})"
    else:
        note = (
            f"retrying: attempt {push.attempts + 1} of {MAX_ATTEMPTS} is due in {delay}s; with no Celery "
            "worker (eager mode) it runs at the next retry_stale_pushes or `manage.py push_configs`"
        )
    log(f"transient error: {text}", note)
    log.flush()
    ConfigPush.objects.filter(pk=push.pk, status=PushStatus.RUNNING).update(
        status=PushStatus.QUEUED,
        error=f"{text}\n({note})",
        next_attempt_at=now + timedelta(seconds=delay),
        updated_at=now,
    )
    return Outcome(push.pk, PushStatus.QUEUED, retry_in=delay, message=str(error))


def _finish(push: ConfigPush, status: str, log: _Log, *, error: str = "", summary: str = "") -> Outcome:
    now = timezone.now()
    if status == PushStatus.SUCCEEDED:
        log(f"succeeded: {summary}" if summary else "succeeded")
    else:
        log(f"failed: {error}")
    log.flush()
    ConfigPush.objects.filter(pk=push.pk, status=PushStatus.RUNNING).update(
        status=status, error=error, finished_at=now, updated_at=now, next_attempt_at=None
    )
    run_follow_up(push.target_id)
    return Outcome(push.pk, status, message=summary or error)


def run_follow_up(target_id: int) -> list[ConfigPush]:
    """Push a request that waited for this target's running push (if it is idle now)."""
    with transaction.atomic():
        target = ConfigTarget.objects.select_for_update().filter(pk=target_id).first()
        if target is None or not target.follow_up or not target.enabled:
            return []
        if ConfigPush.objects.filter(target=target).active().exists():
            return []
        waiting = target.follow_up
        user = get_user_model().objects.filter(pk=waiting.get("requested_by")).first()
        target.follow_up = None
        target.save(update_fields=["follow_up", "updated_at"])
        return queue_pushes(
            reason=f"{waiting.get('reason') or 'change'} (waited for the previous push)",
            user=user,
            plan_id=waiting.get("plan_id"),
            targets=[target],
        )


# --- maintenance (beat) ------------------------------------------------------------------------------


def requeue_stale(now=None) -> list[int]:
    """Running pushes whose log has not moved for STALE_RUNNING lost their worker: back to queued."""
    now = now or timezone.now()
    cutoff = now - STALE_RUNNING
    minutes = int(STALE_RUNNING.total_seconds() // 60)
    stale = ConfigPush.objects.filter(status=PushStatus.RUNNING, updated_at__lt=cutoff)
    requeued = []
    for pk, attempts, target_id in stale.values_list("pk", "attempts", "target_id"):
        row = ConfigPush.objects.filter(pk=pk, status=PushStatus.RUNNING, updated_at__lt=cutoff)
        if attempts >= MAX_ATTEMPTS:
            error = (
                f"no progress for {minutes} minutes during the last of {attempts} attempts (worker lost?)\n"
                "What to do: check the Celery worker and the target, then retry the push"
            )
            if row.update(
                status=PushStatus.FAILED,
                error=error,
                finished_at=now,
                updated_at=now,
                log=_concat_log(_lines([f"failed: {error}"], now)),
            ):
                run_follow_up(target_id)
            continue
        note = _lines([f"no progress for {minutes} minutes (worker lost?): requeued"], now)
        if row.update(status=PushStatus.QUEUED, next_attempt_at=now, updated_at=now, log=_concat_log(note)):
            requeued.append(pk)
    return requeued


def due_pushes(now=None) -> list[int]:
    """Queued pushes to send now: a retry that is due, or a message that never ran (lost)."""
    now = now or timezone.now()
    return list(
        ConfigPush.objects.filter(status=PushStatus.QUEUED, target__enabled=True)
        .filter(
            Q(next_attempt_at__lte=now) | Q(next_attempt_at__isnull=True, created_at__lt=now - LOST_QUEUED)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def retry_now(push: ConfigPush, user=None) -> list[ConfigPush]:
    """The Retry button: a failed push is pushed again as a new push rendered from the current state (the
    failed row stays as it is); a queued push waiting for its retry is made due and sent now."""
    if push.status == PushStatus.QUEUED:
        ConfigPush.objects.filter(pk=push.pk, status=PushStatus.QUEUED).update(next_attempt_at=timezone.now())
        append_log(push.pk, f"retry now requested by {user or 'someone'}")
        transaction.on_commit(lambda: _dispatch(push.pk))
        return [push]
    if push.status != PushStatus.FAILED:
        raise ValidationError(f"push #{push.pk} is {push.get_status_display().lower()}: nothing to retry")
    if not push.target.enabled:
        raise ValidationError(f"target {push.target.name} is disabled: enable it first")
    return queue_pushes(
        reason=f"retry of push #{push.pk}", user=user, plan_id=push.plan_id, targets=[push.target]
    )


# --- dry run ------------------------------------------------------------------------------------------


def dry_run(targets: Iterable[ConfigTarget] | None = None) -> dict[str, list[str]]:
    """What a push would change on each enabled target (read-only: no rows, nothing sent)."""
    chosen = list(targets) if targets is not None else list(ConfigTarget.objects.filter(enabled=True))
    rendered = Rendered(fabric=any(t.kind == ConfigTargetKind.FABRIC for t in chosen))
    result: dict[str, list[str]] = {}
    for target in chosen:
        try:
            payload = rendered.payload_for(target)
            result[target.name] = adapter_for(target).diff(payload) or ["no changes"]
        except Exception as error:  # a dry run reports every target, whatever one of them says
            result[target.name] = [f"cannot tell: {error_text(error, target.kind)}"]
    return result


# --- adapters -----------------------------------------------------------------------------------------


def adapter_for(target: ConfigTarget):
    values = clean_settings(target.kind, target.settings or {})
    return {
        ConfigTargetKind.DIRECTORY: DirectoryAdapter,
        ConfigTargetKind.SLURM: SlurmAdapter,
        ConfigTargetKind.KUBERNETES: KubernetesAdapter,
        ConfigTargetKind.FABRIC: FabricAdapter,
    }[target.kind](target, values)


def _safe_relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(part in ("", ".", "..") for part in path.parts):
        raise ValueError(f"refusing to write {name!r}: not a plain relative path")
    return path


def _write_file(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tree(root: Path, files: dict[str, str]) -> list[Path]:
    """Write files under `root` (each atomically: a temp file beside it, then a rename). Returns the paths."""
    written = []
    for name, text in sorted(files.items()):
        path = root / _safe_relative(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            _write_file(Path(tmp), text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        written.append(path)
    return written


class DirectoryAdapter:
    """Rendered files in a directory, versioned: `<path>/versions/<time>-push<N>/...` holds each push's
    complete set, `<path>/current` is a symlink to the live one. A push writes a whole new version, then
    switches the symlink with one rename: readers see the old set or the new set, never a mix, and a push
    that fails part-way leaves `current` as it was. Files equal to the previous version's are hard links to
    them (do not edit versions in place). The `keep` previous versions are kept, older ones deleted."""

    CURRENT = "current"
    VERSIONS = "versions"

    def __init__(self, target: ConfigTarget, values: dict):
        self.target = target
        self.root = directory_path(values)
        self.keep = int(values.get("keep") or 5)

    def current_dir(self) -> Path | None:
        link = self.root / self.CURRENT
        if link.is_symlink():
            return link.resolve()
        if link.exists():
            raise ValueError(
                f"{link} exists but is not the symlink Rackplane switches: move it away, then retry the push"
            )
        return None

    def apply(self, payload: dict, log: Callable[..., None], push: ConfigPush) -> str:
        files = payload.get("files") or {}
        for name in files:
            _safe_relative(name)
        versions = self.root / self.VERSIONS
        versions.mkdir(parents=True, exist_ok=True)
        previous = self.current_dir()
        name = f"{timezone.now():%Y%m%dT%H%M%SZ}-push{push.pk:06d}"
        staging = versions / f".{name}.partial"
        final = versions / name
        shutil.rmtree(staging, ignore_errors=True)
        changed = linked = 0
        try:
            for rel, text in sorted(files.items()):
                path = staging / _safe_relative(rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                old = previous / rel if previous is not None else None
                if old is not None and old.is_file() and _same_text(old, text):
                    try:
                        os.link(old, path)
                        linked += 1
                        continue
                    except OSError:
                        pass  # a filesystem without hard links: write a copy
                _write_file(path, text)
                changed += 1
            os.replace(staging, final)
            _fsync_dir(versions)
            link_tmp = self.root / f".{self.CURRENT}.{push.pk}.tmp"
            with contextlib.suppress(FileNotFoundError):
                link_tmp.unlink()
            os.symlink(f"{self.VERSIONS}/{name}", link_tmp)
            os.replace(link_tmp, self.root / self.CURRENT)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        removed = sorted(
            str(p.relative_to(previous))
            for p in (previous.rglob("*") if previous is not None else [])
            if p.is_file() and str(p.relative_to(previous)) not in files
        )
        log(
            f"wrote {len(files)} files to {_display_path(final)} "
            f"({changed} new or changed, {linked} unchanged"
            + (f", {len(removed)} no longer rendered: {', '.join(removed)}" if removed else "")
            + ")",
            f"{_display_path(self.root / self.CURRENT)} -> {self.VERSIONS}/{name}"
            + (f" (previous: {self.VERSIONS}/{previous.name})" if previous is not None else ""),
        )
        pruned = self._prune(keep_names={name, previous.name if previous else ""})
        if pruned:
            log(f"removed {len(pruned)} old version(s): {', '.join(pruned)}")
        return f"{len(files)} files in {_display_path(self.root / self.CURRENT)}"

    def _prune(self, keep_names: set[str]) -> list[str]:
        """Keep the live version and the `keep` newest before it (names sort by time)."""
        versions = self.root / self.VERSIONS
        names = sorted(
            (p.name for p in versions.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True
        )
        removed = []
        for old in names[self.keep + 1 :]:
            if old not in keep_names:
                shutil.rmtree(versions / old, ignore_errors=True)
                removed.append(old)
        return removed

    def diff(self, payload: dict) -> list[str]:
        files = payload.get("files") or {}
        current = self.current_dir()
        out = []
        live_names = set()
        if current is not None:
            live_names = {str(p.relative_to(current)) for p in current.rglob("*") if p.is_file()}
        for name in sorted(set(files) | live_names):
            old = (current / name).read_text() if current is not None and name in live_names else None
            new = files.get(name)
            if old == new:
                continue
            if new is None:
                out.append(f"- {name} (no longer rendered)")
                continue
            diff = list(
                difflib.unified_diff(
                    (old or "").splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"live/{name}" if old is not None else "/dev/null",
                    tofile=f"rendered/{name}",
                )
            )
            out.extend(line.rstrip("\n") for line in _clip(diff, 400, name))
        return out


def _clip(lines: list[str], limit: int, name: str) -> list[str]:
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"... {len(lines) - limit} more diff lines of {name}"]


def _same_text(path: Path, text: str) -> bool:
    try:
        if path.stat().st_size != len(text.encode()):
            return False
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


class SlurmAdapter:
    """SlurmTarget.apply (atomic files, reconfigure, read-back, rollback), then the departments' QOS."""

    def __init__(self, target: ConfigTarget, values: dict):
        self.slurm = SlurmTarget(
            values["config_dir"], values["scontrol"], slurmctld_log=values.get("slurmctld_log") or None
        )

    def apply(self, payload: dict, log: Callable[..., None], push: ConfigPush) -> str:
        files = payload.get("files") or {}
        log(f"writing {', '.join(sorted(files))} to {self.slurm.config_dir} and reconfiguring slurmctld")
        result = self.slurm.apply(files)
        log(*result.log)
        blocks = [b for b in result.topology if not b.get("aggregated")]
        if blocks:
            shown = ", ".join(f"{b['name']}={b['nodes']}" for b in blocks[:8])
            log(f"slurmctld runs {len(blocks)} blocks: {shown}" + (", ..." if len(blocks) > 8 else ""))
        qos = payload.get("qos") or []
        if qos:
            if self.slurm.slurmdbd_configured():
                for entry in qos:
                    log(self.slurm.ensure_qos(entry["name"], entry.get("gpu_limit")).note)
            else:
                log(
                    f"{len(qos)} department QOS not set: this cluster has no slurmdbd, which sacctmgr needs "
                    "(GPU limits are then not enforced by Slurm)"
                )
        if result.changed:
            return f"changed {', '.join(result.changed)}; slurmctld reconfigured and verified"
        return "files already in place; slurmctld runs them"

    def diff(self, payload: dict) -> list[str]:
        diffs = self.slurm.diff(payload.get("files") or {})
        out: list[str] = []
        for name, text in diffs.items():
            out.extend(_clip(text.splitlines(), 400, name))
        return out


class KubernetesAdapter:
    """KubernetesTarget.apply: validate, server-side apply what differs, prune (dry run if configured)."""

    def __init__(self, target: ConfigTarget, values: dict):
        self.values = values

    def _target(self) -> KubernetesTarget:
        v = self.values
        return KubernetesTarget(
            v["api_url"],
            token=v.get("token") or None,
            ca_cert=v.get("ca_file") or None,
            insecure=v["insecure"],
        )

    def apply(self, payload: dict, log: Callable[..., None], push: ConfigPush) -> str:
        objects = payload.get("objects") or []
        dry = bool(self.values.get("dry_run"))
        log(
            f"applying {len(objects)} objects to {self.values['api_url']}"
            + (" (server-side dry run)" if dry else "")
        )
        with self._target() as target:
            try:
                result = target.apply(objects, dry_run=dry)
            except KubernetesError as error:
                if error.result is not None:
                    log(*_clip(error.result.log, K8S_LOG_LINES, "the log"))
                raise
        log(*_clip(result.log, K8S_LOG_LINES, "the log"))
        summary = (
            f"{len(result.created)} created, {len(result.updated)} updated, {len(result.deleted)} deleted, "
            f"{len(result.unchanged)} unchanged"
            + (f", {len(result.skipped)} nodes not registered (skipped)" if result.skipped else "")
        )
        return ("dry run: " if dry else "") + summary

    def diff(self, payload: dict) -> list[str]:
        with self._target() as target:
            return _clip(target.diff(payload.get("objects") or []).lines(), 400, "the diff")


# The embedded fabric keeps its partitions in memory: one per target, for the life of the process.
_SIMULATED: dict[int, SimulatedFabricManager] = {}
_SIMULATED_LOCK = threading.Lock()


def simulated_fabric(target_id: int) -> SimulatedFabricManager:
    with _SIMULATED_LOCK:
        return _SIMULATED.setdefault(target_id, SimulatedFabricManager())


class FabricAdapter:
    """FabricManager.apply rack by rack (one NVLink domain each), with progress lines in the log."""

    def __init__(self, target: ConfigTarget, values: dict):
        self.target = target
        self.values = values

    def _manager(self, racks: list[dict]):
        if self.values["kind"] == "simulated":
            return simulated_fabric(self.target.pk)
        locations = {
            uuid: GpuLocation.for_tray(rack["domain"], slot, index)
            for rack in racks
            if rack.get("domain")
            for partition in rack["partitions"]
            for uuid, slot, index in partition["gpus"]
        }
        return NmxFabricManager(
            self.values["base_url"],
            token=self.values.get("token") or None,
            verify=not self.values.get("insecure"),
            locations=locations,
        )

    @staticmethod
    def _desired(rack: dict) -> list[FabricPartition]:
        return [
            FabricPartition(p["name"], p["partition_id"], tuple(g[0] for g in p["gpus"]), rack["domain"])
            for p in rack["partitions"]
            if p["gpus"] or p["partition_id"] == configstate.DEFAULT_CLIQUE_ID
        ]

    def apply(self, payload: dict, log: Callable[..., None], push: ConfigPush) -> str:
        racks = payload.get("racks") or []
        manager = self._manager(racks)
        changed, unchanged, skipped = [], 0, []
        for number, rack in enumerate(racks, 1):
            if not rack.get("domain"):
                skipped.append(rack["rack"])
                continue
            name = rack["rack"]

            def progress(step, total, message, name=name):
                if total:
                    log(f"{name}: {message}")

            try:
                result = manager.apply(rack["domain"], self._desired(rack), progress=progress)
            except FabricError as error:
                done = ", ".join(changed) or "none"
                error.details.append(
                    f"racks changed before the failure: {done}; racks not attempted: {len(racks) - number}"
                )
                error.args = (error._text(),)
                raise
            if result.changed:
                changed.append(name)
            else:
                unchanged += 1
            if result.renumbered:
                log(f"{name}: " + result.log[-1])
        if skipped:
            log(
                f"{len(skipped)} rack(s) skipped, no cluster UUID known yet (not discovered): "
                + ", ".join(skipped[:10])
                + (", ..." if len(skipped) > 10 else "")
            )
        return f"{len(changed)} rack(s) changed, {unchanged} already as planned, {len(skipped)} skipped"

    def diff(self, payload: dict) -> list[str]:
        racks = payload.get("racks") or []
        manager = self._manager(racks)
        out = []
        for rack in racks:
            if not rack.get("domain"):
                out.append(f"{rack['rack']}: skipped (no cluster UUID known yet)")
                continue
            summary = manager.diff(rack["domain"], self._desired(rack)).summary()
            out.extend(f"{rack['rack']}: {line}" for line in summary)
        return out
