"""The audit log page: who changed what, when, through which door, and a compact before -> after diff.

Platform admins see every event and department leads their departments' events
(`AuditEvent.objects.visible_to`); anyone else is refused (core.access.require_any_lead). Filtered with the
FilterSet the API uses (portal.pages.filters). A page is a fixed number of queries: the count, the page of
events
and one query for the names of their departments.

A foreign key shows the name its row had when the change was recorded (the event's labels), its id in the
title; events recorded before labels were kept show the id alone.
"""

import json
from dataclasses import dataclass
from datetime import datetime

from django.apps import apps
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from core.access import require_any_lead
from core.models import AuditAction, AuditEvent, AuditSource
from core.moments import dated
from core.tables import Column, Table, json_dumps
from portal.pages.filters import AuditEventFilter
from tenancy.models import Department

# The field names of core's audited models (Django's own verbose names, made from the field's name: giving
# them verbose_name would alter every migration), for the catalogue: the diff shows them translated.
CORE_FIELD_NAMES = (
    gettext_noop("user"),
    gettext_noop("name"),
    gettext_noop("prefix"),
    gettext_noop("created at"),
    gettext_noop("expires at"),
    gettext_noop("revoked at"),
    gettext_noop("revoked by"),
    gettext_noop("channel"),
    gettext_noop("url"),
    gettext_noop("secret"),
    gettext_noop("secret made at"),
    gettext_noop("email"),
    gettext_noop("events"),
    gettext_noop("scope"),
    gettext_noop("enabled"),
    gettext_noop("allow private address"),
    gettext_noop("threshold"),
    gettext_noop("owner"),
    gettext_noop("created by"),
)
EVENTS_PER_PAGE = 50
VALUE_LIMIT = 80  # characters of a value shown in the diff; the whole value goes in the title


@dataclass(frozen=True)
class Change:
    field: str
    label: str
    before: str | None  # None: the field had no value on that side (create / delete)
    after: str | None
    before_title: str | None = None  # the whole value when cut, a related row's id when named
    after_title: str | None = None


@dataclass
class EventRow:
    event: AuditEvent
    department_name: str | None
    changes: list[Change]


