"""One FilterSet per model, shared by the HTML lists and the API."""

import django_filters
from django.utils.translation import gettext_lazy as _

from core.access import Role
from core.filters import BooleanFilter, IntegerFilter
from tenancy.models import Department, Membership


class DepartmentFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    slug = django_filters.CharFilter()
    priority = IntegerFilter()
    has_limit = BooleanFilter(
        field_name="limit_gpus", lookup_expr="isnull", exclude=True, label=_("Has a GPU limit")
    )

    class Meta:
        model = Department
        fields = ["name", "slug", "priority", "has_limit"]


class MembershipFilter(django_filters.FilterSet):
    username = django_filters.CharFilter(field_name="user__username", lookup_expr="icontains")
    role = django_filters.ChoiceFilter(choices=Role.choices)

    class Meta:
        model = Membership
        fields = ["username", "role"]
