"""One FilterSet per model, shared by the HTML lists and the API."""

import django_filters
from django import forms

from core.access import is_admin
from core.filters import BooleanFilter
from scheduling.choices import Backend, JobState, PriorityClass
from scheduling.models import Job
from tenancy.models import Department, Project


def projects_with_visible_jobs(request):
    """The projects a user may filter jobs by: those of the departments whose jobs they see (admins: all).
    Any other id, unknown or another department's, is refused alike (400 naming `project`)."""
    if request is None:
        return Project.objects.none()
    projects = Project.objects.select_related("department").order_by("department__name", "name")
    if is_admin(request.user):
        return projects
    return projects.filter(department__in=Department.objects.visible_to(request.user))


class JobFilterForm(forms.Form):
    def clean(self):
        cleaned = super().clean()
        project, department = cleaned.get("project"), cleaned.get("department")
        if project is not None and department and project.department.slug != department:
            self.add_error(
                "project",
                f"Project {project.pk} ({project.name}) is not a project of the department {department!r}: "
                "choose one of its projects, or leave out the department.",
            )
        return cleaned


class JobFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    department = django_filters.CharFilter(field_name="department__slug", label="Department (slug)")
    project = django_filters.ModelChoiceFilter(
        queryset=projects_with_visible_jobs,
        label="Project (ID)",
        error_messages={
            "invalid_choice": "No project with this ID among the projects whose jobs you can see: use "
            "an ID from /api/v1/projects/."
        },
    )
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    backend = django_filters.ChoiceFilter(choices=Backend.choices)
    priority_class = django_filters.ChoiceFilter(choices=PriorityClass.choices)
    over_quota = BooleanFilter()

    class Meta:
        model = Job
        form = JobFilterForm
        fields = ["name", "department", "project", "state", "backend", "priority_class", "over_quota"]
