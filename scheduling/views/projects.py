"""The department page's projects panel: each project's guarantee, limit, weight and use, and for
the department's leads (and platform admins) forms to create and change projects, put members in them and
move members between them. Every change goes through tenancy.projects (validated there, audited by
core.audit); the panel is refreshed in place with htmx (a plain form post goes back to the page).

The default project (tenancy.projects) is the panel's first row: guaranteed what the named projects leave,
its people the members in no named project. A step that changes what someone has (a department's first
named project, a new project that takes guarantee from running work, putting people of the default
project in a named one, lowering a project's guarantee, moving someone between named projects or taking
them out of one) is confirmed first: the step's form (scheduling.forms) is answered with a redirect to its
confirmation page, whose GET says who and what changes (scheduling.project_changes) and never writes, and
whose POST applies it while that is still so (else the page again, 409).
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import (
    OuterRef,
    Prefetch,
    Subquery,
    Sum,
)
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import resolve, reverse
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.access import leads, require_project_manager
from core.htmx import confirm_plain_post
from scheduling import project_changes as changes_of
from scheduling.forms import (
    MemberMoveForm,
    PeopleForm,
    ProjectChangeForm,
    ProjectForm,
    ProjectMemberForm,
    StepForm,
)
from scheduling.project_changes import (
    StaleConfirmation,
    move_changes,
    new_project_changes,
)
from tenancy import projects as service
from tenancy.models import Department, Membership, Project, ProjectMembership

ALREADY_IN = gettext_lazy(
    "%(user)s is already in %(project)s: nothing was changed. To change their project role, take them out "
    "and add them again with the new role."
)


class Remainder:
    """A row of figures that is not a project: the work without one, or the department's total."""


def _figures(row, guaranteed: int, use: dict, from_siblings: int = 0):
    """Set a row's figures: its guarantee, GPUs in use, in quota and borrowed for its department (the jobs'
    standing, scheduling.engine.scheduler: only borrowed GPUs are another department's to reclaim), and
    the GPUs of its running jobs beyond its own guarantee (on its siblings' unused guarantee, which only
    they reclaim: `running_figures`'s `beyond`, scheduling.project_changes.leaf_beyond in SQL, the jobs a
    confirmation counts too). Returns the row."""
    row.guaranteed = guaranteed
    row.in_use = use.get("in_use", 0)
    row.borrowed = use.get("borrowed", 0)
    row.in_quota = row.in_use - row.borrowed
    row.from_siblings = from_siblings
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
    use, beyond = changes_of.running_figures(department)
    shown = _projects_in_use(request.user, department, use, beyond)
    default = next((p for p in shown if p.is_default), None)
    projects = [p for p in shown if not p.is_default]
    named = _named_guaranteed(department, shown, projects, manage)
    default_use = _total(u for key, u in use.items() if key is None or (default and key == default.pk))
    context = {
        "department": department,
        "projects": projects,
        "default_project": default,
        "can_manage_projects": manage,
        # One figure for the help text and the default project's row: they add up to the department's.
        "projects_guaranteed": named,
        # The default project's row (with the work from before it, without a project): guaranteed what the
        # named projects leave of the department's (tenancy.projects.default_guarantee, tenancy.quota.
        # NO_PROJECT).
        "unassigned": _figures(
            Remainder(), max(0, department.guaranteed_gpus - named), default_use, beyond.get(None, 0)
        ),
        # The department's figures (every project is visible to a manager): the rows add up to them.
        "department_use": _figures(Remainder(), department.guaranteed_gpus, _total(use.values()))
        if manage
        else None,
    }
    if manage:
        context.update(_manager_context(department, projects, members))
    context.update(extra)
    return context


def _named_guaranteed(department: Department, shown: list[Project], projects: list[Project], manage) -> int:
    """What the department's named projects are guaranteed in all, the hidden ones too (a member sees only
    theirs): a manager's rows are all of them; anyone else's carry it (`_projects_in_use`'s
    `named_guaranteed`), read with them."""
    if manage:
        return sum(p.guaranteed_gpus for p in projects)
    if shown:
        return shown[0].named_guaranteed or 0
    return service.projects_guaranteed(department)  # none shown: counted apart


