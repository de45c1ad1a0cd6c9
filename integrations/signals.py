"""Configuration pushes follow tenancy changes: a change to anything the rendered configuration holds queues a
push to the enabled targets (integrations.pushes.queue_pushes) after its transaction commits, once per
transaction, with a reason naming the change ("department research: guarantee 168 -> 200").

What the configuration renders from tenancy (integrations.state.build_state): each department's name, slug,
guarantee, limit, P_Key, network, export path and storage quota (Slurm QOS, Kueue ClusterQueues, namespaces,
OpenSM, NFS); which department each NVLink partition is dedicated to (Slurm partitions, node labels); the NFS
server of the tenancy settings; who may submit under each Slurm account (slurmdbd's associations: memberships
of departments and projects, POSIX login names, and who is active or a platform admin). A department's weight
and priority (decisions only: scheduling.signals asks for a pass), its VLAN and VNI (checked, but no file
holds them yet) and the other settings render nothing and queue nothing. Changes are heard through
core.changes.watch, as scheduling.signals hears its own: saves compared with the stored row, deletes, and bulk
changes (core.audit.bulk_changed).

Coalescing: every change of a transaction joins one batch and registers an on-commit callback; the first of
them to run pushes once for all. A push that the same transaction saved after the batch's last change (a
partition plan queues its own) already renders it: its target is left out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.db.models.signals import post_save, pre_save
from django.utils import translation

from core.audit import bulk_changed, current_actor
from core.changes import ADDED, BULK, CHANGED, DELETED, Change, watch
from core.enqueue import send_now
from core.sentences import say
from core.task_names import SYNC_TRAY
from integrations import words
from integrations.models import ConfigPush, ConfigTarget
from integrations.pushes import queue_pushes
from integrations.requeue import tray_drained
from integrations.trays import owner_name
from inventory.choices import TrayState
from inventory.health.actions import tray_health_changed
from inventory.models import ComputeTray
from tenancy.models import (
    DedicatedPartition,
    Department,
    Membership,
    PosixAccount,
    Project,
    ProjectMembership,
    TenancySettings,
)

logger = logging.getLogger(__name__)

# Model -> {field the configuration renders: how a push reason names it}. Kept equal to what
# integrations.state reads (tests/integrations/test_tenancy_pushes.py changes every field and compares).
RENDERED: dict[type, dict[str, str]] = {
    Department: {
        "name": "name",
        "slug": "slug",
        "guaranteed_gpus": "guarantee",
        "limit_gpus": "limit",
        "ib_pkey": "P_Key",
        "network_cidr": "network",
        "export_path": "export path",
        "storage_quota_gib": "storage quota (GiB)",
    },
    DedicatedPartition: {"partition": "partition", "department": "department"},
    # A project is a ClusterQueue, namespace, ResourceQuota and LocalQueue, and a Slurm child account.
    Project: {
        "name": "name",
        "slug": "slug",
        "department": "department",
        "guaranteed_gpus": "guarantee",
        "over_quota_weight": "over-quota weight",
        "limit_gpus": "limit",
    },
    TenancySettings: {"nfs_server": "NFS server"},
    # Who may submit under each Slurm account (integrations.state._submitters: slurmdbd's associations).
    Membership: {"user": "person", "department": "department", "role": "role"},
    ProjectMembership: {"user": "person", "project": "project"},
    PosixAccount: {"user": "person", "name": "login name"},
    User: {"is_active": "active", "is_staff": "platform admin", "is_superuser": "superuser"},
    # A tray's MIG layout: its node's nvidia.com/mig.config label, the mig-parted ConfigMap, Slurm's GRES.
    ComputeTray: {"mig_layout": "MIG layout", "mig_layout_devices": "MIG devices"},
}
# Created with its defaults, these render what was rendered before they existed (TenancySettings.load()
# makes the row on first use, even while a push renders): only the fields set otherwise count as a change.
CREATED_AS_DEFAULTS = (TenancySettings,)

REASON_LENGTH = 255  # ConfigPush.reason


def _label(instance) -> str:
    if isinstance(instance, Department):
        return say(words.CHANGED_DEPARTMENT, department=instance.slug)
    if isinstance(instance, DedicatedPartition):
        return say(words.CHANGED_DEDICATION, dedication=instance)
    if isinstance(instance, Project):
        return say(words.CHANGED_PROJECT, project=f"{instance.department.slug}/{instance.slug}")
    try:
        if isinstance(instance, Membership):
            return say(
                words.CHANGED_MEMBERSHIP, person=instance.user.username, department=instance.department.slug
            )
        if isinstance(instance, ProjectMembership):
            project = instance.project
            return say(
                words.CHANGED_PROJECT_MEMBERSHIP,
                person=instance.user.username,
                project=f"{project.department.slug}/{project.slug}",
            )
        if isinstance(instance, PosixAccount):
            return say(words.CHANGED_POSIX_ACCOUNT, person=instance.user.username)
    except ObjectDoesNotExist:  # deleted with the person or the department it named
        pass
    if isinstance(instance, User):
        return say(words.CHANGED_PERSON, person=instance.username)
    if isinstance(instance, ComputeTray):
        return say(words.CHANGED_TRAY, host=instance.hostname)
    with translation.override("en"):  # a stored reason is English, whoever's request made the change
        return str(instance._meta.verbose_name)


def _value(value) -> str:
    return words.NO_VALUE if value is None else str(value)


def _change(model: type, name: str, old, new) -> str:
    rendered = RENDERED[model][name]
    if model._meta.get_field(name).is_relation:  # a primary key says nothing to a reader
        return say(words.FIELD_CHANGED, changed_field=rendered)
    return say(words.FIELD_CHANGE, changed_field=rendered, old_value=_value(old), new_value=_value(new))


# --- one push per transaction -------------------------------------------------------------------------


@dataclass(eq=False)
class _Batch:
    """The changes of one transaction: why to push, and which targets a later push there already covers."""

    reasons: list[str] = field(default_factory=list)
    covered: dict[int, int | None] = field(default_factory=dict)  # target -> its push (None: a follow-up)
    sent: bool = False
    user: object | None = None  # who made the first change: the pushes' requester


@dataclass(frozen=True)
class _PushOnCommit:
    """The on-commit callback of one change: the first of its batch to run queues the pushes."""

    batch: _Batch

    def __call__(self) -> None:
        if self.batch.sent:
            return
        self.batch.sent = True
        _push(self.batch)


def _pending_batch() -> _Batch | None:
    """The batch of the current transaction that has not pushed yet. Any such callback still waiting runs
    whenever a change made now commits (a savepoint that rolls it back would roll back the change too)."""
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        return None
    for _sids, callback, *_ in connection.run_on_commit:
        if isinstance(callback, _PushOnCommit) and not callback.batch.sent:
            return callback.batch
    return None


def request_push(reason: str) -> None:
    """Ask for a push of the current configuration once the current transaction commits (at once outside
    one); coalesced with the transaction's other requests."""
    batch = _pending_batch() or _Batch(user=current_actor())
    if reason not in batch.reasons:
        batch.reasons.append(reason)
    batch.covered.clear()  # a push saved before this change rendered the state without it
    transaction.on_commit(_PushOnCommit(batch), robust=True)


