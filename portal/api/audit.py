"""GET /api/v1/audit-events/: the audit log, read-only, as `AuditEvent.objects.visible_to(user)` allows.

Staff see every event, department leads their departments' events, everyone else none. Filtered with the
FilterSet the audit page uses (portal.pages.filters). A foreign key is an id in before/after, and the name
its row
had at the time in `labels`.
"""

from django.db.models import OuterRef, Subquery
from rest_framework import serializers, viewsets

from core.models import AuditEvent
from portal.pages.filters import AuditEventFilter
from tenancy.models import Department


class LabelsField(serializers.JSONField):
    """Both sides always present; events recorded before labels were kept have none."""

    def to_representation(self, value):
        value = value or {}
        return {"before": value.get("before") or {}, "after": value.get("after") or {}}


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor_name",
        read_only=True,
        help_text="Username of who made the change (kept when the user is deleted); empty for the system.",
    )
    department = serializers.CharField(
        source="department_slug",
        read_only=True,
        allow_null=True,
        help_text="Slug of the department the object belongs to; null when none or since deleted.",
    )
    before = serializers.JSONField(
        read_only=True, allow_null=True, help_text="Changed fields before (null for a create)."
    )
    after = serializers.JSONField(
        read_only=True, allow_null=True, help_text="Changed fields after (null for a delete)."
    )
    labels = LabelsField(
        read_only=True,
        help_text=(
            "Names of the rows the foreign keys in before/after pointed to when the change was recorded: "
            '{"before": {"partition": "gb-r08 default"}, "after": {"partition": "gb-r08 p1"}}. A field is '
            "missing when its value is null or the row was already gone; both are empty for events recorded "
            "before names were kept."
        ),
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor",
            "source",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "department_id",
            "department",
            "before",
            "after",
            "labels",
        ]
        read_only_fields = fields


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """Who changed what, when and through which door (UI, API, admin, task, command), before and after.

    An update lists only the fields that changed. Staff see every event; a department lead sees the events
    of the departments they lead; others see none.
    """

    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    sort_fields = {"when": ("at",), "who": ("actor_name", "-at"), "action": ("action", "-at")}

    def get_queryset(self):
        slug = Department.objects.filter(pk=OuterRef("department_id")).values("slug")[:1]
        return AuditEvent.objects.visible_to(self.request.user).annotate(department_slug=Subquery(slug))
