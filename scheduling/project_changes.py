"""What a step towards named projects changes, said before it is taken: the confirmation pages of
scheduling.views.projects show it on a GET (which never writes) and apply the step on a POST.

* A new named project (`new_project_changes`): its guarantee comes out of the default project's
  (tenancy.projects.default_guarantee), so the default project's in-quota running work beyond the new
  guarantee (the newest first, as tenancy.quota.in_quota_prefix keeps a leaf's guarantee with its oldest
  work) may be reclaimed by the new project's work. Towards other departments nothing changes: the
  department keeps its whole guarantee. Nobody leaves the default project: people join a named project by
  a second step. A department's first named project always asks for confirmation; a later one when some
  running work would change.
* People put in a named project (`move_changes`): those in no named project leave the default project
  (their next jobs go to the named project; their running and pending jobs stay where they were
  submitted). Asks for confirmation when someone leaves the default project.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q

from core.access import leads
from scheduling.choices import ACTIVE_STATES, HOLDING_STATES
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES
from scheduling.models import Job
from tenancy.models import Department, Project, ProjectMembership
from tenancy.projects import default_guarantee, default_project
from tenancy.quota import in_quota_prefix


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


@dataclass(frozen=True)
class NewProjectChanges:
    department: Department
    default: Project | None
    first: bool  # the department's first named project
    guaranteed_gpus: int  # the new project's
    default_before: int  # the default project's guarantee now
    default_after: int  # and after the step
    running: list[JobChange] = field(default_factory=list)  # its in-quota running work, oldest first
    borrowed_jobs: int = 0  # its running work on borrowed GPUs already (unchanged)

    @property
    def beyond(self) -> list[JobChange]:
        """The running jobs the step puts beyond the default project's guarantee that could be reclaimed."""
        return [change for change in self.running if change.loses_guarantee and change.preemptible]

    @property
    def beyond_gpus(self) -> int:
        return sum(change.job.gpus for change in self.beyond)

    @property
    def needs_confirmation(self) -> bool:
        return self.first or bool(self.beyond)


def new_project_changes(department: Department, guaranteed_gpus: int) -> NewProjectChanges:
    """What creating a named project guaranteed `guaranteed_gpus` in `department` changes (module
    docstring). Reads only."""
    before = default_guarantee(department)
    after = max(0, before - guaranteed_gpus)
    running = list(
        Job.objects.filter(_default_work(department), state__in=HOLDING_STATES)
        .select_related("submitted_by")
        .order_by("placed_at", "pk")
    )
    in_quota = [job for job in running if not job.over_quota]
    kept_before = in_quota_prefix(before, [(job.pk, job.gpus) for job in in_quota])
    kept = in_quota_prefix(after, [(job.pk, job.gpus) for job in in_quota])
    return NewProjectChanges(
        department=department,
        default=default_project(department),
        first=not Project.objects.named().filter(department=department).exists(),
        guaranteed_gpus=guaranteed_gpus,
        default_before=before,
        default_after=after,
        running=[JobChange(job, job.pk in kept, job.pk in kept_before) for job in in_quota],
        borrowed_jobs=len(running) - len(in_quota),
    )


@dataclass(frozen=True)
class PersonChange:
    user: object
    leaves_default: bool  # in no named project now: they leave the default project
    jobs_in_default: int  # their running and pending jobs in the default project (they stay there)


@dataclass(frozen=True)
class MoveChanges:
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


def move_changes(department: Department, project: Project, users: list) -> MoveChanges:
    """What putting `users` (members of `department`) in its named `project` changes (module docstring).
    Reads only."""
    in_named = set(
        ProjectMembership.objects.filter(
            user__in=users, project__department=department, project__is_default=False
        ).values_list("user_id", flat=True)
    )
    jobs: dict[int, int] = {}
    for user_id in Job.objects.filter(
        _default_work(department), submitted_by__in=users, state__in=ACTIVE_STATES
    ).values_list("submitted_by_id", flat=True):
        jobs[user_id] = jobs.get(user_id, 0) + 1
    return MoveChanges(
        department=department,
        project=project,
        default=default_project(department),
        # A lead (or an admin) uses every project of the department: nobody they stay able to use is lost.
        people=[
            PersonChange(user, user.pk not in in_named and not leads(user, department), jobs.get(user.pk, 0))
            for user in users
        ],
    )
