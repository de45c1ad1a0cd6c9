"""Serializers for the tenancy API: departments, their members and their fair-share position.

Validation once: a department is saved by `tenancy.services.save_department` and a membership changed by
`set_membership` / `remove_membership`, exactly as the HTML forms and the admin do; their ValidationError
becomes a 400 naming the field. Usage figures (in_use, in_quota, borrowed, pending_demand) are the
department's position among the positions the viewset reads once per request (its context's "positions":
scheduling.usage.department_positions, the one count every screen shows), never a query per row.
"""

from django.db import models
from rest_framework import serializers

from core.access import Role
from core.fields import JSONIntegerField, KnownFieldsOnly
from core.text import TextField
from tenancy.models import DedicatedPartition, Department, Membership
from tenancy.services import save_department


class DedicatedPartitionSerializer(serializers.ModelSerializer):
    partition_id = serializers.IntegerField(read_only=True)
    rack = serializers.CharField(source="partition.rack.name", read_only=True, help_text="Rack name.")
    name = serializers.CharField(source="partition.name", read_only=True, help_text="Partition name.")
    clique_id = serializers.IntegerField(source="partition.clique_id", read_only=True)
    gpus = serializers.IntegerField(
        source="gpu_count", read_only=True, help_text="GPUs in the partition (counted in the guarantee)."
    )

    class Meta:
        model = DedicatedPartition
        fields = ["partition_id", "rack", "name", "clique_id", "gpus"]
        read_only_fields = fields


ALLOCATED = "Allocated from the pools in the tenancy settings when omitted."
# The dashboards' split (scheduling.usage): by the jobs' in-quota/borrowed standing, as each job shows it.
IN_QUOTA = "GPUs in use by its in-quota running jobs (in_use - borrowed)."
BORROWED = "GPUs in use by its running jobs marked over quota (borrowed, preemptible)."


