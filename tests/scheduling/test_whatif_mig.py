"""The what-if of a MIG layout on the site's own history (issue 30): the jobs that asked for MIG slices
replayed as slice requests of their own profile (scheduling.whatif), on the cluster now and with a tray given
a candidate layout (scheduling.whatif_runs.start_mig, its Celery tasks), and `manage.py simulate
--from-history --mig-trays`."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from inventory.models import ComputeTray
from scheduling import tasks, whatif_runs
from scheduling.choices import WhatIfState
from scheduling.engine.mig import GB200_PROFILES
from scheduling.whatif import (
    MIG_FIGURES,
    History,
    HistoryJob,
    Tray,
    WhatIfError,
    carve,
    comparison,
    history,
    profiles_json,
    replay,
)
from tests import factories
from tests.factories import make_department

HOUR = 3600.0
START, END = 1_000_000.0, 1_000_000.0 + 7 * 24 * HOUR
PROFILES = profiles_json(GB200_PROFILES)
ONE_G = {"1g.23gb": 7}
BALANCED = {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}


def slice_job(pk, profile="1g.23gb", slices=1, *, minute=0, ran_h=1.0, department="research"):
    submitted = START + 60 * minute
    return HistoryJob(
        pk,
        f"notebook-{pk}",
        department,
        0,
        "completed",
        submitted,
        submitted,
        submitted + ran_h * HOUR,
        mig_profile=profile,
        mig_slices=slices,
    )


def whole_job(pk, gpus, *, minute=0, ran_h=1.0):
    submitted = START + 60 * minute
    return HistoryJob(
        pk, f"train-{pk}", "research", gpus, "completed", submitted, submitted, submitted + ran_h * HOUR
    )


def trays(count=3):
    """One rack of `count` trays in one NVLink partition."""
    return [Tray(f"gb-t{slot}", "gb-r01", slot, "p1") for slot in range(1, count + 1)]


def mig(*rows):
    return {"profiles": PROFILES, "trays": [list(row) for row in rows]}


# --- the pure part ------------------------------------------------------------------------------------------


def test_a_slice_job_becomes_one_slice_request_of_its_own_profile_per_slice():
    rows = [slice_job(1), slice_job(2, "3g.93gb", 2), whole_job(3, 1)]
    result = history(rows, START, END, {"research": 0})
    asked = sorted((job.id, job.gpus, job.trace_gpus, job.slice) for job in result.jobs)
    # The 2-slice job is two requests: the second takes an id no job row has.
    assert asked == [(1, 1, 1, "1g.23gb"), (2, 1, 1, "3g.93gb"), (3, 1, 1, ""), (4, 1, 1, "3g.93gb")]
    assert "2 jobs asked for MIG slices" in " ".join(result.notes)
    # What the tasks keep between them brings the profiles back.
    again = History.from_json(result.to_json())
    assert [job.slice for job in again.jobs] == [job.slice for job in result.jobs]


def test_slice_jobs_wait_less_with_a_mig_tray_than_as_whole_gpus_on_the_same_trays():
    # 20 one-slice notebooks and a few 1-GPU jobs on 3 trays (12 GPUs): as whole GPUs most of them queue;
    # with one tray carved in seven 1g.23gb per GPU (28 instances) every notebook starts at once.
    rows = [slice_job(pk, minute=pk) for pk in range(1, 21)]
    rows += [whole_job(pk, 1, minute=pk) for pk in range(21, 25)]
    replayed = history(rows, START, END, {"research": 0})
    specs = carve(trays())
    now = replay(replayed, specs, mig=mig())
    candidate = replay(replayed, specs, mig=mig(["gb-t3", "all-1g.23gb", ONE_G]))
    assert now["small_jobs"] == candidate["small_jobs"] == 24
    assert now["slice_jobs"] == 0 and now["slice_utilization"] is None  # no MIG GPU: nothing to use
    assert candidate["slice_jobs"] == 20 and candidate["mig_trays"] == 1 and candidate["mig_gpus"] == 4
    assert now["small_avg_wait_s"] > 0.25 * HOUR
    assert candidate["small_avg_wait_s"] < now["small_avg_wait_s"] / 2
    assert 0 < candidate["slice_utilization"] < 1
    rows = {row["key"]: row for row in comparison([("now", now), ("candidate", candidate)], MIG_FIGURES)}
    assert rows["small_avg_wait_s"]["cells"][1]["verdict"] == "better"
    assert rows["slice_utilization"]["cells"][0]["text"] == "n/a"


def test_a_layout_that_leaves_large_requests_waiting_strands_the_small_instances():
    # Eight 3g.93gb jobs at once: all-balanced has one 3g per GPU, so four wait while each GPU's 1g, 1g and
    # 2g (4 compute slices) sit free and useless to them; all-3g.93gb hosts all eight.
    rows = [slice_job(pk, "3g.93gb", minute=pk) for pk in range(1, 9)]
    replayed = history(rows, START, END, {"research": 0})
    specs = carve(trays())
    balanced = replay(replayed, specs, mig=mig(["gb-t3", "all-balanced", BALANCED]))
    threes = replay(replayed, specs, mig=mig(["gb-t3", "all-3g.93gb", {"3g.93gb": 2}]))
    assert balanced["avg_stranded_slices"] > 0 and balanced["slice_avg_wait_s"] > 0
    assert threes["avg_stranded_slices"] == 0 and threes["slice_avg_wait_s"] == 0
    # A layout with no instance a job's profile fits says so instead of waiting for ever.
    with pytest.raises(WhatIfError, match=r"no instance of the MIG trays can host 3g\.93gb"):
        replay(replayed, specs, mig=mig(["gb-t3", "all-1g.23gb", ONE_G]))


def test_a_mig_tray_keeps_multi_tray_jobs_off_it():
    # An 8-GPU job (2 trays) and two 4-GPU jobs on 3 trays: with every tray whole one 4-GPU job runs beside
    # the gang; with one tray in MIG mode the gang takes the two whole trays and both 4-GPU jobs wait.
    rows = [whole_job(1, 8, minute=0, ran_h=2), whole_job(2, 4, minute=1, ran_h=2), whole_job(3, 4, minute=2)]
    replayed = history(rows, START, END, {"research": 0})
    specs = carve(trays())
    now = replay(replayed, specs, mig=mig())
    candidate = replay(replayed, specs, mig=mig(["gb-t3", "all-balanced", BALANCED]))
    assert now["multi_tray_avg_wait_s"] == 0
    assert candidate["multi_tray_avg_wait_s"] == 0  # the 8-GPU job still fits the two whole trays
    assert candidate["small_avg_wait_s"] is None and candidate["avg_wait_s"] > now["avg_wait_s"]
    # A MIG tray in no partition of the layout is left out, with a note.
    other = replay(replayed, specs, mig=mig(["gb-t9", "all-balanced", BALANCED]))
    assert other["mig_trays"] == 0 and "gb-t9: in no NVLink partition" in other["notes"][0]


# --- from the database: the job rows, a run's tasks, the command --------------------------------------------


@pytest.fixture
def busy_site(demo_inventory):
    """The demo's 3 racks (216 GPUs) nearly full for 3 hours with one 208-GPU job, 24 notebooks of one
    1g.23gb slice each submitted meanwhile, and gb-r02-t17 already in MIG mode (all-balanced: its 16
    instances hold 16 notebooks at once)."""
    research = make_department("Research", guaranteed_gpus=96)
    factories.finished_job(research, "train-wide", gpus=208, ago=timedelta(hours=4), ran=timedelta(hours=3))
    for k in range(24):
        factories.finished_job(
            research,
            f"notebook-{k}",
            mig_profile="1g.23gb",
            mig_slices=1,
            ago=timedelta(minutes=230 - k),
            ran=timedelta(hours=1),
        )
    factories.mig_tray("gb-r02-t17")
    return research


@pytest.mark.django_db
def test_the_history_reads_each_jobs_mig_profile_and_slices(busy_site):
    factories.finished_job(
        busy_site,
        "pair",
        mig_profile="2g.47gb",
        mig_slices=2,
        ago=timedelta(minutes=30),
        ran=timedelta(hours=1),
    )
    replayed = whatif_runs.history(7)
    sliced = [job for job in replayed.jobs if job.slice]
    assert len(sliced) == 26
    assert sorted({job.slice for job in sliced}) == ["1g.23gb", "2g.47gb"]
    assert [job.gpus for job in replayed.jobs if job.name == "train-wide"] == [208]


@pytest.mark.django_db
def test_a_mig_what_if_replays_the_cluster_now_and_the_tray_with_the_layout(busy_site, admin_user):
    tray = ComputeTray.objects.get(hostname="gb-r03-t18")
    layout, profiles = whatif_runs.tray_mig_choice(tray, "all-1g.23gb")
    run = whatif_runs.start_mig(admin_user, 7, tray, layout, profiles)
    assert run.tray == "gb-r03-t18"
    now_layout, candidate_layout = run.layouts.order_by("position")
    # The cluster now keeps its MIG tray; the candidate adds this one with its layout.
    assert [row[0] for row in now_layout.mig["trays"]] == ["gb-r02-t17"]
    assert [row[:2] for row in candidate_layout.mig["trays"]] == [
        ["gb-r02-t17", "all-balanced"],
        ["gb-r03-t18", "all-1g.23gb"],
    ]
    tasks.whatif_prepare.delay(run.pk)
    run.refresh_from_db()
    assert run.state == WhatIfState.DONE, [layout.error for layout in run.layouts.all()]
    now_layout.refresh_from_db()
    candidate_layout.refresh_from_db()
    now, candidate = now_layout.figures, candidate_layout.figures
    assert (now["mig_gpus"], candidate["mig_gpus"]) == (4, 8)
    assert now["slice_jobs"] == candidate["slice_jobs"] == 24
    # Seven more instances per GPU: the notebooks that queued for all-balanced's 16 instances do not.
    assert candidate["small_avg_wait_s"] < now["small_avg_wait_s"]
    progress = whatif_runs.progress(run)
    assert [row["key"] for row in progress.rows] == [key for key, *_ in MIG_FIGURES]


@pytest.mark.django_db
def test_turning_mig_off_is_a_candidate_too(busy_site, admin_user):
    tray = ComputeTray.objects.get(hostname="gb-r02-t17")
    layout, profiles = whatif_runs.tray_mig_choice(tray, "all-disabled")
    run = whatif_runs.start_mig(admin_user, 7, tray, layout, profiles)
    assert run.layouts.get(position=1).mig["trays"] == []
    tasks.whatif_prepare.delay(run.pk)
    candidate = run.layouts.get(position=1)
    assert candidate.state == WhatIfState.DONE and candidate.figures["mig_gpus"] == 0
    assert candidate.figures["slice_utilization"] is None


@pytest.mark.django_db
def test_a_tray_whose_gpus_reported_no_profiles_offers_no_what_if(demo_inventory):
    with pytest.raises(WhatIfError, match="reported its MIG profiles yet"):
        whatif_runs.tray_mig_choice(ComputeTray.objects.get(hostname="gb-r03-t18"), "all-balanced")


@pytest.mark.django_db
def test_simulate_from_history_compares_a_mig_layout_on_the_last_trays_of_each_rack(busy_site):
    out = StringIO()
    call_command(
        "simulate",
        "--from-history",
        "7",
        "--mig-trays",
        "1",
        "--mig-layout",
        "all-1g.23gb",
        stdout=out,
        stderr=StringIO(),
    )
    text = out.getvalue()
    assert "gb-r01-t18, gb-r02-t18, gb-r03-t18 with all-1g.23gb" in text
    assert "Average wait, jobs of 1 GPU or smaller" in text and "Stranded slices (average)" in text
    assert "better" not in text  # the plain-text table gives the differences as numbers
    for args, words in [
        (["--mig-trays", "1", "--slice-share", "0.5"], "--slice-share do not apply"),
        (["--mig-trays", "1", "--mig-guarantees", "whole-work"], "--mig-guarantees do not apply"),
        (["--mig-trays", "1", "--carve", "gb-r01=2x9"], "not both"),
        (["--mig-trays", "0"], "give 1-17 trays per rack"),
        (["--mig-trays", "1", "--mig-layout", "all-7g.999gb"], "is not a layout these GPUs allow"),
    ]:
        with pytest.raises(CommandError, match=words):
            call_command("simulate", "--from-history", "7", *args, stdout=StringIO(), stderr=StringIO())
