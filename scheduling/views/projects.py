"""The department page's projects panel: each project's guarantee, limit, weight and use, and for
the department's leads (and platform admins) forms to create and change projects, put members in them and
move members between them. Every change goes through tenancy.projects (validated there, audited by
core.audit); the panel is refreshed in place with htmx (a plain form post goes back to the page).

The default project (tenancy.projects) is the panel's first row: guaranteed what the named projects leave,
its people the members in no named project. A step that changes what someone has (a department's first
named project, a new project that takes guarantee from running work, putting people of the default
project in a named one) is confirmed first: the step's form is answered with a redirect to its
confirmation page, whose GET says who and what changes (scheduling.project_changes) and never writes, and
whose POST applies it.
"""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Prefetch, Q
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.access import leads, require_project_manager
from core.text import TextFormField
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from scheduling.project_changes import move_changes, new_project_changes
from tenancy import projects as service
from tenancy.api.projects import MAX_GPUS
from tenancy.choices import ProjectRole
from tenancy.forms import ServiceErrorsMixin
from tenancy.models import Department, Membership, Project, ProjectMembership

ALREADY_IN = gettext_lazy(
    "%(user)s is already in %(project)s: nothing was changed. To change their project role, take them out "
    "and add them again with the new role."
)


class ProjectForm(ServiceErrorsMixin, forms.Form):
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


class ProjectMemberForm(ServiceErrorsMixin, forms.Form):
    username = TextFormField(max_length=150)
    role = forms.ChoiceField(choices=ProjectRole.choices, initial=ProjectRole.MEMBER)


class MoveForm(ServiceErrorsMixin, forms.Form):
    to = forms.IntegerField(min_value=1, max_value=2**31 - 1)


class Remainder:
    """A row of figures that is not a project: the work without one, or the department's total."""


def _figures(row, guaranteed: int, use: dict):
    """Set a row's figures: its guarantee, GPUs in use, in quota and borrowed for its department (the jobs'
    standing, scheduling.engine.scheduler: only borrowed GPUs are another department's to reclaim), and
    how many of its in-quota GPUs are beyond its own guarantee (its siblings' unused guarantee, which
    only they reclaim). Returns the row."""
    row.guaranteed = guaranteed
    row.in_use = use.get("in_use", 0)
    row.borrowed = use.get("borrowed", 0)
    row.in_quota = row.in_use - row.borrowed
    row.from_siblings = max(0, row.in_quota - guaranteed)
    return row


def _total(rows) -> dict:
    rows = list(rows)
    return {key: sum(r[key] for r in rows) for key in ("in_use", "borrowed")}


def _department(request, slug: str) -> Department:
    department = Department.objects.visible_to(request.user).filter(slug=slug).first()
    if department is None:
        raise Http404(_("No such department."))
    return department


def panel_context(
    request, department: Department, *, manage: bool | None = None, members: list | None = None, **extra
) -> dict:
    """The projects panel's context: the projects the user may see, each with its GPUs in use and borrowed
    (one query for the figures), its people, and what a lead may do. `manage`: whether the user may manage
    the department (core.access.leads), when the caller has asked already (the department page asks once
    for its panels); `members`: the department's memberships, when the caller has read them all (a
    manager's view of the members table), else read here. A lead may add to each project the department
    members not yet in it (`project.addable`)."""
    if manage is None:
        manage = leads(request.user, department)
    shown, use = _projects_in_use(request.user, department)
    default = next((p for p in shown if p.is_default), None)
    projects = [p for p in shown if not p.is_default]
    unassigned = _default_figures(department, projects, default, use, manage)
    context = {
        "department": department,
        "projects": projects,
        "default_project": default,
        "can_manage_projects": manage,
        "projects_guaranteed": sum(p.guaranteed_gpus for p in projects),
        "unassigned": unassigned,
        # The department's figures (every project is visible to a manager): the rows add up to them.
        "department_use": _figures(Remainder(), department.guaranteed_gpus, _total(use.values()))
        if manage
        else None,
    }
    if manage:
        context.update(_manager_context(department, projects, members))
    context.update(extra)
    return context


