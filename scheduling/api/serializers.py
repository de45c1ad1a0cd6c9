"""Job API serializers. Validation of a job against the cluster and its department is in
scheduling.services.admission (the same rules for every client); these check shapes and say which field is
wrong."""

from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample, PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from core.fields import JSONIntegerField, KnownFieldsOnly, SlugTextField, TextField
from core.workloads import WorkError, WorkRule, validate_work, work_rules
from scheduling.choices import Backend, JobState, PriorityClass, Topology
from scheduling.models import FALLBACK_AFTER_MAX_MINUTES, Job, JobEvent, SliceAllocation
from scheduling.queue_standing import queue_standing
from scheduling.services.admission import (
    DEFAULT_FALLBACK_AFTER_MINUTES,
    check_fallback,
    default_topology,
    submittable_departments,
)
from scheduling.slices import MAX_MEMORY_GB, MAX_SLICES, check_shape, resolve
from tenancy.models import Department, Project

SLICE_FIELDS = ("mig_profile", "mig_slices", "mig_memory_gb")


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "message", "placement"]
        read_only_fields = fields


class FallbackTopologyField(serializers.ChoiceField):
    """A job's fallback topology: null when it has none (stored blank)."""

    def to_representation(self, value):
        return value or None


class JobSerializer(serializers.ModelSerializer):
    fallback_topology = FallbackTopologyField(
        choices=Topology.choices,
        allow_null=True,
        read_only=True,
        help_text="The wider topology the job accepts after fallback_after_minutes of waiting in quota; "
        "null: its topology is strict.",
    )
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="its project (its department's default project for the department's own work); null "
        "only for a job of a department without a default project",
    )
    submitted_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="null once the account is deleted"
    )
    url = serializers.HyperlinkedIdentityField(view_name="job-detail")

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "name",
            "department",
            "project",
            "submitted_by",
            "gpus",
            "mig_profile",
            "mig_slices",
            "mig_memory_gb",
            "topology",
            "fallback_topology",
            "fallback_after_minutes",
            "priority_class",
            "backend",
            "time_limit_minutes",
            "state",
            "pending_reason",
            "over_quota",
            "placement",
            "backend_id",
            "backend_message",
            "exit_code",
            "preemptions",
            "created_at",
            "placed_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class QueueStandingSerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1: the first waiting job the pass serves.")
    ahead = serializers.IntegerField(help_text="Waiting jobs (of any department) the pass serves before it.")
    as_of = serializers.DateTimeField(allow_null=True, help_text="The pass that said so.")
    estimated_start = serializers.DateTimeField(
        allow_null=True,
        help_text="When the trays reserved for it should free up, if the jobs on them run to their time "
        "limits; null: no trays are reserved for it yet.",
    )


class SliceAllocationSerializer(serializers.ModelSerializer):
    """A MIG device a slice job holds."""

    gpu = serializers.CharField(source="gpu.uuid", read_only=True, help_text="The parent GPU's UUID.")
    tray = serializers.CharField(source="gpu.tray.hostname", read_only=True, allow_null=True, default=None)
    gpu_index = serializers.IntegerField(source="gpu.index", read_only=True, allow_null=True)

    class Meta:
        model = SliceAllocation
        fields = ["profile", "mig_uuid", "gpu", "tray", "gpu_index"]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    slices = SliceAllocationSerializer(
        source="slice_allocations",
        many=True,
        read_only=True,
        help_text="The MIG devices a slice job holds while it is starting or running (empty otherwise).",
    )
    queue = serializers.SerializerMethodField(
        help_text="A waiting job's place in line and estimated start, as the last scheduling pass left the "
        "queue (an estimate: the next pass may change it); null for a job that is not waiting, or was "
        "submitted after that pass."
    )

    @extend_schema_field(QueueStandingSerializer(allow_null=True))
    def get_queue(self, job):
        if job.state != JobState.PENDING:
            return None
        standing = queue_standing(job.pk)
        return None if standing is None else QueueStandingSerializer(standing).data

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "work", "slices", "events", "queue"]
        read_only_fields = fields


