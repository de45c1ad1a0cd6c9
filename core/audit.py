"""Record every change to the models that matter: who, when, through which door, before and after.

The actor and the source (UI, API, admin, task, command) travel in a context variable set by
AuditMiddleware for requests and by `audit_context()` for tasks and commands; model signals do the
recording, so no code path (views, API, admin, services, tasks) can forget to. Fields that change on
every discovery report or heartbeat are left out of the diff; a save that changes nothing else records
nothing.
"""

import contextlib
import contextvars
import json
from dataclasses import dataclass

from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models.signals import post_delete, post_save, pre_save
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


# Model label -> fields never worth an audit entry (volatile, or recorded elsewhere).
AUDITED: dict[str, set[str]] = {
    "inventory.rack": {"updated_at"},
    "inventory.computetray": {"last_report", "last_report_at"},
    "inventory.nvlinkpartition": set(),
    "inventory.partitionplan": {"findings"},
    "tenancy.department": {"updated_at"},
    "tenancy.membership": set(),
    "tenancy.dedicatedpartition": set(),
    "tenancy.tenancysettings": set(),
    "tenancy.exporterendpoint": {"last_scraped_at", "last_error", "last_sample_count"},
    "scheduling.job": {"pending_reason"},
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


def connect() -> None:
    # Per audited model, so deletes of other models (telemetry history) stay fast bulk deletes.
    for label in AUDITED:
        model = apps.get_model(label)
        pre_save.connect(_pre_save, sender=model, dispatch_uid=f"audit_pre_save_{label}")
        post_save.connect(_post_save, sender=model, dispatch_uid=f"audit_post_save_{label}")
        post_delete.connect(_post_delete, sender=model, dispatch_uid=f"audit_post_delete_{label}")
