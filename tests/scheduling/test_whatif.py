"""The what-if. Its pure part (scheduling.whatif, no database): job rows -> the replay's input, layouts laid
over the cluster's trays, the replay through the simulator and the comparison. Then from the database
(scheduling.whatif_runs): the history read from job rows and events, a run's Celery tasks (one per layout),
and `manage.py simulate --from-history`."""

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from celery.signals import task_prerun
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduling import tasks, whatif_runs
from scheduling.choices import JobEventKind, WhatIfState
from scheduling.engine.cluster import Cluster
from scheduling.models import Job, JobEvent, WhatIfRun
from scheduling.whatif import (
    FIGURES,
    Carving,
    History,
    HistoryJob,
    Tray,
    WhatIfError,
    carve,
    comparison,
    comparison_text,
    fit_guarantees,
    history,
    replay,
    run_time,
)
from tests.factories import make_department

HOUR = 3600.0
START, END = 1_000_000.0, 1_000_000.0 + 7 * 24 * HOUR  # a 7-day window


def job(
    pk,
    state="completed",
    *,
    department="research",
    gpus=8,
    submitted=None,
    started=None,
    finished=None,
    limit_h=12.0,
    earlier=0.0,
):
    submitted = START + HOUR * pk if submitted is None else submitted
    return HistoryJob(
        id=pk,
        name=f"train-job-{pk:04d}",
        department=department,
        gpus=gpus,
        state=state,
        submitted_at=submitted,
        started_at=started,
        finished_at=finished,
        time_limit_s=limit_h * HOUR,
        earlier_run_s=earlier,
    )


def by_id(result: History) -> dict:
    return {j.id: j for j in result.jobs}


# --- run times ---------------------------------------------------------------------------------------------


def test_a_finished_job_runs_for_the_time_it_ran_plus_its_runs_before_preemptions():
    t = START + 10 * HOUR
    done = job(1, started=t, finished=t + 3 * HOUR)
    failed = job(2, "failed", started=t, finished=t + 600)
    cancelled = job(3, "cancelled", started=t, finished=t + 2 * HOUR)
    preempted = job(4, started=t, finished=t + HOUR, earlier=1800)
    assert run_time(done, END) == 3 * HOUR
    assert run_time(failed, END) == 600
    assert run_time(cancelled, END) == 2 * HOUR  # cancelled jobs count with the time they ran
    assert run_time(preempted, END) == HOUR + 1800


def test_jobs_that_never_ran_are_left_out_and_said_so():
    never = job(1, "cancelled", finished=START + 2 * HOUR)  # cancelled while it waited
    failed_early = job(2, "failed", finished=START + 3 * HOUR)
    ran = job(3, started=START + 4 * HOUR, finished=START + 5 * HOUR)
    result = history([never, failed_early, ran], START, END, {"research": 64})
    assert [j.id for j in result.jobs] == [3]
    assert any("2 jobs cancelled or failed before starting: left out" in note for note in result.notes)


def test_a_running_job_runs_for_its_time_limit_or_for_what_it_has_run_if_longer():
    young = job(1, "running", started=END - HOUR, limit_h=12)
    overdue = job(2, "running", started=END - 20 * HOUR, limit_h=12)  # past its limit (a clock, a drain)
    starting = job(3, "starting", started=END - 60, limit_h=2)
    assert run_time(young, END) == 12 * HOUR
    assert run_time(overdue, END) == 20 * HOUR
    assert run_time(starting, END) == 2 * HOUR
    result = history([young, overdue], START, END, {"research": 64})
    assert [j.duration_s for j in result.jobs] == [12 * HOUR, 20 * HOUR]
    assert any("2 running jobs, 0 waiting jobs" in note for note in result.notes)


def test_a_waiting_job_runs_for_its_time_limit():
    waiting = job(1, "pending", limit_h=6)
    result = history([waiting], START, END, {"research": 64})
    assert result.jobs[0].duration_s == 6 * HOUR
    assert any("1 waiting job." in note for note in result.notes)


