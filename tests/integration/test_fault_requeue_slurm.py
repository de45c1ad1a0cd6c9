"""Fault requeue end to end, on the real Slurm 24.11 testbed (scripts/slurm-testbed.sh): from a node agent's
XID 79 to the tray back in service.

gb-r01 (the testbed's 18 nodes) is carved 2x9 and pushed to slurmctld; the Slurm target names slurmrestd. A
2-tray training job submitted through the REST API runs in Slurm on its two nodes. Then the real agent
(agent/rackplane_agent.py, a separate process, a fake nvidia-smi and a kernel log file, as in
tests/agent/test_slurm_nodes.py) posts an XID 79 for one of them to the live portal:

* slurmctld drains that node with Rackplane's reason (read back with `scontrol --json show node`);
* the job (policy checkpoint, 3 s grace) gets SIGUSR1 in Slurm (its batch script's trap writes a file),
  is then requeued as a whole gang: its Slurm job is cancelled, it keeps its place in line and its history
  says why, and it runs again as a new Slurm job on two other nodes;
* the agent then reports the node healthy and its active check passing: the tray returns to service and
  slurmctld resumes the node;
* a node an admin drained in Slurm (their own reason) that then reports an XID 79 keeps the admin's drain:
  the portal's tray page shows it, and neither the drain nor the return touches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from integrations import pushes
from integrations.models import PushStatus
from integrations.registry import clean_settings
from integrations.tasks import sync_jobs
from inventory.choices import TrayState
from inventory.health.rules import seed_default_rules
from inventory.models import ComputeTray, HealthSettings, Rack
from scheduling.choices import FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.models import FaultPolicy, Job
from tenancy.models import Department
from tenancy.services import save_department
from tests.agent.conftest import fake_nvidia_smi, issue_token, run_agent, tray_xml, xid_line
from tests.integration.conftest import carve, give_identity, tenant_people

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow(reason="a live server, the real Slurm testbed and its requeue timers"),
    pytest.mark.django_db(transaction=True),
]

CHECK = "sh -c 'echo dcgmi diag -r 2: pass; exit 0'"
SCRIPT = (
    "#!/bin/bash\n"
    "trap 'echo checkpoint requested > /tmp/rp-ckpt-$SLURM_JOB_ID' USR1\n"
    "for i in $(seq 600); do sleep 1; done\n"
)


def scontrol(testbed, *args: str) -> str:
    return subprocess.run([testbed.scontrol, *args], capture_output=True, text=True, check=True).stdout


def slurm_node(testbed, host: str) -> dict:
    return json.loads(scontrol(testbed, "--json", "show", "node", host))["nodes"][0]


def slurm_job(testbed, job_id: str) -> dict:
    return json.loads(scontrol(testbed, "--json", "show", "job", job_id))["jobs"][0]


def slurm_hosts(testbed, job_id: str) -> list[str]:
    shown = scontrol(testbed, "show", "job", job_id).split()
    nodelist = next(part.split("=", 1)[1] for part in shown if part.startswith("NodeList="))
    return scontrol(testbed, "show", "hostnames", nodelist).split()


def wait_for(predicate, what: str, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


class Node:
    """The agent of one tray: its folder, fake nvidia-smi, kernel log and state file."""

    def __init__(self, root: Path, tray: ComputeTray, token: Path, portal: str):
        self.tray, self.token, self.portal = tray, token, portal
        self.folder = root / tray.hostname
        self.folder.mkdir()
        self.kernel_log = self.folder / "kern.log"
        self.kernel_log.write_text("")
        self.nvidia_smi = fake_nvidia_smi(self.folder, tray_xml(tray))

    def report(self, *extra: str) -> str:
        done = run_agent(
            "--portal", self.portal,
            "--host", self.tray.hostname,
            "--token-file", str(self.token),
            "--nvidia-smi", str(self.nvidia_smi),
            "--kernel-log", str(self.kernel_log),
            "--state-file", str(self.folder / "state.json"),
            "--once",
            *extra,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"posted the report for {self.tray.hostname}: 200" in done.stderr, done.stderr
        return done.stderr

    def xid_79(self) -> str:
        with self.kernel_log.open("a") as log:
            log.write(xid_line(79, note="GPU has fallen off the bus."))
        return self.report()


@pytest.fixture
def slurm_cluster(slurm_testbed, testbed_target):
    carve([9, 9])
    [push] = pushes.queue_pushes(reason="carve gb-r01 2x9")
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED, push.error
    testbed_target.settings = clean_settings(
        "slurm",
        {
            **testbed_target.settings,
            "rest_url": os.environ["RACKPLANE_SLURMRESTD_URL"],
            # SlurmUser's tokens: each job is submitted, read and cancelled as its person.
            "rest_user": os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm"),
            "jwt_key_file": os.environ["RACKPLANE_SLURM_JWT_KEY"],
            "accounting": True,  # jobs carry their department's account and QOS (slurmdbd enforces them)
        },
    )
    testbed_target.save()
    save_department(Department(name="Research", slug="research", guaranteed_gpus=64))
    seed_default_rules()  # a transactional test before this one flushed the migration's rows
    settings = HealthSettings.load()
    settings.return_after_s = 2
    settings.return_check = CHECK
    settings.breaker_percent = 50
    settings.save()
    FaultPolicy.objects.update_or_create(
        priority_class=PriorityClass.TRAIN, defaults={"action": FaultAction.CHECKPOINT, "grace_s": 3}
    )
    yield testbed_target
    bin_dir = slurm_testbed.bin
    subprocess.run([str(bin_dir / "scancel"), "--user=rackplane"], capture_output=True)
    subprocess.run([str(bin_dir / "scancel"), "--user=root"], capture_output=True)
    for host in slurm_testbed.hostnames():
        if {"DRAIN", "DOWN"} & set(slurm_node(slurm_testbed, host)["state"]):
            subprocess.run(
                [slurm_testbed.scontrol, "update", f"NodeName={host}", "State=RESUME"], check=False
            )


def test_an_xid_79_drains_the_node_requeues_its_job_elsewhere_and_the_node_returns(
    slurm_testbed, slurm_cluster, live_server, admin_user, admin_client, tmp_path
):
    api = APIClient()
    give_identity(admin_user, tenant_people()["ada"])  # jobs run as their person's Unix user
    # slurmdbd enforces associations: a POSIX account given by hand reaches Slurm with the next push (as
    # "Push now" does), which lets ada submit under research's account; jobs carry it (accounting on).
    [push] = pushes.queue_pushes(reason="ada may submit under research")
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED, push.error
    api.force_authenticate(admin_user)
    body = {
        "department": "research",
        "name": "train-ckpt",
        "gpus": 8,
        "priority_class": "train",
        "work": {"script": SCRIPT},
    }
    response = api.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="xid79-1")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.RUNNING, (job.pending_reason, job.backend_message)
    first_run, first_hosts, submitted = job.backend_id, list(job.placement), job.created_at
    wait_for(
        lambda: slurm_job(slurm_testbed, first_run)["job_state"] == ["RUNNING"], "the job running in Slurm"
    )
    assert slurm_hosts(slurm_testbed, first_run) == first_hosts

    token = issue_token(tmp_path, rack=Rack.objects.get(name="gb-r01"))
    failing = ComputeTray.objects.select_related("rack", "partition").get(hostname=first_hosts[1])
    node = Node(tmp_path, failing, token, live_server.url)
    node.report()  # the first report reads the (empty) kernel log from its start

    # 1. The agent's XID 79: the node drains in slurmctld with Rackplane's reason.
    said = node.xid_79()
    assert "XID 79" in said, said
    failing.refresh_from_db()
    assert failing.state == TrayState.DRAIN
    assert failing.state_reason.startswith("rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-")
    shown = slurm_node(slurm_testbed, failing.hostname)
    assert "DRAIN" in shown["state"] and shown["reason"] == failing.state_reason, shown

    # 2. Asked to checkpoint (SIGUSR1 reached the batch script), then requeued when the grace period ends.
    job.refresh_from_db()
    assert job.requeue_at is not None, list(job.events.values_list("kind", "message"))
    assert "asked to checkpoint (SIGUSR1)" in job.events.get(kind=JobEventKind.FAULT).message
    marker = Path(os.environ["RACKPLANE_SLURM_TESTBED"]) / "root" / "tmp" / f"rp-ckpt-{first_run}"
    wait_for(marker.exists, "the job's USR1 trap to run", timeout=20)
    assert "SIGUSR1" in job.backend_message

    def running_again():
        sync_jobs()
        job.refresh_from_db()
        return job.state == JobState.RUNNING and job.backend_id not in ("", first_run)

    wait_for(running_again, "the job requeued and running again", timeout=90, every=1)
    assert job.created_at == submitted and job.fault_requeues == 1 and job.preemptions == 1
    requeued = job.events.get(kind=JobEventKind.REQUEUED)
    assert requeued.message.startswith("requeued: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-")
    assert requeued.message.endswith(f"drained {failing.hostname} (policy checkpoint, grace 3 s)")
    assert requeued.placement == first_hosts
    wait_for(
        lambda: slurm_job(slurm_testbed, first_run)["job_state"] == ["CANCELLED"], "the first run cancelled"
    )
    # The new run waits in Slurm until the first one's nodes are free, then runs on its new trays.
    wait_for(lambda: "RUNNING" in slurm_job(slurm_testbed, job.backend_id)["job_state"], "the second run")
    second_hosts = slurm_hosts(slurm_testbed, job.backend_id)
    assert second_hosts == job.placement and failing.hostname not in second_hosts
    assert "DRAIN" in slurm_node(slurm_testbed, failing.hostname)["state"]

    # 3. Healthy reports and a passing active check: back in service, and slurmctld resumes the node.
    node.report("--check-command", CHECK)
    failing.refresh_from_db()
    assert failing.state == TrayState.DRAIN and failing.healthy_since is not None  # not healthy long enough
    time.sleep(2.5)
    node.report("--check-command", CHECK)
    failing.refresh_from_db()
    assert failing.state == TrayState.UP, failing.state_reason
    shown = slurm_node(slurm_testbed, failing.hostname)
    assert not {"DRAIN", "DOWN"} & set(shown["state"]), shown


def test_an_admins_slurm_drain_is_shown_and_left_alone(
    slurm_testbed, slurm_cluster, live_server, admin_client, tmp_path
):
    tray = ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r01-t17")
    admin_reason = "fan swap, ticket 4411"
    subprocess.run(
        [
            slurm_testbed.scontrol,
            "update",
            f"NodeName={tray.hostname}",
            "State=DRAIN",
            f"Reason={admin_reason}",
        ],
        check=True,
    )
    token = issue_token(tmp_path, rack=Rack.objects.get(name="gb-r01"))
    node = Node(tmp_path, tray, token, live_server.url)
    node.report()
    node.xid_79()
    tray.refresh_from_db()
    assert tray.state == TrayState.DRAIN  # Rackplane's own view: out for the fault
    [outcome] = tray.scheduler_state
    assert outcome["action"] == "not_ours" and outcome["reason"] == admin_reason, outcome
    page = admin_client.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert admin_reason in page and "another owner" in page
    shown = slurm_node(slurm_testbed, tray.hostname)
    assert "DRAIN" in shown["state"] and shown["reason"] == admin_reason

    # Healthy again and the check passes: Rackplane returns the tray, and still leaves the admin's drain.
    node.report("--check-command", CHECK)
    time.sleep(2.5)
    node.report("--check-command", CHECK)
    tray.refresh_from_db()
    assert tray.state == TrayState.UP, tray.state_reason
    [outcome] = tray.scheduler_state
    assert outcome["action"] == "not_ours", outcome
    shown = slurm_node(slurm_testbed, tray.hostname)
    assert "DRAIN" in shown["state"] and shown["reason"] == admin_reason
