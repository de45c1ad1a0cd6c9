"""Partition plans over the API: preview (dry run), create + apply, list, detail, cancel. Platform admins only
(core.access.IsAdmin).

`POST /api/v1/partition-plans/` takes a rack, a layout (a preset with trays left out, or explicit
partitions) and `drain_first`; with `dry_run` it answers the preview (findings and the exact diff of every
rendered file) and saves nothing, otherwise it saves and applies the plan (201). The rules are
in `integrations.plans.service` (the wizard calls the same): a plan that cannot be applied is a 400
naming the reasons, a plan that cannot be applied *now* (another plan in flight, the rack changed) a 409.
Reading a plan never moves it on: its pushes and the beat do (integrations.tasks).
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from core.access import IsAdmin
from core.fields import JSONBooleanField, JSONIntegerField, KnownFieldsOnly, TextField, refuse_body
from core.hardware import TRAYS_PER_RACK
from integrations.models import ConfigPush
from integrations.plans import service as plans
from integrations.plans.forms import api_partitions
from integrations.plans.service import create_and_apply
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan, Rack
from inventory.planning import PRESETS, Finding, Level, parse_ranges


class PartitionPlanFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name", help_text="Rack name.")
    status = django_filters.MultipleChoiceFilter(choices=PlanStatus.choices)

    class Meta:
        model = PartitionPlan
        fields = ["rack", "status"]


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The plan cannot be applied now."
    default_code = "conflict"


# ---- request ------------------------------------------------------------------------------------------


@extend_schema_field(
    {
        "oneOf": [
            {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": TRAYS_PER_RACK}},
            {"type": "string", "example": "1-9"},
        ],
        "description": 'Tray slots: a list (`[1, 2, 3]`) or ranges (`"1-9"`, `"10-12,15"`).',
    }
)
class SlotsField(serializers.Field):
    """Tray slots, each within the rack's 1-18 and named once (checked before a range is expanded)."""

    default_error_messages = {"invalid": "give tray slots as a list of numbers or ranges like '1-9'"}

    def to_internal_value(self, data):
        if isinstance(data, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in data):
            data = ",".join(map(str, data))  # the same rules as ranges, one number at a time
        if isinstance(data, str):
            try:
                return list(parse_ranges(data))
            except ValueError as error:
                raise serializers.ValidationError(str(error)) from error
        self.fail("invalid")

    def to_representation(self, value):
        return list(value)


class PlannedPartitionSerializer(KnownFieldsOnly, serializers.Serializer):
    name = TextField(max_length=31, help_text="Lower-case letters, digits and dashes.")
    slots = SlotsField()
    department = TextField(
        max_length=50,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="Slug of the department it is dedicated to (a service tier); empty: shared.",
    )
    slurm_partition = TextField(
        max_length=64,
        required=False,
        allow_blank=True,
        default="",
        help_text="Slurm partition serving it; empty: shared.",
    )


class PlanLayoutSerializer(KnownFieldsOnly, serializers.Serializer):
    """Either a preset (and trays left out) or explicit partitions."""

    preset = serializers.ChoiceField(
        choices=list(PRESETS),
        required=False,
        help_text="Equal runs of consecutive trays: '2x9' is 1-9, 10-18.",
    )
    leave_out = serializers.ListField(
        child=JSONIntegerField(min_value=1, max_value=TRAYS_PER_RACK),
        required=False,
        default=list,
        max_length=TRAYS_PER_RACK,
        help_text="Trays in no partition (with a preset), each named once.",
    )
    # Each partition has a tray at least: a rack has room for TRAYS_PER_RACK of them.
    partitions = PlannedPartitionSerializer(many=True, required=False, max_length=TRAYS_PER_RACK)

    def validate(self, attrs):
        if ("preset" in attrs) == ("partitions" in attrs):
            raise serializers.ValidationError("give exactly one of 'preset' or 'partitions'")
        leave_out = attrs.get("leave_out") or []
        if twice := sorted({slot for slot in leave_out if leave_out.count(slot) > 1}):
            raise serializers.ValidationError({"leave_out": f"tray {twice[0]} is named twice"})
        if "partitions" in attrs and leave_out:
            raise serializers.ValidationError(
                {"leave_out": "with explicit partitions, leave trays out by not listing them"}
            )
        return attrs