def _reason(reasons: list[str]) -> str:
    """The reasons joined; when they do not fit in a push's reason, as many as fit and how many more."""
    text = "; ".join(reasons)
    if len(text) <= REASON_LENGTH:
        return text
    kept: list[str] = []
    for count, reason in enumerate(reasons, 1):
        if (
            len("; ".join([*kept, reason, say(words.AND_MORE_REASONS, more=len(reasons) - count)]))
            > REASON_LENGTH
        ):
            break
        kept.append(reason)
    if not kept:
        return text[:REASON_LENGTH]
    return "; ".join([*kept, say(words.AND_MORE_REASONS, more=len(reasons) - len(kept))])


def _push(batch: _Batch) -> None:
    targets = None
    if batch.covered:
        pushed = {pk for pk in batch.covered.values() if pk is not None}
        still_there = set(ConfigPush.objects.filter(pk__in=pushed).values_list("target_id", flat=True))
        covered = still_there | {target for target, push in batch.covered.items() if push is None}
        targets = list(
            ConfigTarget.objects.filter(enabled=True).exclude(pk__in=covered).values_list("pk", flat=True)
        )
        if not targets:
            return
    created = queue_pushes(reason=_reason(batch.reasons), user=batch.user, targets=targets)
    logger.info(
        "tenancy change (%s): %d configuration push(es) queued", "; ".join(batch.reasons), len(created)
    )


def requested_push(instance) -> str | None:
    """The reason of the push the last save of `instance` asked for; None when nothing rendered changed."""
    return getattr(instance, "_config_push_reason", None)


