"""Department pages and dashboards. Queries live in scheduling.usage, writes in tenancy.services.

Who may do what:
* everyone signed in sees the departments `Department.objects.visible_to(user)` returns; any other
  department's page answers 404;
* leads and platform admins (core.access.leads) manage a department's members; members get 403;
* only platform admins (core.access.is_admin) create and edit departments and see the admin dashboard.
"""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from core.access import is_admin, leads, require_admin, require_lead
from core.htmx import confirm_plain_post
from core.tables import Column, Table
from scheduling import charts as dashboards
from scheduling import dashboard_data
from scheduling import usage as selectors
from scheduling.views.gpu_life import quota_chart_context
from scheduling.views.people import identity_lock, identity_lock_for
from scheduling.views.projects import panel_context as projects_panel_context
from tenancy.forms import DepartmentForm, MembershipForm
from tenancy.models import Department, Membership
from tenancy.services import remove_membership, save_department, set_membership

# A pk no route will ever be asked for, swapped for each row's own: see _set_urls.
_PK_MARKER = 987654321987654321


def _set_urls(rows, viewname: str, key: str, attribute: str) -> None:
    """Give each row `attribute` = ``reverse(viewname, args=[row.<key>])`` (None when that key is None).

    One reverse() per list instead of a {% url %} per row: on a dashboard's 100 idle GPUs and 50 jobs the URL
    resolver was a quarter of the rendering time. Only for routes whose one argument is an ``<int:pk>``.
    """
    prefix, _marker, suffix = reverse(viewname, args=[_PK_MARKER]).rpartition(str(_PK_MARKER))
    for row in rows:
        pk = getattr(row, key)
        setattr(row, attribute, None if pk is None else f"{prefix}{pk}{suffix}")


def link_idle_gpus(gpus) -> None:
    """The links scheduling/_idle_gpus.html shows on each idle GPU: its page and its job's."""
    _set_urls(gpus, "inventory:gpu-detail", "pk", "url")
    _set_urls(gpus, "scheduling:job-detail", "job_id", "job_url")


def save_form(request, form: DepartmentForm):
    """Save through the service; on a ValidationError put its messages on the form's fields."""
    if not form.is_valid():
        return None
    try:
        return save_department(form.instance)
    except ValidationError as error:
        form.add_service_errors(error)
        return None


DEPARTMENT_SORTS = {
    "name": lambda p: p.department.name.lower(),
    "guarantee": lambda p: p.department.guaranteed_gpus,
    "limit": lambda p: float("inf") if p.department.limit_gpus is None else p.department.limit_gpus,
    "weight": lambda p: p.department.over_quota_weight,
    "priority": lambda p: p.department.priority,
    "in_use": lambda p: p.in_use,
    "fair_share": lambda p: p.fair_share,
    "pending": lambda p: p.pending_demand,
    "idle": lambda p: p.idle,
    "network": lambda p: p.department.vlan_id,
    # The column shows the export path and its quota: by quota, then path (unique: equal quotas still
    # sort one way up and the other way down).
    "storage": lambda p: (p.department.storage_quota_gib, p.department.export_path),
}
DEPARTMENT_COLUMNS = [
    Column("slug", lambda p: p.department.slug),
    Column("name", lambda p: p.department.name),
    Column("role", lambda p: p.role),
    Column("guaranteed_gpus", lambda p: p.department.guaranteed_gpus),
    Column("limit_gpus", lambda p: p.department.limit_gpus),
    Column("over_quota_weight", lambda p: p.department.over_quota_weight),
    Column("priority", lambda p: p.department.priority),
    Column("in_use", lambda p: p.in_use),
    Column("in_quota", lambda p: p.in_quota),
    Column("borrowed", lambda p: p.borrowed),
    Column("fair_share", lambda p: p.fair_share),
    Column("running_jobs", lambda p: p.running_jobs),
    Column("pending_gpus", lambda p: p.pending_demand),
    Column("pending_jobs", lambda p: p.pending_jobs),
    Column("idle", lambda p: p.idle),
]


@require_http_methods(["GET", "POST"])
def department_list(request):
    """The departments the user may see with their usage, sorted (core.tables; `?export=csv|json`: the
    same rows as a file); admins also create departments here (POST)."""
    table = Table(request, "departments", DEPARTMENT_SORTS, "name", exports=request.method == "GET")
    if table.export_format:
        positions = selectors.department_list(request.user, selectors.department_positions())
        return table.export(DEPARTMENT_COLUMNS, table.order_rows(positions))
    form = None
    if request.method == "POST":
        require_admin(request.user, _("department creation"))
        form = DepartmentForm(request.POST)
        department = save_form(request, form)
        if department is not None:
            messages.success(request, _("Department %(name)s created.") % {"name": department.name})
            return redirect("scheduling:department-detail", slug=department.slug)
    elif is_admin(request.user):
        form = DepartmentForm()
    positions = selectors.department_positions()
    context = {
        "positions": table.order_rows(selectors.department_list(request.user, positions)),
        "table": table,
        "form": form,
    }
    if is_admin(request.user):
        # Stands in for the context processor's capacity_status: the GPUs are counted once per request.
        context["capacity_status"] = positions.capacity_status()
    return render(request, "scheduling/department_list.html", context)


def _visible(request, slug: str) -> Department:
    department = selectors.visible_department(request.user, slug)
    if department is None:
        raise Http404(_("No such department."))
    return department


