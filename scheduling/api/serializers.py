"""Job API serializers. Validation of a job against the cluster and its department is in
scheduling.services (the same rules for every client); these check shapes and say which field is wrong."""

from rest_framework import serializers

from core.workloads import WorkError, validate_work
from scheduling.choices import Backend, PriorityClass, Topology
from scheduling.models import Job, JobEvent
from scheduling.services import default_topology, submittable_departments
from tenancy.models import Department


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "message", "placement"]
        read_only_fields = fields


class JobSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    submitted_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    url = serializers.HyperlinkedIdentityField(view_name="job-detail")

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "name",
            "department",
            "submitted_by",
            "gpus",
            "topology",
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


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "work", "events"]
        read_only_fields = fields


class JobSubmitSerializer(serializers.Serializer):
    """A job to run. `work` is {"script": "#!/bin/bash ..."} for Slurm and {"image": ..., "command": [...],
    "args": [...], "env": {...}} for Kubernetes."""

    department = serializers.SlugField(help_text="The department's slug (you must be a member).")
    name = serializers.CharField(max_length=200)
    gpus = serializers.IntegerField(
        min_value=1, help_text="1-4 GPUs on one tray, or a multiple of 4 (whole trays) above that."
    )
    topology = serializers.ChoiceField(
        choices=Topology.choices,
        required=False,
        help_text="partition (the default above one tray): one NVLink partition; rack: one NVLink domain; "
        "any: anywhere.",
    )
    priority_class = serializers.ChoiceField(choices=PriorityClass.choices, default=PriorityClass.TRAIN)
    backend = serializers.ChoiceField(choices=Backend.choices, default=Backend.SLURM)
    time_limit_minutes = serializers.IntegerField(min_value=1, max_value=60 * 24 * 30, default=60)
    work = serializers.JSONField()

    def validate_department(self, slug):
        department = Department.objects.filter(slug=slug).first()
        user = self.context["request"].user
        retried = self.context.get("retried_job")  # the job this request's Idempotency-Key already made
        if department is not None and retried is not None and retried.department_id == department.pk:
            # A retry is answered by what it asks for (scheduling.services.submit_job compares it with the
            # first request), even if the user has since left the department.
            return department
        if department is None or not submittable_departments(user).filter(pk=department.pk).exists():
            # The same answer for a department that does not exist and one the user is not in.
            raise serializers.ValidationError(f"you are not a member of a department {slug!r}")
        return department

    def validate(self, attrs):
        attrs.setdefault("topology", default_topology(attrs["gpus"]))
        attrs["work"] = self._work(attrs["backend"], attrs["work"])
        return attrs

    def _work(self, backend, work):
        # The backend's own rule (registered by the integration that runs it), the same one dispatch uses.
        try:
            return validate_work(backend, work)
        except WorkError as error:
            raise serializers.ValidationError({"work": str(error)}) from error
