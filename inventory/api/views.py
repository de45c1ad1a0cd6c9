"""Read-only inventory API: racks, compute trays, GPUs and NVLink partitions.

Each viewset starts from `Model.objects.visible_to(user)` (the one visibility rule), filters with the shared
FilterSets of inventory.filters, and builds its rows from joins, annotations and at most one prefetch, so a
list page issues a constant number of queries whatever its size.
"""

from django.db.models import BooleanField, Case, Count, F, IntegerField, OuterRef, Prefetch, Q, Subquery, When
from django.db.models.functions import Coalesce
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.access import IsAdminOrReadOnly
from core.pagination import CursorOrPagePagination
from inventory.api.serializers import (
    ComputeTraySerializer,
    GpuSerializer,
    NVLinkPartitionSerializer,
    RackSerializer,
    RecarvePolicySerializer,
)
from inventory.choices import GpuHealth
from inventory.filters import ComputeTrayFilter, GpuFilter, NVLinkPartitionFilter, RackFilter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack, RackPlace, RecarvePolicy

_in_use_place = RackPlace.objects.filter(fabric__in_use=True, rack=OuterRef("pk"))


def _count_per(queryset, parent_field):
    """A correlated `COUNT(*)` of `queryset` rows whose `parent_field` is the outer row, 0 when none.

    Separate subqueries rather than `Count()` over joins: joining partitions x trays x GPUs multiplies rows
    (a rack carved into 18 partitions would aggregate 18 x 72 rows) and would need DISTINCT to be right.
    """
    counted = (
        queryset.filter(**{parent_field: OuterRef("pk")})
        .order_by()
        .values(parent_field)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


class RecarvePolicyWrites(IsAdminOrReadOnly):
    """core.access's rule, with the reason in the API's words."""

    message = "Only platform admins may change a rack's re-carving policy."


class RackViewSet(viewsets.ReadOnlyModelViewSet):
    """NVL72 racks (NVLink domains) with tray, GPU and partition counts. Looked up by name."""

    serializer_class = RackSerializer
    filterset_class = RackFilter
    lookup_field = "name"
    sort_fields = {  # core.tables.SortFilter
        "name": ("name",),
        "system_model": ("system_model", "name"),
        "location": ("location", "name"),
        "created": ("created_at",),
    }

    def get_queryset(self):
        return Rack.objects.visible_to(self.request.user).annotate(
            tray_count=_count_per(ComputeTray.objects.all(), "rack"),
            gpu_count=_count_per(Gpu.objects.all(), "tray__rack"),
            healthy_gpu_count=_count_per(Gpu.objects.filter(health=GpuHealth.HEALTHY), "tray__rack"),
            partition_count=_count_per(NVLinkPartition.objects.all(), "rack"),
            # Its place in the fabric in use (inventory.fabric; issue 33).
            fabric_unit=Subquery(_in_use_place.values("unit__name")[:1]),
            fabric_spine_group=Subquery(_in_use_place.values("unit__parent__name")[:1]),
        )

    @extend_schema(methods=["GET"], responses=RecarvePolicySerializer, filters=False)
    @extend_schema(
        methods=["PUT", "PATCH"], request=RecarvePolicySerializer, responses=RecarvePolicySerializer
    )
    @action(
        detail=True,
        methods=["get", "put", "patch"],
        url_path="recarve-policy",
        serializer_class=RecarvePolicySerializer,
        filterset_class=None,
        permission_classes=[permissions.IsAuthenticated, RecarvePolicyWrites],
    )
    def recarve_policy(self, request, name=None):
        """The rack's re-carving policy (carving that follows demand): everyone reads it, platform admins
        change it. A rack never set has the defaults: off, partitions of at least 1 tray, at most 2 re-carves
        an hour. The scheduler never re-carves a tray that runs work, nor a partition dedicated to a
        department into another department's."""
        rack = get_object_or_404(Rack.objects.visible_to(request.user), name=name)
        policy = RecarvePolicy.of(rack)
        if request.method == "GET":
            return Response(RecarvePolicySerializer(policy).data)
        serializer = RecarvePolicySerializer(policy, data=request.data, partial=request.method == "PATCH")
        serializer.is_valid(raise_exception=True)
        serializer.save()
        return Response(RecarvePolicySerializer(serializer.instance).data)


class ComputeTrayViewSet(viewsets.ReadOnlyModelViewSet):
    """Compute trays with their intended NVLink partition and what they last reported."""

    serializer_class = ComputeTraySerializer
    filterset_class = ComputeTrayFilter
    # 180,000 trays at 10,000 racks: by cursor on the unique hostname (rack, then slot, for names as the
    # inventory writes them), an index walk; numbered pages (`page`) keep the rack-and-slot order.
    pagination_class = CursorOrPagePagination
    cursor_default = "hostname"

    def get_queryset(self):
        # The last raw report can be large and is not shown: leave it in the database.
        return (
            ComputeTray.objects.visible_to(self.request.user)
            .select_related("rack", "partition")
            .defer("last_report")
        )


class GpuViewSet(viewsets.ReadOnlyModelViewSet):
    """GPUs with their reported fabric membership next to the intended one, and whether they drifted."""

    serializer_class = GpuSerializer
    filterset_class = GpuFilter
    sort_fields = {"uuid": ("uuid",), "health": ("health", "pk")}  # indexed columns (core.tables.SortFilter)
    # Pages by cursor unless a client asks for a page number: 720,000 GPUs at 10,000 racks are not counted
    # or skipped for each page. The sorts a cursor can follow: a unique field each.
    pagination_class = CursorOrPagePagination
    cursor_sorts = {"uuid": "uuid"}

    def get_queryset(self):
        intended = F("tray__partition__clique_id")
        return (
            Gpu.objects.visible_to(self.request.user)
            .select_related("tray__rack")
            .defer("tray__last_report")
            .annotate(
                intended_clique_id=intended,
                # Drift: the GPU reported a clique other than its tray's intended partition (including one
                # while its tray is in none). A GPU that has not reported yet, or was removed from its tray,
                # has no intent to disagree with.
                drift=Case(
                    When(Q(reported_clique_id__isnull=True) | Q(tray__isnull=True), then=False),
                    When(Q(tray__partition__isnull=False) & Q(reported_clique_id=intended), then=False),
                    default=True,
                    output_field=BooleanField(),
                ),
            )
            # The primary key: an index walk. The model's physical order (rack, slot, index) would make the
            # database sort all 72,000 GPUs for every page at 1,000 racks.
            .order_by("pk")
        )


class NVLinkPartitionViewSet(viewsets.ReadOnlyModelViewSet):
    """NVLink partitions (one clique ID each) with their trays."""

    serializer_class = NVLinkPartitionSerializer
    filterset_class = NVLinkPartitionFilter

    def get_queryset(self):
        trays = ComputeTray.objects.order_by("slot").only("id", "hostname", "slot", "partition_id")
        return (
            NVLinkPartition.objects.visible_to(self.request.user)
            .select_related("rack")
            .annotate(tray_count=_count_per(ComputeTray.objects.all(), "partition"))
            .prefetch_related(Prefetch("trays", queryset=trays))
        )
