"""POST /api/v1/telemetry/dcgm/: a node pushes its DCGM exporter page instead of being scraped.

For nodes the portal cannot reach (behind NAT, or scraped by the site's own Prometheus): a cron job or the
node agent forwards ``curl -s localhost:9400/metrics`` here with its agent token (inventory.api.auth): a
token bound to a rack or host may send only GPUs on its trays.

When the metrics source is the site's Prometheus (tenancy.metrics_source), utilization comes from there:
a push's utilization lines are not recorded (``recorded`` is 0, ``utilization_from`` says why), its health
fields still are.
"""

from django.urls import path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from core.access import is_admin
from core.parsers import decode_body, read_body
from core.throttling import NodeAgentRateThrottle
from inventory.api.auth import NODE_AGENT_AUTHENTICATION, agent_token, is_fleet_agent, require_gpus_in_scope
from inventory.health.ingest import record_dcgm
from tenancy.activity import RecordResult, record_samples
from tenancy.models import MetricsSource
from tenancy.telemetry import parse_dcgm

MAX_BODY_BYTES = 8 * 1024 * 1024  # a GB200 tray's full page is ~60 KB


class PlainTextParser(BaseParser):
    """A ``text/plain`` body (Prometheus text format is served as ``text/plain; version=0.0.4``) as a str.

    Read and decoded by core.parsers: over MAX_BODY_BYTES is a 413, a charset that is not a text encoding
    (``hex``, ``rot13``) a 415 naming it, bytes not valid in the charset a 400.
    """

    media_type = "text/plain"

    def parse(self, stream, media_type=None, parser_context=None):
        return decode_body(read_body(stream, MAX_BODY_BYTES), media_type, parser_context)


class CanPushTelemetry(permissions.BasePermission):
    """A node agent (an agent token, or a fleet token: inventory.api.auth) or a platform admin."""

    message = (
        "Pushing telemetry needs an agent token, a fleet token (an account holding the "
        "'inventory.report_discovery' permission) or a platform admin account."
    )

    def has_permission(self, request, view):
        user = request.user
        return agent_token(request) is not None or is_admin(user) or is_fleet_agent(user)


class TelemetryResultSerializer(serializers.Serializer):
    recorded = serializers.IntegerField(help_text="GPUs whose utilization was stored")
    unknown_gpus = serializers.ListField(
        child=serializers.CharField(), help_text="UUIDs not in the inventory (not recorded)"
    )
    skipped = serializers.IntegerField(
        help_text="utilization lines not used: no UUID label, a blank or out-of-range value, or a repeat"
    )
    health_events = serializers.IntegerField(
        help_text="health faults recorded (XID, NVLink and fabric fields), new or seen again"
    )
    health_actions = serializers.ListField(
        child=serializers.CharField(), help_text="decisions the health rules took on them"
    )
    utilization_from = serializers.ChoiceField(
        choices=["push", "prometheus"],
        help_text="push: this page's utilization was recorded; prometheus: the metrics source is the site's "
        "Prometheus, so utilization is read from there and this page's is not recorded",
    )


class TelemetryErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


EXAMPLE = (
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9",'
    'pci_bus_id="00000008:01:00.0",device="nvidia0",modelName="NVIDIA GB200",Hostname="gb-r01-t01",'
    'DCGM_FI_DRIVER_VERSION="580.82.07"} 87\n'
)


class DcgmPushView(APIView):
    """Record GPU utilization from a DCGM exporter page (Prometheus text) posted as the body.

    `DCGM_FI_DEV_GPU_UTIL` is recorded as utilization; the health fields (`DCGM_FI_DEV_XID_ERRORS`,
    `DCGM_EXP_XID_ERRORS_COUNT`, `DCGM_FI_DEV_FABRIC_HEALTH_MASK`, the NVLink, NVSwitch and ECC error
    counters: docs/dcgm-counters.csv) as health events the health rules act on. GPUs are matched by their
    `UUID` label. Send it with
    `Content-Type: text/plain` and an agent token (`Authorization: Bearer rpa_...`): a page with GPUs that
    are not on the token's trays is a 403 naming them, and nothing is recorded. A fleet token or a platform
    admin may push for every GPU.
    """

    authentication_classes = NODE_AGENT_AUTHENTICATION
    throttle_classes = [NodeAgentRateThrottle]  # every node, every minute: not people's rates
    parser_classes = [PlainTextParser]
    permission_classes = [CanPushTelemetry]

    @extend_schema(
        operation_id="telemetry_dcgm_push",
        request={"text/plain": OpenApiTypes.STR},
        responses={
            200: TelemetryResultSerializer,
            400: OpenApiResponse(TelemetryErrorSerializer, description="the body is not Prometheus text"),
            413: OpenApiResponse(TelemetryErrorSerializer, description="the body is over 8 MiB"),
            415: OpenApiResponse(
                TelemetryErrorSerializer, description="not text/plain, or a charset that is not text"
            ),
        },
        examples=[OpenApiExample("one GB200 GPU", value=EXAMPLE, request_only=True, media_type="text/plain")],
    )
    def post(self, request):
        text = request.data
        if not isinstance(text, str):  # an empty body parses to {} in DRF
            text = ""
        if not text.strip():
            return Response(
                {"detail": "the body is empty: send the exporter's /metrics page as text/plain"},
                status=status.HTTP_400_BAD_REQUEST,
            )
        samples = parse_dcgm(text)  # DcgmParseError: 400 {"detail": ...} (core.api.exception_handler)
        require_gpus_in_scope(request, [sample.uuid for sample in [*samples, *samples.health]])
        from_prometheus = MetricsSource.load().is_prometheus
        result = RecordResult(recorded=0) if from_prometheus else record_samples(samples)
        health = record_dcgm(samples.health)
        return Response(
            {
                **result.as_dict(),
                "skipped": samples.skipped + result.skipped,
                "health_events": health.new_events + health.repeated_events,
                "health_actions": health.actions,
                "utilization_from": "prometheus" if from_prometheus else "push",
            },
            status=status.HTTP_200_OK,
        )


# Included from portal/urls.py as "telemetry/".
urlpatterns = [path("dcgm/", DcgmPushView.as_view(), name="telemetry-dcgm")]
