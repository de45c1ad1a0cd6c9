"""POST /api/v1/discovery/reports/: node agents report what their GPUs say about the NVLink fabric."""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.hardware import GPUS_PER_TRAY
from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu, ReportError, parse_any
from inventory.services import UnknownHost, check_report, ingest_report


class CanReportDiscovery(permissions.BasePermission):
    message = (
        "Posting discovery reports needs the 'inventory.report_discovery' permission (a node-agent token)."
    )

    def has_permission(self, request, view):
        return request.user.has_perm("inventory.report_discovery")


class ReportedFabricSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=[s.value for s in FabricState], help_text="NVML fabric state")
    status = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text='e.g. "Success", "Insufficient Resources"',
    )
    cluster_uuid = serializers.UUIDField(required=False, allow_null=True, format="hex_verbose")
    clique_id = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=32767)
    health = serializers.ChoiceField(
        choices=[h.value for h in GpuHealth], required=False, default=GpuHealth.UNKNOWN.value
    )


class ReportedGpuSerializer(serializers.Serializer):
    uuid = serializers.RegexField(r"^GPU-[0-9a-fA-F-]{36}$", help_text='As NVML reports it: "GPU-<uuid>"')
    index = serializers.IntegerField(min_value=0, max_value=GPUS_PER_TRAY - 1)
    serial = serializers.CharField(required=False, allow_blank=True, max_length=64)
    product = serializers.CharField(required=False, allow_blank=True, max_length=64)
    memory_mib = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    fabric = ReportedFabricSerializer()


class NodeReportSerializer(serializers.Serializer):
    host = serializers.CharField(max_length=128, help_text="hostname of the compute tray")
    gpus = ReportedGpuSerializer(many=True, required=False, help_text="NVML fabric info, one entry per GPU")
    nvidia_smi = serializers.CharField(
        required=False, trim_whitespace=False, help_text="raw `nvidia-smi -q`, `-q -x` or compact CSV output"
    )
    dry_run = serializers.BooleanField(required=False, default=False, help_text="check only, write nothing")

    def validate(self, attrs):
        if ("gpus" in attrs) == ("nvidia_smi" in attrs):
            raise serializers.ValidationError(
                "send exactly one of 'gpus' (structured) or 'nvidia_smi' (raw output)"
            )
        if "nvidia_smi" in attrs:
            try:
                attrs["format"], attrs["parsed"] = parse_any(attrs["nvidia_smi"])
            except ReportError as error:
                raise serializers.ValidationError({"nvidia_smi": str(error)}) from error
            return attrs
        indexes = [gpu["index"] for gpu in attrs["gpus"]]
        if len(set(indexes)) != len(indexes):
            raise serializers.ValidationError({"gpus": "two GPUs share one index"})
        attrs["format"], attrs["parsed"] = "json", [self._gpu(gpu) for gpu in attrs["gpus"]]
        return attrs

    @staticmethod
    def _gpu(data) -> ReportedGpu:
        fabric = data["fabric"]
        state = FabricState(fabric["state"])
        status = fabric.get("status") or None
        cluster = fabric.get("cluster_uuid")
        clique = fabric.get("clique_id")
        joined = (
            state == FabricState.COMPLETED
            and status in (None, "Success")
            and cluster is not None
            and cluster.int != 0
            and clique is not None
        )
        return ReportedGpu(
            uuid=data["uuid"],
            index=data["index"],
            cluster_uuid=str(cluster) if joined else None,
            clique_id=clique if joined else None,
            state=state,
            status=status if state == FabricState.COMPLETED else None,
            health=GpuHealth(fabric.get("health") or GpuHealth.UNKNOWN),
            serial=data.get("serial") or None,
            product=data.get("product") or None,
            memory_mib=data.get("memory_mib"),
            raw_cluster_uuid=str(cluster) if cluster is not None else None,
            raw_clique_id=str(clique) if clique is not None else None,
        )


class NodeReportResultSerializer(serializers.Serializer):
    host = serializers.CharField()
    format = serializers.CharField()
    gpus = serializers.ListField(child=serializers.DictField())
    tray_clique = serializers.CharField(allow_null=True)
    problems = serializers.ListField(child=serializers.CharField())
    applied = serializers.BooleanField()
    drift = serializers.ListField(child=serializers.CharField())
    created_gpus = serializers.ListField(child=serializers.CharField())
    moved_gpus = serializers.ListField(child=serializers.CharField())
    removed_gpus = serializers.ListField(child=serializers.CharField())
    learned_cluster_uuid = serializers.CharField(allow_null=True)


EXAMPLE = {
    "host": "gb-r01-t01",
    "gpus": [
        {
            "uuid": "GPU-3f6b1c2e-8a41-4f0e-9d55-1b7c0a9e2d41",
            "index": 0,
            "serial": "1654123456789",
            "product": "NVIDIA GB200",
            "memory_mib": 189471,
            "fabric": {
                "state": "completed",
                "status": "Success",
                "cluster_uuid": "dc6e40c4-d722-4357-9ba6-5291dd461278",
                "clique_id": 32766,
                "health": "healthy",
            },
        }
    ],
}


class DiscoveryReportView(APIView):
    """A node agent posts what its GPUs report (NVML `nvmlDeviceGetGpuFabricInfoV`, or raw nvidia-smi output).

    The inventory is reconciled with it (unless `dry_run`): unknown GPUs are created, moved GPUs followed,
    the rack's cluster UUID learned from its first consistent report, and problems and drift recorded on the
    tray. Authenticate with a token of a user holding `inventory.report_discovery`
    (`manage.py discovery_agent_token` makes one).
    """

    permission_classes = [permissions.IsAuthenticated, CanReportDiscovery]

    @extend_schema(
        request=NodeReportSerializer,
        responses={200: NodeReportResultSerializer},
        examples=[OpenApiExample("structured report", value=EXAMPLE, request_only=True)],
    )
    def post(self, request):
        serializer = NodeReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data["dry_run"]:
            result = check_report(data["host"], data["format"], data["parsed"])
        else:
            try:
                result = ingest_report(data["host"], data["format"], data["parsed"])
            except UnknownHost as error:
                return Response({"host": [str(error)]}, status=status.HTTP_400_BAD_REQUEST)
        return Response({**result.report.as_dict(), **result.changes()}, status=status.HTTP_200_OK)
