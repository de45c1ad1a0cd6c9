"""Projects under departments: create, change and delete them, move people between them, and the
rule a job's project follows.

A project is a team inside a department with its own guaranteed GPUs, over-quota weight and limit (Run:ai
projects, KAI's leaf queues, Slurm's child accounts, Kueue's ClusterQueues in the department's Cohort). The
projects' guarantees fit inside their department's: checked here under a row lock on the department, so two
leads adding projects at once cannot both fit, and when a department's guarantee is lowered
(`check_department_guarantee`, from tenancy.services.save_department). Who may: core.access (a
department's leads and platform admins manage its projects; a project's members submit to it). Every change
is audited by core.audit's model signals (tenancy.project, tenancy.projectmembership).

The default project: every department has one from its creation (`ensure_default_project`, called by
tenancy.services.save_department in the transaction that makes the department; tenancy migration 0013 gave
one to the departments made before). It holds what the named projects do not take: its guarantee is the
department's minus theirs (`default_guarantee`; it stores none), its people are the department's members
in no named project (implicit: putting someone in a named project takes them out of it, taking them out
of their last named project puts them back), and it runs as the department itself (namespace, Slurm account,
fair-share leaf). So a department's first named project is no cliff: whoever is in no named project still
submits, to the default project, and the work running there keeps what the named projects leave of the
guarantee. The pages ask a lead to confirm the step first (scheduling.project_changes says who and what
changes).

Jobs: every job submitted names a project. A submission without one gets `default_job_project`: the
person's only usable project in the department, else the department's default project if they may use it;
otherwise (someone in several named projects) they are asked to choose (`check_job_project`, from
scheduling.services.admission.submit_job). Job.project stays nullable only for the jobs of a department
whose default project is missing (none after migration 0013) and for that migration's way back.
"""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.db.models.functions import Lower
from django.utils.translation import gettext as _

from core.access import may_use_project, require_project_manager
from tenancy import naming
from tenancy.choices import ProjectRole, RoleOrigin
from tenancy.models import Department, Membership, Project, ProjectMembership
from tenancy.models.projects import DEFAULT_PROJECT_NAME, DEFAULT_PROJECT_SLUG

QUOTA_FIELDS = ("guaranteed_gpus", "over_quota_weight", "limit_gpus")


def usable_projects(user, department: Department):
    """The projects of `department` that `user` may submit jobs to, by name."""
    return Project.objects.usable_by(user).filter(department=department).order_by(Lower("name"))


def default_project(department: Department | int) -> Project | None:
    """The department's default project (None only for a department made outside save_department)."""
    return Project.objects.filter(department=department, is_default=True).first()


def ensure_default_project(department: Department) -> Project:
    """The department's default project, made if it has none (save_department, in its transaction). Its
    name and slug are "Default" and "default", or the first free "Default 2"/"default-2", ..."""
    existing = default_project(department)
    if existing is not None:
        return existing
    siblings = Project.objects.filter(department=department)
    names = {name.lower() for name in siblings.values_list("name", flat=True)}
    slugs = set(siblings.values_list("slug", flat=True))
    name, slug, n = DEFAULT_PROJECT_NAME, DEFAULT_PROJECT_SLUG, 2
    while name.lower() in names or slug in slugs:
        name, slug, n = f"{DEFAULT_PROJECT_NAME} {n}", f"{DEFAULT_PROJECT_SLUG}-{n}", n + 1
    return Project.objects.create(department=department, name=name, slug=slug, is_default=True)


def default_guarantee(department: Department) -> int:
    """What the default project is guaranteed: the department's guarantee minus its named projects'."""
    return max(0, department.guaranteed_gpus - projects_guaranteed(department))


def default_project_usernames(department: Department) -> list[str]:
    """Who is in the default project: the department's members in none of its named projects (the
    projects panel's Default row), by username."""
    in_named = ProjectMembership.objects.filter(project__department=department, project__is_default=False)
    return list(
        Membership.objects.filter(department=department)
        .exclude(user__in=in_named.values("user"))
        .order_by("user__username")
        .values_list("user__username", flat=True)
    )


def default_job_project(user, department: Department) -> Project | None:
    """The project a job of `department` by `user` goes to when none is named: the person's only usable
    project there, else the default project if they may use it, else None (they must choose)."""
    return submission_default(list(usable_projects(user, department)))


