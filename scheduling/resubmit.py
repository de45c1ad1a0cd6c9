"""Whether a job can be submitted again as it is, and what the person must choose first: the job page's
"Resubmit" and "Clone" buttons, the resubmit confirmation and the cloned form all read it here, so none
of them offers a click that submit_job (tenancy.projects.check_job_project) would refuse.

* The job's values pass: "Resubmit" as before.
* A job without a project (from before default projects) counts as one of the department's default project
  (tenancy.projects): resubmitted, it goes where submit_job puts a job that names none.
* The job's project is one the person may no longer use (a named project they left, or the default project
  once they are in a named one): the confirmation asks which of the person's projects of that department
  to use (`projects`); the clone says the same over its project field.
* No project to choose (the person is in none of the department's projects), a job over its project's
  limit, or a department the person may not submit to: no resubmit; `reason` says why and what to do.

Reads only: a few small queries, none for the common case (a job without a project in a department without
projects) when the job was read through `with_resubmit_facts` (the job page). The submission itself stays
scheduling.services.admission.submit_job's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef
from django.utils.translation import gettext as _

from scheduling.models import Job
from scheduling.services.admission import submittable_departments
from tenancy.models import Project
from tenancy.projects import check_job_project, default_project, usable_projects


@dataclass(frozen=True)
class ResubmitOffer:
    """What the job page may offer for `job` to one person."""

    may_submit: bool  # the person may submit to the job's department at all
    ready: bool  # the job's own values pass as they are
    projects: list[Project] = field(default_factory=list)  # to choose from when not `ready`
    reason: str = ""  # a plain sentence when it cannot be resubmitted, or what to choose first
    why: str = ""  # the project problem alone, for the clone to finish in its own words

    @property
    def possible(self) -> bool:
        """Whether a resubmit can go through (as it is, or once a project is chosen)."""
        return self.may_submit and (self.ready or bool(self.projects))

    @property
    def needs_project(self) -> bool:
        return self.may_submit and not self.ready and bool(self.projects)


def with_resubmit_facts(jobs, user):
    """`jobs` (a Job queryset) with what resubmit_offer would otherwise ask per job, as two EXISTS in the same
    query: may `user` submit to the job's department, and has that department projects."""
    department = OuterRef("department_id")
    return jobs.annotate(
        resubmit_may_submit=Exists(submittable_departments(user).filter(pk=department)),
        resubmit_department_has_projects=Exists(Project.objects.named().filter(department=department)),
    )


def resubmit_offer(user, job: Job) -> ResubmitOffer:
    """What `user` may do to submit `job` again (see the module docstring)."""
    department = job.department
    may_submit = getattr(job, "resubmit_may_submit", None)
    if may_submit is None:
        may_submit = submittable_departments(user).filter(pk=department.pk).exists()
    if not may_submit:
        return ResubmitOffer(
            may_submit=False,
            ready=False,
            reason=_(
                "Only members of %(department)s and platform admins may submit its jobs: ask its lead to add "
                "you."
            )
            % {"department": department.name},
        )
    if job.project_id is None and getattr(job, "resubmit_department_has_projects", None) is False:
        return ResubmitOffer(may_submit=True, ready=True)  # check_job_project's answer, without asking
    project = job.project if job.project_id is not None else default_project(department)
    problems = check_job_project(user, department, project, job.gpus)
    if not problems:
        return ResubmitOffer(may_submit=True, ready=True)
    if "gpus" in problems:
        return ResubmitOffer(
            may_submit=True,
            ready=False,
            reason=_(
                "This job's %(gpus)s GPUs are over project %(project)s's limit of %(limit)s GPUs, so it "
                "could never run: clone it and ask for fewer GPUs."
            )
            % {"gpus": job.gpus, "project": project.name, "limit": project.limit_gpus},
        )
    projects = list(usable_projects(user, department))
    if project is None:  # from before the department's projects: it could name none
        why = _(
            "This job ran as %(department)s's own work, but %(department)s now shares its GPUs among projects"
        ) % {"department": department.name}
    elif project.is_default:
        why = _(
            "This job is in %(department)s's default project, which is for its members in no named project"
        ) % {"department": department.name}
    else:
        why = _("You may no longer submit to this job's project, %(project)s") % {"project": project.name}
    if projects:
        return ResubmitOffer(
            may_submit=True,
            ready=False,
            projects=projects,
            reason=_("%(why)s: choose one of your projects to run it under.") % {"why": why},
            why=why,
        )
    return ResubmitOffer(
        may_submit=True,
        ready=False,
        reason=_(
            "%(why)s, and you are in none of %(department)s's projects: ask a lead of %(department)s to add "
            "you to one, then resubmit."
        )
        % {"why": why, "department": department.name},
        why=why,
    )
