"""POST /api/v1/discovery/reports/: node agents report what their GPUs say about the NVLink fabric, and the
faults they saw (kernel XIDs, active checks) for the health rules (inventory.health)."""

import functools

from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.audit import record_refused
from core.fields import JSONBooleanField, JSONIntegerField, KnownFieldsOnly, StringOnly, TextField
from core.hardware import GPUS_PER_TRAY, MAX_REPORTED_CLIQUE_ID
from core.throttling import NodeAgentRateThrottle
from inventory.api import hash_only
from inventory.api.auth import NODE_AGENT_AUTHENTICATION, IsNodeAgent, agent_token, require_host_in_scope
from inventory.choices import MigMode
from inventory.discovery import faults, health_report, mig
from inventory.discovery.nvidia_smi import (
    FabricFlag,
    FabricState,
    GpuHealth,
    RecoveryAction,
    ReportedGpu,
    ReportError,
    canonical_gpu_uuid,
    parse_any,
    summarize,
    validate_report,
)
from inventory.discovery.report_hash import HASH_RE
from inventory.ingest.heartbeats import heartbeat
from inventory.ingest.reports import check_report, ingest_health, ingest_report, report_sha256
from inventory.ingest.results import HEALTH_ONLY, OutOfScope
from inventory.names import hostname_error


# Every field of a report takes only the JSON type the schema gives it (core.fields): a hash sent as a number,
# an index as "0", a boolean as "true" or a count as 4.0 is a 400 naming the field, never read as meant.
class StringChoiceField(StringOnly, serializers.ChoiceField):
    pass


class StringRegexField(StringOnly, serializers.RegexField):
    pass


class StringUUIDField(StringOnly, serializers.UUIDField):
    """A UUID as text: DRF's UUIDField would also read a JSON integer as the UUID of that number."""


class ReportedFabricSerializer(KnownFieldsOnly, serializers.Serializer):
    state = StringChoiceField(choices=[s.value for s in FabricState], help_text="NVML fabric state")
    status = TextField(
        required=False,
        max_length=64,
        allow_null=True,
        allow_blank=True,
        help_text='e.g. "Success", "Insufficient Resources"',
    )
    cluster_uuid = StringUUIDField(required=False, allow_null=True, format="hex_verbose")
    clique_id = JSONIntegerField(
        required=False, allow_null=True, min_value=0, max_value=MAX_REPORTED_CLIQUE_ID
    )
    health = StringChoiceField(
        choices=[h.value for h in GpuHealth], required=False, default=GpuHealth.UNKNOWN.value
    )
    flags = serializers.ListField(
        child=StringChoiceField(choices=[f.value for f in FabricFlag]),
        required=False,
        max_length=len(FabricFlag),
        help_text="fabric health problems (nvmlGpuFabricInfoV healthMask); empty or absent: none",
    )


class MigInstanceSerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of one `mig.instances` entry; inventory.discovery.mig.GpuMig.from_dict checks it."""

    gpu_instance_id = serializers.IntegerField(min_value=0, max_value=mig.MAX_INSTANCE_ID)
    compute_instance_id = serializers.IntegerField(
        min_value=0, max_value=mig.MAX_INSTANCE_ID, allow_null=True, help_text="null: no compute instance yet"
    )
    profile = TextField(max_length=32, help_text='as the driver names it, e.g. "1g.23gb"')
    profile_id = serializers.IntegerField(min_value=0, max_value=mig.MAX_PROFILE_ID)
    placement_start = serializers.IntegerField(min_value=0, max_value=mig.MEMORY_SLICES - 1)
    placement_size = serializers.IntegerField(min_value=1, max_value=mig.MEMORY_SLICES)
    uuid = TextField(max_length=96, allow_null=True, help_text='"MIG-<uuid>"')
    multiprocessors = serializers.IntegerField(allow_null=True, min_value=0)
    memory_mib = serializers.IntegerField(allow_null=True, min_value=0)


class MigProfileSerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of one `mig.profiles` entry (a row of `nvidia-smi mig -lgip`)."""

    profile_id = serializers.IntegerField(min_value=0, max_value=mig.MAX_PROFILE_ID)
    name = TextField(max_length=32)
    instances_free = serializers.IntegerField(min_value=0)
    instances_total = serializers.IntegerField(min_value=0)
    memory_mib = serializers.IntegerField(min_value=0)
    p2p = serializers.BooleanField()
    multiprocessors = serializers.IntegerField(min_value=0)
    placements = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, size] in memory slices (nvidia-smi mig -lgipp)",
    )


class MigStateSerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of a GPU's `mig`; inventory.discovery.mig.GpuMig.from_dict checks it (every key)."""

    uuid = TextField(max_length=64, help_text="the GPU's own UUID")
    current = StringChoiceField(choices=MigMode.choices)
    pending = StringChoiceField(choices=MigMode.choices, help_text="after the next reset")
    complete = serializers.BooleanField(help_text="the instances are known (false: only the mode)")
    instances = MigInstanceSerializer(many=True)
    profiles = MigProfileSerializer(many=True)


@extend_schema_field(MigStateSerializer)
class MigStateField(serializers.JSONField):
    pass


def _mig_output(what: str) -> TextField:
    """One raw `nvidia-smi mig` listing, as printed (inventory.discovery.mig.combine bounds and reads it)."""
    return TextField(
        multiline=True, required=False, trim_whitespace=False, max_length=mig.MAX_INPUT_CHARS, help_text=what
    )


class MigOutputsSerializer(KnownFieldsOnly, serializers.Serializer):
    """The node's raw `nvidia-smi mig` listings, sent with the `-q -x` listing when a GPU is in MIG mode
    (inventory.discovery.mig.combine reads them)."""

    lgip = _mig_output("`nvidia-smi mig -lgip`: the profiles the driver offers")
    lgipp = _mig_output("`nvidia-smi mig -lgipp`: each profile's possible placements")
    lgi = _mig_output("`nvidia-smi mig -lgi`: the GPU instances, with their placements")
    list = _mig_output("`nvidia-smi -L`: the GPUs and MIG devices, with their UUIDs")


class ReportedGpuSerializer(KnownFieldsOnly, serializers.Serializer):
    uuid = TextField(
        max_length=64, help_text='As NVML reports it: "GPU-<uuid>" (stored with lower-case hex digits)'
    )
    index = JSONIntegerField(min_value=0, max_value=GPUS_PER_TRAY - 1)
    serial = TextField(required=False, allow_blank=True, max_length=64)
    product = TextField(required=False, allow_blank=True, max_length=64)
    memory_mib = JSONIntegerField(required=False, allow_null=True, min_value=0)
    pci_bus_id = StringRegexField(
        r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$",
        required=False,
        allow_null=True,
        help_text='as nvidia-smi prints it ("00000008:01:00.0"): maps kernel XID lines to this GPU',
    )
    recovery_action = StringChoiceField(
        choices=[a.value for a in RecoveryAction],
        required=False,
        allow_null=True,
        help_text="NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; absent or null: not available",
    )
    fabric = ReportedFabricSerializer()
    mig = MigStateField(
        required=False,
        help_text="the GPU's MIG mode and instances (absent: not reported; what was known stays)",
    )

    def validate_uuid(self, value):
        try:
            return canonical_gpu_uuid(value, "uuid")
        except ReportError as error:
            raise serializers.ValidationError(str(error)) from error


class XidEntrySerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of one `xids` entry; inventory.discovery.health_report.validate_xid checks it."""

    time = serializers.DateTimeField(help_text="when the kernel logged it, ISO 8601 with a zone")
    pci_bus_id = TextField(
        max_length=32, required=False, help_text='"00000000:1B:00.0"; absent: read from the NVRM line'
    )
    xid = serializers.IntegerField(min_value=faults.XID_RANGE[0], max_value=faults.XID_RANGE[1])
    pid = serializers.IntegerField(required=False, allow_null=True)
    text = TextField(max_length=health_report.MAX_XID_TEXT, help_text="the kernel line")


class CheckEntrySerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of one `checks` entry; inventory.discovery.health_report.validate_check checks it."""

    name = TextField(max_length=health_report.MAX_CHECK_NAME, help_text='e.g. "dcgmi diag -r 2"')
    exit_status = serializers.IntegerField(min_value=-255, max_value=255)
    output = TextField(
        multiline=True, help_text="the tail of its output, at most 64 KiB (verbatim: NUL refused)"
    )
    started = serializers.DateTimeField()
    seconds = serializers.FloatField(min_value=0)