def submission_default(usable: list[Project]) -> Project | None:
    """Of the projects someone may use in a department, the one their jobs go to when none is named: the
    only one, else the default project among them, else None (default_job_project; scheduling.
    project_changes asks it for the projects someone will use after a step)."""
    if len(usable) == 1:
        return usable[0]
    return next((p for p in usable if p.is_default), None)


def check_job_project(
    user, department: Department, project: Project | None, gpus: int | None = None
) -> dict[str, str]:
    """Errors (field -> sentence) for a job of `department` in `project` submitted by `user`; empty if fine.

    A job names a project the user may use (the message names theirs); no project is taken only by a
    department with no named projects (one made without its default project). A job larger than its
    project's limit could never run.
    """
    if project is not None:
        if project.department_id != department.pk:
            return {
                "project": _("project %(project)s is not a project of %(department)s")
                % {"project": repr(project.slug), "department": department.slug}
            }
        if project.is_default and not may_use_project(user, project):
            mine = ", ".join(p.slug for p in usable_projects(user, department))
            return {
                "project": _(
                    "the default project of %(department)s is for its members in no named project; "
                    "submit to yours (%(projects)s)"
                )
                % {"department": department.slug, "projects": mine}
            }
        if not may_use_project(user, project):
            return {
                "project": _("you are not a member of project %(project)s of %(department)s")
                % {"project": repr(project.slug), "department": department.slug}
            }
        if gpus is not None and project.limit_gpus is not None and gpus > project.limit_gpus:
            return {
                "gpus": _(
                    "%(gpus)s GPUs is over project %(project)s's limit of %(limit)s GPUs: it could never run"
                )
                % {"gpus": gpus, "project": project.slug, "limit": project.limit_gpus}
            }
        return {}
    if not Project.objects.named().filter(department=department).exists():
        return {}
    usable = [p.slug for p in usable_projects(user, department)]
    if usable:
        return {
            "project": _(
                "%(department)s shares its GPUs among projects: choose one of your projects (%(projects)s)"
            )
            % {"department": department.slug, "projects": ", ".join(usable)}
        }
    return {
        "project": _(
            "%(department)s shares its GPUs among projects and you are in none of them: ask a lead of the "
            "department to add you to one"
        )
        % {"department": department.slug}
    }


def projects_guaranteed(department: Department, exclude: int | None = None) -> int:
    projects = Project.objects.filter(department=department)
    if exclude is not None:
        projects = projects.exclude(pk=exclude)
    return projects.aggregate(total=Sum("guaranteed_gpus"))["total"] or 0


def check_department_guarantee(department: Department) -> None:
    """Refuse (ValidationError on guaranteed_gpus) a department guarantee below its projects' guarantees.
    Locks the department's row: call inside the transaction that saves it."""
    if department.pk is None:
        return
    Department.objects.select_for_update().filter(pk=department.pk).first()
    total = projects_guaranteed(department)
    if department.guaranteed_gpus < total:
        raise ValidationError(
            {
                "guaranteed_gpus": _(
                    "its projects are guaranteed %(total)s GPUs together; lower their guarantees first, or "
                    "keep the department's at %(total)s or more"
                )
                % {"total": total}
            }
        )


def _clean_quota(values: dict) -> dict:
    """The quota fields of `values`, with their own errors (field -> sentence) raised."""
    errors = {}
    guaranteed = values.get("guaranteed_gpus", 0)
    limit = values.get("limit_gpus")
    weight = values.get("over_quota_weight", Decimal("1.00"))
    if isinstance(guaranteed, bool) or not isinstance(guaranteed, int) or guaranteed < 0:
        errors["guaranteed_gpus"] = _("a whole number of GPUs, 0 or more")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        errors["limit_gpus"] = _("a whole number of GPUs, 0 or more, or empty for no limit")
    elif limit is not None and not errors and limit < guaranteed:
        errors["limit_gpus"] = _("the limit (%(limit)s) may not be below the guarantee (%(guarantee)s)") % {
            "limit": limit,
            "guarantee": guaranteed,
        }
    if Decimal(str(weight)) < 0:
        errors["over_quota_weight"] = _("0 or more (0: the project never borrows)")
    if errors:
        raise ValidationError(errors)
    return values


