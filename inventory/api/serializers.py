"""Read serializers for the inventory API.

Every value a list row shows comes from the row itself, a select_related join, an annotation or one
prefetch made by the viewset's queryset (inventory.api.views), so a page costs the same number of queries
whatever its size. The annotated fields (counts, intended clique, drift) are declared explicitly so the
OpenAPI schema knows their types.
"""

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import KnownFieldsOnly
from inventory import recarving
from inventory.api.discovery import MigStateField
from inventory.models import ComputeTray, Gpu, NVLinkPartition, PartitionPlan, Rack, RecarvePolicy
from inventory.staleness import silent_policy


class RackSerializer(serializers.ModelSerializer):
    trays = serializers.IntegerField(
        source="tray_count", read_only=True, help_text="Compute trays in the rack."
    )
    gpus = serializers.IntegerField(source="gpu_count", read_only=True, help_text="GPUs in the rack's trays.")
    healthy_gpus = serializers.IntegerField(
        source="healthy_gpu_count", read_only=True, help_text="GPUs whose last reported health is healthy."
    )
    partitions = serializers.IntegerField(
        source="partition_count", read_only=True, help_text="NVLink partitions carved in the rack."
    )
    fabric_unit = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The scalable unit (leaf group) of the compute fabric the rack is in, in the fabric in use "
        "(null: no fabric imported places it).",
    )
    fabric_spine_group = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="The spine group of the rack's scalable unit (null: not placed).",
    )

    class Meta:
        model = Rack
        fields = [
            "id",
            "name",
            "system_model",
            "cluster_uuid",
            "location",
            "trays",
            "gpus",
            "healthy_gpus",
            "partitions",
            "fabric_unit",
            "fabric_spine_group",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class PartitionRefSerializer(serializers.ModelSerializer):
    """The partition a tray is intended to be in, as a tray row shows it."""

    class Meta:
        model = NVLinkPartition
        fields = ["id", "name", "clique_id"]
        read_only_fields = fields


class ComputeTraySerializer(serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name", read_only=True, help_text="Rack name.")
    partition = PartitionRefSerializer(
        read_only=True,
        allow_null=True,
        help_text="The NVLink partition the inventory intends this tray to be in.",
    )
    ib_port_guids = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text='InfiniBand port GUIDs, "0x" + 16 hex.'
    )
    fabric_problems = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="Problems found in the tray's last report."
    )
    stale = serializers.SerializerMethodField(
        help_text="The node reported before but not within the health settings' node silent time "
        "(HealthSettings.node_silent_after_s); filter with ?stale=true. A tray that never reported is "
        "not stale."
    )
    silent_for_s = serializers.SerializerMethodField(
        help_text="Seconds since the node's last report when stale, else null."
    )
    holds_new_work = serializers.SerializerMethodField(
        help_text="Stale and the node silent health rule holds it: the scheduler places no new work there."
    )
    mig_layout = serializers.CharField(
        read_only=True,
        help_text="The MIG layout a platform admin chose for every GPU of the tray (a mig-parted config "
        'name: "all-balanced", "all-1g.23gb"; "all-disabled": whole GPUs), empty when none was.',
    )
    mig_layout_devices = serializers.DictField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text='MIG devices per GPU of that layout, by profile ({"1g.23gb": 7}).',
    )

    def _silent(self, tray) -> tuple[bool, float | None, bool]:
        # One policy and one "now" for the whole page, as the rack view judges it.
        if "silent_policy" not in self.context:
            self.context["silent_policy"], self.context["silent_now"] = silent_policy(), timezone.now()
        policy, now = self.context["silent_policy"], self.context["silent_now"]
        silent = policy.is_silent(tray.last_report_at, now)
        age = round((now - tray.last_report_at).total_seconds(), 1) if silent else None
        return silent, age, silent and policy.hold

    @extend_schema_field(serializers.BooleanField())
    def get_stale(self, tray) -> bool:
        return self._silent(tray)[0]

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_silent_for_s(self, tray):
        return self._silent(tray)[1]

    @extend_schema_field(serializers.BooleanField())
    def get_holds_new_work(self, tray) -> bool:
        return self._silent(tray)[2]

    class Meta:
        model = ComputeTray
        fields = [
            "id",
            "hostname",
            "rack",
            "slot",
            "state",
            "state_reason",
            "ib_port_guids",
            "partition",
            "reported_clique",
            "fabric_problems",
            "last_report_at",
            "stale",
            "silent_for_s",
            "holds_new_work",
            "mig_layout",
            "mig_layout_devices",
        ]
        read_only_fields = fields