def _projects_in_use(user, department: Department, use: dict, beyond: dict) -> list[Project]:
    """The department's projects `user` may see, each with its figures (`_figures`, from `use` and
    `beyond`, as `running_figures` gives them), people and siblings."""
    named = (
        Project.objects.named()
        .filter(department=OuterRef("department"))
        .order_by()
        .values("department")
        .annotate(total=Sum("guaranteed_gpus"))
        .values("total")
    )
    projects = list(
        Project.objects.visible_to(user)
        .filter(department=department)
        .order_by("name")
        .annotate(named_guaranteed=Subquery(named))  # _named_guaranteed, for someone who sees only theirs
        .prefetch_related(Prefetch("memberships", queryset=ProjectMembership.objects.select_related("user")))
    )
    for project in projects:
        project.department = department  # its namespace names the department: not read again per row
        _figures(project, project.guaranteed_gpus, use.get(project.pk, {}), beyond.get(project.pk, 0))
        project.people = list(project.memberships.all())
        project.siblings = [p for p in projects if p.pk != project.pk and not p.is_default]
    return projects


def _manager_context(department: Department, projects: list[Project], members: list | None) -> dict:
    """What a manager of the department sees more: its members, those in no project, the members each
    project may add (`project.addable`), what deleting it changes (`project.deletion`: one query for all)
    and the form for a new project."""
    in_a_project = {m.user_id for p in projects if not p.is_default for m in p.people}
    if members is None:
        members = Membership.objects.filter(department=department).select_related("user")
    department_members = sorted(members, key=lambda m: m.user.username)
    counts = changes_of.job_counts(projects)
    for project in projects:
        already = {m.user_id for m in project.people}
        project.addable = [m for m in department_members if m.user_id not in already]
        # Its Delete button's question (scheduling/_project_delete_question.html).
        usernames = sorted(m.user.username for m in project.people)
        project.deletion = changes_of.delete_changes(project, usernames, counts.get(project.pk, {}))
    return {
        "department_members": department_members,
        "without_project": [m for m in department_members if m.user_id not in in_a_project],
        "project_form": ProjectForm(),
    }


def _panel(request, department: Department, error: str = "", status: int = 200, **extra):
    """htmx: the panel, refreshed in place (with `status`: 400 for a refusal its form swaps in, see
    data-swap-errors in static/js/portal.js). A plain form post: back to the department page."""
    if not request.htmx:
        form = extra.get("project_form")
        if form is not None and form.errors:
            # A refused new project: the department page again, its form filled with what was typed and
            # each error beside its field (a redirect would lose them).
            page = resolve(reverse("scheduling:department-detail", args=[department.slug])).func
            return page(request, department.slug, project_form=form, status=400)
        if error:
            messages.error(request, error)
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


def _to_confirmation(request, url: str, values=()) -> HttpResponseRedirect:
    """Send the person to a step's confirmation page with the step's values, (name, value) pairs (htmx: a
    full-page visit)."""
    query = urlencode(list(values))
    target = f"{url}?{query}" if query else url
    return HttpResponseClientRedirect(target) if request.htmx else redirect(target)


