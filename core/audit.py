"""Record every change to the models that matter: who, when, through which door, before and after.

The actor and the source (UI, API, admin, task, command) travel in a context variable set by
AuditMiddleware for requests and by `audit_context()` for tasks and commands; model signals do the
recording, so no code path (views, API, admin, services, tasks) can forget to. Fields that change on
every discovery report or heartbeat are left out of the diff; a save that changes nothing else records
nothing.

Bulk changes (QuerySet.update(), bulk_update()) send no model signal: code that makes them goes through
`update_recorded`, `bulk_update_recorded` or `recording_changes`, which read the rows' values before,
record one event per changed row of an audited model and send `bulk_changed` for any model. Code that
already holds the before-values (discovery ingest) calls `record_bulk_change` itself.
"""

import contextlib
import contextvars
import json
from dataclasses import dataclass

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import Signal
from django.forms.models import model_to_dict

from core.models import AuditAction, AuditEvent, AuditSource


@dataclass(frozen=True)
class AuditContext:
    actor: object | None
    source: str


_context: contextvars.ContextVar[AuditContext | None] = contextvars.ContextVar("audit_context", default=None)
# Outside any request or task: a management command or a shell.
_COMMAND = AuditContext(actor=None, source=AuditSource.COMMAND)


def _current() -> AuditContext:
    return _context.get() or _COMMAND


# Sent after rows changed in bulk (QuerySet.update() / bulk_update() send no post_save), by the code that
# changed them: sender = the model class, changes = {pk: {field: (before, after)}} (changed fields only,
# keyed by field name, a foreign key as the related row's pk: {"partition": (3, 7)}). Sent after the audit
# recorded it, inside the caller's transaction; other layers (the scheduler's pass triggers) may listen.
bulk_changed = Signal()

# Model label -> fields never worth an audit entry (volatile, or recorded elsewhere).
AUDITED: dict[str, set[str]] = {
    "inventory.rack": {"updated_at"},
    "inventory.computetray": {"last_report", "last_report_at"},
    "inventory.nvlinkpartition": set(),
    "inventory.partitionplan": {"findings"},
    "inventory.agenttoken": {"secret_hash", "last_used_at"},
    "tenancy.department": {"updated_at"},
    "tenancy.membership": set(),
    "tenancy.dedicatedpartition": set(),
    "tenancy.tenancysettings": set(),
    "tenancy.exporterendpoint": {"last_scraped_at", "last_error", "last_sample_count"},
    # Notes recomputed by every pass and every job sync (a backend unreachable at 12:00:30 ...).
    "scheduling.job": {"pending_reason", "backend_message"},
}


@contextlib.contextmanager
def audit_context(source: str, actor=None):
    token = _context.set(AuditContext(actor=actor, source=source))
    try:
        yield
    finally:
        _context.reset(token)


class AuditMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        source = AuditSource.UI
        if path.startswith("/api/"):
            source = AuditSource.API
        elif path.startswith("/admin/"):
            source = AuditSource.ADMIN
        # DRF authenticates tokens inside the view, so the actor is read lazily from the request.
        with audit_context(source, actor=request):
            return self.get_response(request)


def _actor():
    actor = _current().actor
    if actor is not None and hasattr(actor, "user"):  # a request: DRF may have replaced .user by now
        actor = getattr(actor, "user", None)
    return actor if actor is not None and getattr(actor, "is_authenticated", False) else None


def _snapshot(instance) -> dict:
    excluded = AUDITED[instance._meta.label_lower]
    data = model_to_dict(instance, exclude=list(excluded))
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder, default=str))


def _department_id(instance):
    label = instance._meta.label_lower
    if label == "tenancy.department":
        return instance.pk
    return getattr(instance, "department_id", None)


def _record(instance, action, before, after):
    if action == AuditAction.UPDATE:
        changed = {key for key in after if before.get(key) != after.get(key)}
        if not changed:
            return
        before = {key: before.get(key) for key in changed}
        after = {key: after[key] for key in changed}
    actor = _actor()
    AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor else "",
        source=_current().source,
        action=action,
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        department_id=_department_id(instance),
        before=before,
        after=after,
    )


def _pre_save(sender, instance, raw=False, **kwargs):
    if raw:
        return
    previous = sender._default_manager.filter(pk=instance.pk).first() if instance.pk else None
    instance._audit_before = _snapshot(previous) if previous is not None else None


def _post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    before = getattr(instance, "_audit_before", None)
    after = _snapshot(instance)
    if created or before is None:
        _record(instance, AuditAction.CREATE, None, after)
    else:
        _record(instance, AuditAction.UPDATE, before, after)


def _post_delete(sender, instance, **kwargs):
    _record(instance, AuditAction.DELETE, _snapshot(instance), None)


# --- bulk changes ---------------------------------------------------------------------------------------


def _json(value):
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder, default=str))


def _fields(model, names) -> list:
    return [model._meta.get_field(name) for name in names]