class DepartmentSerializer(KnownFieldsOnly, serializers.ModelSerializer):
    # Every number is a JSON integer ("4" and 4.0 are refused, core.fields), the model's own fields included.
    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.IntegerField: JSONIntegerField,
        models.PositiveIntegerField: JSONIntegerField,
        models.PositiveSmallIntegerField: JSONIntegerField,
        models.SmallIntegerField: JSONIntegerField,
    }
    name = TextField(max_length=100)
    # Isolation values: optional (allocated when omitted), checked by the service (range, already assigned,
    # overlapping network or export), so the API and the forms give the same messages. 0 is not "allocate
    # one" (the service allocates for a value left out): it is refused like any value out of range.
    vlan_id = JSONIntegerField(required=False, min_value=1, help_text=f"VLAN ID (1-4094). {ALLOCATED}")
    vxlan_vni = JSONIntegerField(
        required=False, min_value=1, help_text=f"VXLAN VNI (1-16777215). {ALLOCATED}"
    )
    ib_pkey = JSONIntegerField(
        required=False,
        min_value=1,
        help_text=f"InfiniBand partition key, as a number (0x0001-0x7ffe). {ALLOCATED}",
    )
    pkey_hex = serializers.CharField(read_only=True, help_text='The P_Key in hex, e.g. "0x0100".')
    network_cidr = TextField(
        required=False, max_length=43, help_text=f"The tenant network, e.g. 10.64.3.0/24. {ALLOCATED}"
    )
    export_path = TextField(
        required=False,
        max_length=255,
        help_text="Absolute path of the department's NFS export, inside the export root, of letters, digits, "
        "'.', '_' and '-' between '/' (no whitespace, '..', '//', trailing '/' or exports(5) characters such "
        "as '*', '(', ','), not inside or around another department's. Defaults to <export root>/<slug>.",
    )
    storage_quota_gib = JSONIntegerField(
        required=False, min_value=1, help_text="Storage capacity quota. Defaults to the tenancy settings'."
    )
    dedicated_partitions = DedicatedPartitionSerializer(
        many=True,
        read_only=True,
        help_text="NVLink partitions dedicated to the department (their GPUs count in its guarantee).",
    )
    in_use = serializers.IntegerField(read_only=True, help_text="GPUs its running jobs hold.")
    in_quota = serializers.IntegerField(read_only=True, help_text=IN_QUOTA)
    borrowed = serializers.IntegerField(read_only=True, help_text=BORROWED)
    pending_demand = serializers.IntegerField(read_only=True, help_text="GPUs its pending jobs ask for.")

    class Meta:
        model = Department
        fields = [
            "id",
            "name",
            "slug",
            "guaranteed_gpus",
            "over_quota_weight",
            "limit_gpus",
            "priority",
            "vlan_id",
            "vxlan_vni",
            "ib_pkey",
            "pkey_hex",
            "network_cidr",
            "export_path",
            "storage_quota_gib",
            "dedicated_partitions",
            "in_use",
            "in_quota",
            "borrowed",
            "pending_demand",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def to_representation(self, instance):
        # The usage figures: the department's position (scheduling.usage.Position) in the context's
        # "positions" (a callable: they are read when the first department is shown).
        position = self.context["positions"]().of(instance)
        for name in ("in_use", "in_quota", "borrowed", "pending_demand"):
            setattr(instance, name, getattr(position, name))
        return super().to_representation(instance)

    def create(self, validated_data):
        department = Department(**validated_data)
        if "storage_quota_gib" not in validated_data:
            department.storage_quota_gib = None  # the service applies the pools' default
        return self._save(department)

    def update(self, instance, validated_data):
        for field, value in validated_data.items():
            setattr(instance, field, value)
        return self._save(instance)

    @staticmethod
    def _save(department):
        return save_department(department)  # its ValidationError: a 400 (core.api.exception_handler)


class QuotaSerializer(serializers.Serializer):
    """A department's fair-share position now (Run:ai semantics, tenancy.quota.fair_share)."""

    department = serializers.CharField(help_text="Department slug.")
    capacity = serializers.IntegerField(help_text="Schedulable healthy GPUs shared by all departments.")
    guaranteed = serializers.IntegerField()
    limit = serializers.IntegerField(allow_null=True, help_text="Most GPUs it may hold; null: no limit.")
    in_use = serializers.IntegerField(help_text="GPUs its running jobs hold.")
    in_quota = serializers.IntegerField(help_text=IN_QUOTA)
    borrowed = serializers.IntegerField(help_text=BORROWED)
    pending_demand = serializers.IntegerField(help_text="GPUs its pending jobs ask for.")
    fair_share = serializers.IntegerField(help_text="GPUs it is entitled to now (in quota + over quota).")
    entitled_in_quota = serializers.IntegerField(
        help_text="Part of the fair share within its guarantee: min(guarantee, demand), scaled down when the "
        "guarantees do not fit the capacity."
    )
    entitled_over_quota = serializers.IntegerField(help_text="Part of the fair share borrowed by weight.")
    reclaimable = serializers.IntegerField(
        help_text="GPUs it holds beyond its fair share that other departments may take back."
    )
    starved = serializers.IntegerField(help_text="GPUs it is owed within its guarantee but does not hold.")
    slices = serializers.IntegerField(help_text="MIG slices its running slice jobs hold.")
    slice_gpu_equivalents = serializers.FloatField(
        help_text="What those slices count for in GPUs: each its share of a GPU's compute slices (g/7; a "
        "1g.23gb counts 1/7, a 3g.93gb 3/7)."
    )
    in_use_gpu_equivalents = serializers.FloatField(
        help_text="in_use plus slice_gpu_equivalents: what the department's limit and guarantee hold a slice "
        "job to."
    )


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "department", "role", "created_at"]
        read_only_fields = fields


class MembershipCreateSerializer(KnownFieldsOnly, serializers.Serializer):
    username = TextField(max_length=150, help_text="An existing user's username.")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class MembershipRoleSerializer(KnownFieldsOnly, serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)
