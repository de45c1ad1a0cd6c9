"""Configuration pushes: a row first, a Celery message second.

`queue_pushes` renders the desired state once (integrations.rendering), and for every enabled target saves a
`ConfigPush` with the payload for that target's kind, then queues `integrations.tasks.push_config(pk)` with
`core.enqueue` (on commit). The task `claim`s the row (an atomic UPDATE from queued to running: whoever else
holds the same message does nothing), runs the target's adapter, appends timestamped lines to the push's log
as it goes (so the progress page can follow it) and records the outcome.

Rules, and why:

* One queued-or-running push per target (a partial unique constraint): a target is never applied twice at
  once. A newer request supersedes a push that is still queued (it would push an older state). A request
  that arrives while a push is running is kept on the target (`follow_up`) and pushed, rendered afresh, as
  soon as that push finishes.
* Idempotent: a push whose payload is the same as the target's last successful push (and nothing failed
  since) is recorded as succeeded at once, log "unchanged", and nothing is sent. Re-running a push that has
  finished does nothing: only a queued push can be claimed.

Running a push (the task, its retries, the beat's requeue of lost pushes) is integrations.push_runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from core.enqueue import send_now
from core.errors import advice, with_advice
from core.moments import stamp
from core.sentences import CLAUSES, say
from core.task_names import PUSH_CONFIG
from integrations import contents, registry, words
from integrations import state as configstate
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.rendering import Rendered, needs_fabric

K8S_LOG_LINES = 200  # per-object lines kept in the log of a Kubernetes push (the counts are always there)


# --- helpers ------------------------------------------------------------------------------------------


def canonical_json(payload: Any) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def payload_hash(payload: Any) -> str:
    """sha256 of the payload's canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(canonical_json(payload)).hexdigest()


def _stamp(now=None) -> str:
    """A log line's moment: its UTC time (core.moments.stamp; pages show it in the viewer's zone)."""
    return stamp(now or timezone.now())


def log_lines(messages: Iterable[Any], now=None) -> str:
    stamp = _stamp(now)
    out = []
    for message in messages:
        for line in str(message).splitlines() or [""]:
            out.append(f"{stamp} {line}\n")
    return "".join(out)


def concat_log(text: str):
    return Concat(F("log"), Value(text), output_field=models.TextField())


def append_log(push_id: int, *messages: Any) -> None:
    """Append timestamped lines to a push's log: one UPDATE, committed at once outside a transaction."""
    now = timezone.now()
    ConfigPush.objects.filter(pk=push_id).update(log=concat_log(log_lines(messages, now)), updated_at=now)


def error_text(error: BaseException, kind: str) -> str:
    """The error in plain words, always ending with what to do next."""
    text = str(error).strip() or type(error).__name__
    if isinstance(error, ValidationError):
        if hasattr(error, "error_dict"):
            text = "; ".join(f"{key}: {m}" for key, msgs in error.message_dict.items() for m in msgs)
        else:
            text = "; ".join(error.messages)
    kind_advice = registry.get(kind).what_to_do if registry.is_kind(kind) else registry.DEFAULT_WHAT_TO_DO
    return with_advice(text, getattr(error, "what_to_do", "") or kind_advice)


def what_to_do(error: str) -> str:
    """The "What to do:" sentence of a recorded error (empty if none)."""
    return advice(error)


def target_summary(target: ConfigTarget) -> str:
    """One line saying where a target points (never a secret)."""
    if not registry.is_kind(target.kind):
        return f"unknown kind {target.kind!r}"
    return registry.get(target.kind).summary(target.masked_settings())


# --- queueing -----------------------------------------------------------------------------------------


def _dispatch(push_id: int) -> None:
    """Send the task (after commit). A broker that cannot be reached leaves the push queued and due: the
    beat's retry_stale_pushes (every minute) sends it again."""
    if not send_now(PUSH_CONFIG, push_id):
        ConfigPush.objects.filter(pk=push_id, status=PushStatus.QUEUED, next_attempt_at__isnull=True).update(
            next_attempt_at=timezone.now()
        )
        append_log(push_id, "waiting for the broker: could not reach the task queue; the beat sends it again")