def _stored(field, value):
    """A value as a `values_list` read of the field returns it (a foreign key: the related pk)."""
    if field.is_relation and isinstance(value, Model):
        return value.pk
    return value


def _read(model, pks, fields) -> dict:
    """{pk: {field name: stored value}} in one query."""
    rows = model._default_manager.filter(pk__in=list(pks)).values_list("pk", *(f.attname for f in fields))
    return {row[0]: {f.name: value for f, value in zip(fields, row[1:], strict=True)} for row in rows}


def _diff(before: dict, after: dict) -> dict:
    """{pk: {field: (before, after)}} for the fields that changed, rows in both only."""
    changes = {}
    for pk, old in before.items():
        new = after.get(pk)
        if new is None:
            continue
        diff = {name: (old[name], new[name]) for name in old if old[name] != new[name]}
        if diff:
            changes[pk] = diff
    return changes


def record_bulk_change(model, changes: dict) -> None:
    """Record rows changed in bulk: one event per row of an audited model (its volatile fields left out,
    under the current audit context), then send `bulk_changed` for any model. `changes` is
    {pk: {field name: (before, after)}}, a foreign key as the related pk."""
    changes = {pk: diff for pk, diff in changes.items() if diff}
    if not changes:
        return
    label = model._meta.label_lower
    if label in AUDITED:
        excluded = AUDITED[label]
        audited = {pk: {k: v for k, v in diff.items() if k not in excluded} for pk, diff in changes.items()}
        audited = {pk: diff for pk, diff in audited.items() if diff}
        if audited:
            # Non-null foreign keys joined: an object's str() may name its parent (a partition its rack).
            instances = model._default_manager.select_related().in_bulk(list(audited))
            actor, source = _actor(), _current().source
            events = []
            for pk, diff in audited.items():
                instance = instances.get(pk)
                events.append(
                    AuditEvent(
                        actor=actor,
                        actor_name=actor.get_username() if actor else "",
                        source=source,
                        action=AuditAction.UPDATE,
                        object_type=label,
                        object_id=str(pk),
                        object_repr=(str(instance) if instance is not None else str(pk))[:200],
                        department_id=_department_id(instance) if instance is not None else None,
                        before=_json({name: old for name, (old, new) in diff.items()}),
                        after=_json({name: new for name, (old, new) in diff.items()}),
                    )
                )
            AuditEvent.objects.bulk_create(events)
    bulk_changed.send(sender=model, changes=changes)


def update_recorded(queryset, **values) -> int:
    """`queryset.update(**values)`, recorded: reads the rows' current values in one query, updates those
    rows, records what changed. Returns the number of rows updated. Values may be expressions (F())."""
    model = queryset.model
    fields = _fields(model, values)
    before = {
        row[0]: {f.name: value for f, value in zip(fields, row[1:], strict=True)}
        for row in queryset.values_list("pk", *(f.attname for f in fields))
    }
    if not before:
        return 0
    count = model._default_manager.filter(pk__in=list(before)).update(**values)
    if any(hasattr(value, "resolve_expression") for value in values.values()):
        after = _read(model, before, fields)
    else:
        stored = {f.name: _stored(f, values[name]) for f, name in zip(fields, values, strict=True)}
        after = {pk: stored for pk in before}
    record_bulk_change(model, _diff(before, after))
    return count


def bulk_update_recorded(objs, fields, **options) -> int:
    """`Model.objects.bulk_update(objs, fields)`, recorded: one query reads the rows' stored values first."""
    objs = list(objs)
    if not objs:
        return 0
    model = type(objs[0])
    model_fields = _fields(model, fields)
    before = _read(model, [obj.pk for obj in objs], model_fields)
    count = model._default_manager.bulk_update(objs, fields, **options)
    after = {obj.pk: {f.name: getattr(obj, f.attname) for f in model_fields} for obj in objs}
    record_bulk_change(model, _diff(before, after))
    return count


@contextlib.contextmanager
def recording_changes(queryset, *fields):
    """Record the net change of `fields` on the rows of `queryset` over a block of several bulk updates:
    one event per row from its value before the block to its value after (a tray moved to a partition
    through "no partition" is recorded once, old -> new). Rows deleted inside the block are left out."""
    model = queryset.model
    model_fields = _fields(model, fields)
    before = {
        row[0]: {f.name: value for f, value in zip(model_fields, row[1:], strict=True)}
        for row in queryset.values_list("pk", *(f.attname for f in model_fields))
    }
    yield
    if before:
        record_bulk_change(model, _diff(before, _read(model, before, model_fields)))


def connect() -> None:
    # Per audited model, so deletes of other models (telemetry history) stay fast bulk deletes.
    for label in AUDITED:
        model = apps.get_model(label)
        pre_save.connect(_pre_save, sender=model, dispatch_uid=f"audit_pre_save_{label}")
        post_save.connect(_post_save, sender=model, dispatch_uid=f"audit_post_save_{label}")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=f"audit_post_delete_{label}")