# --- receivers ----------------------------------------------------------------------------------------


def _forget_reason(sender, instance, **kwargs):
    instance._config_push_reason = None  # requested_push answers for this save only


def _ask_for_a_push(change: Change) -> None:
    if change.model is User and change.action in (ADDED, DELETED):
        return  # a new person submits nowhere yet; a deleted one's memberships and POSIX account go too
    if change.model is ComputeTray and change.action in (ADDED, DELETED):
        return  # only a tray's MIG layout is watched here; trays come and go through discovery and plans
    if change.model is Project and change.action != BULK and change.instance.is_default:
        return  # a department's default project renders as the department itself: nothing of its own
    rendered = RENDERED[change.model]
    if change.action == BULK:
        touched = ", ".join(rendered[name] for name in sorted(change.fields))
        with translation.override("en"):  # stored in English, whoever's request made the change
            plural = str(change.model._meta.verbose_name_plural)
        request_push(f"{change.count} {plural}: {touched}")
        return
    label = _label(change.instance)
    if change.action == CHANGED:
        changes = ", ".join(_change(change.model, name, *values) for name, values in change.fields.items())
        reason = say(words.CHANGED_FIELDS, changed=label, field_changes=changes)
    else:
        reason = say(words.CHANGE_ADDED if change.action == ADDED else words.CHANGE_DELETED, changed=label)
    change.instance._config_push_reason = reason
    request_push(reason)


def _push_saved(sender, instance, created, raw=False, **kwargs):
    """A push saved in a transaction with pending changes covers its target (it renders them already)."""
    if created and not raw and (batch := _pending_batch()) is not None:
        batch.covered[instance.target_id] = instance.pk


def _follow_up_kept(sender, instance, raw=False, update_fields=None, **kwargs):
    """A request kept for a target's running push is pushed, rendered afresh, when that push ends."""
    if raw or not instance.follow_up or (update_fields is not None and "follow_up" not in update_fields):
        return
    if (batch := _pending_batch()) is not None:
        batch.covered[instance.pk] = None


def connect() -> None:
    for model in RENDERED:
        pre_save.connect(
            _forget_reason, sender=model, dispatch_uid=f"config_push_reason_{model._meta.label_lower}"
        )
    watch(
        "config_push",
        {model: tuple(fields) for model, fields in RENDERED.items()},
        _ask_for_a_push,
        created_as_defaults=CREATED_AS_DEFAULTS,
    )
    post_save.connect(_push_saved, sender=ConfigPush, dispatch_uid="config_push_covers_target")
    post_save.connect(
        _follow_up_kept, sender=ConfigTarget, dispatch_uid="config_push_follow_up_covers_target"
    )
    watch("tray_schedulers", {ComputeTray: ("state", "state_reason")}, _tray_changed)
    bulk_changed.connect(
        _trays_changed_in_bulk, sender=ComputeTray, dispatch_uid="tray_schedulers_bulk_trays"
    )
    # Running jobs of a tray drained by a fault: their class's policy (scheduling.requeue).
    tray_health_changed.connect(tray_drained, dispatch_uid="requeue_jobs_of_drained_tray")


# --- trays leaving and returning to service: every scheduler is told (integrations.trays) ------------------


@dataclass(frozen=True)
class _SyncTrayOnCommit:
    tray_id: int
    owner: str

    def __call__(self) -> None:
        send_now(SYNC_TRAY, self.tray_id, self.owner)


def _tray_changed(change: Change) -> None:
    if change.action == BULK or change.instance is None:
        return  # trays changed together (a partition plan's drain): _trays_changed_in_bulk, by pk
    if change.action not in (CHANGED, ADDED):
        return
    if change.action == ADDED and change.instance.state == TrayState.UP:
        return  # a new tray in service: nothing to drain
    transaction.on_commit(_SyncTrayOnCommit(change.instance.pk, owner_name()), robust=True)


def _trays_changed_in_bulk(sender, changes, **kwargs) -> None:
    """Trays changed together (a partition plan drains its trays and returns them: update_recorded): each
    one whose state or reason changed is pushed to the schedulers like a tray changed alone."""
    owner = owner_name()
    for pk, diff in sorted(changes.items()):
        if "state" in diff or "state_reason" in diff:
            transaction.on_commit(_SyncTrayOnCommit(pk, owner), robust=True)