# --- the window --------------------------------------------------------------------------------------------


def test_the_window_takes_jobs_submitted_in_it_and_those_still_there_when_it_opened():
    before_done = job(1, submitted=START - 10 * HOUR, started=START - 9 * HOUR, finished=START - HOUR)
    still_running = job(2, submitted=START - 10 * HOUR, started=START - 2 * HOUR, finished=START + 3 * HOUR)
    waited_into_it = job(3, submitted=START - 5 * HOUR, started=START + HOUR, finished=START + 2 * HOUR)
    inside = job(4, submitted=START + 5 * HOUR, started=START + 6 * HOUR, finished=START + 8 * HOUR)
    after = job(5, submitted=END + 60, started=END + 120, finished=END + HOUR)
    result = history(
        [before_done, still_running, waited_into_it, inside, after], START, END, {"research": 64}
    )
    jobs = by_id(result)
    assert sorted(jobs) == [2, 3, 4]
    # In the window from its start, with the run time it had left.
    assert jobs[2].submitted_at == START and jobs[2].duration_s == 3 * HOUR
    assert jobs[3].submitted_at == START and jobs[3].duration_s == HOUR
    assert jobs[4].submitted_at == START + 5 * HOUR and jobs[4].duration_s == 2 * HOUR
    assert any("2 jobs submitted before the window were still waiting or running" in n for n in result.notes)


def test_sizes_round_to_whole_trays_and_departments_keep_their_guarantees():
    rows = [
        job(1, gpus=6, started=START + HOUR, finished=START + 2 * HOUR),
        job(2, gpus=2, department="vision", started=START + HOUR, finished=START + 2 * HOUR),
    ]
    result = history(rows, START, END, {"research": 64, "vision": 16, "platform": 8})
    jobs = by_id(result)
    assert (jobs[1].gpus, jobs[1].trace_gpus, jobs[1].trays) == (8, 6, 2)
    assert (jobs[2].gpus, jobs[2].trays) == (2, 1)
    # Only the departments with jobs replay; each with its own guarantee.
    assert result.guarantees == {"research": 64, "vision": 16}
    assert [t.department for t in result.traces()] == ["research", "vision"]


def test_a_huge_window_is_bounded_to_the_most_recent_jobs_with_a_note():
    rows = [job(pk, started=START + pk * HOUR + 60, finished=START + pk * HOUR + 600) for pk in range(1, 51)]
    result = history(rows, START, END, {"research": 64}, max_jobs=20)
    assert [j.id for j in result.jobs] == list(range(31, 51))
    assert result.window_start == result.jobs[0].submitted_at
    assert any("The window holds 50 jobs: the replay takes the most recent 20" in n for n in result.notes)
    # Rows the caller did not read (past the bound, in the database) are counted too.
    fewer = history(rows[-20:], START, END, {"research": 64}, max_jobs=20, older=30)
    assert any("The window holds 50 jobs" in note for note in fewer.notes)


def test_an_empty_window_has_no_jobs_and_no_notes():
    result = history([], START, END, {"research": 64})
    assert result.jobs == [] and result.notes == [] and result.guarantees == {}


def test_the_history_survives_its_json_form():
    rows = [job(1, gpus=6, started=START + HOUR, finished=START + 2 * HOUR), job(2, "pending")]
    result = history(rows, START, END, {"research": 64})
    again = History.from_json(result.to_json())
    assert again.jobs == result.jobs
    assert (again.window_start, again.window_end, again.guarantees, again.notes) == (
        result.window_start,
        result.window_end,
        result.guarantees,
        result.notes,
    )


# --- layouts -----------------------------------------------------------------------------------------------