def department_detail(request, slug, project_form=None, status: int = 200):
    """The department dashboard: leads manage members here; members see it read-only."""
    return department_page(request, _visible(request, slug), project_form=project_form, status=status)


def department_page(request, department, *, project_form=None, status: int = 200):
    """The department dashboard of `department` (one the user may see); `project_form`: the new-project
    form refused, shown again filled, with its errors (scheduling.views.projects.project_create)."""
    dashboard = dashboard_data.department_dashboard(request.user, department)
    link_idle_gpus(dashboard.idle_gpus)
    _set_urls(dashboard.running_jobs, "scheduling:job-detail", "pk", "url")
    _set_urls(dashboard.pending_jobs, "scheduling:job-detail", "pk", "url")
    context = {
        "d": dashboard,
        "department": department,
        "position": dashboard.position,
        # Historical fair share: its decayed usage and rank among borrowers, for its leads and admins only
        # (None for anyone else).
        "history": selectors.fairshare_history(request.user, department, leads_it=dashboard.can_manage),
        # The quota chart over ?range= (1h, 24h, 7d, 30d), ending now; it refreshes itself
        # (scheduling.views.gpu_life).
        **quota_chart_context(
            request, department, dashboard.position, dashboard.taken_at, last_day=dashboard.history
        ),
        "member_form": MembershipForm(department=department) if dashboard.can_manage else None,
        # The projects panel (scheduling.views.projects), with the one answer to "may this user manage it?"
        # the page
        # asked (dashboard.can_manage) and, for a manager, the members it read.
        **projects_panel_context(
            request,
            department,
            manage=dashboard.can_manage,
            members=dashboard.members if dashboard.can_manage else None,
        ),
    }
    if project_form is not None:
        context["project_form"] = project_form
    if is_admin(request.user):
        context["capacity_status"] = dashboard.positions.capacity_status()  # as in department_list
    return render(request, "scheduling/department_detail.html", context, status=status)


def _managed(request, slug: str) -> Department:
    """A department the user may manage: 404 if they cannot see it, 403 if they only belong to it."""
    department = _visible(request, slug)
    require_lead(request.user, department)
    return department


def _members_response(request, department: Department, form: MembershipForm | None = None, error=""):
    """htmx: the members table, refreshed in place. A plain form post: back to the dashboard."""
    if not request.htmx:
        for message in ([error] if error else []) + (
            [m for errors in form.errors.values() for m in errors] if form is not None else []
        ):
            messages.error(request, message)
        return redirect(reverse("scheduling:department-detail", args=[department.slug]) + "#members")
    if not selectors.visible_department(request.user, department.slug):
        # The user removed their own membership: this page is no longer theirs to see.
        return HttpResponseClientRedirect(reverse("scheduling:department-list"))
    manage = leads(request.user, department)
    response = render(
        request,
        "scheduling/_members.html",
        {
            "department": department,
            "d": {"members": dashboard_data.members(request.user, department), "can_manage": manage},
            "member_form": (form or MembershipForm(department=department)) if manage else None,
            "members_error": error,
        },
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_POST
def member_set(request, slug):
    """Add a member by username with a role, or change a member's role."""
    department = _managed(request, slug)
    form = MembershipForm(request.POST, department=department)
    if form.is_valid() and (locked := identity_lock_for(department, form.cleaned_data["username"])):
        # A role from an identity provider follows its groups (scheduling.views.people): not changed here.
        return _members_response(request, department, error=locked)
    if form.is_valid():
        try:
            membership = set_membership(
                department, form.cleaned_data["username"], form.cleaned_data["role"], by=request.user
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            if not request.htmx:
                messages.success(
                    request,
                    _("%(user)s is now %(role)s of %(department)s.")
                    % {
                        "user": membership.user,
                        "role": membership.get_role_display().lower(),
                        "department": department,
                    },
                )
            return _members_response(request, department)
    return _members_response(request, department, form)


@require_POST
def member_remove(request, slug, pk):
    department = _managed(request, slug)
    membership = get_object_or_404(
        Membership.objects.filter(department=department).select_related("user"), pk=pk
    )
    if locked := identity_lock(membership):
        return _members_response(request, department, error=locked)
    asked = confirm_plain_post(
        request,
        question_template="scheduling/_member_remove_question.html",
        context={"membership": membership, "department": department},
        title=_("Remove %(user)s?") % {"user": membership.user.username},
        action=_("Remove"),
        back_url=reverse("scheduling:department-detail", args=[department.slug]) + "#members",
    )
    if asked:
        return asked
    try:
        remove_membership(membership)
    except ValidationError as error:
        return _members_response(request, department, error=" ".join(error.messages))
    if not request.htmx:
        messages.success(
            request,
            _("%(user)s removed from %(department)s.") % {"user": membership.user, "department": department},
        )
    return _members_response(request, department)


def admin_dashboard(request):
    """Platform admins only: every department side by side, capacity, oversubscription and idle GPUs."""
    require_admin(request.user, _("the capacity dashboard"))
    dashboard = dashboard_data.admin_dashboard()
    link_idle_gpus(dashboard.idle_gpus)
    chart = ""
    if dashboard.positions.positions:
        chart = dashboards.departments_html(dashboard.positions, div_id="departments-chart", height=380)
    return render(
        request,
        "scheduling/admin_dashboard.html",
        # capacity_status here also stands in for the context processor's (no second computation).
        {"d": dashboard, "chart": chart, "capacity_status": dashboard.status},
    )