def check_fit(department: Department, project: Project) -> None:
    """Refuse a project whose guarantee, with its siblings', passes the department's. Caller holds the
    department's row lock."""
    others = projects_guaranteed(department, exclude=project.pk)
    total = others + project.guaranteed_gpus
    if total > department.guaranteed_gpus:
        raise ValidationError(
            {
                "guaranteed_gpus": _(
                    "%(department)s's projects would be guaranteed %(total)s GPUs but the department is "
                    "guaranteed %(guarantee)s: at most %(room)s for this project"
                )
                % {
                    "department": department.name,
                    "total": total,
                    "guarantee": department.guaranteed_gpus,
                    "room": max(0, department.guaranteed_gpus - others),
                }
            }
        )


def fit_error(project: Project, guaranteed_gpus: int) -> ValidationError | None:
    """Why `project` may not be guaranteed `guaranteed_gpus` GPUs (check_fit's refusal), or None. Reads
    only (a confirmation page asks before the change)."""
    probe = Project(pk=project.pk, department_id=project.department_id, guaranteed_gpus=guaranteed_gpus)
    try:
        check_fit(project.department, probe)
    except ValidationError as error:
        return error
    return None


def _check_names(department: Department, project: Project) -> None:
    errors = {}
    siblings = Project.objects.filter(department=department).exclude(pk=project.pk)
    if not project.name.strip():
        errors["name"] = _("a name is required")
    elif siblings.filter(name__iexact=project.name.strip()).exists():
        errors["name"] = _("%(department)s already has a project named %(name)s") % {
            "department": department.name,
            "name": repr(project.name.strip()),
        }
    if siblings.filter(slug=project.slug).exists():
        errors["slug"] = _("%(department)s already has a project with the slug %(slug)s") % {
            "department": department.name,
            "slug": repr(project.slug),
        }
    # Its namespace and Slurm account (tenancy.naming: <department>--<project>) are valid and unique once
    # the slug is (the field's validator): no length or collision check is left to make here.
    if errors:
        raise ValidationError(errors)


def _save(department: Department, project: Project) -> Project:
    _check_names(department, project)
    project.full_clean(exclude=["department"], validate_constraints=False)
    check_fit(department, project)
    try:
        with transaction.atomic():
            project.save()
    except IntegrityError as error:  # a concurrent create of the same name or slug in another department row
        raise ValidationError(
            {"name": _("%(department)s already has a project of this name") % {"department": department.name}}
        ) from error
    return project


def _new_project(department: Department, name: str, slug: str, quota: dict) -> Project:
    """The unsaved project create_project would save (`slug` defaults to the name's)."""
    quota = _clean_quota({k: v for k, v in quota.items() if k in QUOTA_FIELDS})
    name = (name or "").strip()
    if not slug:
        # Derived so that it is always valid (tenancy.naming.default_slug: "3D Vision" -> "p-3d-vision"), or
        # the person is asked to type one, on the slug field.
        slug = naming.default_slug(name)
        if not slug and name:
            raise ValidationError({"slug": _(naming.DEFAULT_SLUG_MISSING)})
    return Project(department=department, name=name, slug=slug, **quota)


def check_new_project(by, department: Department, *, name: str, slug: str = "", **quota) -> None:
    """Refuse (ValidationError, as create_project would) a new project that would not be created; reads
    only: a confirmation page asks before the project is made, and must not ask about one it cannot make."""
    require_project_manager(by, department)
    project = _new_project(department, name, slug, quota)
    _check_names(department, project)
    project.full_clean(exclude=["department"], validate_constraints=False)
    check_fit(department, project)


@transaction.atomic
def create_project(by, department: Department, *, name: str, slug: str = "", **quota) -> Project:
    """A new project of `department` (by an admin or its lead). `slug` defaults to the name's."""
    require_project_manager(by, department)
    department = Department.objects.select_for_update().get(pk=department.pk)
    return _save(department, _new_project(department, name, slug, quota))


