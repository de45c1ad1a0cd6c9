"""slurmctld's copy of slurmdbd's accounting (integrations.slurm.assoc_mgr) read from `scontrol show
assoc_mgr` as Slurm 24.11.5 prints it (the testbed's output, trimmed to the lines read). The real wait
after a push: tests/integration/test_slurm_accounting.py."""

import subprocess

import pytest

from integrations.slurm import assoc_mgr
from integrations.slurm.target import SlurmUnavailable

SHOWN = """Current Association Manager state

Association Records

ClusterName=rackplane-testbed Account=root UserName= Partition= Priority=0 ID=1
    ParentAccount= Lineage=/ DefAssoc=No
    GrpTRES=cpu=N(0),mem=N(0),gres/gpu=N(0),gres/gpumem=N(0)
ClusterName=rackplane-testbed Account=optics3000 UserName= Partition= Priority=0 ID=11
    ParentAccount=root(1) Lineage=/optics3000/ DefAssoc=Yes
    GrpTRES=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),gres/gpu=4(0),gres/gpumem=N(0)
ClusterName=rackplane-testbed Account=optics3000 UserName=ada(20001) Partition= Priority=0 ID=14
    ParentAccount= Lineage=/optics3000/0-ada/ DefAssoc=No
    GrpTRES=cpu=N(0),mem=N(0),gres/gpu=N(0),gres/gpumem=N(0)

QOS Records

QOS=normal(1)
    UsageRaw=0.000000
    GrpTRES=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),gres/gpu=N(0),gres/gpumem=N(0)
    PreemptMode=OFF
QOS=optics3000(7)
    UsageRaw=239.886040
    GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.32)
    GrpTRES=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),gres/gpu=8(0),gres/gpumem=N(0)
    PreemptMode=OFF
"""


class Target:
    def __init__(self, stdout: str, returncode: int = 0):
        self.done = subprocess.CompletedProcess([], returncode, stdout, "")
        self.done.output = stdout or "Unable to contact slurm controller"  # as SlurmTarget.scontrol_run's
        self.asked: list[tuple[str, ...]] = []

    def scontrol_run(self, *args):
        self.asked.append(args)
        return self.done


def test_what_slurmctld_holds_agrees_with_what_was_written():
    target = Target(SHOWN)
    wanted = {("optics3000", ""), ("optics3000", "ada")}
    assert assoc_mgr.differences(target, {"optics3000": 8, "normal": None}, wanted) == []
    assert target.asked == [("show", "assoc_mgr", "flags=assoc,qos")]


def test_what_it_lacks_or_still_holds_is_named():
    target = Target(SHOWN)
    lacking = assoc_mgr.differences(
        target,
        {"optics3000": 16, "vision": None},
        {("optics3000", "grace"), ("optics3000", "ada")},
        removed=[("optics3000", "ada"), ("optics3000", "eve")],
    )
    assert lacking == [
        "association optics3000/grace",
        "QOS optics3000 GrpTRES gres/gpu",
        "QOS vision GrpTRES gres/gpu",
        "no association optics3000/ada",
    ]


def test_waiting_gives_up_after_the_timeout_with_what_still_differs():
    slept: list[float] = []
    lacking = assoc_mgr.wait(Target(SHOWN), {}, {("vision", "")}, timeout=0, sleep=slept.append)
    assert lacking == ["association vision/(account)"] and slept == []


def test_an_unreachable_controller_is_unavailable_not_a_difference():
    with pytest.raises(SlurmUnavailable, match="cannot read slurmctld's associations"):
        assoc_mgr.differences(Target("", returncode=1), {}, set())
