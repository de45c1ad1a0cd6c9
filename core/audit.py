"""Record every change to the models that matter: who, when, through which door, before and after.

The actor and the source (UI, API, admin, task, command) travel in a context variable set by
AuditMiddleware for requests and by `audit_context()` for tasks and commands; model signals do the
recording, so no code path (views, API, admin, services, tasks) can forget to. Fields that change on
every discovery report or heartbeat are left out of the diff; a save that changes nothing else records
nothing. Secrets (SECRETS: the metrics source's token and password) are never recorded, but a change of one
is: as "set", "changed" or "removed".

Bulk changes (QuerySet.update(), bulk_update()) send no model signal: code that makes them goes through
`update_recorded`, `bulk_update_recorded` or `recording_changes`, which read the rows' values before,
record one event per changed row of an audited model and send `bulk_changed` for any model. Code that
already holds the before-values (discovery ingest) calls `record_bulk_change` itself.

Foreign keys are recorded as the related row's id in before/after, and its str() at the time beside it in
the event's `labels` ({"before": {"partition": "gb-r08 default"}, "after": {...}}): the row may be renamed
or deleted later (a partition plan deletes the partitions its trays leave). Bulk paths read the names in
one query per related model, whatever the number of rows.
"""

import contextlib
import contextvars
import functools
import hmac
import json
import os
from dataclasses import dataclass

from django.apps import apps
from django.core.exceptions import ObjectDoesNotExist
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import Signal
from django.forms.models import model_to_dict
from django.utils import timezone, translation

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
    # Made, revoked (core.tokens); the key is never stored, its hash never recorded.
    "core.personaltoken": {"key_hash", "last_used_at"},
    # Webhook endpoints and email recipients (core.notifications): the signing secret is never recorded (a
    # new one shows as secret_made_at).
    "core.notificationsubscription": {"secret", "updated_at"},
    "inventory.rack": {"updated_at"},
    "inventory.computetray": {
        "last_report",
        "last_report_at",
        "healthy_since",
        "agent_version",
        "agent_interval_s",
    },
    "inventory.nvlinkpartition": set(),
    "inventory.partitionplan": {"findings"},
    "inventory.recarvepolicy": {"updated_at"},
    # Which fabric source is in use (inventory.fabric_import); its groups and places are replaced whole.
    "inventory.fabricimport": {"notes"},
    "inventory.agenttoken": {"secret_hash", "last_used_at"},
    "inventory.healthrule": set(),
    "inventory.healthsettings": set(),
    # Service and RMA marks (inventory.health.service): who marked a tray, when, with what note.
    "inventory.servicerecord": set(),
    "scheduling.faultpolicy": set(),
    "tenancy.department": {"updated_at"},
    "tenancy.membership": set(),
    "tenancy.project": {"updated_at"},
    "tenancy.projectmembership": set(),
    "tenancy.grouprolerule": set(),
    "tenancy.externalidentity": {"groups", "last_sign_in_at"},
    # The Unix user a person's jobs run as (set by LDAP, OpenID Connect or an administrator).
    "tenancy.posixaccount": {"updated_at"},
    "tenancy.dedicatedpartition": set(),
    "tenancy.tenancysettings": set(),
    "tenancy.exporterendpoint": {"last_scraped_at", "last_error", "last_sample_count"},
    # The metrics source's token and password are never recorded (SECRETS: a change shows as "changed");
    # its poll state changes every minute.
    "tenancy.metricssource": {
        "bearer_token",
        "password",
        "last_polled_at",
        "last_error",
        "last_series_count",
    },
    # Notes recomputed by every pass and every job sync (a backend unreachable at 12:00:30 ...).
    "scheduling.job": {"pending_reason", "backend_message"},
}

# Model label -> secret fields (left out above) whose change is still worth an entry: recorded as "set",
# "changed" or "removed", never their value nor a hash of it (a weak password's hash can be guessed back).
SECRETS: dict[str, set[str]] = {"tenancy.metricssource": {"bearer_token", "password"}}
SECRET_SET, SECRET_CHANGED, SECRET_REMOVED, SECRET_NONE = "set", "changed", "removed", "not set"
# A snapshot holds a keyed digest of each secret, only to compare the row before and after a save in this
# process; _record writes the words above instead. The key is random per process and never stored.
_SECRET_DIGEST_KEY = os.urandom(32)


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


def current_actor():
    """The signed-in user the current request or task acts for (None for a command, a node, the beat)."""
    return _actor()


def _snapshot(instance) -> dict:
    label = instance._meta.label_lower
    data = model_to_dict(instance, exclude=list(AUDITED[label]))
    for name in SECRETS.get(label, ()):
        value = getattr(instance, name) or ""
        data[name] = hmac.digest(_SECRET_DIGEST_KEY, value.encode(), "sha256").hex() if value else ""
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder, default=str))


