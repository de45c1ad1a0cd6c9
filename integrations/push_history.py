"""What each push changed, pushing an earlier version again, and asking a target whether it answers.

Every ConfigPush keeps the payload it rendered (`payload`, its sha256 in `payload_hash`), so a push's
changes are the difference between its payload and the payload of the previous push to the same target that
carried one: each file (directory and Slurm targets), each object (Kubernetes: "Kind namespace/name"), each
rack (the fabric) and the Slurm QOS list become one text item, and each item gets a unified diff (clipped at
DIFF_LINES lines). Unchanged items are listed, collapsed, so the page says what stayed as well.

The stored payloads are bounded: only the newest KEEP_PAYLOADS finished pushes of a target keep theirs
(integrations.pushes.prune_payloads, after every push); older ones keep their hash and log, and their page
says the content was let go. A fabric payload for 1,000 racks is a few megabytes: twenty of them per target
is the bound.

`push_again` (rollback) queues an earlier push's payload as a new push to its target, through the same
pipeline and task as any push (integrations.pushes.queue_payload), and records who asked in the audit log.
`test_connection` asks the target's adapter to `check()` its reachability and credentials without writing,
and says what it found in words.

After a rollback the target runs an older version than the portal's current configuration. `rolled_back`
tells (no column records it: a push again's reason is words.PUSH_ROLLBACK): the target's last successful push
is a push again whose payload differs from the newest push of the current configuration (the newest push that
is not a push again). The targets page and that push's page say so, with a button that queues a normal push
(integrations.pushes.queue_pushes) of the current configuration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from core.diffs import line_kinds, unified_diff
from core.models import AuditAction, AuditEvent, AuditSource
from core.sentences import say
from integrations import contents, pushes, registry, words
from integrations.models import ConfigPush, ConfigTarget, PushStatus

DIFF_LINES = 400  # unified-diff lines shown per file/object
ROLLBACK_PREFIX = "version of push #"
_ROLLBACK = re.compile(r"version of push #(\d+) pushed again")


# An item's state as the push page says it.
STATE_LABELS = {
    "added": pgettext_lazy("diff item", "added"),
    "removed": pgettext_lazy("diff item", "removed"),
    "changed": pgettext_lazy("diff item", "changed"),
    "unchanged": pgettext_lazy("diff item", "unchanged"),
}


@dataclass
class ItemDiff:
    """One file/object/rack of a push against the previous push: `state` added, removed, changed or
    unchanged; `lines` the unified diff (empty when unchanged)."""

    name: str
    state: str
    lines: list[str] = field(default_factory=list)
    clipped: int = 0

    @property
    def state_label(self) -> str:
        """The state in the reader's language."""
        return str(STATE_LABELS.get(self.state, self.state))

    @property
    def added(self) -> int:
        return sum(1 for kind, _line in line_kinds(self.lines) if kind == "add")

    @property
    def removed(self) -> int:
        return sum(1 for kind, _line in line_kinds(self.lines) if kind == "del")

    @property
    def styled(self) -> list[tuple[str, str]]:
        """(css class, line) for the page (the template escapes the line)."""
        return [(f"diff-{kind}", line) for kind, line in line_kinds(self.lines)]


@dataclass
class PushDiff:
    """A push's changes: `previous` the push compared with (None: the first push to its target);
    `unavailable` says in words why there is nothing to compare (payload let go, push failed to render)."""

    push: ConfigPush
    previous: ConfigPush | None
    items: list[ItemDiff]
    unavailable: str = ""

    @property
    def changed(self) -> list[ItemDiff]:
        return [item for item in self.items if item.state != "unchanged"]

    @property
    def unchanged(self) -> list[ItemDiff]:
        return [item for item in self.items if item.state == "unchanged"]


def _dump(value) -> str:
    return yaml.safe_dump(value, sort_keys=True, default_flow_style=False, allow_unicode=True)


