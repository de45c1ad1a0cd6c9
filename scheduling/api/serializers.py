"""Job API serializers. Validation of a job against the cluster and its department is in
scheduling.services (the same rules for every client); these check shapes and say which field is wrong."""

from rest_framework import serializers

from scheduling.choices import Backend, PriorityClass, Topology
from scheduling.models import Job, JobEvent
from scheduling.services import default_topology, submittable_departments
from tenancy.models import Department

MAX_SCRIPT = 1_000_000


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
        if department is None or not submittable_departments(user).filter(pk=department.pk).exists():
            # The same answer for a department that does not exist and one the user is not in.
            raise serializers.ValidationError(f"you are not a member of a department {slug!r}")
        return department

    def validate(self, attrs):
        attrs.setdefault("topology", default_topology(attrs["gpus"]))
        attrs["work"] = self._work(attrs["backend"], attrs["work"])
        return attrs

    def _work(self, backend, work):
        if not isinstance(work, dict):
            raise serializers.ValidationError({"work": "must be an object"})
        if backend == Backend.SLURM:
            unknown = sorted(set(work) - {"script"})
            script = work.get("script")
            if unknown:
                raise serializers.ValidationError(
                    {"work": f"unknown keys for a Slurm job: {', '.join(unknown)}"}
                )
            if not isinstance(script, str) or not script.startswith("#!"):
                raise serializers.ValidationError(
                    {"work": 'a Slurm job needs {"script": "#!/bin/bash ..."}: a script starting with #!'}
                )
            if len(script) > MAX_SCRIPT:
                raise serializers.ValidationError({"work": f"the script is over {MAX_SCRIPT} characters"})
            return {"script": script}
        unknown = sorted(set(work) - {"image", "command", "args", "env"})
        if unknown:
            raise serializers.ValidationError(
                {"work": f"unknown keys for a Kubernetes job: {', '.join(unknown)}"}
            )
        image = work.get("image")
        if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
            raise serializers.ValidationError({"work": 'a Kubernetes job needs "image": a container image'})
        out = {"image": image}
        for key in ("command", "args"):
            value = work.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise serializers.ValidationError({"work": f'"{key}" must be a list of strings'})
            out[key] = value
        env = work.get("env")
        if env is not None:
            if not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()
            ):
                raise serializers.ValidationError({"work": '"env" must map names to string values'})
            out["env"] = env
        return out