def rack_trays(rack: str, layout: dict[str, range], owners: dict[str, str] | None = None) -> list[Tray]:
    partition_of = {slot: name for name, slots in layout.items() for slot in slots}
    return [
        Tray(
            f"{rack}-t{slot:02d}",
            rack,
            slot,
            partition_of.get(slot),
            (owners or {}).get(partition_of.get(slot)),
        )
        for slot in range(1, 19)
    ]


def test_carving_a_rack_changes_only_that_rack_and_leaves_out_trays_in_no_partition():
    trays = rack_trays("r1", {"default": range(1, 19)}) + rack_trays(
        "r2", {"p1": range(1, 10), "p2": range(10, 17)}, {"p2": "inference"}
    )
    now = carve(trays)
    assert len(now) == 18 + 16  # r2's slots 17-18 are in no partition
    assert {(s.rack, s.partition, s.owner) for s in now} == {
        ("r1", "default", None),
        ("r2", "p1", None),
        ("r2", "p2", "inference"),
    }
    plan = carve(
        trays, [Carving("r1", (("a", (1, 2, 3, 4, 5, 6), "vision"), ("b", tuple(range(7, 17)), None)))]
    )
    r1 = [(s.hostname, s.partition, s.owner) for s in plan if s.rack == "r1"]
    assert len(r1) == 16 and r1[0] == ("r1-t01", "a", "vision") and r1[-1] == ("r1-t16", "b", None)
    assert [s for s in plan if s.rack == "r2"] == [s for s in now if s.rack == "r2"]
    cluster = Cluster(plan)
    assert cluster.max_partition_trays == 10 and cluster.capacity == 32 * 4


def test_carving_an_unknown_rack_or_slot_says_so():
    trays = rack_trays("r1", {"default": range(1, 19)})
    with pytest.raises(WhatIfError, match="No rack named r9"):
        carve(trays, [Carving("r9", (("p1", (1,), None),))])
    with pytest.raises(WhatIfError, match="r1 has no tray in slot 19"):
        carve(trays, [Carving("r1", (("p1", (18, 19), None),))])


def test_carvings_survive_their_json_form():
    carving = Carving("r1", (("p1", (1, 2), "vision"), ("p2", (3,), None)))
    assert Carving.from_json(carving.to_json()) == carving


def test_guarantees_larger_than_a_layout_are_scaled_down_in_proportion():
    assert fit_guarantees({"a": 40, "b": 20}, 100) == ({"a": 40, "b": 20}, None)
    fitted, note = fit_guarantees({"a": 90, "b": 45, "c": 15}, 100)
    assert fitted == {"a": 60, "b": 30, "c": 10} and sum(fitted.values()) == 100
    assert "add up to 150 GPUs, more than this layout's 100" in note


# --- the replay and the comparison -------------------------------------------------------------------------


def gang_history() -> History:
    """Two racks' worth of 36-GPU gangs (9 trays) and small jobs, two departments, a day."""
    rows = []
    for pk in range(1, 25):
        submitted = START + pk * 1800
        gpus = 36 if pk % 3 else 4
        department = "research" if pk % 2 else "vision"
        rows.append(
            job(
                pk,
                gpus=gpus,
                department=department,
                submitted=submitted,
                started=submitted + 60,
                finished=submitted + 60 + 4 * HOUR,
            )
        )
    return history(rows, START, START + 24 * HOUR, {"research": 72, "vision": 72})