def queue_pushes(
    *,
    reason: str,
    user=None,
    plan_id: int | None = None,
    targets: Iterable[ConfigTarget | int] | None = None,
    force: bool = False,
    racks: Iterable[str] | None = None,
) -> list[ConfigPush]:
    """Render once and save one push per enabled target (or per enabled target of `targets`), each task
    queued on commit. Returns the pushes created: queued, already succeeded ("unchanged"), or failed when
    the state cannot be rendered for that target. A target with a running push gets no new row: the request
    is kept as its follow-up (see the module docstring). `force` pushes even an unchanged configuration
    (e.g. to repair hand-made changes on the target). `racks`: the request changed these racks only (a
    partition plan): a target that takes slices is sent theirs when it may (`_may_scope`)."""
    reason = (reason or "").strip()[:255] or "configuration push"
    with configstate.collector_paused(), transaction.atomic():
        locked = ConfigTarget.objects.select_for_update().filter(enabled=True).order_by("pk")
        if targets is not None:
            ids = [t.pk if isinstance(t, ConfigTarget) else int(t) for t in targets]
            locked = locked.filter(pk__in=ids)
        locked = list(locked)
        rendered = Rendered(scope=racks)
        sliced = {t.pk for t in locked if _may_scope(t, rendered, force)}
        # The whole state reads every GPU only for a fabric target sent the whole fabric.
        rendered.read_fabric(whole=needs_fabric(t for t in locked if t.pk not in sliced))
        created = []
        for target in locked:
            push = _queue_one(
                target,
                rendered,
                reason=reason,
                user=user,
                plan_id=plan_id,
                force=force,
                scoped=target.pk in sliced,
            )
            if push is not None:
                created.append(push)
    configstate.settle()
    return created


@dataclass(frozen=True)
class _PushRequest:
    """One request to push a target: why, by whom, for which plan, when."""

    reason: str
    user_id: int | None
    plan_id: int | None
    force: bool
    now: datetime


@dataclass(frozen=True)
class _Payload:
    """What a push row stores (`stored`: whole files as their pieces' digests, integrations.contents), its
    hash, the pieces' texts to store with it, or the error when the state cannot be rendered."""

    stored: dict[str, Any]
    digest: str
    pieces: dict[str, str]
    error: Exception | None = None


def _payload_of(target: ConfigTarget, rendered: Rendered | _FixedPayload, scoped: bool = False) -> _Payload:
    """The push's payload as its row stores it, with its hash: the sha256 of that stored form (a file's
    pieces are hashed by content, so the hash changes exactly when a file does)."""
    try:
        stored, pieces = contents.split_payload(rendered.payload_for(target, scoped=scoped))
        return _Payload(stored, payload_hash(stored), pieces)
    except (ValueError, ValidationError) as error:
        return _Payload({}, "", {}, error)


def _leave_to_running(target: ConfigTarget, running: ConfigPush, request: _PushRequest, digest: str | None):
    """A push is running on the target: nothing to add when it applies the same payload (`digest`; None
    when the state could not be rendered), else the request becomes the target's follow-up."""
    if digest is not None and running.payload_hash == digest and not request.force:
        append_log(
            running.pk, f"a new request ({request.reason}) asks for what this push applies: nothing to add"
        )
        return
    target.follow_up = {
        "reason": request.reason,
        "plan_id": request.plan_id,
        "requested_by": request.user_id,
        "requested_at": request.now.isoformat(),
    }
    target.save(update_fields=["follow_up", "updated_at"])
    append_log(running.pk, f"a newer change arrived ({request.reason}): pushed as soon as this push finishes")


def _supersede_queued(target: ConfigTarget, now) -> list[int]:
    """Mark the target's queued pushes superseded (they would push an older state); their pks."""
    older = list(
        ConfigPush.objects.filter(target=target, status=PushStatus.QUEUED).values_list("pk", flat=True)
    )
    if older:
        ConfigPush.objects.filter(pk__in=older, status=PushStatus.QUEUED).update(
            status=PushStatus.SUPERSEDED, finished_at=now, updated_at=now, next_attempt_at=None
        )
    return older


def _render_failure(render_error: Exception, kind: str) -> str:
    error = error_text(render_error, kind)
    if isinstance(render_error, ValidationError):
        return f"the target's settings are not valid: {error}"
    return f"the configuration cannot be rendered for this target: {error}"


