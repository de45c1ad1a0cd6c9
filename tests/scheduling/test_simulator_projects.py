"""Projects in the trace simulator: a trace replayed as a project of a department keeps its own
guarantee inside the department's (hierarchical fair share), and results.json gives each project's figures.

The hand-made workload, on one rack carved as one 18-tray partition (72 GPUs), every job one tray (4 GPUs):
  vision (project of alpha, guarantee 24): 18 jobs at t=0 for 10,000 s - all 72 GPUs, borrowing 48;
  speech (project of alpha, guarantee 24): 6 jobs at t=1,000 for 1,000 s - exactly its guarantee;
  beta (a department, guarantee 24): 6 jobs at t=5,000 for 1,000 s - exactly its guarantee.
With projects, speech's jobs are in quota in its own right: reclaim takes 24 GPUs back from its sibling
vision at once, and beta's likewise from vision at 5,000; vision never falls below its own 24. Replayed
flat (vision and speech one department alpha of 48), speech's jobs are over alpha's quota (alpha holds 72)
and wait until vision's jobs end: the project's guarantee is what makes the difference.
"""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduling import simulator, whatif_runs
from scheduling.engine.placement import RACKPLANE
from scheduling.models import Job
from scheduling.simulator import SimulationError
from scheduling.whatif import History, HistoryJob, Tray, carve, history, replay
from tenancy.models import Project
from tests.factories import make_department

VISION = [(f"v{i}", 0, 10_000, 4) for i in range(18)]
SPEECH = [(f"s{i}", 1_000, 1_000, 4) for i in range(6)]
BETA = [(f"b{i}", 5_000, 1_000, 4) for i in range(6)]
GUARANTEES = {"vision": 24, "speech": 24, "beta": 24}
PROJECTS = {"vision": "alpha", "speech": "alpha"}


def write_trace(path: Path, rows) -> Path:
    lines = ["job_id,submission_time,duration,num_gpu"] + [",".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def waits(run: simulator.PolicyRun, traces) -> dict[str, float]:
    jobs = sorted((job for trace in traces for job in trace.jobs), key=lambda j: (j.submitted_at, j.id))
    return {job.name: wait for job, wait in zip(jobs, run.waits, strict=True)}


@pytest.fixture
def traces(tmp_path):
    return simulator.load_traces(
        [
            write_trace(tmp_path / "vision.csv", VISION),
            write_trace(tmp_path / "speech.csv", SPEECH),
            write_trace(tmp_path / "beta.csv", BETA),
        ]
    )


def test_each_project_of_a_department_gets_its_own_guarantee(traces):
    run = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=GUARANTEES, projects=PROJECTS)
    wait = waits(run, traces)
    assert all(wait[f"s{i}"] == 0 for i in range(6))  # speech reclaims from its sibling at once
    assert all(wait[f"b{i}"] == 0 for i in range(6))  # beta reclaims from alpha's borrowed GPUs
    m = run.metrics
    projects = m["projects"]
    assert set(projects) == {"vision", "speech"}
    for name in ("vision", "speech"):
        assert projects[name]["department"] == "alpha"
        assert projects[name]["guaranteed_gpus"] == 24
        assert projects[name]["guarantee_met"] == 1.0  # held its guarantee whenever it asked
        assert projects[name]["guarantee_shortfall_gpu_s"] == 0.0
    # speech held 24 GPUs from 1,000 to 2,000 (all of it within its guarantee); vision, preempted twice over,
    # never below its own 24 (it was owed 24 and held at least that the whole time).
    assert projects["speech"]["in_quota_gpu_hours"] == round(24 * 1_000 / 3600, 1)
    assert m["preemptions"] == 12  # 6 of vision's jobs for speech, then 6 more for beta
    assert "beta" in m["departments"] and "beta" not in projects


def test_without_projects_the_same_work_waits_behind_its_department(traces, tmp_path):
    """The contrast: vision's and speech's jobs as one department alpha (guarantee 48, the sum)."""
    flat = simulator.load_traces(
        [write_trace(tmp_path / "alpha.csv", VISION + SPEECH), write_trace(tmp_path / "beta.csv", BETA)]
    )
    run = simulator.simulate(flat, 1, "1x18", RACKPLANE, guarantees={"alpha": 48, "beta": 24})
    wait = waits(run, flat)
    assert min(wait[f"s{i}"] for i in range(6)) > 0  # over alpha's quota: it waits for GPUs to free
    assert "projects" not in run.metrics


def test_run_passes_projects_to_every_policy_and_describes_them(traces):
    results, _ = simulator.run(traces, 1, "1x18", guarantees=GUARANTEES, projects=PROJECTS)
    assert results["config"]["projects"] == PROJECTS
    described = {d["name"]: d.get("project_of") for d in results["config"]["departments"]}
    assert described == {"vision": "alpha", "speech": "alpha", "beta": None}
    for policy, figures in results["policies"].items():
        assert figures["projects"]["speech"]["guarantee_met"] == 1.0, policy
        assert figures["projects"]["speech"]["guarantee_shortfall_gpu_s"] == 0.0, policy


def test_a_project_of_an_unknown_trace_or_of_a_trace_is_refused(traces):
    with pytest.raises(SimulationError, match="nosuch: no such trace"):
        simulator.run(traces, 1, "1x18", guarantees=GUARANTEES, projects={"nosuch": "alpha"})
    with pytest.raises(SimulationError, match="beta: a trace's own"):
        simulator.run(traces, 1, "1x18", guarantees=GUARANTEES, projects={"vision": "beta"})


