"""What a step towards named projects changes, said before it is taken: the confirmation pages of
scheduling.views.projects show it on a GET (which never writes) and apply the step on a POST.

* A new named project (`new_project_changes`): its guarantee comes out of the default project's
  (tenancy.projects.default_guarantee), so the default project's in-quota running work beyond the new
  guarantee (tenancy.quota.beyond_guarantee: the scheduler keeps a guarantee with the work not
  preemptible, then the oldest, so the newest training falls beyond first) may be reclaimed by the new
  project's work. Towards other departments nothing changes: the department keeps its whole guarantee.
  Nobody leaves the default project: people join a named project by
  a second step. A department's first named project always asks for confirmation; a later one when some
  running work would change.
* People put in a named project (`move_changes`): those in no named project leave the default project
  (their next jobs go to the named project; their running and pending jobs stay where they were
  submitted). Asks for confirmation when someone leaves the default project.
* A project's guarantee changed (`guarantee_changes`): lowered, the project's in-quota running work beyond
  the new guarantee (the newest first) is in quota on its siblings' unused guarantee from then on, which
  their work may reclaim, and the default project gets what it gave up. Always confirmed. Raised, the
  default project gives it up: confirmed when that puts the default project's running work beyond its
  guarantee (as a new project's guarantee does), else applied at once.
* A named project deleted (`delete_changes`, the question its Delete button asks): tenancy.projects.
  delete_project deletes only a project that never had a job (their history names it), so a project with
  jobs is not deleted and nothing changes for them; one without gives its guarantee back to the default
  project, and its people leave it (back in the default project unless in another named project).
* Someone moved from one named project to another, or taken out of one (`member_changes`): their running
  and pending jobs stay in the projects they were submitted to (tenancy.projects.move_member and
  remove_project_member touch no job); their next submissions default to what tenancy.projects.
  default_job_project will answer after the step (taken out of their last named project: the default
  project). Always confirmed.

The confirmed steps are applied by `confirm_new_project`, `confirm_people`, `confirm_guarantee` and
`confirm_member_change`: under the department's row lock they compute the changes again and refuse
(`StaleConfirmation`, with the changes as they are now) when they differ from what the page showed
(`Confirmable.digest`), so a stale page is shown again, never applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    RowRange,
    Subquery,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import Coalesce, Greatest
from django.utils.translation import pgettext

from core.access import leads
from core.fingerprint import fingerprint
from scheduling.choices import ACTIVE_STATES, HOLDING_STATES, JobState
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES
from scheduling.models import Allocation, Job
from scheduling.usage import keeps_held, kept_held_sql
from tenancy import projects as service
from tenancy.models import Department, Project, ProjectMembership
from tenancy.projects import default_guarantee, default_project, submission_default
from tenancy.quota import beyond_guarantee


class StaleConfirmation(Exception):
    """What a confirmation page showed has changed since: `changes` are the facts as they are now."""

    def __init__(self, changes):
        super().__init__("stale confirmation")
        self.changes = changes


class Confirmable:
    """What a step changes, as its confirmation page shows it: `facts()` are what the page says, `digest`
    their fingerprint, sent back by the confirming POST (scheduling.forms.StepForm's `seen`)."""

    def facts(self) -> tuple:
        raise NotImplementedError

    @property
    def digest(self) -> str:
        return fingerprint(type(self).__name__, *self.facts())[:32]  # scheduling.forms.SEEN

    def still(self, seen: str) -> None:
        """Refuse (StaleConfirmation, with these changes) a confirmation that showed other facts."""
        if self.digest != seen:
            raise StaleConfirmation(self)


def _default_work(department: Department) -> Q:
    """The department's work in its default project (or, from before it, in none)."""
    return Q(department=department) & (Q(project__isnull=True) | Q(project__is_default=True))


@dataclass(frozen=True)
class JobChange:
    job: Job
    keeps_guarantee: bool  # within the default project's guarantee after the step
    was_within: bool = True  # within it before the step (else already beyond: unchanged)

    @property
    def loses_guarantee(self) -> bool:
        return self.was_within and not self.keeps_guarantee

    @property
    def preemptible(self) -> bool:
        """Only preemptible classes are ever reclaimed: a build or interactive job beyond keeps running."""
        return self.job.priority_class in PREEMPTIBLE_CLASSES


class Reclaimable(Confirmable):
    """A step's `running` changes (JobChange): those it puts beyond a guarantee that could be reclaimed."""

    running: list[JobChange]
    borrowed_jobs: int

    def running_facts(self) -> tuple:
        running = tuple((c.job.pk, c.keeps_guarantee, c.was_within, c.preemptible) for c in self.running)
        return running, self.borrowed_jobs

    @property
    def losing(self) -> list[JobChange]:
        """Every running job the step puts beyond the guarantee: the table's "beyond" rows, and what the
        page's sentence counts (`beyond` and `not_preemptible` split it)."""
        return [change for change in self.running if change.loses_guarantee]

    @property
    def losing_gpus(self) -> int:
        return sum(change.job.gpus for change in self.losing)

    @property
    def already(self) -> list[JobChange]:
        """The running jobs beyond the guarantee before the step already (unchanged by it)."""
        return [change for change in self.running if not change.was_within and not change.keeps_guarantee]

    @property
    def already_gpus(self) -> int:
        return sum(change.job.gpus for change in self.already)

    @property
    def gpus_beyond(self) -> int:
        """GPUs of that work beyond the guarantee after the step: those of the jobs falling beyond it and of
        those beyond it already (tenancy.quota.beyond_guarantee), the figure the projects panel's row shows
        once it is taken."""
        return self.losing_gpus + self.already_gpus

    @property
    def beyond(self) -> list[JobChange]:
        """Those of `losing` that may be reclaimed (preemptible)."""
        return [change for change in self.losing if change.preemptible]

    @property
    def beyond_gpus(self) -> int:
        return sum(change.job.gpus for change in self.beyond)

    @property
    def not_preemptible(self) -> list[JobChange]:
        """Those of `losing` that keep running: never reclaimed."""
        return [change for change in self.losing if not change.preemptible]

    @property
    def guarantees(self) -> tuple[int, int]:
        """The guarantee of the work `running` is (before, after the step)."""
        raise NotImplementedError

    @property
    def firm_holder(self) -> Project | None:
        """The project whose work `running` is (None: the department's default project, not made yet)."""
        raise NotImplementedError

    @property
    def firm_gpus(self) -> int:
        """The GPUs its running jobs that are not preemptible hold: they take the guarantee first
        (Standing)."""
        return sum(change.job.gpus for change in self.running if not change.preemptible)

    @property
    def firm_fills(self) -> bool:
        """The step leaves that work's new non-preemptible jobs no room where there was some: they run only
        within the guarantee (scheduling.engine.scheduler, Projects), and the running ones hold all of it."""
        before, after = self.guarantees
        return before > self.firm_gpus >= after


@dataclass(frozen=True)
class NewProjectChanges(Reclaimable):
    department: Department
    default: Project | None
    first: bool  # the department's first named project
    guaranteed_gpus: int  # the new project's
    default_before: int  # the default project's guarantee now
    default_after: int  # and after the step
    running: list[JobChange] = field(default_factory=list)  # its in-quota running work, oldest first
    borrowed_jobs: int = 0  # its running work on borrowed GPUs already (unchanged)

    @property
    def needs_confirmation(self) -> bool:
        return self.first or bool(self.beyond) or self.firm_fills

    @property
    def guarantees(self) -> tuple[int, int]:
        return self.default_before, self.default_after

    @property
    def firm_holder(self) -> Project | None:
        return self.default

    def facts(self) -> tuple:
        return (
            self.department.pk,
            self.first,
            self.guaranteed_gpus,
            self.default_before,
            self.default_after,
            *self.running_facts(),
        )


def new_project_changes(department: Department, guaranteed_gpus: int) -> NewProjectChanges:
    """What creating a named project guaranteed `guaranteed_gpus` in `department` changes (module
    docstring). Reads only."""
    before = default_guarantee(department)
    after = max(0, before - guaranteed_gpus)
    running, borrowed = _running_changes(_default_work(department), before, after)
    return NewProjectChanges(
        department=department,
        default=default_project(department),
        first=not Project.objects.named().filter(department=department).exists(),
        guaranteed_gpus=guaranteed_gpus,
        default_before=before,
        default_after=after,
        running=running,
        borrowed_jobs=borrowed,
    )


STANDING_FIELDS = ("pk", "gpus", "priority_class", "placed_at", "started_at", "created_at", "over_quota")


def standing_key(job: Job) -> tuple:
    """Where a running `job` stands in its department's (or project's) guarantee: the scheduler's order
    (scheduling.engine.scheduler._standing_order, with its start time as scheduling.pass_inputs reads it):
    not preemptible first, then oldest first. The projects panel and the confirmations sort by it; it reads
    `STANDING_FIELDS`."""
    since = job.placed_at or job.started_at or job.created_at
    return job.priority_class in PREEMPTIBLE_CLASSES, since, job.over_quota, job.pk


def standing_order() -> list:
    """`standing_key` in SQL, for ORDER BY and windows (booleans sort false first there as in Python; the
    pk last, so no two jobs tie)."""
    return [
        ExpressionWrapper(Q(priority_class__in=PREEMPTIBLE_CLASSES), output_field=BooleanField()).asc(),
        Coalesce("placed_at", "started_at", "created_at").asc(),
        F("over_quota").asc(),
        F("pk").asc(),
    ]


def reached_in_standing(leaf) -> Window:
    """Each running job's GPUs with those of the jobs before it in its leaf (`leaf`: an expression naming
    it), in standing order: the SQL side of `leaf_beyond`. A job is in its leaf's guarantee while this stays
    within it (tenancy.quota.in_quota_prefix: the sums only grow, so the jobs within are a prefix), and
    beyond it after, unless it borrows from other departments (`over_quota`)."""
    return Window(Sum("gpus"), partition_by=[leaf], order_by=standing_order(), frame=RowRange(None, 0))


def leaf_beyond(guaranteed: int, jobs: list[Job]) -> set[int]:
    """The pks of `jobs` (one project's, or the default project's, running jobs) beyond `guaranteed`:
    tenancy.quota.beyond_guarantee over them in standing order (`standing_key`)."""
    ordered = sorted(jobs, key=standing_key)
    return set(beyond_guarantee(guaranteed, [(job.pk, job.gpus, job.over_quota) for job in ordered]))


def _running_changes(work: Q, before: int, after: int) -> tuple[list[JobChange], int]:
    """The in-quota running jobs of `work` in standing order (`standing_key`) as a guarantee of `before`
    GPUs becomes `after` (tenancy.quota.beyond_guarantee, the projects panel's answer too), and how many
    of its running jobs borrow from other departments already."""
    running = sorted(
        Job.objects.filter(work, state__in=HOLDING_STATES).select_related("submitted_by"), key=standing_key
    )
    beyond_before, beyond_after = leaf_beyond(before, running), leaf_beyond(after, running)
    changes = [
        JobChange(job, job.pk not in beyond_after, job.pk not in beyond_before)
        for job in running
        if not job.over_quota
    ]
    return changes, len(running) - len(changes)


@dataclass(frozen=True)
class PersonChange:
    user: object
    leaves_default: bool  # in no named project now: they leave the default project
    jobs: tuple = ()  # their running and pending jobs in the default project, oldest first (they stay there)

    @property
    def jobs_in_default(self) -> int:
        return len(self.jobs)

    @property
    def waiting(self) -> list:
        """Those of `jobs` still pending: they wait in the default project as before (a move moves no job)."""
        return [job for job in self.jobs if job.state == JobState.PENDING]


@dataclass(frozen=True)
class MoveChanges(Confirmable):
    department: Department
    project: Project
    default: Project | None
    people: list[PersonChange]

    @property
    def leaving_default(self) -> list[PersonChange]:
        return [person for person in self.people if person.leaves_default]

    @property
    def needs_confirmation(self) -> bool:
        return bool(self.leaving_default)

    def facts(self) -> tuple:
        people = tuple((p.user.pk, p.leaves_default, tuple(job.pk for job in p.jobs)) for p in self.people)
        return self.project.pk, people


def move_changes(department: Department, project: Project, users: list) -> MoveChanges:
    """What putting `users` (members of `department`) in its named `project` changes (module docstring).
    Reads only."""
    in_named = set(
        ProjectMembership.objects.filter(
            user__in=users, project__department=department, project__is_default=False
        ).values_list("user_id", flat=True)
    )
    jobs: dict[int, list[Job]] = {}
    for job in (
        Job.objects.filter(_default_work(department), submitted_by__in=users, state__in=ACTIVE_STATES)
        .order_by("pk")
        .only("pk", "name", "state", "submitted_by_id")
    ):
        jobs.setdefault(job.submitted_by_id, []).append(job)
    return MoveChanges(
        department=department,
        project=project,
        default=default_project(department),
        # A lead (or an admin) uses every project of the department: nobody they stay able to use is lost.
        people=[
            PersonChange(
                user, user.pk not in in_named and not leads(user, department), tuple(jobs.get(user.pk, ()))
            )
            for user in users
        ],
    )


@transaction.atomic
def confirm_new_project(by, department: Department, seen: str, **fields) -> Project:
    """Create a confirmed new project (tenancy.projects.create_project, with `fields`) if what it changes is
    still what the page showed (`seen`, NewProjectChanges.digest), else StaleConfirmation."""
    department = Department.objects.select_for_update().get(pk=department.pk)
    new_project_changes(department, fields.get("guaranteed_gpus", 0)).still(seen)
    return service.create_project(by, department, **fields)


@transaction.atomic
def confirm_people(by, project: Project, users: list, role: str, seen: str) -> None:
    """Put confirmed people in `project` (tenancy.projects.set_project_members), all or none, if what it
    changes is still what the page showed (`seen`, MoveChanges.digest), else StaleConfirmation."""
    department = Department.objects.select_for_update().get(pk=project.department_id)
    move_changes(department, project, users).still(seen)
    service.set_project_members(by, project, users, role)


@dataclass(frozen=True)
class GuaranteeChanges(Reclaimable):
    project: Project
    default: Project | None
    before: int  # the project's guarantee now
    after: int  # and after the step
    room: int  # the most the project may be guaranteed (the department's minus its siblings')
    default_before: int  # the default project's guarantee now
    default_after: int  # and after the step
    # Lowered: the project's in-quota running work, oldest first; raised: the default project's.
    running: list[JobChange] = field(default_factory=list)
    borrowed_jobs: int = 0  # running jobs of that work on borrowed GPUs already (unchanged)

    @property
    def lowering(self) -> bool:
        return self.after < self.before

    @property
    def fits(self) -> bool:
        return self.after <= self.room

    @property
    def needs_confirmation(self) -> bool:
        """A lowered guarantee always (what the project keeps and the default project gets); a raised one
        when it puts the default project's running work beyond its guarantee, or leaves its new work that is
        not preemptible no room (`firm_fills`). Never a step that does not fit (tenancy.projects refuses it in
        words)."""
        return self.fits and (self.lowering or bool(self.beyond) or self.firm_fills)

    @property
    def guarantees(self) -> tuple[int, int]:
        return (self.before, self.after) if self.lowering else (self.default_before, self.default_after)

    @property
    def firm_holder(self) -> Project | None:
        return self.project if self.lowering else self.default

    def facts(self) -> tuple:
        return (
            self.project.pk,
            self.before,
            self.after,
            self.default_before,
            self.default_after,
            *self.running_facts(),
        )


def guarantee_changes(project: Project, guaranteed_gpus: int) -> GuaranteeChanges:
    """What guaranteeing the named `project` `guaranteed_gpus` GPUs instead of its own changes (module
    docstring). Reads only."""
    department = project.department
    default_before = default_guarantee(department)
    room = department.guaranteed_gpus - service.projects_guaranteed(department, exclude=project.pk)
    default_after = max(0, room - guaranteed_gpus)
    if guaranteed_gpus < project.guaranteed_gpus:
        work = Q(department=department, project=project)
        running, borrowed = _running_changes(work, project.guaranteed_gpus, guaranteed_gpus)
    else:
        running, borrowed = _running_changes(_default_work(department), default_before, default_after)
    return GuaranteeChanges(
        project=project,
        default=default_project(department),
        before=project.guaranteed_gpus,
        after=guaranteed_gpus,
        room=room,
        default_before=default_before,
        default_after=default_after,
        running=running,
        borrowed_jobs=borrowed,
    )


@transaction.atomic
def confirm_guarantee(by, project: Project, seen: str, **changes) -> Project:
    """Apply a confirmed change of `project` (tenancy.projects.update_project, with `changes`) if what it
    changes is still what the page showed (`seen`, GuaranteeChanges.digest), else StaleConfirmation."""
    Department.objects.select_for_update().get(pk=project.department_id)
    project = Project.objects.select_for_update().select_related("department").get(pk=project.pk)
    guarantee_changes(project, changes.get("guaranteed_gpus", project.guaranteed_gpus)).still(seen)
    return service.update_project(by, project, **changes)


@dataclass(frozen=True)
class MemberChanges(Confirmable):
    membership: ProjectMembership
    to: Project | None  # None: taken out of `membership.project`
    default: Project | None
    jobs: list[Job]  # their running and pending jobs in the department: each stays in its project
    submits_before: Project | None  # where a job of theirs without a project goes now (None: they choose)
    submits_after: Project | None  # and after the step
    choices_after: list[Project]  # the projects they may submit to after the step
    named_after: int  # how many named projects they are in after the step

    @property
    def source(self) -> Project:
        return self.membership.project

    @property
    def user(self):
        return self.membership.user

    @property
    def back_to_default(self) -> bool:
        """Taken out of their last named project: they submit to the default project again."""
        return self.named_after == 0 and self.default is not None and self.default in self.choices_after

    @property
    def choice_names(self) -> str:
        return ", ".join(project.name for project in self.choices_after)

    def facts(self) -> tuple:
        return (
            self.membership.pk,
            self.source.pk,
            self.to.pk if self.to else None,
            tuple((job.pk, job.project_id) for job in self.jobs),
            self.submits_after.pk if self.submits_after else None,
            tuple(project.pk for project in self.choices_after),
        )


def member_changes(membership: ProjectMembership, to: Project | None) -> MemberChanges:
    """What moving `membership`'s person from its named project to the sibling `to` (None: taking them out
    of it) changes (module docstring). Reads only."""
    source, user = membership.project, membership.user
    department = source.department
    projects = list(Project.objects.filter(department=department).order_by("name"))
    named = set(
        ProjectMembership.objects.filter(
            user=user, project__department=department, project__is_default=False
        ).values_list("project_id", flat=True)
    )
    named_after = (named - {source.pk}) | ({to.pk} if to else set())
    default = next((p for p in projects if p.is_default), None)
    # tenancy.projects.usable_projects after the step (core.access.may_use_project): a lead every project
    # of the department, anyone else their named projects, or the default project when in none.
    if leads(user, department):
        usable = projects
    else:
        usable = [p for p in projects if p.pk in named_after] or ([default] if default else [])
    jobs = list(
        Job.objects.filter(department=department, submitted_by=user, state__in=ACTIVE_STATES)
        .select_related("project")
        .order_by("created_at", "pk")
    )
    return MemberChanges(
        membership=membership,
        to=to,
        default=default,
        jobs=jobs,
        submits_before=service.default_job_project(user, department),
        submits_after=submission_default(usable),
        choices_after=usable,
        named_after=len(named_after),
    )


@transaction.atomic
def confirm_member_change(by, membership: ProjectMembership, to: Project | None, seen: str) -> MemberChanges:
    """Apply a confirmed move (to `to`) or taking out (`to` None) of `membership` (tenancy.projects) if what
    it changes is still what the page showed (`seen`, MemberChanges.digest), else StaleConfirmation.
    ProjectMembership.DoesNotExist when the person has left the project since."""
    Department.objects.select_for_update().get(pk=membership.project.department_id)
    membership = (
        ProjectMembership.objects.select_for_update()
        .select_related("project__department", "user")
        .get(pk=membership.pk)
    )
    now = member_changes(membership, to)
    now.still(seen)
    if to is None:
        service.remove_project_member(by, membership)
    else:
        service.move_member(by, membership, to)
    return now


@dataclass(frozen=True)
class DeleteChanges:
    """What deleting the named `project` changes, as its Delete question says it
    (scheduling/_project_delete_question.html): who leaves it, and its jobs (any: it is not deleted)."""

    project: Project
    usernames: list[str]  # its people, by name
    jobs: int = 0  # ever: tenancy.projects.delete_project refuses a project with any
    running: int = 0  # holding GPUs now
    waiting: int = 0  # pending

    NAMED = 3  # people named in the question; the rest are counted

    @property
    def deletable(self) -> bool:
        return not self.jobs

    @property
    def who(self) -> str:
        """Up to NAMED of its people by name, then how many more (a list as the viewer's language writes
        one: core.templatetags.rackplane.listing)."""
        names = pgettext("between the items of a list in a sentence", ", ").join(self.usernames[: self.NAMED])
        more = len(self.usernames) - self.NAMED
        if more <= 0:
            return names
        return pgettext("people", "%(names)s and %(more)s more") % {"names": names, "more": more}


def job_counts(projects) -> dict[int, dict[str, int]]:
    """Each of `projects`' jobs ever, running and waiting, by project pk (one query; none: absent)."""
    rows = (
        Job.objects.filter(project__in=projects)
        .values("project")
        .annotate(
            jobs=Count("pk"),
            running=Count("pk", filter=Q(state__in=HOLDING_STATES)),
            waiting=Count("pk", filter=Q(state=JobState.PENDING)),
        )
    )
    return {row.pop("project"): row for row in rows}


def delete_changes(project: Project, usernames: list[str] | None = None, counts: dict | None = None):
    """What deleting the named `project` changes (module docstring). `usernames` (its people, sorted) and
    `counts` (its job_counts row) when the caller has read them for many projects, else read here."""
    if usernames is None:
        usernames = sorted(project.memberships.values_list("user__username", flat=True))
    if counts is None:
        counts = job_counts([project]).get(project.pk, {})
    return DeleteChanges(project=project, usernames=list(usernames), **counts)


_DEFAULT_LEAF = Q(project__isnull=True) | Q(project__is_default=True)


def running_figures(department: Department) -> tuple[dict, dict[int | None, int]]:
    """The department's running jobs' figures, in one query whatever their number (issue 32: a department
    with 20,000 running jobs): the GPUs in use and borrowed per project pk (None: the work without a
    project), and the GPUs beyond each leaf's own guarantee by leaf (None: the default project's and those
    without one): scheduling.project_changes.leaf_beyond, summed in the database over the jobs in
    standing order (`reached_in_standing`), each leaf against its guarantee (the default project's: what
    the named projects leave, tenancy.projects.default_guarantee). In use and borrowed are the kept figures
    where the database keeps them (scheduling.usage.kept_held: no allocation read), else the allocations
    counted per job."""
    kept = keeps_held()
    leaf = Case(When(_DEFAULT_LEAF, then=Value(None)), default=F("project_id"))
    named = (
        Project.objects.named()
        .filter(department=department)
        .order_by()
        .values("department")
        .annotate(total=Sum("guaranteed_gpus"))
        .values("total")
    )
    named_total = Coalesce(Subquery(named, output_field=IntegerField()), 0)
    default_guarantee = Greatest(
        Value(department.guaranteed_gpus) - named_total, 0, output_field=IntegerField()
    )
    held = Allocation.objects.filter(job=OuterRef("pk")).order_by().values("job").annotate(n=Count("pk"))
    jobs = (
        Job.objects.filter(department=department, state__in=HOLDING_STATES)
        .annotate(
            default_leaf=ExpressionWrapper(_DEFAULT_LEAF, output_field=BooleanField()),
            held=Value(0) if kept else Coalesce(Subquery(held.values("n"), output_field=IntegerField()), 0),
            reached=reached_in_standing(leaf),
            leaf_guarantee=Case(
                When(_DEFAULT_LEAF, then=default_guarantee),
                default=F("project__guaranteed_gpus"),
                output_field=IntegerField(),
            ),
        )
        .order_by()
        .values("project_id", "default_leaf", "gpus", "over_quota", "held", "reached", "leaf_guarantee")
    )
    # Summed over the window's rows (SQL forbids an aggregate of a window function in one SELECT).
    sql, params = jobs.query.sql_with_params()
    sql = (
        "SELECT project_id, default_leaf, SUM(held), SUM(CASE WHEN over_quota THEN held ELSE 0 END), "
        "SUM(CASE WHEN reached > leaf_guarantee AND NOT over_quota THEN gpus ELSE 0 END) "
        f"FROM ({sql}) standing GROUP BY project_id, default_leaf"
    )
    if kept:  # the kept figures' rows, each with its project's leaf
        held_sql, held_params = kept_held_sql(department)
        sql += (
            " UNION ALL SELECT held.project_id, "
            "held.project_id IS NULL OR COALESCE(project.is_default, false), held.in_use, held.borrowed, 0 "
            f"FROM ({held_sql}) held(department_id, project_id, in_use, borrowed) "
            f"LEFT JOIN {Project._meta.db_table} project ON project.id = held.project_id"
        )
        params = (*params, *held_params)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    use: dict[int | None, dict[str, int]] = {}
    beyond: dict[int | None, int] = {}
    for project, default_leaf, in_use, borrowed, over in rows:  # per project (its leaf follows)
        figures = use.setdefault(project, {"in_use": 0, "borrowed": 0})
        figures["in_use"] += in_use
        figures["borrowed"] += borrowed
        key = None if default_leaf else project
        beyond[key] = beyond.get(key, 0) + over
    return use, beyond
