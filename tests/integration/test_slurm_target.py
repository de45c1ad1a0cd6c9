"""SlurmTarget against a real Slurm 24.11 controller (the testbed scripts/test.sh starts).

Each test leaves the testbed as it found it (fixture `slurm_baseline`): files, running topology, idle nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from integrations.slurm import assoc_mgr
from integrations.slurm.render import ServiceTier
from integrations.slurm.target import (
    PREV_SUFFIX,
    RACKPLANE_CONF,
    TOPOLOGY_CONF,
    SlurmRejected,
    SlurmTarget,
    SlurmUnavailable,
)
from integrations.slurm.topology import parse_show_topology

pytestmark = pytest.mark.integration


def _files(testbed):
    """Every file the target manages, None for one that is not there (topology.yaml on the baseline)."""
    return testbed.target().live_files()


def test_2x9_plan_applied_shows_two_blocks(slurm_testbed, slurm_baseline):
    target = slurm_testbed.target()
    hosts = slurm_testbed.hostnames()
    # With slurmdbd a partition's QOS must exist there, or slurmctld refuses the file (fatal: "Partition
    # batch has an invalid qos").
    for name in ("batch", "inference"):
        assert target.ensure_qos(name, None).applied
    assert not assoc_mgr.wait(target, {"batch": None, "inference": None}, set())
    tiers = [
        ServiceTier("batch", tuple(hosts), qos="batch", default=True),
        ServiceTier("inference", tuple(hosts[9:]), qos="inference", priority_tier=10, max_time_minutes=240),
    ]
    rendered = target.render(slurm_testbed.state([9, 9], tiers))
    assert set(target.diff(rendered)) == {RACKPLANE_CONF, TOPOLOGY_CONF}

    result = target.apply(rendered)

    assert sorted(result.changed) == [RACKPLANE_CONF, TOPOLOGY_CONF]
    assert result.reconfigured
    shown = subprocess.run(
        [slurm_testbed.scontrol, "show", "topology"], capture_output=True, text=True
    ).stdout
    blocks = parse_show_topology(shown)
    assert [(b["name"], b["nodes"], b["size"], b["aggregated"]) for b in blocks] == [
        ("r01p1", "gb-r01-t[01-09]", 9, False),
        ("r01p2", "gb-r01-t[10-18]", 9, False),
        ("r01p[1-2]", "gb-r01-t[01-18]", 18, True),
    ]
    assert [(b.name, len(b.hostnames)) for b in target.read_back()] == [("r01p1", 9), ("r01p2", 9)]
    partitions = target.read_partitions()
    assert partitions["inference"] == set(hosts[9:])
    assert partitions["batch"] == set(hosts)
    # The previous files are kept beside the new ones; pushing the same state again changes nothing.
    kept = (slurm_testbed.conf_dir / (TOPOLOGY_CONF + PREV_SUFFIX)).read_text()
    assert kept == slurm_baseline[0][TOPOLOGY_CONF]
    assert target.diff(rendered) == {}
    again = target.apply(rendered)
    assert again.changed == [] and not again.reconfigured


def test_a_job_of_one_partition_lands_inside_it(slurm_testbed, slurm_baseline):
    """The point of the blocks: a 9-tray job on a 2x9 rack gets the trays of one NVLink partition."""
    target = slurm_testbed.target()
    target.apply(target.render(slurm_testbed.state([9, 9])))
    # Make the blocks uneven first: one job holding three trays of r01p1... (t01-t03)
    sbatch = str(slurm_testbed.bin / "sbatch")
    squeue = str(slurm_testbed.bin / "squeue")
    scancel = str(slurm_testbed.bin / "scancel")
    first = subprocess.run(
        [sbatch, "--parsable", "--nodes=3", "--nodelist=gb-r01-t[01-03]", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    second = subprocess.run(
        [sbatch, "--parsable", "--nodes=9", "--gres=gpu:4", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        deadline = time.monotonic() + 30
        while True:
            out = subprocess.run(
                [squeue, "-h", "-j", second, "-o", "%T %N"], capture_output=True, text=True, check=True
            ).stdout.split()
            if out and out[0] == "RUNNING":
                break
            assert time.monotonic() < deadline, f"the 9-node job did not start: {out}"
            time.sleep(0.5)
        placed = subprocess.run(
            [slurm_testbed.scontrol, "show", "hostnames", out[1]], capture_output=True, text=True, check=True
        ).stdout.split()
        # r01p1 has only 6 free trays, so the job must be all of r01p2, not spread over both partitions.
        assert placed == [f"gb-r01-t{i:02d}" for i in range(10, 19)]
    finally:
        subprocess.run([scancel, first, second], check=False)
        deadline = time.monotonic() + 30
        while subprocess.run([squeue, "-h"], capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline, "jobs did not end"
            time.sleep(0.5)


def test_controller_down_is_unavailable_and_changes_nothing(slurm_testbed, slurm_baseline):
    saved, topology = slurm_baseline
    target = slurm_testbed.target()
    rendered = target.render(slurm_testbed.state([9, 9]))
    slurm_testbed.control("stop-ctld")

    with pytest.raises(SlurmUnavailable) as caught:
        target.apply(rendered)

    assert caught.value.transient
    assert "retry later" in str(caught.value)
    assert _files(slurm_testbed) == saved
    slurm_testbed.control("start-ctld")
    assert target.read_topology() == topology


def test_controller_lost_during_apply_rolls_back(slurm_testbed, slurm_baseline):
    """Past the first ping: the files are written, reconfigure cannot reach slurmctld, they are restored."""
    saved, topology = slurm_baseline
    target = slurm_testbed.target(timeout=60)
    rendered = target.render(slurm_testbed.state([9, 9]))
    slurm_testbed.control("stop-ctld")

    with pytest.raises(SlurmUnavailable) as caught:
        target.apply(rendered, check_controller_first=False)

    assert _files(slurm_testbed) == saved
    assert "restored the previous topology.conf" in str(caught.value)
    slurm_testbed.control("start-ctld")
    assert target.read_topology() == topology


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda files: {RACKPLANE_CONF: files[RACKPLANE_CONF] + "PartitionName=ghosts Nodes=gb-r09-t01\n"},
            "Invalid node names in partition ghosts",
        ),
        (
            lambda files: {RACKPLANE_CONF: files[RACKPLANE_CONF].replace("CPUs=4", "CPUs=4 Bogus=1", 1)},
            "Bogus",
        ),
    ],
    ids=["unknown-node-in-partition", "unknown-node-option"],
)
def test_rejected_config_is_rolled_back(slurm_testbed, slurm_baseline, change, words):
    target = slurm_testbed.target()
    good = target.render(slurm_testbed.state([9, 9]))
    target.apply(good)
    applied_topology = target.read_topology()
    before = _files(slurm_testbed)

    with pytest.raises(SlurmRejected) as caught:
        target.apply({**good, **change(good)})

    assert not caught.value.transient
    assert words in str(caught.value)  # slurmctld's own words, from its log
    assert _files(slurm_testbed) == before
    assert target.read_topology() == applied_topology
    assert target.ping()


def test_read_back_mismatch_is_rolled_back(slurm_testbed, slurm_baseline, conf_copy):
    """A target writing where slurmctld does not read: reconfigure succeeds, the read-back catches it."""
    saved, topology = slurm_baseline
    target = slurm_testbed.target(settle_seconds=1)
    target.config_dir = conf_copy
    rendered = target.render(slurm_testbed.state([9, 9]))

    with pytest.raises(SlurmRejected) as caught:
        target.apply(rendered)

    message = str(caught.value)
    assert "does not run the planned topology" in message
    assert "block r01p1 is missing" in message
    assert (conf_copy / TOPOLOGY_CONF).read_text() == saved[TOPOLOGY_CONF]
    assert _files(slurm_testbed) == saved
    assert target.read_topology() == topology


def test_qos_is_skipped_without_slurmdbd(tmp_path):
    """A cluster without slurmdbd (a stand-in scontrol says so: the testbed has one): nothing is run."""
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'AccountingStorageType   = accounting_storage/none'\n")
    scontrol.chmod(0o755)
    result = SlurmTarget(tmp_path, str(scontrol), sacctmgr=str(tmp_path / "no-sacctmgr")).ensure_qos(
        "dept-a", 16
    )
    assert not result.applied
    assert "no slurmdbd" in result.note


def test_ensure_qos_runs_sacctmgr_against_slurmdbd(slurm_testbed):
    """The sacctmgr path (a target without slurmrestd): a QOS is made, its limit changed, then cleared."""
    target = slurm_testbed.target()
    sacctmgr = [str(slurm_testbed.bin / "sacctmgr"), "-n", "-P", "show", "qos", "name=sacctmgr-qos"]

    for limit, shown in ((16, "gres/gpu=16"), (8, "gres/gpu=8"), (None, "")):
        result = target.ensure_qos("sacctmgr-qos", limit)
        assert result.applied, result.note
        out = subprocess.run([*sacctmgr, "format=name,grptres"], capture_output=True, text=True, check=True)
        assert out.stdout.split() == [f"sacctmgr-qos|{shown}"]


def test_slurmrestd_answers_with_a_jwt(slurm_testbed):
    """The testbed's slurmrestd (JWT auth) lists the fake trays, as the job path will use it."""
    token = subprocess.run(
        [slurm_testbed.scontrol, "token", "username=root", "lifespan=60"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert token.startswith("SLURM_JWT=")
    request = urllib.request.Request(
        os.environ["RACKPLANE_SLURMRESTD_URL"] + "/slurm/v0.0.42/nodes",
        headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token.split("=", 1)[1]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.load(response)
    assert body["errors"] == []
    assert sorted(n["name"] for n in body["nodes"]) == slurm_testbed.hostnames()
    assert {n["gres"] for n in body["nodes"]} == {"gpu:4"}


def test_the_baseline_sees_what_a_test_changes_in_slurmctlds_memory(slurm_testbed, slurm_baseline):
    """`slurm_baseline` skips its reconfigure only when nothing changed: its snapshot of slurmctld sees a
    drained node and a changed partition (changes no file shows), and stays the same when nothing is done.
    What it changed is left for the fixture to undo."""
    from tests.integration.conftest import _slurm_state

    before = _slurm_state(slurm_testbed)
    assert _slurm_state(slurm_testbed) == before
    host = "gb-r01-t18"
    subprocess.run(
        [slurm_testbed.scontrol, "update", f"NodeName={host}", "State=DRAIN", "Reason=baseline check"],
        check=True,
    )
    assert _slurm_state(slurm_testbed) != before
    # Back in service, schedulable; the reason slurmctld keeps from the drain is still a change.
    subprocess.run([slurm_testbed.scontrol, "update", f"NodeName={host}", "State=RESUME"], check=True)
    subprocess.run([slurm_testbed.scontrol, "update", "PartitionName=batch", "MaxTime=60"], check=True)
    changed = _slurm_state(slurm_testbed)
    assert changed != before and "MaxTime=01:00:00" in changed[0]


def test_a_controller_whose_process_is_gone_is_started_again_with_a_warning(slurm_testbed, monkeypatch):
    """The known 24.11.5 crash between two tests (docs/developer/testing.md): the next Slurm test's fixture
    finds no slurmctld process, starts it (a warning with the testbed's status) and the controller answers
    again; an alive controller is left alone; a session's fourth restart fails instead."""
    from tests.integration import conftest

    monkeypatch.setattr(conftest, "_ctld_restarts", [0])
    assert slurm_testbed.ctld_processes()
    assert slurm_testbed.restart_dead_controller() is False

    slurm_testbed.control("kill-ctld")
    assert slurm_testbed.ctld_processes() == []
    with pytest.warns(UserWarning, match="slurmctld's process was gone") as caught:
        assert slurm_testbed.restart_dead_controller() is True
    assert "slurmctld: DOWN (no process)" in str(caught[0].message)
    assert slurm_testbed.target().ping()
    assert conftest._ctld_restarts == [1]

    monkeypatch.setattr(conftest, "_ctld_restarts", [conftest._CTLD_RESTARTS])
    slurm_testbed.control("kill-ctld")
    try:
        with pytest.raises(pytest.fail.Exception, match="failed again after 3 restarts"):
            slurm_testbed.restart_dead_controller()
    finally:
        slurm_testbed.control("start-ctld")
    assert slurm_testbed.target().ping()


def test_a_controller_that_answers_nothing_is_killed_and_started_again(slurm_testbed, monkeypatch):
    """The other 24.11.5 failure (CI on 42c3558): slurmctld alive but answering nothing after a reconfigure
    (here: stopped with SIGSTOP, as alive and as silent). `revive_controller` kills it after its grace and
    starts it again, with a warning; one that answers is left alone."""
    import os
    import signal

    from tests.integration import conftest

    monkeypatch.setattr(conftest, "_ctld_restarts", [0])
    assert slurm_testbed.revive_controller(grace=1) is False
    [pid] = slurm_testbed.ctld_processes()
    os.kill(pid, signal.SIGSTOP)
    try:
        assert not slurm_testbed.target().ping()
        with pytest.warns(UserWarning, match="answered nothing and was killed") as caught:
            assert slurm_testbed.revive_controller(grace=2) is True
        assert "alive but not answering" in str(caught[0].message)
    finally:
        if slurm_testbed.ctld_processes() == [pid]:  # not revived: let it go on
            os.kill(pid, signal.SIGCONT)
    assert pid not in slurm_testbed.ctld_processes()
    assert slurm_testbed.target().ping()
    assert conftest._ctld_restarts == [1]
