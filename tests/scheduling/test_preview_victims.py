"""The job form's "If submitted now" (scheduling.preview) names the jobs a job would preempt, and whose:
a project's in-quota job reclaiming its own department's work without a project is not preempting "other
departments"."""

import pytest

from scheduling import pass_cache
from scheduling.choices import PriorityClass, Topology
from scheduling.preview import preview_job
from tenancy.models import Project
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

ASKED = {"gpus": 4, "topology": Topology.ANY, "priority_class": PriorityClass.TRAIN, "time_limit_minutes": 60}


@pytest.fixture
def research(demo_inventory):
    """Research (guaranteed 16, project LLM 8) holds every tray with jobs without a project."""
    pass_cache.forget()
    research = make_department("Research", guaranteed_gpus=16)
    Project.objects.create(department=research, name="LLM", slug="llm", guaranteed_gpus=8)
    trays = free_trays(500)
    assert len(trays) > 4
    for n, tray in enumerate(trays):
        make_job(research, f"np-{n:03d}", trays=[tray], backend_id=f"{700 + n}")
    return research


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_projects_job_reclaiming_its_departments_work_says_of_your_department(research):
    preview = preview_job(department=research, project=Project.objects.get(slug="llm"), **ASKED)
    assert preview.fits and not preview.over_quota and preview.preempts == 1
    [victim] = preview.victims
    assert victim.own_department and (victim.department, victim.project) == ("Research", None)
    words = " ".join(preview.sentences)
    assert f"preempt 1 job of your department: {victim.name} (Research, no project)." in words
    assert "other departments" not in words


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_another_departments_job_reclaiming_borrowed_work_says_of_other_departments(research):
    beta = make_department("Beta", guaranteed_gpus=8)
    preview = preview_job(department=beta, **ASKED)
    assert preview.fits and not preview.over_quota and preview.preempts == 1
    [victim] = preview.victims
    assert not victim.own_department and victim.department == "Research"
    words = " ".join(preview.sentences)
    assert f"preempt 1 borrowed job of other departments: {victim.name} (Research, no project)." in words
    assert "your department" not in words


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_build_job_within_the_guarantee_names_the_borrowed_training_of_its_own_it_displaces(demo_inventory):
    pass_cache.forget()
    vision = make_department("Vision", guaranteed_gpus=8)
    trays = free_trays(500)
    for n, tray in enumerate(trays):
        make_job(vision, f"sweep-{n:03d}", trays=[tray], backend_id=f"{900 + n}")
    asked = {**ASKED, "priority_class": PriorityClass.BUILD}  # 4 GPUs: a whole tray
    preview = preview_job(department=vision, **asked)
    assert preview.fits and not preview.over_quota and preview.preempts == 1
    [victim] = preview.victims
    assert victim.own_work and victim.own_department and victim.department == "Vision"
    words = " ".join(preview.sentences)
    assert f"preempt 1 borrowed training job of your own: {victim.name} (Vision, no project)." in words
    assert "Build and inference work holds the guarantee first" in words
    # Training asked the same way borrows nothing of its own: it waits.
    assert not preview_job(department=vision, **{**asked, "priority_class": PriorityClass.TRAIN}).fits
