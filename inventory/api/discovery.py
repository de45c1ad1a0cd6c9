"""POST /api/v1/discovery/reports/: node agents report what their GPUs say about the NVLink fabric."""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.fields import JSONBooleanField
from core.hardware import GPUS_PER_TRAY, MAX_REPORTED_CLIQUE_ID
from core.throttling import NodeAgentRateThrottle
from inventory.api.auth import NODE_AGENT_AUTHENTICATION, IsNodeAgent, require_host_in_scope
from inventory.discovery.nvidia_smi import (
    FabricState,
    GpuHealth,
    ReportedGpu,
    ReportError,
    canonical_gpu_uuid,
    parse_any,
    validate_report,
)
from inventory.services import UnknownHost, check_report, ingest_report


class ReportedFabricSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=[s.value for s in FabricState], help_text="NVML fabric state")
    status = serializers.CharField(
        required=False,
        max_length=64,
        allow_null=True,
        allow_blank=True,
        help_text='e.g. "Success", "Insufficient Resources"',
    )
    cluster_uuid = serializers.UUIDField(required=False, allow_null=True, format="hex_verbose")
    clique_id = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_REPORTED_CLIQUE_ID
    )
    health = serializers.ChoiceField(
        choices=[h.value for h in GpuHealth], required=False, default=GpuHealth.UNKNOWN.value
    )


class ReportedGpuSerializer(serializers.Serializer):
    uuid = serializers.CharField(
        max_length=64, help_text='As NVML reports it: "GPU-<uuid>" (stored with lower-case hex digits)'
    )
    index = serializers.IntegerField(min_value=0, max_value=GPUS_PER_TRAY - 1)
    serial = serializers.CharField(required=False, allow_blank=True, max_length=64)
    product = serializers.CharField(required=False, allow_blank=True, max_length=64)
    memory_mib = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    fabric = ReportedFabricSerializer()

    def validate_uuid(self, value):
        try:
            return canonical_gpu_uuid(value, "uuid")
        except ReportError as error:
            raise serializers.ValidationError(str(error)) from error


class NodeReportSerializer(serializers.Serializer):
    host = serializers.CharField(max_length=128, help_text="hostname of the compute tray")
    gpus = ReportedGpuSerializer(many=True, required=False, help_text="NVML fabric info, one entry per GPU")
    nvidia_smi = serializers.CharField(
        required=False, trim_whitespace=False, help_text="raw `nvidia-smi -q`, `-q -x` or compact CSV output"
    )
    dry_run = JSONBooleanField(required=False, default=False, help_text="check only, write nothing")

    def validate(self, attrs):
        if ("gpus" in attrs) == ("nvidia_smi" in attrs):
            raise serializers.ValidationError(
                "send exactly one of 'gpus' (structured) or 'nvidia_smi' (raw output)"
            )
        # Both inputs end in the one check every path shares (validate_report); its refusal names the field.
        field = "nvidia_smi" if "nvidia_smi" in attrs else "gpus"
        try:
            if field == "nvidia_smi":
                attrs["format"], parsed = parse_any(attrs["nvidia_smi"])
            else:
                attrs["format"], parsed = "json", [self._gpu(gpu) for gpu in attrs["gpus"]]
            attrs["parsed"] = validate_report(parsed)
        except ReportError as error:
            raise serializers.ValidationError({field: str(error)}) from error
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
    tray. A report that could only corrupt the inventory (no GPUs, a UUID twice, a malformed UUID, a clique
    ID outside 0-32767) is a 400 naming the problem and writes nothing; a GPU another host still reports
    stays where it is and is listed under `problems`.

    Authenticate with an agent token (`Authorization: Bearer rpa_...`) bound to the tray's rack or host: a
    report for a host outside its scope is a 403 that writes nothing. A fleet token (an account holding
    `inventory.report_discovery`) may report for every host.
    """

    authentication_classes = NODE_AGENT_AUTHENTICATION
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeAgentRateThrottle]  # every node, every minute: not people's rates

    @extend_schema(
        request=NodeReportSerializer,
        responses={200: NodeReportResultSerializer},
        examples=[OpenApiExample("structured report", value=EXAMPLE, request_only=True)],
    )
    def post(self, request):
        host = request.data.get("host") if hasattr(request.data, "get") else None
        if isinstance(host, str):  # scope before anything else: an outside host learns nothing more
            require_host_in_scope(request, host.strip())  # stripped as the serializer will
        serializer = NodeReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        require_host_in_scope(request, data["host"])  # the host as validated (trimmed) is the one written
        try:
            if data["dry_run"]:
                result = check_report(data["host"], data["format"], data["parsed"])
            else:
                result = ingest_report(data["host"], data["format"], data["parsed"])
        except UnknownHost as error:
            return Response({"host": [str(error)]}, status=status.HTTP_400_BAD_REQUEST)
        return Response({**result.report.as_dict(), **result.changes()}, status=status.HTTP_200_OK)
