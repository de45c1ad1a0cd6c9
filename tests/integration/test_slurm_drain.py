"""Drain, resume and maintenance windows of trays through a real Slurm 24.11 controller (the testbed).

Every fact is read back from slurmctld itself (`scontrol --json show node|reservation`, `squeue`), never
from what Rackplane says it did. Each test leaves every node idle, no job queued and no Rackplane
reservation behind (fixture `slurm_clean`).
"""

from __future__ import annotations

import json
import stat
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from integrations.drain import (
    ALREADY_DRAINED,
    DRAINED,
    DRAINING,
    FAILED,
    NOT_DRAINED,
    NOT_OURS,
    REASON_UPDATED,
    RESERVATION_REMOVED,
    RESERVED,
    RESUMED,
    WOULD_DRAIN,
    WOULD_RESERVE,
    WOULD_RESUME,
    apply_tray_state,
    end_maintenance,
    schedule_maintenance,
)
from integrations.slurm.drain import SlurmDrainer, SlurmNodeUnknown, parse_node_line, reservation_name
from integrations.slurm.target import SlurmTarget, SlurmUnavailable

pytestmark = pytest.mark.integration

REASON = (
    "rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-3f1c9a2e-0b7d-4c55-9e61-1a2b3c4d5e6f "
    "at 2026-11-24T10:00Z"
)