def _create_queued(target: ConfigTarget, fields: dict[str, Any], request: _PushRequest) -> ConfigPush | None:
    """A queued push, its task sent on commit; None (the request kept as the target's follow-up) when
    someone else holds an active push for this target after all (the row lock makes this rare)."""
    try:
        with transaction.atomic():
            push = ConfigPush.objects.create(
                **fields,
                status=PushStatus.QUEUED,
                log=log_lines(
                    [
                        say(
                            words.PUSH_LOG_QUEUED_FORCED if request.force else words.PUSH_LOG_QUEUED,
                            reason=request.reason,
                        )
                    ],
                    request.now,
                ),
            )
    except IntegrityError:
        target.follow_up = {
            "reason": request.reason,
            "plan_id": request.plan_id,
            "requested_by": request.user_id,
        }
        target.save(update_fields=["follow_up", "updated_at"])
        return None
    transaction.on_commit(lambda pk=push.pk: _dispatch(pk))
    return push


def _create_push(target: ConfigTarget, payload: _Payload, request: _PushRequest) -> ConfigPush | None:
    """The push row: failed (cannot be rendered), succeeded at once (unchanged, unless forced) or queued;
    the pieces of its files stored with it (those no row holds yet)."""
    now, reason = request.now, request.reason
    render_error, digest = payload.error, payload.digest
    if render_error is None:
        contents.save_pieces(payload.pieces)
    fields: dict[str, Any] = {
        "target": target,
        "payload": payload.stored,
        "has_pieces": contents.FILE_PIECES in payload.stored,
        "payload_hash": digest,
        "requested_by_id": request.user_id,
        "reason": reason,
        "plan_id": request.plan_id,
    }
    if render_error is not None:
        error = _render_failure(render_error, target.kind)
        return ConfigPush.objects.create(
            **fields,
            status=PushStatus.FAILED,
            error=error,
            finished_at=now,
            log=log_lines(
                [say(words.PUSH_LOG_REQUESTED, reason=reason), words.PUSH_LOG_FAILED_EARLY, error], now
            ),
        )
    if not request.force and _last_outcome_hash(target) == digest:
        return ConfigPush.objects.create(
            **fields,
            status=PushStatus.SUCCEEDED,
            started_at=now,
            finished_at=now,
            log=log_lines(
                [
                    say(words.PUSH_LOG_REQUESTED, reason=reason),
                    CLAUSES.join([words.PUSH_LOG_UNCHANGED, words.PUSH_LOG_NOTHING_SENT]),
                ],
                now,
            ),
        )
    return _create_queued(target, fields, request)


def _queue_one(
    target: ConfigTarget,
    rendered: Rendered | _FixedPayload,
    *,
    reason: str,
    user,
    plan_id,
    force: bool,
    scoped: bool = False,
) -> ConfigPush | None:
    """Push `target` (its row locked by the caller): the new push, or None when a running push takes the
    request. `scoped`: send the request's slice (`_may_scope` said it may)."""
    payload = _payload_of(target, rendered, scoped)
    request = _PushRequest(
        reason=reason,
        user_id=user.pk if user is not None and getattr(user, "is_authenticated", False) else None,
        plan_id=plan_id,
        force=force,
        now=timezone.now(),
    )
    running = ConfigPush.objects.filter(target=target, status=PushStatus.RUNNING).first()
    if running is not None:
        _leave_to_running(target, running, request, payload.digest if payload.error is None else None)
        return None
    older = _supersede_queued(target, request.now)
    push = _create_push(target, payload, request)
    if push is None:
        return None
    if older:
        ConfigPush.objects.filter(pk__in=older).update(
            superseded_by=push,
            log=concat_log(
                log_lines([say(words.PUSH_LOG_SUPERSEDED, push=push.pk, reason=reason)], request.now)
            ),
        )
    if target.follow_up:
        target.follow_up = None  # this push renders the newest state: it covers the waiting request
        target.save(update_fields=["follow_up", "updated_at"])
    return push


def _may_scope(target: ConfigTarget, rendered: Rendered | _FixedPayload, force: bool) -> bool:
    """Whether `target` may be sent the request's slice alone rather than the whole state: only on top of a
    configuration known to be live, so that the slice plus what the target holds is the whole state. That is
    when its kind takes slices, the push is not forced (a repair sends everything), nothing waits for the
    target (a queued push the new one supersedes, a follow-up: they carry changes outside the slice; a
    running push keeps the request as its follow-up, pushed whole) and its last finished push succeeded (a
    failed one may have left any part half done)."""
    if force or not rendered.scoped(target) or target.follow_up:
        return False
    if ConfigPush.objects.filter(target=target).active().exists():
        return False
    return _last_outcome_hash(target) is not None


