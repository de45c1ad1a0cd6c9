"""Default projects (tenancy.projects): every department has one from its creation, at most one; it holds
what the named projects do not take (guarantee, people, the work from before them), so a department's first
named project is no cliff: nobody loses the right to submit and the work running keeps its guarantee."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.access import may_use_project
from scheduling.choices import PriorityClass
from scheduling.models import Job
from scheduling.project_changes import move_changes, new_project_changes
from scheduling.services.admission import submit_job
from scheduling.services.passes import run_pass
from tenancy import projects as service
from tenancy.models import Department, Project, ProjectMembership
from tenancy.services import save_department
from tests.factories import free_trays, make_department, make_job, make_member

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=16)


def default_of(department) -> Project:
    return Project.objects.get(department=department, is_default=True)


def test_a_new_department_gets_one_default_project_in_the_same_transaction(demo_inventory):
    department = make_department("Vision", guaranteed_gpus=8)
    default = default_of(department)
    assert (default.name, default.slug, default.guaranteed_gpus, default.limit_gpus) == (
        "Default",
        "default",
        0,
        None,
    )
    # It runs as the department: its namespace and Slurm account are the department's own.
    assert default.namespace == default.account == "vision"
    save_department(department)  # saved again: still one
    assert Project.objects.filter(department=department).count() == 1
    # A department refused by validation leaves no project behind (one transaction).
    with pytest.raises(ValidationError):
        save_department(Department(name="Vision", slug="vision-2", guaranteed_gpus=8))
    assert Project.objects.count() == 1


def test_at_most_one_default_project_per_department_and_it_holds_no_quota(department_a):
    unique = r"one_default_per_department|department_id"  # PostgreSQL names it; SQLite names the column
    with pytest.raises(IntegrityError, match=unique), transaction.atomic():
        Project.objects.create(department=department_a, name="Other", slug="other", is_default=True)
    with pytest.raises(IntegrityError, match="default_holds_no_quota"), transaction.atomic():
        Project.objects.filter(department=department_a, is_default=True).update(guaranteed_gpus=4)
    assert service.ensure_default_project(department_a) == default_of(department_a)
    assert Project.objects.filter(department=department_a, is_default=True).count() == 1


def test_the_default_project_keeps_its_rules(department_a, lead_a, member_a):
    default = default_of(department_a)
    with pytest.raises(ValidationError, match="holds what the named projects leave"):
        service.update_project(lead_a, default, guaranteed_gpus=4)
    with pytest.raises(ValidationError, match="keeps its default project"):
        service.delete_project(lead_a, default)
    with pytest.raises(ValidationError, match="members in no named project"):
        service.set_project_member(lead_a, default, member_a)
    assert service.update_project(lead_a, default, name="General").name == "General"  # a name may change
    assert not ProjectMembership.objects.exists()


def test_default_project_membership_is_every_member_in_no_named_project(
    department_a, lead_a, member_a, member_b
):
    default = default_of(department_a)
    assert may_use_project(member_a, default) and may_use_project(lead_a, default)
    assert not may_use_project(member_b, default)  # another department's member
    assert list(Project.objects.usable_by(member_a)) == [default]
    vision = service.create_project(lead_a, department_a, name="Vision", guaranteed_gpus=8)
    assert may_use_project(member_a, default)  # a first named project takes nobody out
    membership = service.set_project_member(lead_a, vision, member_a)
    assert not may_use_project(member_a, default) and may_use_project(lead_a, default)
    assert list(Project.objects.usable_by(member_a)) == [vision]
    assert list(Project.objects.usable_by(member_b).filter(department=department_a)) == []
    service.remove_project_member(lead_a, membership)  # out of their last named project: back in it
    assert may_use_project(member_a, default)
    with pytest.raises(ValidationError, match="members in no named project"):
        service.move_member(lead_a, service.set_project_member(lead_a, vision, member_a), default)


def _submit(user, department, **fields):
    job, _ = submit_job(
        user=user,
        department=department,
        name="train",
        gpus=4,
        topology="any",
        priority_class="train",
        time_limit_minutes=60,
        backend="slurm",
        work={"script": SCRIPT},
        **fields,
    )
    return job


def test_a_job_without_a_project_goes_to_the_persons_only_project_else_the_default(
    department_a, lead_a, member_a
):
    default = default_of(department_a)
    assert _submit(member_a, department_a).project == default
    vision = service.create_project(lead_a, department_a, name="Vision", guaranteed_gpus=8)
    speech = service.create_project(lead_a, department_a, name="Speech", guaranteed_gpus=4)
    other = make_member("other", department_a)
    assert _submit(other, department_a).project == default  # in no named project: still submits
    assert _submit(lead_a, department_a).project == default  # a lead uses every project: the default
    service.set_project_member(lead_a, vision, member_a)
    assert _submit(member_a, department_a).project == vision  # their only one
    service.set_project_member(lead_a, speech, member_a)
    with pytest.raises(ValidationError, match="choose one of your projects"):
        _submit(member_a, department_a)
    with pytest.raises(ValidationError, match="is for its members in no named project"):
        _submit(member_a, department_a, project=default)


@pytest.mark.slow(reason="runs scheduling passes")
def test_the_first_named_project_keeps_the_guarantee_of_the_work_running(department_a, lead_a):
    default = default_of(department_a)
    trays = free_trays(3)
    jobs = [
        make_job(department_a, f"d{n}", trays=[tray], project=default, over_quota=True)
        for n, tray in enumerate(trays)
    ]
    run_pass()
    assert [Job.objects.get(pk=j.pk).over_quota for j in jobs] == [False, False, False]  # 12 of 16

    # Before: the step says what changes. A project guaranteed 4 leaves the default project 12: all kept.
    changes = new_project_changes(department_a, 4)
    assert changes.first and changes.needs_confirmation
    assert (changes.default_before, changes.default_after) == (16, 12)
    assert [c.keeps_guarantee for c in changes.running] == [True, True, True] and not changes.beyond
    # One guaranteed 8 leaves it 8: the newest job would be beyond the default project's guarantee.
    assert [c.job.name for c in new_project_changes(department_a, 8).beyond] == ["d2"]
    # A job of a class never preempted (build) holds the guarantee first, as the scheduler's Standing
    # has it: the newest training falls beyond instead (the page said the build did, and kept running).
    Job.objects.filter(pk=jobs[2].pk).update(priority_class=PriorityClass.BUILD)
    build = new_project_changes(department_a, 8)
    assert [c.job.name for c in build.running] == ["d2", "d0", "d1"]
    assert [c.job.name for c in build.beyond] == ["d1"] and not build.not_preemptible
    Job.objects.filter(pk=jobs[2].pk).update(priority_class=PriorityClass.TRAIN)
    assert Project.objects.named().count() == 0  # reading what changes wrote nothing

    service.create_project(lead_a, department_a, name="LLM", guaranteed_gpus=8)
    run_pass()
    # Towards other departments nothing changed: the department's 12 GPUs stay in quota (the 4 beyond
    # the default project's 8 are the new project's unused guarantee, which only its work takes back).
    assert [Job.objects.get(pk=j.pk).over_quota for j in jobs] == [False, False, False]
    assert not new_project_changes(department_a, 0).first


def test_putting_people_in_a_named_project_says_who_leaves_the_default_project(
    department_a, lead_a, member_a
):
    vision = service.create_project(lead_a, department_a, name="Vision", guaranteed_gpus=8)
    _submit(member_a, department_a)
    changes = move_changes(department_a, vision, [member_a, lead_a])
    assert [(p.user, p.leaves_default, p.jobs_in_default) for p in changes.people] == [
        (member_a, True, 1),
        (lead_a, False, 0),  # a lead keeps every project of the department
    ]
    assert changes.needs_confirmation
    service.set_project_member(lead_a, vision, member_a)
    assert not move_changes(department_a, vision, [member_a]).needs_confirmation
