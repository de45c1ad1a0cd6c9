"""GET /api/v1/config-targets/ (platform admins): the targets, their kind and settings with secrets masked;
GET /api/v1/config-targets/kinds/: every registered kind with its settings (key, label, default, secret), so
a client knows what a target of each kind takes. GET /api/v1/jobs/{id}/logs/: a job's output as its backend
keeps it (integrations.logs, the job page's Logs panel), for REST clients such as `rp logs`."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import IsAdmin, is_admin
from integrations import pushes, registry
from integrations.job_output import DEFAULT_LIMIT
from integrations.logs import job_logs
from integrations.models import ConfigTarget
from scheduling.models import Job


class ConfigTargetSerializer(serializers.ModelSerializer):
    kind_label = serializers.SerializerMethodField()
    settings = serializers.SerializerMethodField(help_text="The kind's settings; secrets masked.")
    summary = serializers.SerializerMethodField(help_text="Where the target points, in one line.")

    class Meta:
        model = ConfigTarget
        fields = ["id", "name", "kind", "kind_label", "enabled", "settings", "summary", "updated_at"]
        read_only_fields = fields

    def get_kind_label(self, target) -> str:
        return registry.label(target.kind)

    def get_settings(self, target) -> dict:
        return target.masked_settings()

    def get_summary(self, target) -> str:
        return pushes.target_summary(target)


KindSerializer = inline_serializer(
    "ConfigTargetKind",
    fields={
        "name": serializers.CharField(),
        "label": serializers.CharField(),
        "runs_jobs": serializers.CharField(help_text="The Job.backend its targets run, or empty."),
        "settings": serializers.ListField(child=serializers.DictField()),
    },
    many=True,
)


class ConfigTargetViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ConfigTargetSerializer
    permission_classes = [permissions.IsAuthenticated, IsAdmin]

    def get_queryset(self):
        return ConfigTarget.objects.visible_to(self.request.user).order_by("name")

    @extend_schema(responses=KindSerializer)
    @action(detail=False, pagination_class=None)
    def kinds(self, request):
        return Response(
            [
                {
                    "name": kind.name,
                    "label": kind.label,
                    "runs_jobs": kind.backend if kind.job_backend else "",
                    "settings": [
                        {
                            "key": s.key,
                            "label": str(s.field().label or s.key),
                            "default": s.default,
                            "secret": s.secret,
                        }
                        for s in kind.settings
                    ],
                }
                for kind in registry.kinds()
            ]
        )


class JobLogPartSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="The stream: a file's path, or a pod's name.")
    text = serializers.CharField(help_text="Its last `limit_bytes` bytes (from a whole line), as UTF-8.")
    size = serializers.IntegerField(allow_null=True, help_text="Bytes in the whole stream; null: not known.")
    truncated = serializers.BooleanField(help_text="Only the end of the stream is in `text`.")
    error = serializers.CharField(help_text="Why this stream could not be read; empty when it could.")


class JobLogsSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    state = serializers.CharField(help_text="The job's state now (its output may still grow until it ends).")
    source = serializers.CharField(help_text="Where the output comes from, in words.")
    error = serializers.CharField(help_text="Why nothing could be read at all; empty otherwise.")
    limit_bytes = serializers.IntegerField(help_text="At most this many bytes of each stream are sent.")
    parts = JobLogPartSerializer(many=True)


class JobLogsView(APIView):
    """A job's output, read from the backend that runs it (the job page's Logs panel): the last 64 KiB of each
    stream. Jobs are those the caller may see (`Job.objects.visible_to`): another department's is a 404."""

    @extend_schema(operation_id="jobs_logs_retrieve", responses=JobLogsSerializer)
    def get(self, request, pk):
        job = get_object_or_404(Job.objects.visible_to(request.user).select_related("department"), pk=pk)
        logs = job_logs(job, limit=DEFAULT_LIMIT, show_paths=is_admin(request.user))
        return Response(
            {
                "job": job.pk,
                "state": job.state,
                "source": logs.source,
                "error": logs.error,
                "limit_bytes": DEFAULT_LIMIT,
                "parts": [
                    {
                        "name": part.name,
                        "text": part.text,
                        "size": part.size,
                        "truncated": part.truncated,
                        "error": part.error,
                    }
                    for part in logs.parts
                ],
            }
        )