def test_the_command_takes_projects_and_writes_their_figures(traces, tmp_path):
    out = tmp_path / "results.json"
    args = [
        *("--trace", str(tmp_path / "vision.csv"), "--trace", str(tmp_path / "speech.csv")),
        *("--trace", str(tmp_path / "beta.csv"), "--racks", "1", "--layout", "1x18"),
        *("--policy", RACKPLANE, "--out", str(out), "--workers", "1"),
        *("--guarantee", "vision=24", "--guarantee", "speech=24"),
        *("--project", "vision=alpha", "--project", "speech=alpha"),
    ]
    call_command("simulate", *args, stdout=StringIO(), stderr=StringIO())
    results = json.loads(out.read_text())
    assert "--project vision=alpha --project speech=alpha" in results["config"]["command"]
    speech = results["policies"][RACKPLANE]["projects"]["speech"]
    assert speech["department"] == "alpha" and speech["guarantee_met"] == 1.0

    with pytest.raises(CommandError, match="write TRACE=DEPARTMENT"):
        call_command("simulate", *[a if a != "speech=alpha" else "speech" for a in args], stdout=StringIO())


# --- the what-if replays the portal's projects ------------------------------------------------------------

HOUR = 3600.0
START = 1_000_000.0


def row(pk, department, project="", *, submitted_h=0.0, ran_h=1.0, gpus=4):
    return HistoryJob(
        id=pk,
        name=f"job-{pk}",
        department=department,
        gpus=gpus,
        state="completed",
        submitted_at=START + submitted_h * HOUR,
        started_at=START + submitted_h * HOUR,
        finished_at=START + (submitted_h + ran_h) * HOUR,
        project=project,
    )


def test_the_what_if_history_replays_each_project_with_its_guarantee():
    rows = [
        row(1, "alpha", "vision"),
        row(2, "alpha", "speech"),
        row(3, "alpha"),  # no project: one more leaf of alpha
        row(4, "beta"),
        row(5, "beta", "gone"),  # a project the portal no longer has: the department's work
    ]
    guarantees = {"alpha": 48, "beta": 24}
    projects = {"alpha/vision": 24, "alpha/speech": 16, "alpha/idle": 4}
    result = history(rows, START, START + 24 * HOUR, guarantees, projects=projects)
    assert {job.name: job.department for job in result.jobs} == {
        "job-1": "alpha/vision",
        "job-2": "alpha/speech",
        "job-3": "alpha/(no project)",
        "job-4": "beta",
        "job-5": "beta",
    }
    # The no-project leaf has what alpha's projects (idle ones included, as the engine counts) leave.
    assert result.guarantees == {
        "alpha/(no project)": 4,
        "alpha/speech": 16,
        "alpha/vision": 24,
        "beta": 24,
    }
    assert result.projects == {
        "alpha/(no project)": "alpha",
        "alpha/speech": "alpha",
        "alpha/vision": "alpha",
    }
    assert History.from_json(json.loads(json.dumps(result.to_json()))).projects == result.projects


def test_the_what_if_replay_honours_a_projects_guarantee_against_its_sibling():
    """The module docstring's workload as portal history: vision's 18 one-tray jobs fill the rack, speech's
    6 arrive an hour later and reclaim their project's 24 GPUs from their sibling at once."""
    rows = [row(i, "alpha", "vision", ran_h=10, gpus=4) for i in range(18)]
    rows += [row(100 + i, "alpha", "speech", submitted_h=1, ran_h=1, gpus=4) for i in range(6)]
    trays = [Tray(f"r1-t{slot:02d}", "r1", slot, "default") for slot in range(1, 19)]
    projects = {"alpha/vision": 24, "alpha/speech": 24}
    with_projects = history(rows, START, START + 24 * HOUR, {"alpha": 48}, projects=projects)
    figures = replay(with_projects, carve(trays))
    assert figures["preemptions"] == 6  # six of vision's borrowed jobs give way to speech's in-quota ones
    assert figures["guarantee_shortfall_gpu_s"] == 0.0

    flat = history(rows, START, START + 24 * HOUR, {"alpha": 48})  # the same jobs, projects unknown
    figures = replay(flat, carve(trays))
    assert figures["preemptions"] == 0  # speech's jobs are over alpha's quota: they wait for vision's
    assert figures["avg_wait_s"] > 0


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_what_if_reads_each_jobs_project_and_the_projects_guarantees(demo_inventory):
    alpha = make_department("Alpha", guaranteed_gpus=48)
    vision = Project.objects.create(department=alpha, name="Vision", slug="vision", guaranteed_gpus=32)
    now = timezone.now()
    for name, project in (("train-v", vision), ("train-none", None)):
        job = Job.objects.create(
            department=alpha,
            project=project,
            name=name,
            gpus=8,
            state="completed",
            placed_at=now - timedelta(hours=5),
            started_at=now - timedelta(hours=5),
            finished_at=now - timedelta(hours=4),
            time_limit_minutes=120,
        )
        Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(hours=6))
    result = whatif_runs.history(7, now)
    assert {job.name: job.department for job in result.jobs} == {
        "train-v": "alpha/vision",
        "train-none": "alpha/(no project)",
    }
    assert result.guarantees == {"alpha/vision": 32, "alpha/(no project)": 16}
    assert result.projects == {"alpha/vision": "alpha", "alpha/(no project)": "alpha"}
