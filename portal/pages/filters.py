"""The audit log's FilterSet, shared by the audit page and the API."""

import django_filters
from django.apps import apps
from django.db.models import Q
from django.utils.functional import Promise
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from core.audit import AUDITED
from core.filters import IntegerFilter
from core.models import AuditAction, AuditEvent, AuditSource
from tenancy.models import Department


def _in_viewers_language(name):
    """A verbose name as the viewer reads it: a lazy one is already; a plain one is looked up when shown."""
    return name if isinstance(name, Promise) else gettext_lazy(name)


def object_type_choices():
    """The audited models, as "app_label.model" with their verbose name (the label alone, should this module
    be imported before the models are loaded); lazy, so that each viewer reads the names in their language
    (a plain name is looked up: portal.pages.audit_names marks them for the catalogue)."""
    choices = []
    for label in AUDITED:
        if apps.models_ready:
            model = apps.get_model(label)
            choices.append(
                (
                    label,
                    format_lazy(
                        "{}: {}",
                        _in_viewers_language(model._meta.app_config.verbose_name),
                        _in_viewers_language(model._meta.verbose_name),
                    ),
                )
            )
        else:
            choices.append((label, label))
    return choices


def departments_with_visible_events(request):
    """The departments a user may filter by: those whose events they may see (staff: all)."""
    if request is None:
        return Department.objects.none()
    return Department.objects.led_by(request.user).order_by("name")


class AuditEventFilter(django_filters.FilterSet):
    object_type = django_filters.ChoiceFilter(
        choices=object_type_choices(), label="Object type (app_label.model)"
    )
    object_id = django_filters.CharFilter(label="Object ID")
    object = django_filters.CharFilter(
        field_name="object_repr", lookup_expr="icontains", label="Object name contains"
    )
    action = django_filters.MultipleChoiceFilter(choices=AuditAction.choices)
    source = django_filters.MultipleChoiceFilter(choices=AuditSource.choices)
    actor = django_filters.CharFilter(method="filter_actor", label="Username")
    department = django_filters.ModelChoiceFilter(
        queryset=departments_with_visible_events,
        to_field_name="slug",
        method="filter_department",
        label="Department (slug)",
    )
    department_id = IntegerFilter(label="Department ID (also of deleted departments)")
    date = django_filters.DateFromToRangeFilter(field_name="at", label="Date (from, to; both inclusive)")
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte", label="At or after")

    class Meta:
        model = AuditEvent
        fields = [
            "object_type",
            "object_id",
            "object",
            "action",
            "source",
            "actor",
            "department",
            "department_id",
            "date",
            "since",
        ]

    def filter_actor(self, queryset, name, value):
        # actor_name outlives the user; the username of a live user may have changed since.
        return queryset.filter(Q(actor_name__iexact=value) | Q(actor__username__iexact=value))

    @extend_schema_field(OpenApiTypes.STR)  # a slug
    def filter_department(self, queryset, name, value):
        return queryset.filter(department_id=value.pk)
