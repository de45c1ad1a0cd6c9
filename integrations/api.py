"""GET /api/v1/config-targets/ (platform admins): the targets, their kind and settings with secrets masked;
GET /api/v1/config-targets/kinds/: every registered kind with its settings (key, label, default, secret), so
a client knows what a target of each kind takes."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.access import IsAdmin
from integrations import pushes, registry
from integrations.models import ConfigTarget


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
