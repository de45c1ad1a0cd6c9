"""The portal's preemption bounds (RACKPLANE_MIN_RUNTIME_MINUTES, RACKPLANE_PREEMPT_AFTER_MINUTES): the pass
and the job form's preview decide by the same rules (scheduling.pass_inputs.engine_options), and both say
when the waiting job may preempt; a wrong setting is a start-up error (scheduling.checks)."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.utils import timezone

from scheduling import pass_cache
from scheduling.choices import JobState, PriorityClass, Topology
from scheduling.models import Job
from scheduling.pass_inputs import engine_options
from scheduling.preview import preview_job
from scheduling.services.passes import run_pass
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

ASKED = {"gpus": 4, "topology": Topology.ANY, "priority_class": PriorityClass.TRAIN, "time_limit_minutes": 60}


def borrowers(minutes_ago: float):
    """Research (guaranteed nothing) borrows every tray with jobs started `minutes_ago`; Beta is owed 8."""
    pass_cache.forget()
    research = make_department("Research", guaranteed_gpus=0)
    started = timezone.now() - timedelta(minutes=minutes_ago)
    for n, tray in enumerate(free_trays(500)):
        make_job(research, f"borrow-{n:03d}", trays=[tray], backend_id=f"{700 + n}", started_at=started)
    assert Job.objects.filter(over_quota=True).count() == Job.objects.count() > 4
    return make_department("Beta", guaranteed_gpus=8)


def test_the_settings_become_the_engines_options(settings):
    assert engine_options() == {}
    settings.RACKPLANE_MIN_RUNTIME_MINUTES = {"train": "30", "build": "0"}
    settings.RACKPLANE_PREEMPT_AFTER_MINUTES = "10"
    assert engine_options() == {"min_runtime_s": {"train": 1800.0}, "preempt_after_s": 600.0}


@pytest.mark.parametrize(
    ("min_runtime", "grace", "message"),
    [
        ({"trian": "30"}, "0", "names 'trian', which is no priority class"),
        ({"train": "half an hour"}, "0", "gives 'train' 'half an hour': whole minutes >= 0"),
        ({}, "-5", "RACKPLANE_PREEMPT_AFTER_MINUTES is '-5': whole minutes >= 0"),
    ],
)
def test_a_wrong_setting_stops_the_start(settings, min_runtime, grace, message):
    settings.RACKPLANE_MIN_RUNTIME_MINUTES = min_runtime
    settings.RACKPLANE_PREEMPT_AFTER_MINUTES = grace
    with pytest.raises(SystemCheckError, match=message):
        call_command("check")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_young_borrowers_are_not_reclaimed_and_the_preview_and_the_pass_say_when(demo_inventory, settings):
    beta = borrowers(minutes_ago=5)
    settings.RACKPLANE_MIN_RUNTIME_MINUTES = {"train": "30"}
    preview = preview_job(department=beta, **ASKED)
    assert not preview.fits and preview.preempts == 0
    words = " ".join(preview.sentences)
    assert (
        "borrowed work could make room, but that work has not run its minimum run time yet: it may " in words
    )
    assert "preempt in about 25 min." in words

    waiting = make_job(beta, "owed", state=JobState.PENDING, gpus=4, topology=Topology.ANY)
    run_pass()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING
    assert "has not run its minimum run time yet: it may preempt in about 25 min" in waiting.pending_reason
    assert not Job.objects.filter(preemptions__gt=0).exists()

    # Once they have run it, the same pass reclaims.
    Job.objects.filter(department__slug="research").update(started_at=timezone.now() - timedelta(minutes=31))
    run_pass()
    waiting.refresh_from_db()
    assert waiting.state != JobState.PENDING


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_fresh_in_quota_job_preempts_only_after_its_grace(demo_inventory, settings):
    beta = borrowers(minutes_ago=120)
    settings.RACKPLANE_PREEMPT_AFTER_MINUTES = "10"
    words = " ".join(preview_job(department=beta, **ASKED).sentences)
    assert (
        "a job preempts only after waiting about 10 min (the preemption grace): it may preempt in about 10"
        in words
    )

    waiting = make_job(beta, "owed", state=JobState.PENDING, gpus=4, topology=Topology.ANY)
    run_pass()
    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING and "(the preemption grace)" in waiting.pending_reason
    Job.objects.filter(pk=waiting.pk).update(created_at=timezone.now() - timedelta(minutes=11))
    run_pass()
    waiting.refresh_from_db()
    assert waiting.state != JobState.PENDING
    assert Job.objects.filter(department__slug="research", preemptions=1, state=JobState.PENDING).count() == 1
