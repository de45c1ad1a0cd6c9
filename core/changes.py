"""Watch some fields of some models and hear of every change to them: through save() (compared with the stored
row, so a save that changes nothing watched costs one narrow read at most, and none when its `update_fields`
names no watched field), delete(), and bulk updates (announced as core.audit.bulk_changed).

The scheduler asks for a pass this way (scheduling.signals) and the integrations for a configuration push
(integrations.signals); each reacts to a `Change` in its own words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django.db.models import Model
from django.db.models.signals import post_delete, post_save, pre_save

from core.audit import bulk_changed

ADDED, CHANGED, DELETED, BULK = "added", "changed", "deleted", "bulk"


@dataclass(frozen=True)
class Change:
    model: type[Model]
    action: str  # ADDED, CHANGED, DELETED, or BULK (rows updated together: no instance)
    instance: object | None = None
    # CHANGED: watched field name -> (before, after), in the order watched. BULK: the watched fields touched.
    fields: dict[str, tuple] = field(default_factory=dict)
    count: int = 1  # rows (BULK)


def watch(
    key: str,
    watched: dict[type[Model], tuple[str, ...]],
    on_change: Callable[[Change], None],
    *,
    created_as_defaults: tuple[type[Model], ...] = (),
) -> None:
    """Call `on_change` for each change of a watched field. `key` names the watcher (signal dispatch ids, the
    attribute a save's before-values wait in). A model of `created_as_defaults` that is created is compared
    with its fields' defaults instead of being reported as added (a settings row made on first use)."""
    before_attr = f"_watch_before_{key}"

    def attnames(model: type[Model]) -> list[str]:
        return [model._meta.get_field(name).attname for name in watched[model]]

    def report_diff(model: type[Model], instance, before: tuple) -> None:
        after = tuple(getattr(instance, name) for name in attnames(model))
        pairs = zip(watched[model], before, after, strict=True)
        changed = {name: (old, new) for name, old, new in pairs if old != new}
        if changed:
            on_change(Change(model, CHANGED, instance, changed))

    def pre(sender, instance, raw=False, update_fields=None, **kwargs):
        setattr(instance, before_attr, None)
        if raw or instance._state.adding or instance.pk is None:
            return
        names = attnames(sender)
        if update_fields is not None and not set(update_fields) & {*watched[sender], *names}:
            return
        stored = sender._default_manager.filter(pk=instance.pk).values_list(*names).first()
        setattr(instance, before_attr, stored)

    def post(sender, instance, created, raw=False, **kwargs):
        if raw:
            return
        if created and sender in created_as_defaults:
            defaults = tuple(sender._meta.get_field(name).get_default() for name in watched[sender])
            report_diff(sender, instance, defaults)
        elif created:
            on_change(Change(sender, ADDED, instance))
        elif (before := getattr(instance, before_attr, None)) is not None:
            report_diff(sender, instance, before)

    def deleted(sender, instance, **kwargs):
        on_change(Change(sender, DELETED, instance))

    def bulk(sender, changes, **kwargs):
        names = watched.get(sender)
        if not names:
            return
        touched = {name for diff in changes.values() for name in diff}
        fields = {name: (None, None) for name in names if name in touched}
        if fields:
            on_change(Change(sender, BULK, None, fields, len(changes)))

    for model in watched:
        label = model._meta.label_lower
        pre_save.connect(pre, sender=model, weak=False, dispatch_uid=f"{key}_pre_save_{label}")
        post_save.connect(post, sender=model, weak=False, dispatch_uid=f"{key}_post_save_{label}")
        post_delete.connect(deleted, sender=model, weak=False, dispatch_uid=f"{key}_post_delete_{label}")
    bulk_changed.connect(bulk, weak=False, dispatch_uid=f"{key}_bulk_changed")