@require_POST
def project_create(request, slug):
    department = _department(request, slug)
    require_project_manager(request.user, department)
    form = ProjectForm(request.POST)
    if form.is_valid():
        try:  # one that would be refused is not asked about (project_create_confirm): the form again, why
            service.check_new_project(request.user, department, **form.cleaned_data)
        except ValidationError as error:
            form.add_service_errors(error)
    if (
        form.is_valid()
        and new_project_changes(department, form.cleaned_data["guaranteed_gpus"]).needs_confirmation
    ):
        return _to_confirmation(
            request, reverse("scheduling:project-create-confirm", args=[department.slug]), form.values()
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
    """Change a project. Lowering a named project's guarantee, or raising it so far that the default
    project's running work falls beyond what it keeps, is confirmed first (project_update_confirm); any
    other change is applied at once."""
    department = _department(request, slug)
    project = get_object_or_404(Project.objects.select_related("department"), department=department, pk=pk)
    require_project_manager(request.user, department)
    form = ProjectForm(request.POST)
    if not form.is_valid():
        return _panel(
            request,
            department,
            error=_("%(project)s: %(errors)s") % {"project": project.name, "errors": " ".join(form.problems)},
            status=400,
        )
    if (
        not project.is_default
        and changes_of.guarantee_changes(project, form.cleaned_data["guaranteed_gpus"]).needs_confirmation
    ):
        return _to_confirmation(
            request,
            reverse("scheduling:project-update-confirm", args=[department.slug, project.pk]),
            form.values(),
        )
    try:
        service.update_project(request.user, project, **form.changes())
    except ValidationError as error:
        return _panel(
            request,
            department,
            error=_("%(project)s was not changed: %(why)s") % {"project": project.name, "why": _words(error)},
            status=400,
        )
    return _panel(request, department)


@require_POST
def project_delete(request, slug, pk):
    department = _department(request, slug)
    project = get_object_or_404(Project, department=department, pk=pk)
    deletion = changes_of.delete_changes(project)
    if deletion.deletable and leads(request.user, department):
        asked = confirm_plain_post(
            request,
            question_template="scheduling/_project_delete_question.html",
            context={"deletion": deletion},
            title=_("Delete project %(name)s?") % {"name": project.name},
            action=_("Delete"),
            back_url=reverse("scheduling:department-detail", args=[department.slug]) + "#projects",
        )
        if asked:
            return asked
    try:
        service.delete_project(request.user, project)
    except ValidationError as error:
        return _panel(request, department, error=_words(error))
    return _panel(request, department)


@require_POST
def project_member_set(request, slug, pk):
    department = _department(request, slug)
    project = get_object_or_404(Project, department=department, pk=pk)
    require_project_manager(request.user, department, _("change who is in its projects"))
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
        step = {
            "project": project.pk,
            "username": membership.user.username,
            "role": form.cleaned_data["role"],
        }
        url = reverse("scheduling:project-people-confirm", args=[department.slug])
        return _to_confirmation(request, url, step.items())
    try:
        service.set_project_member(request.user, project, membership.user, form.cleaned_data["role"])
    except ValidationError as error:
        return _panel(request, department, error=_words(error))
    return _panel(request, department)


def _placement(request, slug: str, pk: int) -> tuple[Department, ProjectMembership]:
    """The department and someone's place in one of its named projects (404 elsewhere), for its leads."""
    department = _department(request, slug)
    membership = get_object_or_404(
        ProjectMembership.objects.select_related("project__department", "user"),
        pk=pk,
        project__department=department,
        project__is_default=False,
    )
    require_project_manager(request.user, department, _("change who is in its projects"))
    return department, membership


@require_POST
def project_member_move(request, slug, pk):
    """Move someone to a sibling named project: checked, then confirmed (project_member_move_confirm)."""
    department, membership = _placement(request, slug, pk)
    form = MemberMoveForm(request.POST, membership=membership)
    if not form.is_valid():
        return _panel(request, department, error=" ".join(form.problems), status=400)
    return _to_confirmation(
        request, reverse("scheduling:project-member-move-confirm", args=[department.slug, pk]), form.values()
    )


@require_POST
def project_member_remove(request, slug, pk):
    """Take someone out of a named project: confirmed first (project_member_remove_confirm)."""
    department, _membership = _placement(request, slug, pk)
    return _to_confirmation(
        request, reverse("scheduling:project-member-remove-confirm", args=[department.slug, pk])
    )


# --- the confirmed steps ------------------------------------------------------------------------------


def _confirm_page(request, template: str, context: dict, status: int = 200):
    return render(request, template, context, status=status)


def _done(request, department: Department, message: str):
    messages.success(request, message)
    return redirect(reverse("scheduling:department-detail", args=[department.slug]) + "#projects")


@require_http_methods(["GET", "POST"])
def project_create_confirm(request, slug):
    """A new named project, confirmed: GET says what it changes (scheduling.project_changes), POST creates
    it. A form that does not validate is a 400 that names what is wrong, with nothing written."""
    department = _department(request, slug)
    require_project_manager(request.user, department)
    form = ProjectChangeForm(request.POST if request.method == "POST" else request.GET)
    context = {"department": department, "form": form}
    template = "scheduling/project_create_confirm.html"
    if not form.is_valid():
        return _confirm_page(request, template, context, status=400)
    context["values"] = form.values()
    try:  # a project that would be refused is not asked about (nor confirmed): the refusal, at once
        service.check_new_project(request.user, department, **form.changes())
    except ValidationError as error:
        form.add_service_errors(error)
        return _confirm_page(request, template, context, status=400)
    if request.method == "POST":
        seen = form.cleaned_data["seen"]
        try:
            project = changes_of.confirm_new_project(request.user, department, seen, **form.changes())
        except StaleConfirmation as stale:
            return _confirm_page(request, template, {**context, "changes": stale.changes, "stale": True}, 409)
        except ValidationError as error:
            form.add_service_errors(error)
            return _confirm_page(request, template, context, status=400)
        return _done(request, department, _("Project %(name)s created.") % {"name": project.name})
    context["changes"] = new_project_changes(department, form.cleaned_data["guaranteed_gpus"])
    return _confirm_page(request, template, context)


@require_http_methods(["GET", "POST"])
def project_people_confirm(request, slug):
    """People of the department (`username`, repeated) put in its named project (`project`, its pk) with a
    project `role`, confirmed: GET says who leaves the default project (scheduling.project_changes), POST
    puts them in, all or none. Another department's project is a 404; someone who is not a member of the
    department, an unknown role, a project that is not a number, or the default project a 400; nothing
    is written (scheduling.forms.PeopleForm)."""
    department = _department(request, slug)
    require_project_manager(request.user, department, _("change who is in its projects"))
    form = PeopleForm(request.POST if request.method == "POST" else request.GET, department=department)
    valid = form.is_valid()
    if form.elsewhere:
        raise Http404(_("No such project in this department."))
    context = {"department": department, "problems": form.problems}
    template = "scheduling/project_people_confirm.html"
    if not valid:
        return _confirm_page(request, template, context, status=400)
    project, users, role = (form.cleaned_data[k] for k in ("project", "users", "role"))
    context.update(project=project, values=form.values())
    if request.method == "POST":
        try:
            changes_of.confirm_people(request.user, project, users, role, form.cleaned_data["seen"])
        except StaleConfirmation as stale:
            return _confirm_page(request, template, {**context, "changes": stale.changes, "stale": True}, 409)
        except ValidationError as error:
            context["problems"] = [_words(error)]
            return _confirm_page(request, template, context, status=400)
        names = ", ".join(u.get_username() for u in users)
        done = _("%(names)s now in %(project)s.") % {"names": names, "project": project.name}
        return _done(request, department, done)
    context["changes"] = move_changes(department, project, users)
    return _confirm_page(request, template, context)


@require_http_methods(["GET", "POST"])
def project_update_confirm(request, slug, pk):
    """A named project's guarantee lowered (or raised into the default project's running work), confirmed:
    GET says which running jobs fall beyond a guarantee and what the default project keeps
    (scheduling.project_changes.guarantee_changes); POST applies the change if that is still so (else the
    page again, 409, with the changes as they are now). Nothing is written on a GET or a refusal."""
    department = _department(request, slug)
    project = get_object_or_404(
        Project.objects.select_related("department"), department=department, pk=pk, is_default=False
    )
    require_project_manager(request.user, department)
    form = ProjectChangeForm(request.POST if request.method == "POST" else request.GET)
    context = {"department": department, "project": project, "form": form}
    template = "scheduling/project_update_confirm.html"
    if not form.is_valid():
        return _confirm_page(request, template, context, status=400)
    changes = changes_of.guarantee_changes(project, form.cleaned_data["guaranteed_gpus"])
    if not changes.fits:
        form.add_service_errors(service.fit_error(project, form.cleaned_data["guaranteed_gpus"]))
        return _confirm_page(request, template, context, status=400)
    context["values"] = form.values()
    if request.method == "POST":
        try:
            changes_of.confirm_guarantee(request.user, project, form.cleaned_data["seen"], **form.changes())
        except StaleConfirmation as stale:
            return _confirm_page(request, template, {**context, "changes": stale.changes, "stale": True}, 409)
        except ValidationError as error:
            form.add_service_errors(error)
            return _confirm_page(request, template, context, status=400)
        return _done(request, department, _("%(project)s changed.") % {"project": project.name})
    context["changes"] = changes
    return _confirm_page(request, template, context)


def _member_confirm(request, slug: str, pk: int, moving: bool):
    """Someone moved to a sibling named project (`moving`, to the project `to`) or taken out of theirs,
    confirmed: GET says which of their jobs stay in which project and where their next jobs go
    (scheduling.project_changes.member_changes); POST applies the step if that is still so (else the page
    again, 409). A `to` that is not another named project of the department is a 400, nothing written."""
    department, membership = _placement(request, slug, pk)
    data = request.POST if request.method == "POST" else request.GET
    form = MemberMoveForm(data, membership=membership) if moving else StepForm(data)
    context = {"department": department, "membership": membership, "form": form, "moving": moving}
    context["values"] = form.values()
    template = "scheduling/project_member_confirm.html"
    if not form.is_valid():
        return _confirm_page(request, template, context, status=400)
    to = form.cleaned_data.get("to")
    if request.method == "POST":
        try:
            seen = form.cleaned_data["seen"]
            changes = changes_of.confirm_member_change(request.user, membership, to, seen)
        except StaleConfirmation as stale:
            return _confirm_page(request, template, {**context, "changes": stale.changes, "stale": True}, 409)
        except ValidationError as error:
            form.add_error(None, _words(error))
            return _confirm_page(request, template, context, status=400)
        words = {"user": changes.user.get_username(), "from": changes.source.name}
        if to is None:
            return _done(request, department, _("%(user)s taken out of %(from)s.") % words)
        words["to"] = to.name
        return _done(request, department, _("%(user)s moved from %(from)s to %(to)s.") % words)
    context["changes"] = changes_of.member_changes(membership, to)
    return _confirm_page(request, template, context)


@require_http_methods(["GET", "POST"])
def project_member_move_confirm(request, slug, pk):
    return _member_confirm(request, slug, pk, moving=True)


@require_http_methods(["GET", "POST"])
def project_member_remove_confirm(request, slug, pk):
    return _member_confirm(request, slug, pk, moving=False)
