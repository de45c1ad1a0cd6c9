"""Projects under departments outside Rackplane: the Slurm account tree as exact sacctmgr commands
in the configuration output, a project's jobs under its account (Slurm) and in its namespace (Kubernetes).

The Slurm testbed has no slurmdbd, so the commands are checked as text here (scripts/slurm-testbed.sh);
the Kubernetes objects are checked against the real API server in kubernetes/test_render_projects.py.
"""

from __future__ import annotations

import pytest

from integrations import state as configstate
from integrations.jobs import DispatchRequest
from integrations.kubernetes import job_objects as kube_jobs
from integrations.slurm.render import SlurmAccount, render_account_script, sacctmgr_account_commands
from integrations.slurm.rest import submit_payload
from tenancy.models import Project
from tests.factories import make_department

HOSTS = ("gb-r01-t01", "gb-r01-t02")


def test_the_account_tree_is_exact_sacctmgr_commands_parents_first():
    accounts = [
        SlurmAccount("research-vision", "research", 48, shares=32),
        SlurmAccount("research", "root", 96, shares=64),
        SlurmAccount("research-nlp", "research", None),
        SlurmAccount("vision", "root", None, shares=8),
    ]
    assert sacctmgr_account_commands(accounts) == [
        ["-i", "add", "account", "research", "parent=root"],
        ["-i", "add", "account", "vision", "parent=root"],
        ["-i", "add", "account", "research-nlp", "parent=research"],
        ["-i", "add", "account", "research-vision", "parent=research"],
        ["-i", "modify", "account", "name=research", "set", "GrpTRES=gres/gpu=96", "Fairshare=64"],
        ["-i", "modify", "account", "name=vision", "set", "GrpTRES=gres/gpu=-1", "Fairshare=8"],
        ["-i", "modify", "account", "name=research-nlp", "set", "GrpTRES=gres/gpu=-1", "Fairshare=1"],
        ["-i", "modify", "account", "name=research-vision", "set", "GrpTRES=gres/gpu=48", "Fairshare=32"],
    ]
    script = render_account_script(accounts)
    assert "sacctmgr -i add account research-vision parent=research\n" in script
    assert script.endswith(
        "sacctmgr -i modify account name=research-vision set GrpTRES=gres/gpu=48 Fairshare=32\n"
    )
    with pytest.raises(ValueError, match="fairshare must be at least 1"):
        sacctmgr_account_commands([SlurmAccount("vision", "root", None, shares=0)])


@pytest.mark.parametrize(
    "accounts, words",
    [
        ([SlurmAccount("a b", "root")], "not a valid Slurm name"),
        ([SlurmAccount("x", "nowhere")], "its parent nowhere is not in the tree"),
        ([SlurmAccount("x"), SlurmAccount("x")], "listed twice"),
        ([SlurmAccount("x", "root", -2)], "must be >= 0"),
    ],
)
def test_an_account_tree_that_cannot_be_built_is_refused(accounts, words):
    with pytest.raises(ValueError, match=words):
        sacctmgr_account_commands(accounts)


def slurm_request(**changes) -> DispatchRequest:
    values = dict(
        job_id=42,
        name="train",
        department="research",
        priority_class="train",
        hostnames=HOSTS,
        gpus_per_tray=4,
        time_limit_minutes=90,
        work={"script": "#!/bin/bash\nsrun hostname\n"},
        service_tier="gpu",
        segment=2,
    )
    values.update(changes)
    return DispatchRequest(**values)


def test_a_projects_slurm_job_runs_under_the_projects_account():
    job = submit_payload(slurm_request(project="vision"))["job"]
    assert job["account"] == "research--vision" and job["qos"] == "research"
    assert "RACKPLANE_PROJECT=vision" in job["environment"]
    plain = submit_payload(slurm_request())["job"]
    assert plain["account"] == "research" and not any(
        e.startswith("RACKPLANE_PROJECT") for e in plain["environment"]
    )