class AgentInfoSerializer(KnownFieldsOnly, serializers.Serializer):
    """Documentation of `agent`; inventory.discovery.health_report.validate_agent checks it."""

    version = TextField(max_length=health_report.MAX_AGENT_VERSION)
    interval_s = serializers.IntegerField(min_value=1, max_value=health_report.MAX_AGENT_INTERVAL)


# Taken as JSON and checked, with every other path into the health rules, by inventory.discovery.faults (one
# validation); the serializers above only document the shape.
@extend_schema_field(XidEntrySerializer(many=True))
class XidsField(serializers.JSONField):
    pass


@extend_schema_field(CheckEntrySerializer(many=True))
class ChecksField(serializers.JSONField):
    pass


@extend_schema_field(AgentInfoSerializer)
class AgentField(serializers.JSONField):
    pass


class NodeReportSerializer(KnownFieldsOnly, serializers.Serializer):
    host = TextField(max_length=128, help_text="hostname of the compute tray")
    gpus = ReportedGpuSerializer(many=True, required=False, help_text="NVML fabric info, one entry per GPU")
    nvidia_smi = TextField(
        multiline=True,
        required=False,
        trim_whitespace=False,
        help_text="raw `nvidia-smi -q`, `-q -x` or compact CSV output",
    )
    mig = MigOutputsSerializer(
        required=False,
        help_text="with a `nvidia-smi -q -x` listing whose GPUs are in MIG mode: the node's `nvidia-smi mig` "
        "listings (profiles, placements, instances, MIG UUIDs)",
    )
    dry_run = JSONBooleanField(required=False, default=False, help_text="check only, write nothing")
    xids = XidsField(
        required=False,
        help_text=f"kernel XID lines since the last report, each once, at most {health_report.MAX_XIDS}",
    )
    checks = ChecksField(required=False, help_text="active check results (e.g. dcgmi diag), when configured")
    agent = AgentField(required=False, help_text="the node agent's version and report interval")
    report_sha256 = TextField(
        required=False,
        help_text="instead of the report: the `report_sha256` the portal answered for this node's last "
        "report, when the node's listing has not changed since (64 lower-case hex digits). Answered 200 "
        "with `unchanged: true` (a heartbeat) or 409 with `full_report_needed: true` (send the full report)",
    )

    def validate_host(self, value):
        # The inventory only holds hostnames Slurm and Kubernetes take (inventory.names): say why a host
        # cannot be a tray's instead of looking it up and answering "not in the inventory".
        if (why := hostname_error(value)) is not None:
            raise serializers.ValidationError(f"{value!r} cannot be a compute tray's hostname: {why}")
        return value

    def validate_report_sha256(self, value):
        if not HASH_RE.match(value):
            raise serializers.ValidationError(
                "report_sha256 must be a SHA-256 as the portal answered it: 64 lower-case hex digits "
                f"(got {len(value)} characters); send it as answered, or send the full report"
            )
        return value

    def validate(self, attrs):
        health, errors = health_report.validate_health(
            attrs.get("xids"), attrs.get("checks"), attrs.get("agent"), now=timezone.now()
        )
        if errors:
            raise serializers.ValidationError(errors)
        attrs["health"] = health
        if "report_sha256" in attrs:
            self._refuse_more_than_the_hash(attrs)
            attrs["format"], attrs["parsed"] = "hash", None
            return attrs
        if "gpus" not in attrs and "nvidia_smi" not in attrs and (health.xids or health.checks):
            # nvidia-smi failed on the node (a GPU fell off the bus): the kernel's XIDs still count.
            attrs["format"], attrs["parsed"] = HEALTH_ONLY, None
            return attrs
        if ("gpus" in attrs) == ("nvidia_smi" in attrs):
            raise serializers.ValidationError(
                "send exactly one of 'gpus' (structured) or 'nvidia_smi' (raw output); a report may leave "
                "both out only when it carries 'xids' or 'checks' (nvidia-smi failed on the node)"
            )
        # Both inputs end in the one check every path shares (validate_report); its refusal names the field.
        field = "nvidia_smi" if "nvidia_smi" in attrs else "gpus"
        try:
            if field == "nvidia_smi":
                attrs["format"], parsed = parse_any(attrs["nvidia_smi"])
            else:
                attrs["format"], parsed = "json", [self._gpu(gpu, i) for i, gpu in enumerate(attrs["gpus"])]
            parsed = self._with_mig(attrs, parsed)
            attrs["parsed"] = validate_report(parsed)
        except ReportError as error:
            raise serializers.ValidationError({field: str(error)}) from error
        return attrs

    @staticmethod
    def _with_mig(attrs, parsed: list[ReportedGpu]) -> list[ReportedGpu]:
        """The GPUs with their MIG state: read from the `-q -x` listing and the `mig` listings beside it.
        Text and CSV listings do not say (what was known stays); the structured path carries `gpus[].mig`."""
        if attrs["format"] != "xml":
            if "mig" in attrs:
                raise serializers.ValidationError(
                    {
                        "mig": "the nvidia-smi mig listings go with the `nvidia-smi -q -x` listing (this "
                        f"report's is {attrs['format']}); a structured report gives each GPU's `mig`"
                    }
                )
            return parsed
        if "mig" not in attrs:
            return mig.with_mig(parsed, attrs["nvidia_smi"], None)  # a refusal: the listing's, as before
        mig.combine(attrs["nvidia_smi"], None)  # the listing's own MIG fields first: refused as the listing's
        try:
            return mig.with_mig(parsed, attrs["nvidia_smi"], dict(attrs["mig"]))
        except mig.MigReportError as error:
            raise serializers.ValidationError({"mig": str(error)}) from error

    @staticmethod
    def _refuse_more_than_the_hash(attrs) -> None:
        """A hash-only report carries nothing but the hash, and is never a dry run."""
        extra = sorted(k for k in ("gpus", "nvidia_smi", "mig", "xids", "checks") if k in attrs)
        if extra:
            raise serializers.ValidationError(
                {
                    "report_sha256": f"a hash-only report carries no {', '.join(extra)}: send either the "
                    "full report or, when nothing changed and there are no XIDs or check results, "
                    "only its hash"
                }
            )
        if attrs.get("dry_run"):
            raise serializers.ValidationError(
                {"report_sha256": "a dry run needs the full report: a hash alone has nothing to check"}
            )

    @staticmethod
    def _gpu(data, position: int = 0) -> ReportedGpu:
        state_of_mig = None
        if "mig" in data:
            state_of_mig = mig.GpuMig.from_dict(data["mig"], f"gpus[{position}].mig")
            if state_of_mig.uuid != data["uuid"]:
                raise mig.MigReportError(
                    f"gpus[{position}].mig: uuid {state_of_mig.uuid} is not the GPU's own ({data['uuid']})"
                )
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
            pci_bus_id=data.get("pci_bus_id") or None,
            recovery_action=RecoveryAction(data["recovery_action"]) if data.get("recovery_action") else None,
            fabric_flags=tuple(dict.fromkeys(FabricFlag(flag) for flag in fabric.get("flags") or ())),
            serial=data.get("serial") or None,
            product=data.get("product") or None,
            memory_mib=data.get("memory_mib"),
            raw_cluster_uuid=str(cluster) if cluster is not None else None,
            raw_clique_id=str(clique) if clique is not None else None,
            mig=state_of_mig,
        )


