"""One FilterSet per model, shared by the HTML lists and the API."""

import django_filters
from django.db.models import Q
from django.utils import timezone

from core.filters import BooleanFilter, IntegerFilter
from inventory.choices import FabricState, GpuHealth, MigMode, SystemModel, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from inventory.staleness import silent_policy, silent_q


class RackFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    system_model = django_filters.ChoiceFilter(choices=SystemModel.choices)
    location = django_filters.CharFilter(lookup_expr="icontains")
    has_problems = BooleanFilter(method="filter_has_problems", label="Has fabric problems")

    class Meta:
        model = Rack
        fields = ["name", "system_model", "location", "has_problems"]

    def filter_has_problems(self, queryset, name, value):
        problem_trays = ComputeTray.objects.exclude(fabric_problems=[]).values("rack_id")
        unhealthy = Gpu.objects.exclude(health__in=[GpuHealth.HEALTHY, GpuHealth.NOT_SUPPORTED]).values(
            "tray__rack_id"
        )
        condition = Q(pk__in=problem_trays) | Q(pk__in=unhealthy)
        return queryset.filter(condition) if value else queryset.exclude(condition)


class NVLinkPartitionFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name")
    clique_id = IntegerFilter()

    class Meta:
        model = NVLinkPartition
        fields = ["rack", "clique_id", "name"]


class ComputeTrayFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name")
    state = django_filters.MultipleChoiceFilter(choices=TrayState.choices)
    clique_id = IntegerFilter(field_name="partition__clique_id")
    hostname = django_filters.CharFilter(lookup_expr="icontains")
    has_problems = BooleanFilter(method="filter_has_problems", label="Has fabric problems")
    stale = BooleanFilter(
        method="filter_stale",
        label="Node stopped reporting (reported before, not within the health settings' node silent time)",
    )

    class Meta:
        model = ComputeTray
        fields = ["rack", "state", "clique_id", "hostname", "has_problems", "stale"]

    def filter_has_problems(self, queryset, name, value):
        return queryset.exclude(fabric_problems=[]) if value else queryset.filter(fabric_problems=[])

    def filter_stale(self, queryset, name, value):
        # The same judgement as the tray's `stale` field and the rack view (inventory.staleness).
        silent = silent_q(silent_policy().cutoff(timezone.now()))
        return queryset.filter(silent) if value else queryset.exclude(silent)


class GpuFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="tray__rack__name")
    tray = django_filters.CharFilter(field_name="tray__hostname")
    health = django_filters.MultipleChoiceFilter(choices=GpuHealth.choices)
    fabric_state = django_filters.MultipleChoiceFilter(choices=FabricState.choices)
    mig_mode = django_filters.MultipleChoiceFilter(choices=MigMode.choices)
    clique_id = IntegerFilter(field_name="reported_clique_id")
    intended_clique_id = IntegerFilter(field_name="tray__partition__clique_id")

    class Meta:
        model = Gpu
        fields = [
            "rack",
            "tray",
            "health",
            "fabric_state",
            "mig_mode",
            "clique_id",
            "intended_clique_id",
            "uuid",
        ]
