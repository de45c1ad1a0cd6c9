"""Pass triggers: every change the scheduler's decisions depend on asks for a pass (scheduling.services.
request_pass: on commit, coalesced per transaction).

Watched, in the layers below: a department's guarantee, limit, weight or priority; a tray's state (drained,
down, up again), partition or fabric problems; a GPU's health, tray, fabric state or reported clique; NVLink
partitions and dedications appearing, changing or going. Saves compare with the stored row and ask only when
a watched field changed (discovery saves trays on every report, mostly unchanged); a save whose
`update_fields` names no watched field costs nothing. Bulk changes arrive as core.audit.bulk_changed.
"""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save, pre_save

from core.audit import bulk_changed
from inventory.models import ComputeTray, Gpu, NVLinkPartition
from scheduling.services import request_pass
from tenancy.models import DedicatedPartition, Department

# Model -> the fields a scheduling decision reads.
WATCHED: dict[type, tuple[str, ...]] = {
    Department: ("guaranteed_gpus", "limit_gpus", "over_quota_weight", "priority"),
    ComputeTray: ("state", "partition", "fabric_problems"),
    Gpu: ("health", "tray", "fabric_state", "reported_clique_id"),
    NVLinkPartition: ("rack", "clique_id", "name"),
    DedicatedPartition: ("partition", "department"),
}


def _attnames(model: type) -> list[str]:
    return [model._meta.get_field(name).attname for name in WATCHED[model]]


def _label(instance) -> str:
    return f"{instance._meta.verbose_name} {instance}"


def _pre_save(sender, instance, raw=False, update_fields=None, **kwargs):
    instance._pass_before = None
    if raw or instance._state.adding or instance.pk is None:
        return
    fields = WATCHED[sender]
    attnames = _attnames(sender)
    if update_fields is not None and not set(update_fields) & {*fields, *attnames}:
        return
    instance._pass_before = sender._default_manager.filter(pk=instance.pk).values_list(*attnames).first()


def _post_save(sender, instance, created, raw=False, update_fields=None, **kwargs):
    if raw:
        return
    if created:
        request_pass(f"{_label(instance)} added")
        return
    before = getattr(instance, "_pass_before", None)
    if before is None:
        return
    after = tuple(getattr(instance, name) for name in _attnames(sender))
    changed = [name for name, old, new in zip(WATCHED[sender], before, after, strict=True) if old != new]
    if changed:
        request_pass(f"{_label(instance)}: {', '.join(changed)}")


def _post_delete(sender, instance, **kwargs):
    request_pass(f"{_label(instance)} deleted")


def _bulk_changed(sender, changes, **kwargs):
    fields = set(WATCHED.get(sender, ()))
    if not fields:
        return
    touched = sorted({name for diff in changes.values() for name in diff} & fields)
    if touched:
        request_pass(f"{len(changes)} {sender._meta.verbose_name_plural}: {', '.join(touched)}")


def connect() -> None:
    for model in WATCHED:
        label = model._meta.label_lower
        pre_save.connect(_pre_save, sender=model, dispatch_uid=f"pass_pre_save_{label}")
        post_save.connect(_post_save, sender=model, dispatch_uid=f"pass_post_save_{label}")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=f"pass_post_delete_{label}")
    bulk_changed.connect(_bulk_changed, dispatch_uid="pass_bulk_changed")