def payload_items(payload: dict) -> dict[str, str]:
    """A payload as named texts, whatever its kind: files as they are, objects and racks as YAML."""
    items: dict[str, str] = {}
    files = payload.get("files")
    for name, text in (files if isinstance(files, Mapping) else {}).items():
        items[name] = text if isinstance(text, str) else json.dumps(text, indent=2, sort_keys=True)
    for obj in payload.get("objects") or []:
        meta = obj.get("metadata") or {}
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        items[f"{obj.get('kind', '?')} {where}{meta.get('name', '?')}"] = _dump(obj)
    for index, rack in enumerate(payload.get("racks") or []):
        name = rack.get("name") or rack.get("rack") or rack.get("cluster_uuid") or f"#{index + 1}"
        items[f"rack {name}"] = _dump(rack)
    if payload.get("qos"):
        items["Slurm QOS"] = _dump(payload["qos"])
    for key, value in payload.items():  # anything a future kind adds is shown, not dropped
        if key not in {"objects", "racks", "qos"} and not (key == "files" and isinstance(files, Mapping)):
            items[key] = _dump(value)
    return items


def has_payload(push: ConfigPush) -> bool:
    return bool(push.payload)


def previous_push(push: ConfigPush) -> ConfigPush | None:
    """The push to the same target before this one that carried a payload (whatever became of it)."""
    return (
        ConfigPush.objects.filter(target_id=push.target_id, pk__lt=push.pk)
        .exclude(payload_hash="")
        .order_by("-pk")
        .first()
    )


def diff_items(old: dict[str, str], new: dict[str, str]) -> list[ItemDiff]:
    out = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            out.append(ItemDiff(name, "unchanged"))
            continue
        lines = [
            line.rstrip("\n")
            for line in unified_diff(
                (before or "").splitlines(keepends=True),
                (after or "").splitlines(keepends=True),
                fromfile=f"previous/{name}" if before is not None else "/dev/null",
                tofile=f"this push/{name}" if after is not None else "/dev/null",
            )
        ]
        state = "added" if before is None else "removed" if after is None else "changed"
        clipped = max(0, len(lines) - DIFF_LINES)
        out.append(ItemDiff(name, state, lines[:DIFF_LINES], clipped))
    order = {"changed": 0, "added": 1, "removed": 2, "unchanged": 3}
    return sorted(out, key=lambda item: (order[item.state], item.name))


def push_diff(push: ConfigPush) -> PushDiff:
    """This push against the previous one to its target, item by item."""
    if not push.payload_hash:
        return PushDiff(push, None, [], _("This push rendered nothing (it failed before sending): no diff."))
    if not has_payload(push):
        return PushDiff(
            push,
            None,
            [],
            _(
                "The content of this push was let go (only the newest %(keep)s pushes of a target keep "
                "theirs); its hash is still shown above."
            )
            % {"keep": pushes.KEEP_PAYLOADS},
        )
    previous = previous_push(push)
    new = payload_items(contents.payload_of(push.payload))
    if previous is None:
        return PushDiff(push, None, diff_items({}, new))
    if not has_payload(previous):
        return PushDiff(
            push,
            previous,
            [],
            _("The content of the previous push (#%(previous)s) was let go: nothing to compare with.")
            % {"previous": previous.pk},
        )
    old = payload_items(contents.payload_of(previous.payload))
    if isinstance(push.payload.get("scope"), dict):
        # A rack's slice (integrations.rendering): compared with what the previous push held for the same
        # items; the other racks' were not sent, not removed.
        old = {name: text for name, text in old.items() if name in new}
    return PushDiff(push, previous, diff_items(old, new))


# --- rollback -------------------------------------------------------------------------------------------


def can_push_again(push: ConfigPush) -> str:
    """Why this push cannot be pushed again ("" when it can)."""
    if not push.payload_hash:
        return _("it rendered nothing")
    if not has_payload(push):
        return _("its content was let go (only the newest %(keep)s pushes keep theirs)") % {
            "keep": pushes.KEEP_PAYLOADS
        }
    if not push.target.enabled:
        return _("target %(target)s is disabled") % {"target": push.target.name}
    return ""