class JobSubmitSerializer(KnownFieldsOnly, serializers.Serializer):
    """A job to run. `work` is {"script": "#!/bin/bash ..."} for Slurm and {"image": ..., "command": [...],
    "args": [...], "env": {...}} for Kubernetes. A field it does not take is refused, not ignored."""

    department = SlugTextField(help_text=_("The department's slug (you must be a member)."))
    project = SlugTextField(
        required=False,
        allow_null=True,
        help_text=_(
            "The slug of the department's project the job runs under (you must be able to use it). "
            "Absent or null: your only project in the department, else its default project (the one every "
            "member in no named project uses); someone in several named projects names one."
        ),
    )
    name = TextField(max_length=200)
    gpus = JSONIntegerField(
        min_value=1,
        required=False,
        help_text=_(
            "1-4 GPUs on one tray, or a multiple of 4 (whole trays) above that. Leave it out for MIG slices."
        ),
    )
    mig_profile = TextField(
        max_length=32,
        required=False,
        allow_null=True,
        help_text=_(
            "MIG slices instead of whole GPUs: the profile, as the GPUs report it (nvidia-smi mig -lgip, for "
            "example 1g.23gb), which a tray's MIG layout offers. Or give mig_memory_gb instead."
        ),
    )
    mig_slices = JSONIntegerField(
        min_value=1,
        max_value=MAX_SLICES,
        required=False,
        allow_null=True,
        help_text=format_lazy(
            _(
                "How many MIG slices (1 to {most}, all on one tray; default 1 when a profile or size is "
                "given)."
            ),
            most=MAX_SLICES,
        ),
    )
    mig_memory_gb = JSONIntegerField(
        min_value=1,
        max_value=MAX_MEMORY_GB,
        required=False,
        allow_null=True,
        help_text=_(
            "MIG slices by memory: GB each slice needs; the smallest profile a tray offers with at least "
            "that "
            "much is chosen. Not with mig_profile."
        ),
    )
    topology = serializers.ChoiceField(
        choices=Topology.choices,
        required=False,
        help_text=_(
            "partition (the default above one tray): one NVLink partition; rack: one NVLink domain; "
            "any: anywhere."
        ),
    )
    fallback_topology = serializers.ChoiceField(
        choices=Topology.choices,
        required=False,
        allow_null=True,
        help_text=format_lazy(
            _(
                "Opt in to a wider topology than `topology` (rack or any for a partition job, any for a "
                "rack job) once the job has waited fallback_after_minutes (default {minutes}) within its "
                "department's guarantee. Absent or null: the topology stays strict."
            ),
            minutes=DEFAULT_FALLBACK_AFTER_MINUTES,
        ),
    )
    fallback_after_minutes = JSONIntegerField(
        min_value=1,
        max_value=FALLBACK_AFTER_MAX_MINUTES,
        required=False,
        allow_null=True,
        help_text=format_lazy(
            _(
                "Minutes of waiting since submission before the fallback topology is allowed (1 to 10080); "
                "only with fallback_topology. Absent or null with a fallback_topology: {minutes} (two hours)."
            ),
            minutes=DEFAULT_FALLBACK_AFTER_MINUTES,
        ),
    )
    priority_class = serializers.ChoiceField(choices=PriorityClass.choices, default=PriorityClass.TRAIN)
    backend = serializers.ChoiceField(choices=Backend.choices, default=Backend.SLURM)
    time_limit_minutes = JSONIntegerField(min_value=1, max_value=60 * 24 * 30, default=60)
    work = serializers.JSONField()

    def validate_department(self, slug):
        department = Department.objects.filter(slug=slug).first()
        user = self.context["request"].user
        retried = self.context.get("retried_job")  # the job this request's Idempotency-Key already made
        if department is not None and retried is not None and retried.department_id == department.pk:
            # A retry is answered by what it asks for (scheduling.services.admission.submit_job compares it
            # with the first request), even if the user has since left the department.
            return department
        if department is None or not submittable_departments(user).filter(pk=department.pk).exists():
            # Slugs are case-sensitive (a SlugField may hold capitals): one of the user's own departments
            # that only differs in case is named, so "Research" is answered with "research".
            same_but_case = submittable_departments(user).filter(slug__iexact=slug).exclude(slug=slug)
            right = list(same_but_case.values_list("slug", flat=True)[:2])
            if len(right) == 1:
                raise serializers.ValidationError(
                    gettext("department slugs are case-sensitive: yours is %(right)s, not %(slug)s")
                    % {"right": repr(right[0]), "slug": repr(slug)}
                )
            # The same answer for a department that does not exist and one the user is not in.
            raise serializers.ValidationError(
                gettext("you are not a member of a department %(slug)s") % {"slug": repr(slug)}
            )
        return department

    def validate(self, attrs):
        attrs["project"] = self._project(attrs["department"], attrs.get("project"))
        self._slices(attrs)
        attrs.setdefault("topology", default_topology(attrs["gpus"]))
        attrs["fallback_topology"] = attrs.get("fallback_topology") or ""
        errors = check_fallback(
            attrs["topology"], attrs["fallback_topology"], attrs.get("fallback_after_minutes")
        )
        if errors:
            raise serializers.ValidationError(errors)
        attrs["work"] = self._work(attrs["backend"], attrs["work"])
        return attrs

    def _slices(self, attrs) -> None:
        """Whole GPUs or MIG slices (scheduling.slices): the slices' profile chosen, `gpus` 0 for them."""
        for name in SLICE_FIELDS:
            if attrs.get(name) is None:
                attrs.pop(name, None)
        if not any(name in attrs for name in SLICE_FIELDS):
            if "gpus" not in attrs:  # DRF's own "required" (the job form's preview asks for the field by it)
                raise serializers.ValidationError({"gpus": [self.fields["gpus"].error_messages["required"]]})
            return
        if "gpus" in attrs:
            raise serializers.ValidationError(
                {"gpus": gettext("ask for whole GPUs or for MIG slices, not both: leave gpus out for slices")}
            )
        attrs["gpus"] = 0
        attrs["mig_slices"] = attrs.get("mig_slices", 1)
        errors = check_shape(attrs.get("topology", ""), attrs.get("fallback_topology") or "")
        profile, problems = resolve(
            attrs.get("mig_profile", ""), attrs["mig_slices"], attrs.get("mig_memory_gb")
        )
        errors.update(problems)
        if errors:
            raise serializers.ValidationError(errors)
        attrs["mig_profile"] = profile

    def _project(self, department, slug):
        """The named project of the department (whether the user may use it, and whether the department
        requires one, is scheduling.services.admission.submit_job's rule:
        tenancy.projects.check_job_project)."""
        if not slug:
            return None
        project = Project.objects.filter(department=department, slug=slug).first()
        if project is None:
            raise serializers.ValidationError(
                {
                    "project": gettext("%(department)s has no project %(slug)s")
                    % {"department": department.slug, "slug": repr(slug)}
                }
            )
        return project

    def _work(self, backend, work):
        # The backend's own rule (registered by the integration that runs it), the same one dispatch uses.
        try:
            return validate_work(backend, work)
        except WorkError as error:
            raise serializers.ValidationError({"work": str(error)}) from error