class HealthOutcomeSerializer(serializers.Serializer):
    new_events = serializers.IntegerField()
    repeated_events = serializers.IntegerField(help_text="faults seen again within the dedup window")
    actions = serializers.ListField(
        child=serializers.CharField(), help_text="decisions the health rules took"
    )
    unmapped_xids = serializers.IntegerField(help_text="XIDs whose PCI bus id matched no GPU of the tray")
    healthy = serializers.BooleanField(help_text="whether this report counts towards return to service")


class NodeReportResultSerializer(serializers.Serializer):
    """The answer to a full report (reconciled, or unchanged and counted as a heartbeat)."""

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
    health = HealthOutcomeSerializer(
        required=False,
        help_text="what the health rules made of the report's faults; absent for a dry run (nothing is "
        "recorded, so the rules do not run: `xids`, `checks` and `agent` are only checked)",
    )
    unchanged = serializers.BooleanField(
        help_text="the report was the node's last one again: only its last-seen time was recorded"
    )
    report_sha256 = serializers.CharField(
        allow_blank=True,
        help_text="the report's canonical hash (empty for a dry run or a health-only report): send it "
        "back as `report_sha256` instead of an unchanged report",
    )


class NodeReportAnswerSerializer(NodeReportResultSerializer):
    """What POST /discovery/reports/ answers: a full report's result, or, for a hash-only report the portal
    recognised, only `host`, `unchanged` (true), `report_sha256` and `problems` (the other fields absent).
    One schema with those four required, not a oneOf: a full answer also carries the four, so it would match
    both branches of a oneOf."""

    ALWAYS = ("host", "unchanged", "report_sha256", "problems")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            field.required = name in self.ALWAYS


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

    Health (all optional): `xids` (kernel `NVRM: Xid` lines, at most 256, each once), `checks` (active check
    results) and `agent` are recorded with the GPUs' NVML recovery action and fabric health flags (read from
    `nvidia-smi -q -x`) as health events, and the health rules act on them in the same transaction (drain,
    degrade the NVLink partition, warn; see `health.actions` in the answer). Any of them malformed (a wrong
    type, an unknown key, an XID outside 1-999, text over its limit, a time without a zone, an entry twice) is
    a 400 naming it, and nothing is written. Unknown top-level keys are a 400 too.

    Unchanged reports cost a heartbeat: the answer carries `report_sha256`, the report's canonical hash. A
    full report with the same hash as the node's last reconciled one (and no XIDs or check results) is
    answered `unchanged: true` and only the tray's last-seen time is recorded (batched). A node may instead
    post `{"host": ..., "report_sha256": ..., "agent": ...}` alone: 200 with `unchanged: true` when the
    portal's last report for the tray has that hash and the tray needs nothing else, 409 with
    `full_report_needed: true` when it must see the full report (post it then). A hash that is not 64
    lower-case hex digits, or a hash sent with `gpus`, `nvidia_smi`, `xids` or `checks`, is a 400.

    Authenticate with an agent token (`Authorization: Bearer rpa_...`) bound to the tray's rack or host: a
    report for a host outside its scope is a 403 that writes nothing. So is a report whose content reaches
    outside it: a GPU the inventory has on (or detached from) a tray of another rack (of another host, for a
    host token) would be moved to the reporting tray, so the whole report (dry run included) is refused,
    `{"detail": "GPU ... belongs to tray ... of rack ...; this token speaks for rack ...", "refused_gpus":
    [...]}`, nothing of it applied, and the attempt is audited on the token. A fleet token (an account
    holding `inventory.report_discovery`) may report for every host and move any GPU (an RMA).
    """

    authentication_classes = NODE_AGENT_AUTHENTICATION
    permission_classes = [IsNodeAgent]
    throttle_classes = [NodeAgentRateThrottle]  # every node, every minute: not people's rates

    @classmethod
    def as_view(cls, **initkwargs):
        """DRF's view behind the short path of plain hash-only reports (inventory.api.hash_only), which
        answers them as this view would and leaves every other request to it."""
        whole = super().as_view(**initkwargs)

        @functools.wraps(whole)  # keeps `cls`, `initkwargs` (the schema) and `csrf_exempt`
        def view(request, *args, **kwargs):
            return hash_only.answer(request) or whole(request, *args, **kwargs)

        return view

    @extend_schema(
        request=NodeReportSerializer,
        responses={
            200: NodeReportAnswerSerializer,
            403: OpenApiResponse(
                description="The agent token may not speak for the host, or the report lists GPUs of a tray "
                'of another rack (another host): `{"detail": "GPU ... belongs to tray ... of rack ...; this '
                'token speaks for rack ...", "refused_gpus": [{"gpu", "tray", "rack", "where"}]}`. Nothing '
                "of the report is applied; the attempt is audited on the token."
            ),
            409: OpenApiResponse(
                description="A hash-only report the portal cannot take: its last reconciled report for the "
                "host had another hash, or the tray has something the health rules must see again. "
                '`{"detail": "...", "full_report_needed": true}`: post the full report now.'
            ),
        },
        examples=[OpenApiExample("structured report", value=EXAMPLE, request_only=True)],
    )
    def post(self, request):
        host = request.data.get("host") if hasattr(request.data, "get") else None
        if isinstance(host, str):  # scope before anything else: an outside host learns nothing more
            require_host_in_scope(request, host.strip())  # stripped as the serializer will
        token = agent_token(request)  # its scope covers the report's content too (OutOfScope)
        serializer = NodeReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if not isinstance(host, str) or host.strip() != data["host"]:  # else checked above (one query less)
            require_host_in_scope(request, data["host"])  # the host as validated (trimmed) is the one written
        try:
            if "report_sha256" in data:
                return self._hash_only(data["host"], data["report_sha256"])
            unchanged = self._unchanged(data)
            if unchanged is not None:
                return unchanged
            result = self._ingest(data, token)
        # UnknownHost: 400 {"host": [...]} (core.api.exception_handler)
        except OutOfScope as refused:
            # After the ingest's transaction rolled back: the attempt is recorded, nothing of the report.
            record_refused(refused.token, {**refused.as_detail(), "dry_run": data["dry_run"]})
            return Response(
                {"detail": refused.message, "refused_gpus": refused.offenders},
                status=status.HTTP_403_FORBIDDEN,
            )
        answer = {**result.report.as_dict(), **result.changes()}
        if data["dry_run"]:
            # Nothing was recorded, so the health rules did not run: no outcome to give, not a null one.
            del answer["health"]
        return Response(answer, status=status.HTTP_200_OK)

    @staticmethod
    def _unchanged(data) -> Response | None:
        """The answer to a full report with the hash of the tray's last reconciled one (and no XIDs or check
        results, not a dry run): only a heartbeat is recorded. None for any other report.

        A heartbeat before the content's scope check is safe: it matches only the hash of the tray's last
        applied report (whose GPUs were in scope then) and writes only the last-seen times of the reporting
        tray and the GPUs on it now."""
        if data["parsed"] is None or data["dry_run"] or data["health"].xids or data["health"].checks:
            return None
        sha256 = report_sha256(data["format"], data["parsed"], data["health"])
        beat = heartbeat(data["host"], sha256)
        if beat is None:
            return None
        report = summarize(beat.host, data["format"], data["parsed"], expected_cluster_uuid=beat.cluster_uuid)
        return Response({**report.as_dict(), **UNCHANGED, "report_sha256": sha256})

    @staticmethod
    def _ingest(data, token):
        """Record the report (only its health when nvidia-smi failed on the node), or check it (dry run)."""
        if data["parsed"] is None:
            return ingest_health(data["host"], data["health"], dry_run=data["dry_run"])
        if data["dry_run"]:
            return check_report(data["host"], data["format"], data["parsed"], scope=token)
        return ingest_report(data["host"], data["format"], data["parsed"], data["health"], scope=token)

    @staticmethod
    def _hash_only(host: str, sha256: str) -> Response:
        beat = heartbeat(host, sha256)
        if beat is None:
            return Response(hash_only.full_report_needed(host), status=status.HTTP_409_CONFLICT)
        return Response({**beat.as_dict(), "problems": beat.problems})


# The answer to a full report that was the node's last one again (a heartbeat): nothing reconciled.
UNCHANGED = {
    "applied": True,
    "drift": [],
    "created_gpus": [],
    "moved_gpus": [],
    "removed_gpus": [],
    "learned_cluster_uuid": None,
    "health": {"new_events": 0, "repeated_events": 0, "actions": [], "unmapped_xids": 0, "healthy": True},
    "unchanged": True,
}