def _mask_secrets(label: str, before: dict | None, after: dict | None) -> None:
    """Replace the secrets' digests in an event's before/after by words: set, changed, removed, not set."""
    for name in SECRETS.get(label, ()):
        old = before.get(name) if before is not None else None
        new = after.get(name) if after is not None else None
        if before is not None and name in before:
            before[name] = SECRET_SET if old else SECRET_NONE
        if after is not None and name in after:
            if not new:
                after[name] = SECRET_REMOVED if old else SECRET_NONE
            else:
                after[name] = SECRET_CHANGED if old else SECRET_SET


LABEL_LIMIT = 200  # characters of a related row's name kept in an event's labels


@functools.cache
def _references(model: type[Model]) -> dict:
    """{field name: field} of the model's foreign keys and one-to-ones (a snapshot holds the related id).
    Cached per model: bulk recording asks twice per row."""
    return {f.name: f for f in model._meta.concrete_fields if f.is_relation}


def _labels(before: dict, after: dict) -> dict:
    """An event's `labels`: {} when no foreign key has a name on either side."""
    return {"before": before, "after": after} if before or after else {}


def _names_on(instance, values: dict | None) -> dict:
    """{field: str() of the related row} for the foreign keys among `values` (a snapshot's keys) that point
    somewhere: the row `instance` holds already, else one query each. Nothing is cached on `instance` (the
    caller's object must not start reading a related row it would have read fresh)."""
    if instance is None or not values:
        return {}
    names = {}
    # As `type`: mypy does not count a type[X] as Hashable, which the cache's arguments must be.
    model: type = type(instance)
    for name, field in _references(model).items():
        value = getattr(instance, field.attname)
        if name not in values or value is None:
            continue
        if field.is_cached(instance):
            related = field.get_cached_value(instance)
        else:
            # Non-null foreign keys joined: a row's str() may name its parent (a partition its rack).
            related = (
                field.related_model._base_manager.select_related()
                .filter(**{field.target_field.name: value})
                .first()
            )
        try:
            if related is not None:
                names[name] = str(related)[:LABEL_LIMIT]
        except ObjectDoesNotExist:  # a row its str() names is gone: the id alone is all there is
            continue
    return names


def _department_id(instance):
    label = instance._meta.label_lower
    if label == "tenancy.department":
        return instance.pk
    return getattr(instance, "department_id", None)


def _in_english(function):
    """The record is English whatever the language of the request that made the change (names with choice
    labels, the labels of foreign keys): the audit log is data, shown as stored. A new override per call:
    one `translation.override` used as a decorator is a single object shared by every thread."""

    @functools.wraps(function)
    def recorded(*args, **kwargs):
        with translation.override("en"):
            return function(*args, **kwargs)

    return recorded


@_in_english
def _record(instance, action, before, after, previous=None):
    """One event; `previous` is the row as it was before an update (for the names of its foreign keys)."""
    if action == AuditAction.UPDATE:
        changed = {key for key in after if before.get(key) != after.get(key)}
        if not changed:
            return
        before = {key: before.get(key) for key in changed}
        after = {key: after[key] for key in changed}
    _mask_secrets(instance._meta.label_lower, before, after)
    old_side = instance if action == AuditAction.DELETE else previous
    labels = _labels(_names_on(old_side, before), _names_on(instance, after))
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
        labels=labels,
    )


def _pre_save(sender, instance, raw=False, **kwargs):
    if raw:
        return
    previous = sender._default_manager.filter(pk=instance.pk).first() if instance.pk else None
    instance._audit_before = _snapshot(previous) if previous is not None else None
    instance._audit_previous = previous


def _post_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    before = getattr(instance, "_audit_before", None)
    after = _snapshot(instance)
    if created or before is None:
        _record(instance, AuditAction.CREATE, None, after)
    else:
        _record(instance, AuditAction.UPDATE, before, after, getattr(instance, "_audit_previous", None))


def _post_delete(sender, instance, **kwargs):
    _record(instance, AuditAction.DELETE, _snapshot(instance), None)


# --- bulk changes ---------------------------------------------------------------------------------------


@_in_english
def record_refused(instance, detail: dict) -> None:
    """One `refuse` event on `instance`, the credential a request was refused for (an agent token whose
    report reached outside its rack): who tried, under the current audit context, and `detail` (what it
    tried). Call it after the refused work's transaction rolled back, or the event goes with it."""
    actor = _actor()
    AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor else "",
        source=_current().source,
        action=AuditAction.REFUSE,
        object_type=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        before=None,
        after=_json(detail),
    )


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


def _read_names(model, rows, known: dict | None = None) -> dict:
    """{(related model, target field): {value: str() of the row}} for the foreign keys of `model` in `rows`
    ({field name: stored value} each), `known` names kept: one query per related model for the values not
    known yet. Values whose row is gone are left out."""
    names = {key: dict(found) for key, found in (known or {}).items()}
    references = _references(model)
    wanted: dict[tuple, set] = {}
    for row in rows:
        for name, value in row.items():
            field = references.get(name)
            if field is None or value is None:
                continue
            key = (field.related_model, field.target_field.name)
            if value not in names.get(key, {}):
                wanted.setdefault(key, set()).add(value)
    for (related, target), values in wanted.items():
        # Non-null foreign keys joined: a row's str() may name its parent (a partition its rack).
        found = related._base_manager.select_related().in_bulk(list(values), field_name=target)
        names.setdefault((related, target), {}).update(
            (value, str(row)[:LABEL_LIMIT]) for value, row in found.items()
        )
    return names


