"""The job form's dry run (scheduling.preview) reads the pass's inputs through the same function as the pass
(scheduling.pass_inputs.gather): for the same database it must decide a job exactly as the next pass does,
with projects and a silent tray in play, and write nothing."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.choices import HealthKind
from inventory.health.rules import seed_default_rules
from inventory.models import ComputeTray, HealthRule
from scheduling import pass_cache
from scheduling.choices import JobState, PriorityClass, Topology
from scheduling.models import Allocation, Job, JobEvent
from scheduling.preview import preview_job
from scheduling.services.passes import run_pass
from tenancy.models import Project
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_preview_places_a_project_job_as_the_pass_then_does_beside_a_silent_tray(demo_inventory):
    """Research splits its guarantee between vision and nlp (8 GPUs each). vision holds every tray but one,
    which is free and silent (its node stopped reporting; the node_silent rule holds it). An nlp job within
    nlp's guarantee cannot go to the silent tray: it reclaims a tray from one of vision's borrowers. The
    preview says so (without a project it would have to borrow and wait; without the silent rule it would
    take the free tray) and the pass then does exactly that."""
    seed_default_rules()
    assert HealthRule.objects.get(kind=HealthKind.NODE_SILENT).enabled
    pass_cache.forget()
    research = make_department("Research", guaranteed_gpus=16)
    vision = Project.objects.create(department=research, name="Vision", slug="vision", guaranteed_gpus=8)
    nlp = Project.objects.create(department=research, name="NLP", slug="nlp", guaranteed_gpus=8)
    silent, *busy = free_trays(200)
    assert len(busy) > 4
    for n, tray in enumerate(busy):
        make_job(research, f"vision-{n}", trays=[tray], project=vision, backend_id=f"{900 + n}")
    ComputeTray.objects.filter(pk=silent.pk).update(last_report_at=timezone.now() - timedelta(minutes=30))
    asked = {
        "department": research,
        "gpus": 4,
        "topology": Topology.ANY,
        "priority_class": PriorityClass.TRAIN,
        "time_limit_minutes": 60,
    }
    before = (Job.objects.count(), Allocation.objects.count(), JobEvent.objects.count())

    preview = preview_job(**asked, project=nlp)

    assert (Job.objects.count(), Allocation.objects.count(), JobEvent.objects.count()) == before
    assert preview.fits and preview.errors == {}
    assert silent.hostname not in preview.trays
    assert (len(preview.trays), preview.preempts, preview.over_quota) == (1, 1, False)

    job = Job.objects.create(name="nlp-0", project=nlp, **asked)
    summary = run_pass()

    job.refresh_from_db()
    assert job.state == JobState.STARTING
    assert (tuple(job.placement), job.over_quota) == (preview.trays, preview.over_quota)
    assert summary.preempted == preview.preempts
    [victim] = Job.objects.filter(project=vision, state=JobState.PENDING)
    assert victim.placement == list(preview.trays)  # the borrower whose tray the preview named