# ---- the request schema: one per job backend --------------------------------------------------------------
# JobSubmitSerializer validates every submission; the OpenAPI document shows it as one schema per registered
# backend (core.workloads: the backend's `work` rule as JSON Schema), so `backend` and `work` always agree.


_VARIANTS: dict[str, type[serializers.Serializer]] = {}


def _submit_variant(rule: WorkRule) -> type[serializers.Serializer]:
    if rule.backend not in _VARIANTS:
        _VARIANTS[rule.backend] = _make_variant(rule)
    return _VARIANTS[rule.backend]


def _make_variant(rule: WorkRule) -> type[serializers.Serializer]:
    name = rule.backend.title()
    default = JobSubmitSerializer._declared_fields["backend"].default
    backend_schema = {"type": "string", "enum": [rule.backend]}
    if rule.backend == default:
        backend_schema["default"] = default
    backend = extend_schema_field(backend_schema)(type(f"{name}BackendField", (TextField,), {}))
    work = extend_schema_field(rule.schema)(type(f"{name}WorkField", (serializers.JSONField,), {}))
    fields = {
        "backend": backend(required=rule.backend != default, help_text=f"{name} runs the job."),
        "work": work(help_text=rule.schema.get("description", "")),
        "__doc__": f"A job for {name}.",
    }
    return type(f"{name}JobSubmitSerializer", (JobSubmitSerializer,), fields)


def job_submit_variants() -> list[type[serializers.Serializer]]:
    return [_submit_variant(rule) for rule in work_rules()]


JobSubmitRequest = PolymorphicProxySerializer(
    component_name="JobSubmit",
    serializers=job_submit_variants,  # called when the schema is generated, after every kind registered
    resource_type_field_name=None,
)


def job_submit_example(rule: WorkRule) -> dict:
    """A submission of the rule's own example work (the demo's `research` department, one tray)."""
    return {
        "department": "research",
        "name": f"example-{rule.backend}",
        "gpus": 4,
        "backend": rule.backend,
        "work": rule.example,
    }


def job_submit_examples() -> list[OpenApiExample]:
    return [
        OpenApiExample(f"{rule.backend.title()} job", value=job_submit_example(rule), request_only=True)
        for rule in work_rules()
    ]