def test_a_layout_whose_partitions_are_too_small_for_the_gangs_loses_locality():
    trays = rack_trays("r1", {"default": range(1, 19)}) + rack_trays("r2", {"default": range(1, 19)})
    thirds = (
        ("p1", tuple(range(1, 7)), None),
        ("p2", tuple(range(7, 13)), None),
        ("p3", tuple(range(13, 19)), None),
    )
    gangs = gang_history()
    now = replay(gangs, carve(trays))
    carved = replay(gangs, carve(trays, [Carving("r1", thirds), Carving("r2", thirds)]), span_slowdown=1.5)
    assert now["jobs"] == carved["jobs"] == 24
    assert now["multi_tray_in_one_partition"] == 1.0  # every 9-tray gang fits one 18-tray partition
    assert carved["multi_tray_in_one_partition"] == 0.0  # no 6-tray partition holds one
    assert carved["avg_jct_s"] > now["avg_jct_s"]  # spread gangs run 1.5x longer
    assert now["layout"] == "2 racks, 2 partitions, 144 GPUs"
    assert carved["layout"] == "2 racks, 6 partitions, 144 GPUs"

    rows = comparison([("The cluster now", now), ("3x6", carved)])
    assert [row["key"] for row in rows] == [key for key, *_ in FIGURES]
    locality = next(row for row in rows if row["key"] == "multi_tray_in_one_partition")
    assert [cell["text"] for cell in locality["cells"]] == ["100.0%", "0.0%"]
    assert locality["cells"][1]["delta"] == "-100.0 pts" and locality["cells"][1]["verdict"] == "worse"
    jct = next(row for row in rows if row["key"] == "avg_jct_s")
    assert jct["cells"][0]["delta"] == "" and jct["cells"][1]["verdict"] == "worse"
    text = comparison_text([("The cluster now", now), ("3x6", carved)])
    assert "The cluster now" in text and "Multi-tray jobs in one partition" in text and "-100.0 pts" in text


def test_a_layout_that_cannot_run_the_history_says_why():
    trays = rack_trays("r1", {"p1": range(1, 10), "p2": range(10, 19)})
    big = history([job(1, gpus=72, started=START + 60, finished=START + HOUR)], START, END, {"research": 72})
    assert replay(big, carve(trays))["jobs"] == 1  # 72 GPUs: the whole rack, across its two partitions
    small = carve(trays, [Carving("r1", (("p1", tuple(range(1, 10)), None),))])
    with pytest.raises(
        WhatIfError, match="has 36 GPUs in its partitions, and 1 job of the history needs more"
    ):
        replay(big, small)
    with pytest.raises(WhatIfError, match="no jobs in the window"):
        replay(history([], START, END, {}), carve(trays))
    with pytest.raises(WhatIfError, match="no tray in any NVLink partition"):
        replay(big, [])


def test_a_layout_that_did_not_finish_shows_as_not_available():
    rows = comparison([("The cluster now", {"avg_wait_s": 3600.0}), ("broken", None)])
    wait = rows[0]
    assert [cell["text"] for cell in wait["cells"]] == ["1.00 h", "n/a"]
    assert wait["cells"][1]["delta"] == ""


# --- from the database: whatif_runs, its tasks and `manage.py simulate --from-history` ---------------------


def db_job(
    department, name, gpus, *, hours_ago, ran_h, state="completed", limit_h=24, preempted_after_h=None
):
    """A job row submitted `hours_ago` that started at once and ran `ran_h` hours (to now if running); with
    `preempted_after_h` it was preempted that long after its first start and started again right away."""
    now = timezone.now()
    submitted = now - timedelta(hours=hours_ago)
    started = submitted + timedelta(minutes=5)
    last_start = started + timedelta(hours=preempted_after_h or 0)
    job = Job.objects.create(
        department=department,
        name=name,
        gpus=gpus,
        state=state,
        placed_at=last_start,
        started_at=last_start,
        finished_at=None if state == "running" else last_start + timedelta(hours=ran_h),
        time_limit_minutes=int(limit_h * 60),
        preemptions=1 if preempted_after_h else 0,
    )
    Job.objects.filter(pk=job.pk).update(created_at=submitted)
    if preempted_after_h:
        JobEvent.objects.create(job=job, kind=JobEventKind.PLACED, at=started)
        JobEvent.objects.create(job=job, kind=JobEventKind.PREEMPTED, at=last_start)
        JobEvent.objects.create(job=job, kind=JobEventKind.PLACED, at=last_start)
    return job