class GpuSerializer(serializers.ModelSerializer):
    # A GPU removed from its tray has no tray, hence no rack and no intended clique: those are null.
    rack = serializers.CharField(
        source="tray.rack.name", read_only=True, allow_null=True, help_text="Rack name."
    )
    tray = serializers.CharField(
        source="tray.hostname",
        read_only=True,
        allow_null=True,
        help_text="Hostname of the GPU's compute tray.",
    )
    intended_clique_id = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Clique ID of the tray's intended NVLink partition."
    )
    drift = serializers.BooleanField(
        read_only=True,
        help_text="The GPU reported a clique ID other than its tray's intended one (false until it reports, "
        "and for a GPU removed from its tray).",
    )

    mig = MigStateField(
        read_only=True,
        allow_null=True,
        help_text="MIG instances and offered profiles as the node last reported them (null: never reported)",
    )

    class Meta:
        model = Gpu
        fields = [
            "id",
            "uuid",
            "rack",
            "tray",
            "index",
            "serial",
            "product",
            "memory_mib",
            "health",
            "fabric_state",
            "fabric_status",
            "reported_cluster_uuid",
            "reported_clique_id",
            "intended_clique_id",
            "drift",
            "mig_mode",
            "mig_pending",
            "mig",
            "last_report_at",
        ]
        read_only_fields = fields


class NVLinkPartitionSerializer(serializers.ModelSerializer):
    rack = serializers.CharField(source="rack.name", read_only=True, help_text="Rack name.")
    is_default = serializers.BooleanField(read_only=True, help_text="The rack-wide default partition.")
    tray_count = serializers.IntegerField(read_only=True, help_text="Compute trays in the partition.")
    trays = serializers.SlugRelatedField(
        many=True,
        read_only=True,
        slug_field="hostname",
        help_text="Hostnames of the partition's trays, by slot.",
    )

    class Meta:
        model = NVLinkPartition
        fields = ["id", "rack", "clique_id", "name", "is_default", "tray_count", "trays", "created_at"]
        read_only_fields = fields


class RecarveSerializer(serializers.ModelSerializer):
    """A re-carve the scheduler made: its partition plan (the plan API has the rest; admins only)."""

    class Meta:
        model = PartitionPlan
        fields = ["id", "status", "reason", "for_job_id", "created_at", "finished_at"]
        read_only_fields = fields


class RecarvePolicySerializer(KnownFieldsOnly, serializers.ModelSerializer):
    """A rack's re-carving policy: off (the default) or on, within its bounds. Writes go through
    inventory.recarving.set_policy (the model's bounds, the rack's lock, the audit)."""

    rack = serializers.CharField(source="rack.name", read_only=True, help_text="The rack's name.")
    updated_at = serializers.DateTimeField(
        read_only=True, allow_null=True, help_text="When an admin last set it; null: never (the defaults)."
    )
    recarves_last_hour = serializers.SerializerMethodField(
        help_text="The scheduler's re-carves of this rack in the last hour (bounded by max_per_hour)."
    )
    last_recarve = serializers.SerializerMethodField(help_text="The scheduler's latest re-carve of the rack.")

    class Meta:
        model = RecarvePolicy
        fields = ["rack", "enabled", "smallest_trays", "max_per_hour", "updated_at"]
        fields += ["recarves_last_hour", "last_recarve"]
        read_only_fields = ["updated_at"]
        # A PUT says all three (the model's defaults are for a rack never set); a PATCH only what changes.
        extra_kwargs = {name: {"required": True} for name in ("enabled", "smallest_trays", "max_per_hour")}

    def get_recarves_last_hour(self, policy) -> int:
        return recarving.recarves_in_window(policy.rack, timezone.now())

    @extend_schema_field(RecarveSerializer(allow_null=True))
    def get_last_recarve(self, policy):
        plan = recarving.last_recarve(policy.rack)
        return RecarveSerializer(plan).data if plan is not None else None

    def save(self, **kwargs):
        policy = self.instance
        values = {
            name: self.validated_data.get(name, getattr(policy, name))
            for name in ("enabled", "smallest_trays", "max_per_hour")
        }
        self.instance = recarving.set_policy(policy.rack, **values)
        return self.instance