def test_a_projects_kubernetes_job_runs_in_the_projects_namespace():
    work = {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["torchrun"]}
    objects = kube_jobs.render_job_objects(slurm_request(project="vision", work=work))
    assert {o["metadata"]["namespace"] for o in objects} == {"research--vision"}
    plain = kube_jobs.render_job_objects(slurm_request(work=work))
    assert {o["metadata"]["namespace"] for o in plain} == {"research"}


@pytest.mark.django_db
def test_the_configuration_output_has_the_account_tree_once_a_department_has_projects(demo_inventory):
    research = make_department("Research", guaranteed_gpus=64, limit_gpus=96)
    make_department("Vision", guaranteed_gpus=8)
    assert configstate.SLURM_ACCOUNTS not in configstate.render_files(configstate.build_state())
    Project.objects.create(
        department=research, name="Vision models", slug="vm", guaranteed_gpus=32, limit_gpus=48
    )
    files = configstate.render_files(configstate.build_state())
    script = files[configstate.SLURM_ACCOUNTS]
    both = "QOS=research,research--borrowed DefaultQOS=research"
    assert script.splitlines()[2:] == [
        # The QOS first (the accounts name them): each department's own at its guarantee, the borrowed
        # one without a GPU limit of its own (the department's account holds it at the limit).
        "sacctmgr -i add qos research",
        "sacctmgr -i modify qos where name=research set GrpTRES=gres/gpu=64",
        "sacctmgr -i add qos research--borrowed",
        "sacctmgr -i modify qos where name=research--borrowed set GrpTRES=gres/gpu=-1",
        "sacctmgr -i add qos vision",
        "sacctmgr -i modify qos where name=vision set GrpTRES=gres/gpu=8",
        "sacctmgr -i add qos vision--borrowed",
        "sacctmgr -i modify qos where name=vision--borrowed set GrpTRES=gres/gpu=-1",
        "sacctmgr -i add account research parent=root",
        "sacctmgr -i add account vision parent=root",
        "sacctmgr -i add account research--vm parent=research",
        # The fairshare is the guarantee in GPUs (at least 1): research 64 of which its project vm 32.
        f"sacctmgr -i modify account name=research set GrpTRES=gres/gpu=96 Fairshare=64 {both}",
        "sacctmgr -i modify account name=vision set GrpTRES=gres/gpu=-1 Fairshare=8 "
        "QOS=vision,vision--borrowed DefaultQOS=vision",
        f"sacctmgr -i modify account name=research--vm set GrpTRES=gres/gpu=48 Fairshare=32 {both}",
    ]
    assert "name: research--vm" in files["kubernetes/05-clusterqueues.yaml"]
    assert "kind: Cohort" in files["kubernetes/11-cohorts.yaml"]


@pytest.mark.django_db
def test_a_default_project_renders_and_runs_as_its_department(demo_inventory):
    from integrations import dispatch
    from scheduling.choices import JobState
    from tests.factories import make_job

    research = make_department("Research", guaranteed_gpus=64)
    default = Project.objects.get(department=research, is_default=True)
    before = configstate.render_files(configstate.build_state())
    # Nothing of its own outside: no account, no namespace, no ClusterQueue, no Cohort.
    assert configstate.SLURM_ACCOUNTS not in before
    assert not any("research--" in text for text in before.values())
    # Its jobs run as the department's own work: the department's account and namespace.
    job = make_job(research, trays=["gb-r01-t01"], project=default, state=JobState.STARTING)
    request = dispatch.dispatch_request(job, {})
    assert (request.project, request.home) == ("", "research")
    # With a named project beside it, it is still the department's own queue and account.
    Project.objects.create(department=research, name="Vision", slug="vision", guaranteed_gpus=8)
    files = configstate.render_files(configstate.build_state())
    assert "research--vision" in files[configstate.SLURM_ACCOUNTS]
    assert "research--default" not in "".join(files.values())