@pytest.fixture
def week(demo_inventory):
    research = make_department("Research", guaranteed_gpus=96)
    vision = make_department("Vision", guaranteed_gpus=48)
    db_job(research, "train-old", 36, hours_ago=10 * 24, ran_h=2)  # before the window
    db_job(research, "train-a", 36, hours_ago=50, ran_h=6, preempted_after_h=2)
    db_job(vision, "train-b", 6, hours_ago=40, ran_h=1.5)
    db_job(vision, "build-c", 2, hours_ago=30, ran_h=0, state="cancelled")  # never started...
    Job.objects.filter(name="build-c").update(placed_at=None, started_at=None)  # ...cancelled while waiting
    db_job(research, "train-d", 72, hours_ago=5, ran_h=0, state="running", limit_h=12)
    return research, vision


@pytest.mark.django_db
def test_the_history_is_read_from_the_job_rows_and_their_preemptions(week):
    result = whatif_runs.history(7)
    jobs = {job.name: job for job in result.jobs}
    assert sorted(jobs) == ["train-a", "train-b", "train-d"]
    assert jobs["train-a"].duration_s == pytest.approx((2 + 6) * HOUR)  # before and after its preemption
    assert (jobs["train-b"].gpus, jobs["train-b"].trace_gpus) == (8, 6)
    assert jobs["train-d"].duration_s == pytest.approx(12 * HOUR)  # running: its time limit
    assert result.guarantees == {"research": 96, "vision": 48}
    assert any("1 job cancelled or failed before starting" in note for note in result.notes)
    with pytest.raises(WhatIfError, match="Replay between 1 and 30 days"):
        whatif_runs.history(31)


@pytest.mark.django_db
def test_a_run_prepares_once_fans_out_one_task_per_layout_and_settles(week, admin_user):
    thirds = Carving(
        "gb-r01",
        (
            ("p1", (1, 2, 3, 4, 5, 6), None),
            ("p2", (7, 8, 9, 10, 11, 12), None),
            ("p3", (13, 14, 15, 16, 17, 18), None),
        ),
    )
    run = whatif_runs.start(admin_user, 7, [("gb-r01 as 3x6", [thirds])], rack="gb-r01")
    assert [(layout.label, layout.state) for layout in run.layouts.all()] == [
        ("The cluster now", WhatIfState.QUEUED),
        ("gb-r01 as 3x6", WhatIfState.QUEUED),
    ]
    started = []

    def record(sender=None, args=(), **_):
        started.append((sender.name, tuple(args)))

    task_prerun.connect(record)  # Celery's own signal: which tasks ran, with what
    try:
        tasks.whatif_prepare.delay(run.pk)  # eager: prepare, then the group's tasks, here
    finally:
        task_prerun.disconnect(record)
    layout_ids = list(run.layouts.values_list("pk", flat=True))
    assert started == [
        ("scheduling.tasks.whatif_prepare", (run.pk,)),
        *(("scheduling.tasks.whatif_replay", (layout_id,)) for layout_id in layout_ids),
    ]
    run.refresh_from_db()
    assert run.state == WhatIfState.DONE and run.jobs == 3 and run.finished_at
    assert {layout.state for layout in run.layouts.all()} == {WhatIfState.DONE}
    # Delivered again, the messages do nothing twice.
    assert tasks.whatif_prepare.delay(run.pk).get() == []
    assert whatif_runs.replay_layout(layout_ids[0]) == "not claimed"
    assert WhatIfRun.objects.get(pk=run.pk).state == WhatIfState.DONE


@pytest.mark.django_db
def test_a_sweep_out_of_bounds_is_refused(week, admin_user):
    with pytest.raises(WhatIfError, match="Replay between 1 and 30 days of history, not 0"):
        whatif_runs.start(admin_user, 0, [])
    many = [(f"candidate {n}", [Carving("gb-r01", (("p1", (1,), None),))]) for n in range(6)]
    with pytest.raises(WhatIfError, match="At most 6 layouts at once"):
        whatif_runs.start(admin_user, 7, many)