def _names_in(model, values: dict, names: dict) -> dict:
    """{field: name} for the foreign keys in `values` ({field name: stored value}) that `names` knows."""
    out = {}
    for name, field in _references(model).items():
        value = values.get(name)
        found = names.get((field.related_model, field.target_field.name), {})
        if value is not None and value in found:
            out[name] = found[value]
    return out


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


@_in_english
def record_bulk_change(
    model, changes: dict, names: dict | None = None, described: dict | None = None
) -> None:
    """Record rows changed in bulk: one event per row of an audited model (its volatile fields left out,
    under the current audit context), then send `bulk_changed` for any model. `changes` is
    {pk: {field name: (before, after)}}, a foreign key as the related pk. The related rows' names are read
    in one query per related model; `names` (from `_read_names`) holds those read before the change, for
    rows it may have deleted. `described` ({pk: (str() of the row, its department's pk)}) saves reading the
    changed rows again when the caller knows them (the scheduling pass)."""
    changes = {pk: diff for pk, diff in changes.items() if diff}
    if not changes:
        return
    label = model._meta.label_lower
    if label in AUDITED:
        excluded = AUDITED[label]
        audited = {pk: {k: v for k, v in diff.items() if k not in excluded} for pk, diff in changes.items()}
        audited = {pk: diff for pk, diff in audited.items() if diff}
        if audited:
            if described is None:
                # Non-null foreign keys joined: an object's str() may name its parent (a partition its rack).
                instances = model._default_manager.select_related().in_bulk(list(audited))
                described = {pk: (str(row), _department_id(row)) for pk, row in instances.items()}
            sides = {
                pk: (
                    {name: old for name, (old, _) in diff.items()},
                    {name: new for name, (_, new) in diff.items()},
                )
                for pk, diff in audited.items()
            }
            names = _read_names(model, [values for pair in sides.values() for values in pair], names)
            actor, source = _actor(), _current().source
            # Every side as JSON stores it, in one round trip through the encoder.
            stored = iter(_json([side for pair in sides.values() for side in pair]))
            events = []
            for pk, (old, new) in sides.items():
                text, department_id = described.get(pk, (str(pk), None))
                before, after = next(stored), next(stored)
                events.append(
                    {
                        "actor_id": actor.pk if actor else None,
                        "actor_name": actor.get_username() if actor else "",
                        "source": source,
                        "action": AuditAction.UPDATE,
                        "object_type": label,
                        "object_id": str(pk),
                        "object_repr": text[:200],
                        "department_id": department_id,
                        "before": before,
                        "after": after,
                        "labels": _labels(_names_in(model, old, names), _names_in(model, new, names)),
                    }
                )
            _insert_events(events)
    bulk_changed.send(sender=model, changes=changes)


def _insert_events(events: list[dict]) -> None:
    """AuditEvent rows ({field attname: value}) made now, in one statement. PostgreSQL: one INSERT from a
    single JSON parameter. (bulk_create sends each column as an array, and the driver quotes every element
    of a JSON array in Python, a regular expression per quote character: slower than the insert itself
    for the hundreds of jobs a scheduling pass records at once.)"""
    at = timezone.now()
    if connection.vendor != "postgresql":
        AuditEvent.objects.bulk_create(AuditEvent(at=at, **event) for event in events)
        return
    columns = {f.attname: f for f in AuditEvent._meta.concrete_fields}
    names = list(events[0])
    typed = ", ".join(f'"{name}" {columns[name].db_type(connection)}' for name in names)
    quoted = ", ".join(f'"{name}"' for name in names)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {AuditEvent._meta.db_table} ({quoted}, at) "
            f"SELECT {quoted}, %s FROM jsonb_to_recordset(%s::jsonb) AS v({typed})",
            [at, json.dumps(events, cls=DjangoJSONEncoder)],
        )


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
    # The names of the rows the foreign keys point to now: the block may delete them.
    names = _read_names(model, before.values()) if model._meta.label_lower in AUDITED else None
    yield
    if before:
        record_bulk_change(model, _diff(before, _read(model, before, model_fields)), names)


def connect() -> None:
    # Per audited model, so deletes of other models (telemetry history) stay fast bulk deletes.
    for label in AUDITED:
        model = apps.get_model(label)
        pre_save.connect(_pre_save, sender=model, dispatch_uid=f"audit_pre_save_{label}")
        post_save.connect(_post_save, sender=model, dispatch_uid=f"audit_post_save_{label}")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=f"audit_post_delete_{label}")