def _text(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return _("yes") if value else _("no")
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _short(text: str) -> tuple[str, str | None]:
    if len(text) <= VALUE_LIMIT:
        return text, None
    return text[: VALUE_LIMIT - 1] + "…", text


def _shown(value, name: str | None) -> tuple[str, str | None]:
    """A value as the diff shows it and its title: a foreign key's recorded name (the id in the title),
    else the value itself."""
    if name is None:
        return _short(_text(value))
    text, whole = _short(name)
    return text, f"{whole or name} (ID {_text(value)})"


def _labels(object_type: str) -> dict[str, str]:
    try:
        model = apps.get_model(object_type)
    except (LookupError, ValueError):
        return {}
    labels = {}
    for field in model._meta.get_fields():
        try:
            # A lazy verbose name is in the viewer's language already; a made-up one is looked up.
            labels[field.name] = _(str(model._meta.get_field(field.name).verbose_name))
        except (FieldDoesNotExist, AttributeError):
            continue
    return labels


def _field(object_type: str, name: str):
    """The model field `name` of `object_type` ("app.model"), None when there is none (any more)."""
    try:
        return apps.get_model(object_type)._meta.get_field(name)
    except (LookupError, ValueError, FieldDoesNotExist):
        return None


def _readable(field, value):
    """A recorded value as the viewer reads it: a moment (recorded in UTC, ISO 8601) in the viewer's zone with
    the zone named, a choice by its label in the viewer's language; anything else as recorded."""
    if field is None or not isinstance(value, str) or not value:
        return value
    if isinstance(field, models.DateTimeField):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
        return dated(moment, seconds=True) if moment.tzinfo is not None else value
    choices = dict(field.flatchoices) if getattr(field, "choices", None) else {}
    return str(choices[value]) if value in choices else value


def changes_of(event: AuditEvent, labels: dict[str, str] | None = None) -> list[Change]:
    """The fields an event touched, in the model's order: before and after for an update, one side else.
    `labels` are the fields' verbose names (looked up when not given)."""
    labels = labels if labels is not None else _labels(event.object_type)
    before, after = event.before or {}, event.after or {}
    names = event.labels or {}
    names_before, names_after = names.get("before") or {}, names.get("after") or {}
    keys = list(after) + [key for key in before if key not in after]
    rows = []
    for key in keys:
        if event.action == AuditAction.UPDATE and before.get(key) == after.get(key):
            continue
        field = _field(event.object_type, key)
        old = _shown(_readable(field, before[key]), names_before.get(key)) if key in before else (None, None)
        new = _shown(_readable(field, after[key]), names_after.get(key)) if key in after else (None, None)
        rows.append(Change(key, labels.get(key, key.replace("_", " ")), old[0], new[0], old[1], new[1]))
    return rows


def _rows(events: list[AuditEvent]) -> list[EventRow]:
    """Each event with its department's name and its changes: one query for the names, field labels
    looked up once per model."""
    names = dict(
        Department.objects.filter(pk__in={e.department_id for e in events if e.department_id}).values_list(
            "pk", "name"
        )
    )
    labels: dict[str, dict[str, str]] = {}
    rows = []
    for event in events:
        if event.object_type not in labels:
            labels[event.object_type] = _labels(event.object_type)
        rows.append(
            EventRow(
                event=event,
                department_name=names.get(event.department_id),
                changes=changes_of(event, labels[event.object_type]),
            )
        )
    return rows


def _is_filtered(request, form) -> bool:
    return any(request.GET.get(name) for name in form.fields if name != "page") or any(
        request.GET.get(f"date_{end}") for end in ("after", "before")
    )


AUDIT_SORTS = {
    "when": ("at",),
    "who": ("actor_name", "-at"),
    "through": ("source", "-at"),
    "action": ("action", "-at"),
    "object": ("object_type", "object_repr", "-at"),
    "department": ("department_id", "-at"),
}
AUDIT_COLUMNS = [
    Column("id", lambda e: e.pk),
    Column("at", lambda e: e.at),
    Column("actor", lambda e: e.actor_name),
    Column("source", lambda e: e.source),
    Column("action", lambda e: e.action),
    Column("object_type", lambda e: e.object_type),
    Column("object_id", lambda e: e.object_id),
    Column("object", lambda e: e.object_repr),
    Column("department_id", lambda e: e.department_id),
    Column("before", lambda e: e.before),
    Column("after", lambda e: e.after),
]
AUDIT_CSV_COLUMNS = [
    *AUDIT_COLUMNS[:-2],
    Column("before", lambda e: json_dumps(e.before)),
    Column("after", lambda e: json_dumps(e.after)),
]


def audit_list(request):
    """The events the user may see, filtered, sorted (newest first unless asked) and paginated;
    `?export=csv|json`: every filtered event (core.tables)."""
    require_any_lead(request.user, _("the audit log"))
    table = Table(request, "audit", AUDIT_SORTS, "-when", per_page=EVENTS_PER_PAGE)
    filterset = AuditEventFilter(
        request.GET, queryset=table.order(AuditEvent.objects.visible_to(request.user)), request=request
    )
    if table.export_format:
        columns = AUDIT_CSV_COLUMNS if table.export_format == "csv" else AUDIT_COLUMNS
        return table.export(columns, filterset.qs)
    page = table.page(filterset.qs)
    page.object_list = _rows(list(page.object_list))
    form = filterset.form
    return render(
        request,
        "portal/audit_list.html",
        {
            "filter": filterset,
            "table": table,
            "page": page,
            "filtered": _is_filtered(request, form),
            "object_types": form.fields["object_type"].choices,
            "actions": AuditAction.choices,
            "sources": AuditSource.choices,
            "departments": form.fields["department"].queryset,
            "selected_actions": request.GET.getlist("action"),
            "selected_sources": request.GET.getlist("source"),
        },
    )