def scontrol(testbed, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([testbed.scontrol, *args], capture_output=True, text=True, check=check)


def node(testbed, host: str) -> dict:
    """The node as slurmctld shows it (not as Rackplane parsed it)."""
    return json.loads(scontrol(testbed, "--json", "show", "node", host).stdout)["nodes"][0]


def reservations(testbed) -> dict[str, dict]:
    shown = json.loads(scontrol(testbed, "--json", "show", "reservation").stdout)
    return {r["name"]: r for r in shown.get("reservations") or []}


def squeue_state(testbed, job_id: str) -> tuple[str, str]:
    out = subprocess.run(
        [str(testbed.bin / "squeue"), "-h", "-j", job_id, "-o", "%T|%r"], capture_output=True, text=True
    ).stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_for(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def sbatch(testbed, *args: str) -> str:
    done = subprocess.run(
        [str(testbed.bin / "sbatch"), "--parsable", *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip().split(";")[0]


@pytest.fixture
def slurm_clean(slurm_testbed):
    """Afterwards: no job, no Rackplane reservation, every node resumed and idle again."""
    yield slurm_testbed
    testbed = slurm_testbed
    if subprocess.run([testbed.scontrol, "ping"], capture_output=True).returncode != 0:
        testbed.control("start-ctld")
    subprocess.run([str(testbed.bin / "scancel"), "--user=root"], capture_output=True)
    subprocess.run([str(testbed.bin / "scancel"), "--user=rackplane"], capture_output=True)
    for name in reservations(testbed):
        scontrol(testbed, "delete", f"ReservationName={name}", check=False)
    for host in testbed.hostnames():
        if {"DRAIN", "DOWN"} & set(node(testbed, host)["state"]):
            scontrol(testbed, "update", f"NodeName={host}", "State=RESUME")

    def all_idle():
        states = subprocess.run(
            [str(testbed.bin / "sinfo"), "-h", "-N", "-o", "%t"], capture_output=True, text=True
        ).stdout.split()
        return states and all(s == "idle" for s in states)

    wait_for(all_idle, "every node idle again", timeout=60)


@pytest.fixture
def drainer(slurm_testbed, slurm_clean) -> SlurmDrainer:
    return SlurmDrainer(slurm=slurm_testbed.target(), name="testbed")


def test_a_drain_carries_rackplanes_reason_stops_placement_and_resume_returns_the_node(
    slurm_testbed, drainer
):
    host = "gb-r01-t03"
    outcome = drainer.drain(host, REASON, owner="rules")

    assert outcome.action == DRAINED and outcome.changed and outcome.ok
    shown = node(slurm_testbed, host)
    assert shown["state"] == ["IDLE", "DRAIN"]
    assert shown["reason"] == REASON
    assert outcome.reason == REASON and outcome.state == "IDLE+DRAIN" and outcome.owner == "root"
    assert outcome.sent == [f"{slurm_testbed.scontrol} update NodeName={host} State=DRAIN 'Reason={REASON}'"]
    # The scheduler places nothing there: a job that asks for this node waits, and slurmctld says why.
    job = sbatch(slurm_testbed, f"--nodelist={host}", "--wrap", "sleep 300")
    time.sleep(2)
    state, why = squeue_state(slurm_testbed, job)
    assert state == "PENDING", why
    assert "ReqNodeNotAvail" in why or "Unavailable" in why or "Resources" in why

    # Draining again with the same reason changes nothing.
    again = drainer.drain(host, REASON)
    assert again.action == ALREADY_DRAINED and not again.changed and again.sent == []

    back = drainer.resume(host)
    assert back.action == RESUMED and back.changed
    assert "DRAIN" not in node(slurm_testbed, host)["state"]
    assert back.sent == [f"{slurm_testbed.scontrol} update NodeName={host} State=RESUME"]
    # ... and the waiting job starts on it.
    wait_for(lambda: squeue_state(slurm_testbed, job)[0] == "RUNNING", "the job to start on the resumed node")

    # Nothing of Rackplane's left to resume (Slurm keeps the old reason text on the idle node: ignored).
    assert drainer.resume(host).action == NOT_DRAINED


def test_an_admins_drain_is_left_alone_and_reported(slurm_testbed, drainer):
    host = "gb-r01-t04"
    scontrol(
        slurm_testbed, "update", f"NodeName={host}", "State=DRAIN", "Reason=admin: fan 3 replaced, burn-in"
    )
    before = node(slurm_testbed, host)

    outcome = drainer.drain(host, REASON)

    assert outcome.action == NOT_OURS and not outcome.changed and outcome.sent == []
    assert outcome.reason == "admin: fan 3 replaced, burn-in" and outcome.owner == "root"
    assert "another owner's reason" in outcome.message and "admin: fan 3 replaced" in outcome.message
    after = node(slurm_testbed, host)
    assert after["reason"] == "admin: fan 3 replaced, burn-in"
    assert after["reason_changed_at"] == before["reason_changed_at"]  # not even rewritten with the same text

    # Rackplane's return to service leaves the admin's drain in place too.
    back = drainer.resume(host)
    assert back.action == NOT_OURS and not back.changed
    assert node(slurm_testbed, host)["state"] == ["IDLE", "DRAIN"]


def test_a_down_node_keeps_slurms_own_reason(slurm_testbed, drainer):
    """A node slurmctld (or an admin) has DOWN with a reason: Rackplane's drain would overwrite the reason,
    so it is left and reported."""
    host = "gb-r01-t05"
    scontrol(slurm_testbed, "update", f"NodeName={host}", "State=DOWN", "Reason=Not responding")

    outcome = drainer.drain(host, REASON)

    assert outcome.action == NOT_OURS
    assert "DOWN" in outcome.state and outcome.reason == "Not responding"
    assert node(slurm_testbed, host)["reason"] == "Not responding"


def test_resume_of_a_node_slurm_also_has_down_clears_only_the_drain(slurm_testbed, drainer):
    """Rackplane drained it, then slurmctld marked it DOWN as well, keeping Rackplane's reason (as it does
    for a drained node whose slurmd stops answering): UNDRAIN clears the drain and leaves the DOWN to Slurm
    (RESUME would force the node back to IDLE)."""
    host = "gb-r01-t14"
    drainer.drain(host, REASON)
    scontrol(slurm_testbed, "update", f"NodeName={host}", "State=DOWN", f"Reason={REASON}")
    assert node(slurm_testbed, host)["state"] == ["DOWN", "DRAIN"]

    outcome = drainer.resume(host)

    assert outcome.action == RESUMED
    assert outcome.sent == [f"{slurm_testbed.scontrol} update NodeName={host} State=UNDRAIN"]
    assert "DRAIN" not in node(slurm_testbed, host)["state"]


def test_a_busy_node_drains_while_its_job_runs_on(slurm_testbed, drainer):
    host = "gb-r01-t06"
    job = sbatch(slurm_testbed, f"--nodelist={host}", "--wrap", "sleep 300")
    wait_for(lambda: squeue_state(slurm_testbed, job)[0] == "RUNNING", "the job to run")

    outcome = drainer.drain(host, REASON)

    assert outcome.action == DRAINING and outcome.changed
    shown = node(slurm_testbed, host)
    assert "DRAIN" in shown["state"] and ("ALLOCATED" in shown["state"] or "MIXED" in shown["state"])
    assert squeue_state(slurm_testbed, job)[0] == "RUNNING"  # draining does not stop the work already there

    # A second fault: Rackplane's own reason is brought up to date (still its drain).
    newer = REASON.replace("XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)", "XID 48 (GPU_ECC_DBE)")
    updated = drainer.drain(host, newer)
    assert updated.action == REASON_UPDATED and node(slurm_testbed, host)["reason"] == newer

    assert drainer.resume(host).action == RESUMED
    assert "DRAIN" not in node(slurm_testbed, host)["state"]


def test_resume_after_asks_slurmctld_to_resume_by_itself(slurm_testbed, drainer):
    host = "gb-r01-t07"
    started = time.time()
    outcome = drainer.drain(host, REASON, resume_after_s=900)

    assert outcome.action == DRAINED
    assert outcome.sent[0].endswith("ResumeAfter=900")
    resume_at = node(slurm_testbed, host)["resume_after"]
    assert resume_at["set"] and started + 880 <= resume_at["number"] <= time.time() + 920


def test_dry_run_runs_nothing_and_says_what_it_would_run(slurm_testbed, slurm_clean, tmp_path):
    """The dry run's scontrol is the real one behind a wrapper that logs each call: nothing is called."""
    calls = tmp_path / "calls.log"
    wrapper = tmp_path / "scontrol"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {slurm_testbed.scontrol} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    drainer = SlurmDrainer(slurm=SlurmTarget(slurm_testbed.conf_dir, str(wrapper)))
    host = "gb-r01-t08"
    start = datetime.now(UTC) + timedelta(hours=1)

    outcomes = [
        drainer.drain(host, REASON, dry_run=True),
        drainer.resume(host, dry_run=True),
        drainer.schedule_maintenance(host, 3, start, start + timedelta(hours=2), "PSU swap", dry_run=True),
    ]

    assert [o.action for o in outcomes] == [WOULD_DRAIN, WOULD_RESUME, WOULD_RESERVE]
    assert all(o.dry_run and not o.changed for o in outcomes)
    assert outcomes[0].sent == [f"{wrapper} update NodeName={host} State=DRAIN 'Reason={REASON}'"]
    assert "ReservationName=rackplane-maint-gb-r01-t08-3" in outcomes[2].sent[0]
    assert "Flags=MAINT,IGNORE_JOBS" in outcomes[2].sent[0]
    assert not calls.exists(), calls.read_text()
    assert node(slurm_testbed, host)["state"] == ["IDLE"]
    assert reservations(slurm_testbed) == {}
    # The same wrapper does log a real run (so the check above is not vacuous).
    assert drainer.drain(host, REASON).action == DRAINED
    assert any(
        line.startswith("update NodeName=gb-r01-t08 State=DRAIN") for line in calls.read_text().splitlines()
    )


def test_a_maintenance_window_is_a_maint_reservation_made_once_moved_and_removed(slurm_testbed, drainer):
    host = "gb-r01-t09"
    name = reservation_name(host, 12)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    end = start + timedelta(hours=2)

    made = drainer.schedule_maintenance(host, 12, start, end, "PSU swap (ticket 4411)")

    assert made.action == RESERVED and made.changed
    shown = reservations(slurm_testbed)[name]
    assert shown["node_list"] == host
    assert {"MAINT", "IGNORE_JOBS"} <= set(shown["flags"])
    assert shown["users"] == "root"
    assert abs(shown["start_time"]["number"] - start.timestamp()) <= 60
    assert abs(shown["end_time"]["number"] - end.timestamp()) <= 60
    text = scontrol(slurm_testbed, "show", "reservation", name).stdout
    assert "Comment=rackplane: PSU swap (ticket 4411)" in text

    again = drainer.schedule_maintenance(host, 12, start, end, "PSU swap (ticket 4411)")
    assert again.action == RESERVED and not again.changed and again.sent == []

    later = start + timedelta(hours=3)
    moved = drainer.schedule_maintenance(host, 12, later, later + timedelta(minutes=30))
    assert moved.changed and moved.sent[0].split()[1:3] == ["update", f"ReservationName={name}"]
    shown = reservations(slurm_testbed)[name]
    assert abs(shown["start_time"]["number"] - later.timestamp()) <= 60
    assert abs(shown["end_time"]["number"] - (later + timedelta(minutes=30)).timestamp()) <= 60

    removed = drainer.end_maintenance(host, 12)
    assert removed.action == RESERVATION_REMOVED and removed.changed
    assert name not in reservations(slurm_testbed)
    gone = drainer.end_maintenance(host, 12)
    assert gone.action == RESERVATION_REMOVED and not gone.changed and "removed already" in gone.message


def test_a_window_that_starts_now_reserves_a_busy_node_without_touching_its_job(slurm_testbed, drainer):
    host = "gb-r01-t10"
    job = sbatch(slurm_testbed, f"--nodelist={host}", "--wrap", "sleep 300")
    wait_for(lambda: squeue_state(slurm_testbed, job)[0] == "RUNNING", "the job to run")
    now = datetime.now(UTC)

    made = drainer.schedule_maintenance(host, "now", now, now + timedelta(minutes=45))

    assert made.action == RESERVED and "StartTime=now" in made.sent[0]
    shown = reservations(slurm_testbed)[reservation_name(host, "now")]
    assert "ACTIVE" in scontrol(slurm_testbed, "show", "reservation", shown["name"]).stdout
    assert squeue_state(slurm_testbed, job)[0] == "RUNNING"  # IGNORE_JOBS: the running job is not in the way


def test_unknown_node_is_said_in_words_and_permanent(slurm_testbed, drainer):
    with pytest.raises(SlurmNodeUnknown, match="does not know a node named gb-r01-t99") as caught:
        drainer.drain("gb-r01-t99", REASON)
    assert not caught.value.transient
    with pytest.raises(SlurmNodeUnknown):
        drainer.resume("gb-r01-t99")
    with pytest.raises(SlurmNodeUnknown):
        drainer.schedule_maintenance(
            "gb-r01-t99", 1, datetime.now(UTC), datetime.now(UTC) + timedelta(hours=1)
        )


def test_the_one_line_form_reads_the_same_as_json(slurm_testbed, drainer):
    """Controllers without the JSON plugin: `show node -o` says the same (reason with spaces, quotes)."""
    host = "gb-r01-t11"
    reason = 'rackplane: check "dcgmi diag -r 2" failed (exit 1) [run 3]'
    drainer.drain(host, reason)
    line = parse_node_line(scontrol(slurm_testbed, "show", "node", "-o", host).stdout)
    parsed = drainer.read_node(host)
    assert line.flags == parsed.flags == ("IDLE", "DRAIN")
    assert line.reason == parsed.reason == reason
    assert line.reason_by == parsed.reason_by == "root"


@pytest.mark.django_db
def test_apply_tray_state_goes_through_every_enabled_slurm_target(slurm_testbed, slurm_clean):
    from integrations.models import ConfigTarget

    ConfigTarget.objects.create(
        name="testbed",
        kind="slurm",
        settings={"config_dir": str(slurm_testbed.conf_dir), "scontrol": slurm_testbed.scontrol},
    )
    ConfigTarget.objects.create(
        name="old-cluster",
        kind="slurm",
        enabled=False,
        settings={"config_dir": "/nonexistent", "scontrol": "/nonexistent/scontrol"},
    )
    host = "gb-r01-t12"

    drained = apply_tray_state(host, "needs_service", "needs service: 3 faults in 7 days", owner="rules")

    assert [(o.target, o.kind, o.action) for o in drained] == [("testbed", "slurm", DRAINED)]
    assert node(slurm_testbed, host)["reason"] == "rackplane: needs service: 3 faults in 7 days"

    start = datetime.now(UTC) + timedelta(days=1)
    window = schedule_maintenance(host, 7, start, start + timedelta(hours=4), "RMA swap")
    assert [o.action for o in window] == [RESERVED]
    assert reservation_name(host, 7) in reservations(slurm_testbed)
    assert [o.action for o in end_maintenance(host, 7)] == [RESERVATION_REMOVED]

    back = apply_tray_state(host, "up", owner="alice")
    assert [o.action for o in back] == [RESUMED]
    assert "DRAIN" not in node(slurm_testbed, host)["state"]

    unknown = apply_tray_state("gb-r09-t01", "drain", "XID 79")
    assert [(o.action, o.transient) for o in unknown] == [(FAILED, False)]
    assert "does not know a node named gb-r09-t01" in unknown[0].message


@pytest.mark.django_db
def test_controller_down_is_transient_and_said_in_words(slurm_testbed, slurm_clean):
    from integrations.models import ConfigTarget

    ConfigTarget.objects.create(
        name="testbed",
        kind="slurm",
        settings={"config_dir": str(slurm_testbed.conf_dir), "scontrol": slurm_testbed.scontrol},
    )
    slurm_testbed.control("stop-ctld")
    try:
        outcomes = apply_tray_state("gb-r01-t13", "drain", "XID 79 on GPU-x")
        with pytest.raises(SlurmUnavailable):
            SlurmDrainer(slurm=slurm_testbed.target()).resume("gb-r01-t13")
    finally:
        slurm_testbed.control("start-ctld")
    assert [(o.action, o.transient) for o in outcomes] == [(FAILED, True)]
    assert "slurmctld did not answer" in outcomes[0].message
    assert "Unable to contact slurm controller" in outcomes[0].message
    assert "retry later" in outcomes[0].message
    # Nothing happened while it was down, and a retry now does it.
    assert "DRAIN" not in node(slurm_testbed, "gb-r01-t13")["state"]
    assert [o.action for o in apply_tray_state("gb-r01-t13", "drain", "XID 79 on GPU-x")] == [DRAINED]