def _default_figures(department: Department, projects, default, use: dict, manage: bool) -> Remainder:
    """The default project's row (with the work from before it, without a project): guaranteed what the
    named projects leave of the department's (tenancy.projects.default_guarantee, tenancy.quota.NO_PROJECT),
    every named project counted, the hidden ones too (a member sees only theirs)."""
    default_use = _total(u for key, u in use.items() if key is None or (default and key == default.pk))
    named = (
        sum(p.guaranteed_gpus for p in projects)
        if manage
        else sum(
            Project.objects.named().filter(department=department).values_list("guaranteed_gpus", flat=True)
        )
    )
    return _figures(Remainder(), max(0, department.guaranteed_gpus - named), default_use)


def _projects_in_use(user, department: Department) -> tuple[list[Project], dict]:
    """The department's projects `user` may see, each with its figures (`_figures`), people and siblings;
    and the GPUs in use and borrowed per project (None: the work without a project), in one query."""
    projects = list(
        Project.objects.visible_to(user)
        .filter(department=department)
        .order_by("name")
        .prefetch_related(Prefetch("memberships", queryset=ProjectMembership.objects.select_related("user")))
    )
    use = {
        row["job__project"]: row
        for row in Allocation.objects.filter(job__department=department, job__state__in=HOLDING_STATES)
        .values("job__project")
        .annotate(in_use=Count("pk"), borrowed=Count("pk", filter=Q(job__over_quota=True)))
    }
    for project in projects:
        _figures(project, project.guaranteed_gpus, use.get(project.pk, {}))
        project.people = list(project.memberships.all())
        project.siblings = [p for p in projects if p.pk != project.pk and not p.is_default]
    return projects, use


def _manager_context(department: Department, projects: list[Project], members: list | None) -> dict:
    """What a manager of the department sees more: its members, those in no project, the members each
    project may add (`project.addable`) and the form for a new project."""
    in_a_project = {m.user_id for p in projects if not p.is_default for m in p.people}
    if members is None:
        members = Membership.objects.filter(department=department).select_related("user")
    department_members = sorted(members, key=lambda m: m.user.username)
    for project in projects:
        already = {m.user_id for m in project.people}
        project.addable = [m for m in department_members if m.user_id not in already]
    return {
        "department_members": department_members,
        "without_project": [m for m in department_members if m.user_id not in in_a_project],
        "project_form": ProjectForm(),
    }