@transaction.atomic
def update_project(by, project: Project, **changes) -> Project:
    """Change a project's name, slug or quota (by an admin or its department's lead)."""
    require_project_manager(by, project.department)
    department = Department.objects.select_for_update().get(pk=project.department_id)
    project = Project.objects.get(pk=project.pk)
    if project.is_default and any(
        f in changes and changes[f] != getattr(project, f) for f in ("slug", *QUOTA_FIELDS)
    ):
        raise ValidationError(
            _(
                "the default project holds what the named projects leave of the department's guarantee: "
                "change theirs or the department's (only its name may change)"
            )
        )
    if "slug" in changes and changes["slug"] != project.slug and project.jobs.exists():
        raise ValidationError(
            {"slug": _("jobs have run under this slug (its namespace and Slurm account): keep it")}
        )
    quota = {f: changes.get(f, getattr(project, f)) for f in QUOTA_FIELDS}
    _clean_quota(quota)
    for field, value in changes.items():
        if field in ("name", "slug", *QUOTA_FIELDS):
            setattr(project, field, value.strip() if field == "name" else value)
    return _save(department, project)


@transaction.atomic
def delete_project(by, project: Project) -> None:
    """Delete a project that never had jobs (their history keeps it otherwise)."""
    require_project_manager(by, project.department)
    Department.objects.select_for_update().get(pk=project.department_id)
    if project.is_default:
        raise ValidationError(
            _("a department keeps its default project: it holds what named projects do not")
        )
    if project.jobs.exists():
        raise ValidationError(
            _(
                "%(project)s has jobs (their history names it): it cannot be deleted; set its guarantee to 0 "
                "and move its members instead"
            )
            % {"project": project}
        )
    project.delete()


def _refuse_default(project: Project) -> None:
    if project.is_default:
        raise ValidationError(
            {
                "project": _(
                    "the default project's people are the department's members in no named project: take "
                    "them out of their named projects instead"
                )
            }
        )


def _department_member(project: Project, user) -> None:
    if not Membership.objects.filter(user=user, department_id=project.department_id).exists():
        raise ValidationError(
            {
                "user": _("%(user)s is not a member of %(department)s: add them to the department first")
                % {"user": user, "department": project.department}
            }
        )


@transaction.atomic
def set_project_member(by, project: Project, user, role: str = ProjectRole.MEMBER) -> ProjectMembership:
    """Put a member of the project's department in the project with `role` (or change their role)."""
    require_project_manager(by, project.department, _("change who is in its projects"))
    if role not in ProjectRole.values:
        raise ValidationError({"role": _("one of %(roles)s") % {"roles": ", ".join(ProjectRole.values)}})
    _refuse_default(project)
    _department_member(project, user)
    membership, created = ProjectMembership.objects.select_for_update().get_or_create(
        user=user, project=project, defaults={"role": role}
    )
    if not created and (membership.role != role or membership.origin != RoleOrigin.MANUAL):
        membership.role = role
        membership.origin = RoleOrigin.MANUAL  # a change by hand makes it a hand grant (tenancy.identity)
        membership.save()
    return membership


@transaction.atomic
def set_project_members(by, project: Project, users, role: str = ProjectRole.MEMBER) -> list:
    """Put several members of the project's department in it (set_project_member), all or none."""
    return [set_project_member(by, project, user, role) for user in users]


@transaction.atomic
def remove_project_member(by, membership: ProjectMembership) -> None:
    require_project_manager(by, membership.project.department, _("change who is in its projects"))
    membership.delete()


@transaction.atomic
def move_member(by, membership: ProjectMembership, to: Project) -> ProjectMembership:
    """Move a person from one project to a sibling project, keeping their project role. Their running and
    pending jobs stay in the project they were submitted to."""
    source = membership.project
    require_project_manager(by, source.department, _("move its members between projects"))
    if to.department_id != source.department_id:
        raise ValidationError(
            {
                "project": _(
                    "%(project)s is not a project of %(department)s: people move within their department"
                )
                % {"project": to, "department": source.department}
            }
        )
    if to.pk == source.pk:
        return membership
    _refuse_default(to)
    membership = ProjectMembership.objects.select_for_update().get(pk=membership.pk)
    if ProjectMembership.objects.filter(user_id=membership.user_id, project=to).exists():
        membership.delete()  # already in the target project: leaving the source is the move
        return ProjectMembership.objects.get(user_id=membership.user_id, project=to)
    membership.project = to
    membership.origin = RoleOrigin.MANUAL  # moved by hand: a hand grant from now on (tenancy.identity)
    membership.save()
    return membership


def forget_department_member(membership: Membership) -> None:
    """The person left the department: they leave its projects too (called by remove_membership)."""
    ProjectMembership.objects.filter(
        user_id=membership.user_id, project__department_id=membership.department_id
    ).delete()
