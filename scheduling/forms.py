"""Forms of the department page's projects panel and of its confirmation pages (scheduling.views.
projects). They read and check the input; tenancy.projects validates and saves the change, and
scheduling.project_changes says what it changes first."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.text import TextFormField
from tenancy.api.projects import MAX_GPUS
from tenancy.choices import ProjectRole
from tenancy.forms import ServiceErrorsMixin
from tenancy.models import Department, Membership, Project, ProjectMembership

MAX_PEOPLE_AT_ONCE = 500  # people put in a project in one step
PK = {"min_value": 1, "max_value": 2**31 - 1}
CHOOSE_PROJECT = gettext_lazy("Choose one of the department's projects.")
ELSEWHERE = "elsewhere"  # the error code of a project of another department: a 404, not a 400
SEEN = r"^[0-9a-f]{32}$"  # scheduling.project_changes' digest


class StepMixin:
    """What the panel's forms and the confirmation pages' share: their values and their errors in words."""

    def values(self) -> list[tuple[str, str]]:
        """The form's values as sent (not `seen`), for a confirmation page's address or hidden fields."""
        every = getattr(self.data, "getlist", lambda name: [self.data[name]])
        return [
            (name, value)
            for name in self.fields
            if name in self.data and name != "seen"
            for value in every(name)
        ]

    @property
    def problems(self) -> list[str]:
        return [message for errors in self.errors.values() for message in errors]


class ProjectForm(StepMixin, ServiceErrorsMixin, forms.Form):
    name = TextFormField(max_length=100, label=gettext_lazy("Name"))
    slug = forms.SlugField(
        max_length=30,
        required=False,
        label=gettext_lazy("Slug"),
        help_text=gettext_lazy("Leave empty to derive it from the name (3D Vision: p-3d-vision)."),
    )
    guaranteed_gpus = forms.IntegerField(
        min_value=0, max_value=MAX_GPUS, initial=0, label=gettext_lazy("Guaranteed GPUs")
    )
    over_quota_weight = forms.DecimalField(
        min_value=0,
        max_digits=6,
        decimal_places=2,
        initial=Decimal("1.00"),
        label=gettext_lazy("Over-quota weight"),
    )
    limit_gpus = forms.IntegerField(
        min_value=0,
        max_value=MAX_GPUS,
        required=False,
        label=gettext_lazy("Limit (GPUs)"),
        help_text=gettext_lazy("Empty: none."),
    )

    def changes(self) -> dict:
        """The changes for tenancy.projects.update_project: an empty slug keeps the project's."""
        return {
            k: v for k, v in self.cleaned_data.items() if k in ProjectForm.base_fields and (k != "slug" or v)
        }


class ProjectMemberForm(ServiceErrorsMixin, forms.Form):
    username = TextFormField(max_length=150)
    role = forms.ChoiceField(choices=ProjectRole.choices, initial=ProjectRole.MEMBER)


class StepForm(StepMixin, forms.Form):
    """A confirmation's POST carries what its page showed (`seen`: scheduling.project_changes' digest)."""

    seen = forms.RegexField(regex=SEEN, required=False)


class ProjectChangeForm(ProjectForm):
    """A new project, or a project's change, on its confirmation page."""

    seen = forms.RegexField(regex=SEEN, required=False)


class MemberMoveForm(StepForm):
    """Where a person in a named project moves to: another named project of the department."""

    to = forms.IntegerField(**PK, error_messages={"invalid": CHOOSE_PROJECT})

    def __init__(self, data, *, membership: ProjectMembership):
        super().__init__(data)
        self.membership = membership

    def clean_to(self) -> Project:
        project = Project.objects.filter(
            department_id=self.membership.project.department_id, pk=self.cleaned_data["to"]
        ).first()
        if project is None or project.is_default or project.pk == self.membership.project_id:
            raise ValidationError(_("Choose one of the department's other named projects to move them to."))
        return project


class PeopleForm(StepForm):
    """The people step: members of `department` (`username`, repeated) put in its named `project` (its pk)
    with a project `role`. `users` in cleaned_data: the people, in the order given, once each. A project of
    another department is an error with the code ELSEWHERE (the view answers 404)."""

    project = forms.IntegerField(
        **PK,
        error_messages=dict.fromkeys(("required", "invalid", "min_value", "max_value"), CHOOSE_PROJECT),
    )
    username = forms.Field(required=False, widget=forms.MultipleHiddenInput)
    role = forms.CharField(required=False)

    def __init__(self, data, *, department: Department):
        super().__init__(data)
        self.department = department

    def clean_project(self) -> Project:
        project = Project.objects.filter(department=self.department, pk=self.cleaned_data["project"]).first()
        if project is None:
            raise ValidationError(_("No such project in this department."), code=ELSEWHERE)
        if project.is_default:
            raise ValidationError(
                _("The default project's people are the members in no named project: choose a named project.")
            )
        return project

    def clean_username(self) -> list[str]:
        usernames = [u for u in self.cleaned_data["username"] or [] if isinstance(u, str)]
        if not usernames or len(usernames) > MAX_PEOPLE_AT_ONCE:
            raise ValidationError(
                _("Choose between 1 and %(n)d members of the department.") % {"n": MAX_PEOPLE_AT_ONCE}
            )
        if any("\x00" in username for username in usernames):  # PostgreSQL text cannot hold one
            raise ValidationError(_("A username has no NUL character."))
        return usernames

    def clean_role(self) -> str:
        role = self.cleaned_data["role"] or ProjectRole.MEMBER
        if role not in ProjectRole.values:
            raise ValidationError(
                _("A project role is one of: %(roles)s.") % {"roles": ", ".join(ProjectRole.values)}
            )
        return role

    def clean(self):
        cleaned = super().clean()
        usernames = cleaned.get("username")
        if not usernames or self.errors:
            return cleaned
        members = {
            m.user.username: m.user
            for m in Membership.objects.filter(
                department=self.department, user__username__in=usernames
            ).select_related("user")
        }
        if unknown := [u for u in usernames if u not in members]:
            raise ValidationError(
                _("Not members of %(department)s: %(names)s.")
                % {"department": self.department.name, "names": ", ".join(sorted(set(unknown)))[:1000]}
            )
        cleaned["users"] = list(dict.fromkeys(members[u] for u in usernames))
        return cleaned

    @property
    def elsewhere(self) -> bool:
        return self.has_error("project", ELSEWHERE)