class _FixedPayload:
    """Stands where a Rendered does in _queue_one: always the same payload (a version pushed again)."""

    def __init__(self, payload: dict[str, Any]):
        self.payload = payload

    def scoped(self, target: ConfigTarget) -> bool:
        return False

    def payload_for(self, target: ConfigTarget, *, scoped: bool = False) -> dict[str, Any]:
        return self.payload


def queue_payload(target_id: int, payload: dict[str, Any], *, reason: str, user=None) -> ConfigPush:
    """Push a given payload (an earlier push's version: integrations.push_history.push_again) to one
    target, through the same rows, claim and task as any push; forced (sent even if equal to the live
    one). Refused while a push runs on the target: its follow-up would render the current state instead."""
    with transaction.atomic():
        target = ConfigTarget.objects.select_for_update().get(pk=target_id)
        if not target.enabled:
            raise ValidationError(f"Target {target.name} is disabled: enable it first.")
        if ConfigPush.objects.filter(target=target, status=PushStatus.RUNNING).exists():
            raise ValidationError(
                f"A push is running on {target.name}: wait for it to finish, then push this version again."
            )
        push = _queue_one(
            target, _FixedPayload(payload), reason=reason[:255], user=user, plan_id=None, force=True
        )
        if push is None:  # the row lock makes this all but impossible
            raise ValidationError(f"A push is running on {target.name}: try again when it has finished.")
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
        reason=say(words.PUSH_RETRY, push=push.pk), user=user, plan_id=push.plan_id, targets=[push.target]
    )


# --- dry run ------------------------------------------------------------------------------------------


def dry_run(targets: Iterable[ConfigTarget] | None = None) -> dict[str, list[str]]:
    """What a push would change on each enabled target (read-only: no rows, nothing sent)."""
    chosen = list(targets) if targets is not None else list(ConfigTarget.objects.filter(enabled=True))
    rendered = Rendered(fabric=needs_fabric(chosen))
    result: dict[str, list[str]] = {}
    for target in chosen:
        try:
            payload = rendered.payload_for(target)
            result[target.name] = adapter_for(target).diff(payload) or ["no changes"]
        except Exception as error:  # a dry run reports every target, whatever one of them says
            result[target.name] = [f"cannot tell: {error_text(error, target.kind)}"]
    return result


def adapter_for(target: ConfigTarget):
    """The adapter of the target's kind, built from its validated settings."""
    return registry.get(target.kind).adapter(target, target.cleaned_settings())


# --- what the push history (integrations.push_history) keeps ----------------------------------------------

KEEP_PAYLOADS = 20  # finished pushes per target whose payload is kept (for diffs and rollback)


def prune_payloads(target_id: int, keep: int = KEEP_PAYLOADS) -> int:
    """Let go of the payloads of a target's finished pushes beyond the newest `keep` (hash and log stay),
    never the last successful push's (what the target holds: its files' pieces stay stored, see
    integrations.contents). Returns how many were let go."""
    finished = ConfigPush.objects.filter(target_id=target_id).exclude(status__in=[PushStatus.QUEUED])
    finished = finished.exclude(status=PushStatus.RUNNING).exclude(payload_hash="")
    kept = list(finished.order_by("-pk").values_list("pk", flat=True)[:keep])
    if len(kept) < keep:
        return 0
    live = (
        finished.filter(status=PushStatus.SUCCEEDED)
        .order_by("-finished_at", "-pk")
        .values_list("pk", flat=True)
        .first()
    )
    return finished.filter(pk__lt=min(kept)).exclude(pk=live).exclude(payload={}).update(payload={})


def remember(target: ConfigTarget, adapter) -> None:
    """Keep what the adapter learned about the target (`adapter.facts`: the Slurm version) on the target."""
    facts = getattr(adapter, "facts", None)
    if facts:
        merged = {**(target.facts or {}), **facts, "checked_at": timezone.now().isoformat()}
        ConfigTarget.objects.filter(pk=target.pk).update(facts=merged)
        target.facts = merged
