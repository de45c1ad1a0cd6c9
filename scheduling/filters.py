"""One FilterSet per model, shared by the HTML lists and the API.

Jobs name their project by slug (the API's `project` field, the job page), so `?project=` takes the slug.
A slug is unique within a department only: one that several visible departments use matches the jobs of
each (add `department=` to pick one). A slug that names no project the user may see
(`Project.objects.visible_to`) is a 400 naming `project`, the same answer whether it is unknown, another
department's or a project of one's own department one is not in (no probing)."""

import django_filters
from django import forms
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.filters import BooleanFilter
from scheduling.choices import Backend, JobState, PriorityClass
from scheduling.models import Job
from tenancy.models import Department, Project


def projects_with_visible_jobs(request):
    """The projects a user may filter jobs by: the projects they may see (`Project.objects.visible_to`, the
    one rule the projects API, the department page and search follow: admins all, a department's leads its
    projects, anyone else the projects they are in). Any other slug, unknown, another department's or a
    project of one's department one is not in, is refused alike (400 naming `project`)."""
    if request is None:
        return Project.objects.none()
    return (
        Project.objects.visible_to(request.user)
        .select_related("department")
        .order_by("department__name", "name")
    )


class JobFilterForm(forms.Form):
    def clean(self):
        cleaned = super().clean()
        projects, department = cleaned.get("project"), cleaned.get("department")
        if projects and department and all(p.department.slug != department for p in projects):
            names = ", ".join(
                _("%(department)s's %(project)s") % {"department": p.department.name, "project": p.name}
                for p in projects
            )
            self.add_error(
                "project",
                _(
                    "Project %(slug)s (%(names)s) is not a project of the department %(department)s: choose "
                    "one of its projects, or leave out the department."
                )
                % {"slug": repr(projects[0].slug), "names": names, "department": repr(department)},
            )
        elif projects and department:
            cleaned["project"] = [p for p in projects if p.department.slug == department]
        return cleaned


class VisibleSlugField(forms.CharField):
    """A slug naming what `queryset` holds (`found`); any other slug is invalid (`invalid_choice`)."""

    def __init__(self, *, queryset, **kwargs):
        self.queryset = queryset
        super().__init__(**kwargs)

    def found(self, value: str):
        raise NotImplementedError

    def clean(self, value):
        value = super().clean(value)
        if not value:
            return None
        found = self.found(value) if self.queryset is not None else None
        if not found:
            raise forms.ValidationError(
                self.error_messages["invalid_choice"], code="invalid_choice", params={"value": value}
            )
        return found


class ProjectSlugField(VisibleSlugField):
    """A project's slug -> the projects of `queryset` with that slug (a list: a slug is unique per
    department only)."""

    default_error_messages = {
        "invalid_choice": gettext_lazy(
            "No project with the slug %(value)r among the projects you can see (your own; a department's "
            "leads: all of its projects): use a slug from /api/v1/projects/."
        )
    }

    def found(self, value: str):
        return list(self.queryset.filter(slug=value))


class ProjectSlugFilter(django_filters.filters.QuerySetRequestMixin, django_filters.Filter):
    """`?project=<slug>`: the jobs of the matching projects the request's user may see."""

    field_class = ProjectSlugField

    def filter(self, qs, value):
        if not value:
            return qs
        return qs.filter(project__in=[p.pk for p in value])


def departments_with_visible_jobs(request):
    """The departments a user may filter jobs by: the ones they may see (`Department.objects.visible_to`:
    admins all, anyone else their own). Any other slug, unknown or another department's, is refused alike
    (400 naming `department`), as an unknown project is: never an empty list that reads as "no jobs"."""
    if request is None:
        return Department.objects.none()
    return Department.objects.visible_to(request.user)


class DepartmentSlugField(VisibleSlugField):
    """A department's slug, one of `queryset`'s."""

    default_error_messages = {
        "invalid_choice": gettext_lazy(
            "No department with the slug %(value)r among the departments you can see (your own): use a slug "
            "from /api/v1/departments/."
        )
    }

    def found(self, value: str):
        return value if self.queryset.filter(slug=value).exists() else None


class DepartmentSlugFilter(django_filters.filters.QuerySetRequestMixin, django_filters.Filter):
    """`?department=<slug>`: the jobs of that department, when the request's user may see it."""

    field_class = DepartmentSlugField

    def filter(self, qs, value):
        return qs.filter(department__slug=value) if value else qs


class JobFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    department = DepartmentSlugFilter(
        queryset=departments_with_visible_jobs, label=gettext_lazy("Department (slug)")
    )
    project = ProjectSlugFilter(queryset=projects_with_visible_jobs, label=gettext_lazy("Project (slug)"))
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    backend = django_filters.ChoiceFilter(choices=Backend.choices)
    priority_class = django_filters.ChoiceFilter(choices=PriorityClass.choices)
    over_quota = BooleanFilter()

    @property
    def shows_projects(self) -> bool:
        """Whether the jobs page offers the project filter: once a department the viewer sees has named
        projects (a department with only its default project has nothing to tell apart)."""
        return self.form.fields["project"].queryset.named().exists()

    class Meta:
        model = Job
        form = JobFilterForm
        fields = ["name", "department", "project", "state", "backend", "priority_class", "over_quota"]