def _panel(request, department: Department, error: str = "", status: int = 200, **extra):
    """htmx: the panel, refreshed in place (with `status`: 400 for a refusal its form swaps in, see
    data-swap-errors in static/js/portal.js). A plain form post: back to the department page."""
    if not request.htmx:
        if error:
            messages.error(request, error)
        form = extra.get("project_form")
        for errors in form.errors.values() if form is not None else []:
            for message in errors:
                messages.error(request, message)
        return redirect(reverse("scheduling:department-detail", args=[department.slug]) + "#projects")
    response = render(
        request,
        "scheduling/_projects.html",
        panel_context(request, department, projects_error=error, **extra),
        status=status,
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def _words(error: ValidationError) -> str:
    if hasattr(error, "error_dict"):
        return " ".join(
            f"{field.replace('_', ' ')}: {' '.join(m)}" for field, m in error.message_dict.items()
        )
    return " ".join(error.messages)


def _to_confirmation(request, url: str, values) -> HttpResponseRedirect:
    """Send the person to a step's confirmation page with the step's values (htmx: a full-page visit)."""
    query = urlencode([(k, v) for k in values if k != "csrfmiddlewaretoken" for v in values.getlist(k)])
    target = f"{url}?{query}"
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


@require_POST
def project_create(request, slug):
    department = _department(request, slug)
    require_project_manager(request.user, department)
    form = ProjectForm(request.POST)
    if (
        form.is_valid()
        and new_project_changes(department, form.cleaned_data["guaranteed_gpus"]).needs_confirmation
    ):
        return _to_confirmation(
            request, reverse("scheduling:project-create-confirm", args=[department.slug]), request.POST
        )
    if form.is_valid():
        try:
            project = service.create_project(request.user, department, **form.cleaned_data)
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            if not request.htmx:
                messages.success(request, _("Project %(name)s created.") % {"name": project.name})
            return _panel(request, department)
    return _panel(request, department, project_form=form)


@require_POST
def project_update(request, slug, pk):
    department = _department(request, slug)
    project = get_object_or_404(Project, department=department, pk=pk)
    require_project_manager(request.user, department)
    form = ProjectForm(request.POST)
    if not form.is_valid():
        return _panel(
            request,
            department,
            error=_("%(project)s: %(errors)s")
            % {"project": project.name, "errors": " ".join(m for e in form.errors.values() for m in e)},
        )
    changes = {k: v for k, v in form.cleaned_data.items() if k != "slug" or v}
    try:
        service.update_project(request.user, project, **changes)
    except ValidationError as error:
        return _panel(
            request,
            department,
            error=_("%(project)s was not changed: %(why)s") % {"project": project.name, "why": _words(error)},
        )
    return _panel(request, department)


@require_POST
def project_delete(request, slug, pk):
    department = _department(request, slug)
    project = get_object_or_404(Project, department=department, pk=pk)
    try:
        service.delete_project(request.user, project)
    except ValidationError as error:
        return _panel(request, department, error=_words(error))
    return _panel(request, department)


@require_POST
def project_member_set(request, slug, pk):
    department = _department(request, slug)
    project = get_object_or_404(Project, department=department, pk=pk)
    require_project_manager(request.user, department, "change who is in its projects")
    form = ProjectMemberForm(request.POST)
    membership = (
        Membership.objects.filter(department=department, user__username=form.data.get("username", ""))
        .select_related("user")
        .first()
    )
    if not form.is_valid() or membership is None:
        return _panel(
            request,
            department,
            error=_("Choose a member of %(department)s to add to %(project)s.")
            % {"department": department.name, "project": project.name},
            status=400,
        )
    if ProjectMembership.objects.filter(project=project, user=membership.user).exists():
        # The panel offers only people not in the project yet: a stale page, or a second click.
        return _panel(
            request,
            department,
            error=ALREADY_IN % {"user": membership.user, "project": project.name},
            status=400,
        )
    if not project.is_default and move_changes(department, project, [membership.user]).needs_confirmation:
        values = request.POST.copy()
        values["project"] = str(project.pk)
        return _to_confirmation(
            request, reverse("scheduling:project-people-confirm", args=[department.slug]), values
        )
    try:
        service.set_project_member(request.user, project, membership.user, form.cleaned_data["role"])
    except ValidationError as error:
        return _panel(request, department, error=_words(error))
    return _panel(request, department)


@require_POST
def project_member_move(request, slug, pk):
    department = _department(request, slug)
    membership = get_object_or_404(
        ProjectMembership.objects.select_related("project", "user"), pk=pk, project__department=department
    )
    require_project_manager(request.user, department, "move its members between projects")
    form = MoveForm(request.POST)
    to = form.is_valid() and Project.objects.filter(department=department, pk=form.cleaned_data["to"]).first()
    if not to:
        return _panel(
            request, department, error=_("Choose one of the department's projects to move them to.")
        )
    try:
        service.move_member(request.user, membership, to)
    except ValidationError as error:
        return _panel(request, department, error=_words(error))
    if not request.htmx:
        messages.success(
            request,
            _("%(user)s moved from %(from)s to %(to)s.")
            % {"user": membership.user, "from": membership.project.name, "to": to.name},
        )
    return _panel(request, department)


@require_POST
def project_member_remove(request, slug, pk):
    department = _department(request, slug)
    membership = get_object_or_404(ProjectMembership, pk=pk, project__department=department)
    service.remove_project_member(request.user, membership)
    return _panel(request, department)


# --- the confirmed steps ------------------------------------------------------------------------------


def _confirm_page(request, template: str, context: dict, status: int = 200):
    return render(request, template, context, status=status)


@require_http_methods(["GET", "POST"])
def project_create_confirm(request, slug):
    """A new named project, confirmed: GET says what it changes (scheduling.project_changes), POST creates
    it. A form that does not validate is a 400 that names what is wrong, with nothing written."""
    department = _department(request, slug)
    require_project_manager(request.user, department)
    form = ProjectForm(request.POST if request.method == "POST" else request.GET)
    context = {"department": department, "form": form}
    if not form.is_valid():
        return _confirm_page(request, "scheduling/project_create_confirm.html", context, status=400)
    if request.method == "POST":
        try:
            project = service.create_project(request.user, department, **form.cleaned_data)
        except ValidationError as error:
            form.add_service_errors(error)
            return _confirm_page(request, "scheduling/project_create_confirm.html", context, status=400)
        messages.success(request, _("Project %(name)s created.") % {"name": project.name})
        return redirect(reverse("scheduling:department-detail", args=[department.slug]) + "#projects")
    context["changes"] = new_project_changes(department, form.cleaned_data["guaranteed_gpus"])
    context["values"] = [(k, v) for k, v in form.data.items() if k != "csrfmiddlewaretoken"]
    return _confirm_page(request, "scheduling/project_create_confirm.html", context)


MAX_PEOPLE_AT_ONCE = 500  # people put in a project in one step


def _people_step(request, department: Department):
    """The people step's (project, users, role, problems) from the request's values (GET or POST); a 404
    for a project of another department. `problems` (sentences) when anything is wrong."""
    data = request.POST if request.method == "POST" else request.GET
    choice = MoveForm({"to": data.get("project", "")})
    if not choice.is_valid():
        return None, [], "", [_("Choose one of the department's projects.")]
    project = get_object_or_404(Project, department=department, pk=choice.cleaned_data["to"])
    usernames, role, problems = data.getlist("username"), data.get("role", ProjectRole.MEMBER), []
    if project.is_default:
        problems.append(
            _("The default project's people are the members in no named project: choose a named project.")
        )
    if not usernames or len(usernames) > MAX_PEOPLE_AT_ONCE:
        problems.append(
            _("Choose between 1 and %(n)d members of the department.") % {"n": MAX_PEOPLE_AT_ONCE}
        )
    if role not in ProjectRole.values:
        problems.append(_("A project role is one of: %(roles)s.") % {"roles": ", ".join(ProjectRole.values)})
    if any("\x00" in username for username in usernames):  # a POST body: PostgreSQL text cannot hold one
        problems.append(_("A username has no NUL character."))
        usernames = []
    members = {
        m.user.username: m.user
        for m in Membership.objects.filter(
            department=department, user__username__in=usernames[:MAX_PEOPLE_AT_ONCE]
        ).select_related("user")
    }
    if not problems and (unknown := [u for u in usernames if u not in members]):
        problems.append(
            _("Not members of %(department)s: %(names)s.")
            % {"department": department.name, "names": ", ".join(sorted(set(unknown)))[:1000]}
        )
    users = [] if problems else list(dict.fromkeys(members[u] for u in usernames))
    return project, users, role, problems


@require_http_methods(["GET", "POST"])
def project_people_confirm(request, slug):
    """People of the department (`username`, repeated) put in its named project (`project`, its pk) with a
    project `role`, confirmed: GET says who leaves the default project (scheduling.project_changes), POST
    puts them in, all or none. Another department's project is a 404; someone who is not a member of the
    department, an unknown role, a project that is not a number, or the default project a 400; nothing
    is written."""
    department = _department(request, slug)
    require_project_manager(request.user, department, "change who is in its projects")
    project, users, role, problems = _people_step(request, department)
    context = {"department": department, "project": project, "problems": problems, "role": role}
    template = "scheduling/project_people_confirm.html"
    if problems:
        return _confirm_page(request, template, context, status=400)
    if request.method == "POST":
        try:
            with transaction.atomic():
                for user in users:
                    service.set_project_member(request.user, project, user, role)
        except ValidationError as error:
            context["problems"] = [_words(error)]
            return _confirm_page(request, template, context, status=400)
        names = ", ".join(u.get_username() for u in users)
        messages.success(
            request, _("%(names)s now in %(project)s.") % {"names": names, "project": project.name}
        )
        return redirect(reverse("scheduling:department-detail", args=[department.slug]) + "#projects")
    context["changes"] = move_changes(department, project, users)
    return _confirm_page(request, template, context)
