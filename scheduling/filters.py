"""One FilterSet per model, shared by the HTML lists and the API."""

import django_filters

from core.filters import BooleanFilter
from scheduling.choices import Backend, JobState, PriorityClass
from scheduling.models import Job


class JobFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    department = django_filters.CharFilter(field_name="department__slug", label="Department (slug)")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    backend = django_filters.ChoiceFilter(choices=Backend.choices)
    priority_class = django_filters.ChoiceFilter(choices=PriorityClass.choices)
    over_quota = BooleanFilter()

    class Meta:
        model = Job
        fields = ["name", "department", "state", "backend", "priority_class", "over_quota"]