def push_again(push: ConfigPush, user) -> ConfigPush:
    """Queue this push's payload again as a new push to its target (rollback), audited."""
    why = can_push_again(push)
    if why:
        raise ValidationError(
            _("Push #%(push)s cannot be pushed again: %(why)s.") % {"push": push.pk, "why": why}
        )
    with transaction.atomic():
        created = pushes.queue_payload(
            push.target_id, push.payload, reason=say(words.PUSH_ROLLBACK, push=push.pk), user=user
        )
        actor = user if getattr(user, "is_authenticated", False) else None
        AuditEvent.objects.create(
            actor=actor,
            actor_name=actor.get_username() if actor else "",
            source=AuditSource.UI,
            action=AuditAction.CREATE,
            object_type="integrations.configpush",
            object_id=str(created.pk),
            object_repr=f"Push #{created.pk} to {push.target.name}"[:200],
            before={},
            after={
                "rollback_of": push.pk,
                "target": push.target_id,
                "payload_hash": push.payload_hash,
                "status": created.status,
            },
            labels={"after": {"target": push.target.name}},
        )
    return created


def rollback_of(push: ConfigPush) -> int | None:
    """The push whose version `push` pushed again (a rollback), or None (a normal push)."""
    match = _ROLLBACK.fullmatch(push.reason or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class RolledBack:
    """A target running an older version than the current configuration: `push` the rollback it runs (the
    version of push `version_of`), `current` the newest push of the current configuration, `pending` a
    push queued or running since the rollback (None: nothing is bringing the current one back)."""

    push: ConfigPush
    version_of: int | None
    current: ConfigPush
    pending: ConfigPush | None = None

    @property
    def sentence(self) -> str:
        return (
            f"Runs an older version: push #{self.push.pk} rolled back to the version of push "
            f"#{self.version_of}, not the current configuration (push #{self.current.pk})."
        )


def rolled_back(target: ConfigTarget) -> RolledBack | None:
    """Whether `target` runs a version pushed again that is not the current configuration (three small
    queries; None when it runs the current one, or was never rolled back)."""
    pushes_of = ConfigPush.objects.filter(target_id=target.pk).exclude(payload_hash="")
    last = (
        pushes_of.filter(status=PushStatus.SUCCEEDED)
        .order_by("-finished_at", "-pk")
        .only("pk", "reason", "payload_hash", "finished_at", "target_id")
        .first()
    )
    if last is None or rollback_of(last) is None:
        return None
    current = (
        pushes_of.exclude(reason__startswith=ROLLBACK_PREFIX)
        .exclude(status=PushStatus.SUPERSEDED)
        .order_by("-pk")
        .only("pk", "payload_hash", "status", "target_id")
        .first()
    )
    if current is None or current.payload_hash == last.payload_hash:
        return None
    pending = (
        ConfigPush.objects.filter(
            target_id=target.pk, pk__gt=last.pk, status__in=[PushStatus.QUEUED, PushStatus.RUNNING]
        )
        .order_by("-pk")
        .only("pk", "status", "target_id")
        .first()
    )
    return RolledBack(push=last, version_of=rollback_of(last), current=current, pending=pending)


# --- test connection -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionCheck:
    ok: bool
    summary: str
    details: list[str]


def test_connection(target: ConfigTarget) -> ConnectionCheck:
    """Ask the target's adapter whether it can reach the target with these settings (nothing written)."""
    if not registry.is_kind(target.kind):
        return ConnectionCheck(
            False,
            _("%(target)s has an unknown kind (%(kind)s).") % {"target": target.name, "kind": target.kind},
            [],
        )
    try:
        adapter = pushes.adapter_for(target)
    except ValidationError as error:
        return ConnectionCheck(
            False,
            _("The settings of %(target)s are not valid: %(errors)s")
            % {"target": target.name, "errors": "; ".join(error.messages)},
            [],
        )
    try:
        details = list(adapter.check())
        pushes.remember(target, adapter)
    except Exception as error:  # the check reports what went wrong in words, whatever it was
        text = pushes.error_text(error, target.kind)
        first, *rest = text.splitlines() or [type(error).__name__]
        return ConnectionCheck(
            False, _("Testing %(target)s failed: %(first)s") % {"target": target.name, "first": first}, rest
        )
    answer = details[0] if details else _("ok")
    return ConnectionCheck(
        True, _("%(target)s answers: %(answer)s") % {"target": target.name, "answer": answer}, details[1:]
    )