class PlanRequestSerializer(KnownFieldsOnly, serializers.Serializer):
    rack = TextField(max_length=64, help_text="Rack name, e.g. gb-r01.")
    layout = PlanLayoutSerializer()
    drain_first = JSONBooleanField(
        default=False, help_text="Drain busy trays that change partition and apply once their work ends."
    )
    dry_run = JSONBooleanField(default=False, help_text="Preview only: findings and diffs, nothing saved.")

    def validate_rack(self, value):
        rack = Rack.objects.filter(name=value).first()
        if rack is None:
            raise serializers.ValidationError(f"no rack named {value!r}")
        return rack


# ---- responses ----------------------------------------------------------------------------------------


class PlanFindingSerializer(serializers.Serializer):
    level = serializers.ChoiceField(choices=["error", "warning", "ok"])
    message = serializers.CharField()


class PlanTrayChangeSerializer(serializers.Serializer):
    slot = serializers.IntegerField()
    hostname = serializers.CharField()
    before = serializers.CharField(allow_null=True, help_text="Partition now (null: none).")
    after = serializers.CharField(allow_null=True, help_text="Partition planned (null: left out).")
    running_jobs = serializers.ListField(child=serializers.CharField())


class PlanPreviewSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="No error: the plan can be applied.")
    findings = PlanFindingSerializer(many=True)
    changes = PlanTrayChangeSerializer(many=True, help_text="Trays whose NVLink partition changes.")
    diffs = serializers.DictField(
        child=serializers.CharField(),
        help_text="Rendered file (relative path) -> unified diff of what its push would send.",
    )


class PlanPartitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    slots = serializers.ListField(child=serializers.IntegerField())
    clique_id = serializers.IntegerField()
    department = serializers.CharField(allow_null=True)
    slurm_partition = serializers.CharField(allow_blank=True)


class PlanPushSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    target = serializers.CharField(help_text="The configured target the push goes to.")
    status = serializers.CharField()


class PartitionPlanSerializer(serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name", read_only=True)
    layout = PlanPartitionSerializer(many=True, read_only=True)
    findings = PlanFindingSerializer(many=True, read_only=True, help_text="The checks when it was saved.")
    created_by = serializers.CharField(source="created_by.username", read_only=True, allow_null=True)
    pushes = serializers.SerializerMethodField(help_text="The config pushes queued for the plan.")

    class Meta:
        model = PartitionPlan
        fields = [
            "id",
            "rack",
            "status",
            "layout",
            "drain_first",
            "findings",
            "error",
            "pushes",
            "created_by",
            "origin",
            "reason",
            "for_job_id",
            "created_at",
            "applied_at",
            "finished_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "origin": {
                "help_text": "admin: made in the wizard or this API; scheduler: a re-carve of idle trays "
                "for a waiting gang under the rack's re-carving policy."
            },
            "reason": {"help_text": "Why the scheduler re-carved (its plans only)."},
        }

    @extend_schema_field(PlanPushSerializer(many=True))
    def get_pushes(self, plan):
        pushes = self.context.get("pushes")
        if pushes is None:
            pushes = pushes_by_plan([plan.pk])
        return pushes.get(plan.pk, [])


def pushes_by_plan(plan_ids) -> dict[int, list[dict]]:
    """The pushes of several plans in one query."""
    out: dict[int, list[dict]] = {}
    for push in ConfigPush.objects.filter(plan_id__in=list(plan_ids)).select_related("target").order_by("pk"):
        out.setdefault(push.plan_id, []).append(
            {"id": push.pk, "target": str(push.target), "status": push.status}
        )
    return out


def _errors(error: DjangoValidationError) -> list[str]:
    return list(error.messages)


# ---- viewset ------------------------------------------------------------------------------------------