@pytest.mark.django_db
def test_simulate_from_history_prints_the_comparison(week, tmp_path):
    out, err = StringIO(), StringIO()
    call_command(
        "simulate",
        "--from-history",
        "7",
        "--carve",
        "gb-r01=3x6",
        "--carve",
        "all=2x9",
        "--out",
        str(tmp_path / "whatif.json"),
        stdout=out,
        stderr=err,
    )
    text = out.getvalue()
    assert "3 jobs of 2 department(s) from the last 7 days, replayed under the rackplane policy:" in text
    assert "The cluster now: 3 racks, 4 partitions, 216 GPUs" in text
    assert "gb-r01 as 3x6: 3 racks, 6 partitions, 216 GPUs" in text
    assert "every rack as 2x9: 3 racks, 6 partitions, 216 GPUs" in text
    for figure in (
        "Average wait",
        "p95 wait",
        "Average JCT",
        "Multi-tray jobs in one partition",
        "Guarantee shortfall",
    ):
        assert figure in text
    assert "gb-r01 as 3x6: replayed in" in err.getvalue()
    saved = json.loads((tmp_path / "whatif.json").read_text())
    assert [layout["label"] for layout in saved["layouts"]] == [
        "The cluster now",
        "gb-r01 as 3x6",
        "every rack as 2x9",
    ]
    assert saved["layouts"][0]["figures"]["jobs"] == 3


@pytest.mark.django_db
def test_simulate_from_history_says_when_there_is_nothing_and_refuses_what_does_not_apply(demo_inventory):
    out = StringIO()
    call_command("simulate", "--from-history", "3", stdout=out)
    assert "No job was submitted or ran in the last 3 days: there is nothing to replay." in out.getvalue()
    for args, words in [
        (["--from-history", "7", "--trace", "x.csv"], "--trace do not apply"),
        (["--from-history", "7", "--carve", "gb-r09=2x9"], "there is no rack gb-r09"),
        (["--from-history", "7", "--carve", "gb-r01=2x8"], "a rack has 18 compute trays"),
        (["--from-history", "0"], "Replay between 1 and 30 days"),
        (["--from-history", "99"], "Replay between 1 and 30 days"),
        (["--from-history", "7", "--mig-trays", "2"], "has reported its MIG profiles yet"),
        (["--carve", "gb-r01=2x9"], "--carve goes with --from-history DAYS"),
        (["--racks", "2"], "the following arguments are required: --trace, --out"),
    ]:
        with pytest.raises(CommandError, match=re.escape(words)):
            call_command("simulate", *args, stdout=StringIO(), stderr=StringIO())


@pytest.mark.django_db
def test_layouts_that_cannot_be_replayed_end_in_words_and_so_does_a_run_with_none_left(week, admin_user):
    gone = Carving("gb-r09", (("p1", tuple(range(1, 19)), None),))  # a rack removed since the preview
    run = whatif_runs.start(admin_user, 7, [("gb-r09 as 1x18", [gone])])
    tasks.whatif_prepare.delay(run.pk)
    run.refresh_from_db()
    assert run.state == WhatIfState.DONE  # the cluster now replayed
    failed = run.layouts.get(position=1)
    assert (failed.state, failed.error) == (WhatIfState.FAILED, "No rack named gb-r09 in the inventory.")

    # A history no layout can run (a job wider than the whole cluster): the run fails, and says why.
    research = week[0]
    db_job(research, "train-too-wide", 288, hours_ago=2, ran_h=1)
    run = whatif_runs.start(admin_user, 7, [])
    tasks.whatif_prepare.delay(run.pk)
    run.refresh_from_db()
    assert (run.state, run.error) == (
        WhatIfState.FAILED,
        "No layout could be replayed: each one says why below.",
    )
    assert "1 job of the history needs more (the largest 288)" in run.layouts.get().error
    progress = whatif_runs.progress(run)
    assert progress.done and progress.rows == [] and progress.stuck == ""