EXAMPLES = [
    OpenApiExample(
        "Preview a 2x9 layout, tray 7 left out",
        value={"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": [7]}, "dry_run": True},
        request_only=True,
    ),
    OpenApiExample(
        "Apply explicit partitions, one dedicated to a department",
        value={
            "rack": "gb-r01",
            "layout": {
                "partitions": [
                    {"name": "train", "slots": "1-9", "department": "research", "slurm_partition": ""},
                    {"name": "shared", "slots": [10, 11, 12, 13, 14, 15, 16, 17, 18]},
                ]
            },
            "drain_first": True,
        },
        request_only=True,
    ),
]


@extend_schema_view(
    list=extend_schema(summary="Partition plans, newest first"),
    retrieve=extend_schema(summary="A partition plan with its pushes"),
)
class PartitionPlanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """NVLink partition plans: preview, apply, follow and cancel a new layout for a rack. Admins only."""

    serializer_class = PartitionPlanSerializer
    permission_classes = [permissions.IsAuthenticated, IsAdmin]
    filterset_class = PartitionPlanFilter

    def get_queryset(self):
        return PartitionPlan.objects.visible_to(self.request.user).select_related("rack", "created_by")

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = {**self.get_serializer_context(), "pushes": pushes_by_plan(p.pk for p in page)}
        return self.get_paginated_response(PartitionPlanSerializer(page, many=True, context=context).data)

    @extend_schema(
        summary="Preview (dry_run) or create and apply a partition plan",
        request=PlanRequestSerializer,
        responses={
            200: OpenApiResponse(PlanPreviewSerializer, description="dry_run: the preview; nothing saved."),
            201: OpenApiResponse(PartitionPlanSerializer, description="The plan, saved and applied."),
            400: OpenApiResponse(description="The request or the plan is invalid; the reasons are named."),
            403: OpenApiResponse(description="Not a platform admin."),
            409: OpenApiResponse(description="Another plan is in flight for the rack, or the rack changed."),
        },
        examples=EXAMPLES,
    )
    def create(self, request, *args, **kwargs):
        data = PlanRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        rack, drain = data.validated_data["rack"], data.validated_data["drain_first"]
        try:
            partitions = api_partitions(data.validated_data["layout"])
        except ValueError as error:
            raise serializers.ValidationError({"layout": [str(error)]}) from error
        if data.validated_data["dry_run"]:
            result = plans.preview(rack, partitions, drain=drain)
            check = result.check
            if (busy := plans.in_flight(rack)) is not None:  # `ok` means it can be applied now (a 201)
                check.findings.insert(0, Finding(Level.ERROR, busy))
            body = {
                "ok": check.ok,
                "findings": [{"level": f.level.value, "message": f.message} for f in check.findings],
                "changes": [
                    {
                        "slot": c.slot,
                        "hostname": c.hostname,
                        "before": c.before,
                        "after": c.after,
                        "running_jobs": list(c.running_jobs),
                    }
                    for c in check.changes
                ],
                "diffs": result.diffs,
            }
            return Response(PlanPreviewSerializer(body).data, status=status.HTTP_200_OK)
        try:
            plan = create_and_apply(rack, partitions, drain=drain, user=request.user)
        except plans.PlanConflict as error:
            raise Conflict(str(error)) from error
        except DjangoValidationError as error:
            raise serializers.ValidationError({"layout": _errors(error)}) from error
        plan = self.get_queryset().get(pk=plan.pk)
        return Response(self.get_serializer(plan).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Cancel a draft or draining plan (its drained trays return to service)",
        request=None,
        responses={
            200: PartitionPlanSerializer,
            409: OpenApiResponse(
                description="The plan is applying or finished: it can no longer be cancelled."
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        refuse_body(request)
        plan = self.get_object()
        try:
            plans.cancel_plan(plan, user=request.user)
        except plans.PlanConflict as error:
            raise Conflict(str(error)) from error
        return Response(self.get_serializer(get_object_or_404(self.get_queryset(), pk=plan.pk)).data)
