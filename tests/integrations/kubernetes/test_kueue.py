"""A real Kueue controller admitting the work Rackplane renders and dispatches.

Kueue (built from its Go module by scripts/kube-testbed.sh, the version in testbed/kueue/go.mod) runs for
this module on the shared testbed's real kube-apiserver, with Kueue's own CRDs of that version: the `kueue`
fixture starts it once (`kueue-start`) and stops it at the end (`kueue-stop`, which puts the packaged CRDs
back for the other tests). Nothing Kueue writes is written by a test: the Workloads, their admission, their
topology assignment, eviction, the Jobs unsuspended and suspended again are Kueue's. What no controller
here writes, the tests do: Nodes as a kubelet with the NVIDIA device plugin would register them (Ready,
allocatable `nvidia.com/gpu`: Kueue's topology-aware scheduling counts no other node).

Rackplane's side is its own code: the Node labels, Topology, ResourceFlavors, Cohorts, ClusterQueues and
LocalQueues of `render.desired_objects` (applied as the `rackplane` field manager, as a push does), and the
Jobs of `KubernetesJobBackend.submit` with the `rackplane` service account's token. The last test runs
the placement engine (scheduling.engine) on the same small scenario and compares its decisions with
Kueue's.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.fabric import Fabric
from core.posix import PosixIdentity
from integrations.jobs import DispatchRequest
from integrations.kubernetes import render as r
from integrations.kubernetes.jobs import KubernetesJobBackend
from integrations.kubernetes.tenants import (
    CHANNEL_DEVICE_CLASS,
    DEFAULT_FLAVOR,
    GPU_RESOURCE,
    IMEX_CHANNEL_RESOURCE,
    kueue_configuration,
    mig_resource,
)
from inventory.mig_layouts import layout
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import PARTITION
from scheduling.engine.scheduler import Department, PendingJob, Project, RunningJob, schedule
from tenancy.renderers import ProjectSpec
from tests.integrations.kube_testbed import KubeAdmin
from tests.integrations.kubernetes.test_render import NFS, tenant

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "kube-testbed.sh"
UUID_1 = "3f0d2b8a-1c4e-4f6a-9b7d-2e5c8a1f0b31"
UUID_2 = "7a9e4c1d-5b2f-4e8a-8c3d-6f1b9e2a4d72"
PERSON = PosixIdentity("ada", uid=10001, gid=10001, groups=())
TIMEOUT = 30.0


# --- Kueue on the testbed ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kueue(kube_testbed):
    """Kueue running on the testbed for this module; its version. Stopped (and the packaged CRDs put back)
    when the module ends."""
    directory = str(kube_testbed.directory)
    # Kueue starts and stops on a clean cluster: it would make Workloads for Jobs left by earlier tests.
    admin = KubeAdmin(kube_testbed)
    admin.wipe()
    started = subprocess.run(
        ["bash", str(SCRIPT), "kueue-start", directory], capture_output=True, text=True, check=False
    )
    if started.returncode:
        pytest.fail(f"scripts/kube-testbed.sh kueue-start failed:\n{started.stderr[-3000:]}")
    try:
        yield (kube_testbed.directory / "kueue.version").read_text().strip()
    finally:
        admin.wipe()
        subprocess.run(["bash", str(SCRIPT), "kueue-stop", directory], check=True, capture_output=True)


def wait_for(what: str, probe: Callable[[], Any], timeout: float = TIMEOUT, kube=None) -> Any:
    """`probe()` once it answers something true; after `timeout` an AssertionError saying what Kueue did
    not do (and, given `kube`, what every Workload and ClusterQueue says)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(
                f"Kueue did not {what} within {timeout:.0f} s" + (state(kube) if kube else "")
            )
        time.sleep(0.1)


def state(kube) -> str:
    lines = []
    for kind in ("Workload", "ClusterQueue"):
        for item in kube.list(kind):
            said = {
                t: f"{c['status']} {c.get('reason')}: {c.get('message')}" for t, c in conditions(item).items()
            }
            lines.append(f"{kind} {item['metadata'].get('namespace', '')}/{item['metadata']['name']}: {said}")
    return "".join(f"\n  {line}" for line in lines)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def is_true(obj: dict[str, Any], kind: str) -> bool:
    return conditions(obj).get(kind, {}).get("status") == "True"


def workload_of(kube, namespace: str, job: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job `namespace/job` (it owns it), or None yet."""
    for item in kube.list("Workload"):
        meta = item["metadata"]
        owners = {o["name"] for o in meta.get("ownerReferences") or [] if o["kind"] == "Job"}
        if meta["namespace"] == namespace and job in owners:
            return item
    return None


def admitted(kube, namespace: str, job: str) -> dict[str, Any] | None:
    workload = workload_of(kube, namespace, job)
    return workload if workload and is_true(workload, "Admitted") else None


def assigned_nodes(workload: dict[str, Any]) -> list[str]:
    """The nodes of the workload's topology assignment (Kueue's TAS), one entry per pod."""
    (podset,) = workload["status"]["admission"]["podSetAssignments"]
    assignment = podset["topologyAssignment"]
    hostname = assignment["levels"].index(r.HOSTNAME_LABEL)
    nodes: list[str] = []
    for slice_ in assignment["slices"]:
        values = slice_["valuesPerLevel"][hostname]
        if "individual" in values:  # names compressed as prefix + root + suffix
            parts = values["individual"]
            names = [parts.get("prefix", "") + root + parts.get("suffix", "") for root in parts["roots"]]
        else:
            names = [values["universal"]] * slice_.get("domainCount", 1)
        counts = slice_["podCounts"].get("individual") or [slice_["podCounts"]["universal"]] * len(names)
        for name, count in zip(names, counts, strict=True):
            nodes += [name] * count
    return sorted(nodes)


# --- the cluster Rackplane renders --------------------------------------------------------------------


def inventory(trays_per_rack: int = 3) -> r.InventoryState:
    """Two NVL72 racks (two NVLink domains), each one default partition of `trays_per_rack` trays."""
    return r.InventoryState(
        racks=[r.RackSpec("gb-r01", UUID_1), r.RackSpec("gb-r02", UUID_2)],
        partitions=[r.PartitionSpec(rack, "default", 32766) for rack in ("gb-r01", "gb-r02")],
        nodes=[
            r.NodeSpec(f"{rack}-t{slot:02d}", rack, "default")
            for rack in ("gb-r01", "gb-r02")
            for slot in range(1, trays_per_rack + 1)
        ],
    )


def push(kube, state: r.InventoryState, tenants) -> None:
    """The cluster as a kubelet per tray and Rackplane's configuration push leave it: Ready Nodes with four
    allocatable GPUs, then every object of `render.desired_objects` server-side applied as `rackplane`."""
    for node in state.nodes:
        kube.register_ready_node(node.hostname, gpus=4)
    for obj in r.desired_objects(state, tenants, nfs_server=NFS):
        kube.apply(obj, manager="rackplane")


def request(job_id: int, department: str, hosts: tuple[str, ...], project: str = "") -> DispatchRequest:
    return DispatchRequest(
        job_id=job_id,
        name=f"job {job_id}",
        department=department,
        priority_class="train",
        hostnames=hosts,
        gpus_per_tray=4,
        time_limit_minutes=60,
        work={"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["python", "train.py"]},
        project=project,
        run_as=PERSON,
    )


@pytest.fixture
def backend(kueue, kube, kube_testbed):
    """Rackplane's job backend, as Rackplane runs: the `rackplane` service account on the real server."""
    with KubernetesJobBackend(kube_testbed.url, token=kube_testbed.token, ca_file=kube_testbed.ca) as b:
        yield b


# --- admission -------------------------------------------------------------------------------------------


def test_kueue_admits_a_dispatched_job_through_the_rendered_queue_on_its_trays(kube, backend, kueue):
    state = inventory()
    vision = tenant("vision", guaranteed_gpus=8, limit_gpus=16)
    push(kube, state, [vision])
    backend_id = backend.submit(request(101, "vision", ("gb-r02-t02",)))
    namespace, name = backend_id.split("/")

    workload = wait_for("admit the job", lambda: admitted(kube, namespace, name), kube=kube)
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == "vision"
    (podset,) = admission["podSetAssignments"]
    assert podset["flavors"] == {"nvidia.com/gpu": DEFAULT_FLAVOR}
    assert podset["resourceUsage"] == {"nvidia.com/gpu": "4"}
    # Topology-aware: Kueue put the pod on the tray Rackplane chose (the Job's node affinity).
    assert assigned_nodes(workload) == ["gb-r02-t02"]
    # Admission starts the Job: Kueue unsuspends it (a Job controller would now make its pod).
    job = wait_for(
        "unsuspend the Job",
        lambda: (j := kube.get("Job", name, namespace)) and not j["spec"]["suspend"] and j,
    )
    assert job["spec"]["suspend"] is False
    queue = wait_for(
        "count the GPUs in the ClusterQueue's status",
        lambda: (
            (q := kube.get("ClusterQueue", "vision"))
            and (q.get("status") or {}).get("admittedWorkloads")
            and q
        ),
    )
    (usage,) = queue["status"]["flavorsUsage"]
    # A one-tray job claims no IMEX channel: the channels' quota is covered, nothing of it used.
    assert usage["resources"] == [
        {"name": GPU_RESOURCE, "total": "4", "borrowed": "0"},
        {"name": IMEX_CHANNEL_RESOURCE, "total": "0", "borrowed": "0"},
    ]


# --- borrowing and reclaim: Kueue and the placement engine on the same scenario ---------------------------

# Two departments, each one project "train" holding its whole guarantee: department cohorts over project
# ClusterQueues (tenants.department_cohort, project_cluster_queue). The cluster is exactly their guarantees
# (4 trays, 16 GPUs): Kueue lends only quota (nominal quotas in the cohort tree), the engine lends free
# GPUs, and the two agree when the GPUs are the quota.
PROJECT = ProjectSpec("train", "Train", 8, 16, "1")
DEPARTMENTS = [
    tenant(
        "alpha",
        guaranteed_gpus=8,
        limit_gpus=16,
        pkey=0x11,
        vlan_id=101,
        vxlan_vni=10101,
        projects=(PROJECT,),
    ),
    tenant(
        "beta", guaranteed_gpus=8, limit_gpus=16, pkey=0x12, vlan_id=102, vxlan_vni=10102, projects=(PROJECT,)
    ),
]
ENGINE_DEPARTMENTS = [
    Department(t.slug, t.guaranteed_gpus, limit=t.limit_gpus, projects=(Project("train", 8, limit=16),))
    for t in DEPARTMENTS
]
# The scenario, one step per pass: (job id, department) submitted at that step, one tray (4 GPUs) each.
STEPS: list[list[tuple[int, str]]] = [
    [(301, "beta"), (302, "beta")],  # beta's guarantee
    [(303, "beta")],  # beta borrows alpha's idle guarantee...
    [(304, "beta")],  # ...up to its limit (16)
    [(305, "alpha")],  # alpha's in-quota job reclaims: the newest borrower goes
]


def engine_decisions(state: r.InventoryState):
    """Rackplane's engine on the scenario: per step, (started job -> its trays, borrowing job ids, preempted
    job ids), the pass's `over_quota` after each step."""
    cluster = Cluster([TraySpec(n.hostname, n.rack, n.partition or "") for n in state.nodes])
    running: dict[int, RunningJob] = {}
    decisions = []
    for step, submitted in enumerate(STEPS, start=1):
        now = float(step)
        pending = [
            PendingJob(job, dept, 4, PARTITION, submitted_at=now, project="train") for job, dept in submitted
        ]
        result = schedule(cluster, ENGINE_DEPARTMENTS, list(running.values()), pending, now)
        for victim in result.preempted:
            running.pop(victim)
        starts = {}
        for start in result.started:
            job = next(p for p in pending if p.id == start.job_id)
            running[job.id] = RunningJob(job.id, job.department, 4, now, now + 3600, project="train")
            starts[job.id] = tuple(cluster.tray_host[t] for t, _ in start.placement)
        for job_id, over in result.over_quota.items():
            running[job_id] = RunningJob(
                job_id,
                running[job_id].department,
                4,
                running[job_id].started_at,
                now + 3600,
                over_quota=over,
                project="train",
            )
        borrowing = {j for j, over in result.over_quota.items() if over}
        decisions.append((starts, borrowing, set(result.preempted)))
    return decisions


def borrowed(kube, queue: str) -> int:
    status = (kube.get("ClusterQueue", queue) or {}).get("status") or {}
    for usage in status.get("flavorsUsage") or []:
        for resource in usage["resources"]:
            if resource["name"] == "nvidia.com/gpu":
                return int(resource.get("borrowed", "0"))
    return 0


def test_borrowing_and_reclaim_between_department_cohorts_decide_as_the_engine_does(kube, backend, kueue):
    state = inventory(trays_per_rack=2)
    push(kube, state, DEPARTMENTS)
    expected = engine_decisions(state)
    # What the engine decides: beta's third and fourth jobs borrow, alpha's job reclaims the newest of them.
    assert [borrowing for _, borrowing, _ in expected] == [set(), {303}, {303, 304}, {303}]
    assert [preempted for _, _, preempted in expected] == [set(), set(), set(), {304}]
    home = {job: f"{department}--train" for step in STEPS for job, department in step}
    names: dict[int, str] = {}
    for step, (submitted, (starts, borrowing, preempted)) in enumerate(zip(STEPS, expected, strict=True)):
        if step:
            # Kueue orders reclaim victims by admission time, kept to the second: one second between steps.
            time.sleep(max(0.0, 1.05 - (time.time() % 1.0)))
        assert set(starts) == {job for job, _ in submitted}, "the engine starts every job of the step"
        for job, department in submitted:
            names[job] = backend.submit(request(job, department, starts[job], project="train")).split("/")[1]
        for job in starts:
            wait_for(f"admit job {job}", lambda job=job: admitted(kube, home[job], names[job]), kube=kube)
        for victim in preempted:
            workload = wait_for(
                f"preempt job {victim}",
                lambda victim=victim: (
                    (w := workload_of(kube, home[victim], names[victim])) and is_true(w, "Evicted") and w
                ),
            )
            assert conditions(workload)["Evicted"]["reason"] == "Preempted"
            assert not is_true(workload, "Admitted")
            wait_for(
                f"suspend job {victim} again",
                lambda victim=victim: (
                    (j := kube.get("Job", names[victim], home[victim])) and j["spec"]["suspend"] and j
                ),
            )
        # Kueue's verdicts, job by job, are the engine's: who runs, and how many GPUs each department borrows.
        running = {job for job in names if admitted(kube, home[job], names[job])}
        expected_running = {job for s in expected[: step + 1] for job in s[0]} - {
            v for s in expected[: step + 1] for v in s[2]
        }
        assert running == expected_running, f"step {step + 1}"
        for department in ("alpha", "beta"):
            engine_borrowed = 4 * sum(1 for job in borrowing if home[job].startswith(department))
            wait_for(
                f"report {department} borrowing {engine_borrowed} GPUs at step {step + 1}",
                lambda q=f"{department}--train", n=engine_borrowed: borrowed(kube, q) == n,
            )


# --- topology-aware scheduling -----------------------------------------------------------------------------


def gang(name: str, namespace: str, pods: int, level: str) -> dict[str, Any]:
    """A Job as a Kueue user submits a topology-aware gang into the department's queue: `pods` pods of one
    tray (4 GPUs) each, all required inside one value of the node label `level`."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "suspend": True,
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": level}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "resources": {
                                "requests": {"nvidia.com/gpu": "4"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                },
            },
        },
    }


def test_a_topology_request_lands_inside_one_nvlink_domain(kube, backend, kueue):
    state = inventory(trays_per_rack=4)
    vision = tenant("vision", guaranteed_gpus=32, limit_gpus=32)
    push(kube, state, [vision])
    # Rackplane's own jobs hold two trays of gb-r01: 6 trays are free, but only gb-r02 has 3 together.
    for job, host in ((201, "gb-r01-t01"), (202, "gb-r01-t02")):
        held = backend.submit(request(job, "vision", (host,))).split("/")[1]
        wait_for(f"admit Rackplane's job {job}", lambda held=held: admitted(kube, "vision", held))

    kube.create(gang("gang-a", "vision", 3, r.DOMAIN_LABEL))
    workload = wait_for("admit the gang", lambda: admitted(kube, "vision", "gang-a"), kube=kube)
    nodes = assigned_nodes(workload)
    labels = r.node_labels(state)
    assert len(nodes) == len(set(nodes)) == 3
    assert {labels[n][r.DOMAIN_LABEL] for n in nodes} == {UUID_2}  # all in gb-r02's NVLink domain

    # Another gang of 3 fits the quota (20 of 32 GPUs held) and the free trays (3), but no NVLink domain
    # has 3 of them: it waits rather than span racks.
    kube.create(gang("gang-b", "vision", 3, r.DOMAIN_LABEL))
    waiting = wait_for(
        "say why the second gang waits",
        lambda: (w := workload_of(kube, "vision", "gang-b")) and "QuotaReserved" in conditions(w) and w,
    )
    assert not is_true(waiting, "QuotaReserved")
    message = conditions(waiting)["QuotaReserved"]["message"]
    assert 'topology "nvlink" allows to fit only 2 out of 3 pod(s)' in message, message


def test_a_multi_tray_job_is_admitted_with_its_imex_channels_counted(kube, backend, kueue):
    """Rackplane's multi-tray job: its pods claim an IMEX channel from the ComputeDomain's
    ResourceClaimTemplate, and Kueue (>= 0.18: KueueDRAIntegration on by default) counts DRA claims against
    quota. With the configuration Rackplane asks a site to give Kueue (tenants.kueue_configuration: the
    channel's DeviceClass mapped to IMEX_CHANNEL_RESOURCE, which the testbed's Kueue is started with) and
    the ClusterQueues covering that resource beside the GPUs, the job is admitted, one channel per pod
    counted, on its trays. Without the mapping Kueue leaves it Inadmissible ("DeviceClass ... is not mapped in
    DRA configuration"): measured with Kueue 0.19.2 before Rackplane rendered it. The template is written
    here as NVIDIA's DRA driver writes it for the ComputeDomain."""
    assert kueue_configuration()["resources"]["deviceClassMappings"] == [
        {"name": IMEX_CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_DEVICE_CLASS]}
    ]
    push(kube, inventory(), [tenant("vision", guaranteed_gpus=8, limit_gpus=16)])
    hosts = ("gb-r02-t02", "gb-r02-t03")
    name = backend.submit(request(401, "vision", hosts)).split("/")[1]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{name}-imex-channel", "namespace": "vision"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "channel", "exactly": {"deviceClassName": CHANNEL_DEVICE_CLASS}}]
                }
            }
        },
    }
    templates = "/apis/resource.k8s.io/v1/namespaces/vision/resourceclaimtemplates"
    status, answer = kube.request("POST", templates, template)
    assert status in (201, 409), answer  # 409: left by a run that stopped before its clean-up
    try:
        workload = wait_for("admit the multi-tray job", lambda: admitted(kube, "vision", name), kube=kube)
        (podset,) = workload["status"]["admission"]["podSetAssignments"]
        assert podset["count"] == 2
        assert podset["resourceUsage"][GPU_RESOURCE] == "8"
        assert podset["resourceUsage"][IMEX_CHANNEL_RESOURCE] == "2"  # one channel per pod
        assert assigned_nodes(workload) == sorted(hosts)
    finally:
        # ResourceClaimTemplates are not among the kinds the wipe removes: leave none behind.
        kube.request("DELETE", f"{templates}/{name}-imex-channel")


# --- the compute fabric above the racks (issue 33) ----------------------------------------------------

UUID_3 = "5c2e8f1a-9d3b-4a7e-b6c4-1e8d2f9a3b57"
# Racks gb-r01 and gb-r02 in scalable unit su-1, gb-r03 alone in su-2, under two spine groups.
FABRIC = Fabric(
    racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-1"), "gb-r03": ("spine-b", "su-2")}
)
TIER_0 = r.FABRIC_TIER_LABEL.format(tier=0)


def test_a_gang_required_in_one_scalable_unit_spans_racks_but_not_units(kube, backend, kueue):
    """The Topology with the fabric's tiers above the NVLink domain and the nodes' Topograph tier labels,
    server-side applied as a push does, are what the real Kueue places by: a gang required inside one
    `fabric.topograph.run/tier-0` (scalable unit) takes trays of two racks of su-1, never su-2's; the next
    one goes to the unit that still has room."""
    state = r.InventoryState(
        racks=[r.RackSpec("gb-r01", UUID_1), r.RackSpec("gb-r02", UUID_2), r.RackSpec("gb-r03", UUID_3)],
        partitions=[r.PartitionSpec(rack, "default", 32766) for rack in ("gb-r01", "gb-r02", "gb-r03")],
        nodes=[
            r.NodeSpec(f"{rack}-t{slot:02d}", rack, "default")
            for rack in ("gb-r01", "gb-r02", "gb-r03")
            for slot in (1, 2)
        ],
    )
    vision = tenant("vision", guaranteed_gpus=24, limit_gpus=24)
    for node in state.nodes:
        kube.register_ready_node(node.hostname, gpus=4)
    for obj in r.desired_objects(state, [vision], nfs_server=NFS, fabric=FABRIC):
        kube.apply(obj, manager="rackplane")
    topology = kube.get("Topology", r.TOPOLOGY_NAME)
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]][:3] == [
        r.FABRIC_TIER_LABEL.format(tier=1),
        TIER_0,
        r.DOMAIN_LABEL,
    ]
    labels = r.node_labels(state, fabric=FABRIC)

    kube.create(gang("unit-a", "vision", 3, TIER_0))
    nodes = assigned_nodes(wait_for("admit the gang", lambda: admitted(kube, "vision", "unit-a"), kube=kube))
    assert len(set(nodes)) == 3
    assert {labels[n][TIER_0] for n in nodes} == {"su-1"}
    assert {labels[n][r.RACK_LABEL] for n in nodes} == {"gb-r01", "gb-r02"}  # larger than a rack: two racks

    # su-1 has one tray left, su-2 two: a gang of two goes to su-2 rather than span units.
    kube.create(gang("unit-b", "vision", 2, TIER_0))
    nodes = assigned_nodes(
        wait_for("admit the second gang", lambda: admitted(kube, "vision", "unit-b"), kube=kube)
    )
    assert {labels[n][TIER_0] for n in nodes} == {"su-2"}


# --- MIG slices -----------------------------------------------------------------------------------------

BALANCED = layout("all-balanced", {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1})
MIG_TRAY = "gb-r01-t03"


def slice_request(job_id: int, department: str, slices: int, profile: str = "1g.23gb") -> DispatchRequest:
    """A slice job as the pass dispatches it: `slices` MIG devices of `profile` on the MIG tray."""
    return dataclasses.replace(
        request(job_id, department, (MIG_TRAY,)), gpus_per_tray=0, mig_profile=profile, mig_slices=slices
    )


def test_kueue_admits_slice_jobs_within_the_mig_quota_of_the_departments_queue(kube, backend, kueue):
    """A slice job in a Kueue-managed namespace is admitted through the department's ClusterQueue, whose
    MIG quota is its guarantee in GPU-equivalents (tenants.mig_quota): 1 GPU = 7 one-slice devices of the
    8 the MIG tray offers. Without the MIG resources covered, Kueue keeps the Job suspended ("resource
    nvidia.com/mig-1g.23gb unavailable in ClusterQueue"), as it did before issue 30's quotas."""
    base = inventory()
    state = dataclasses.replace(
        base,
        nodes=tuple(
            dataclasses.replace(n, mig_layout=BALANCED) if n.hostname == MIG_TRAY else n for n in base.nodes
        ),
    )
    assert r.mig_offer(state) == {"1g.23gb": 8, "2g.47gb": 4, "3g.93gb": 4}
    for node in state.nodes:
        if node.hostname == MIG_TRAY:  # the device plugin's mixed strategy: MIG devices, no whole GPU
            devices = {mig_resource(p): n * 4 for p, n in BALANCED.devices}
            kube.register_ready_node(node.hostname, gpus=0, devices=devices)
        else:
            kube.register_ready_node(node.hostname, gpus=4)
    # The GPU Operator's namespace, its install's (mig-parted's ConfigMap goes there).
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": r.DEFAULT_MIG_NAMESPACE}}
    kube.apply(namespace, "helm")
    for obj in r.desired_objects(state, [tenant("vision", guaranteed_gpus=1, limit_gpus=1)], nfs_server=NFS):
        kube.apply(obj, manager="rackplane")
    one_g = mig_resource("1g.23gb")

    first = backend.submit(slice_request(501, "vision", 2)).split("/")[1]
    workload = wait_for("admit the slice job", lambda: admitted(kube, "vision", first), kube=kube)
    (podset,) = workload["status"]["admission"]["podSetAssignments"]
    assert podset["flavors"] == {one_g: DEFAULT_FLAVOR}
    assert podset["resourceUsage"] == {one_g: "2"}
    assert assigned_nodes(workload) == [MIG_TRAY]
    wait_for(
        "unsuspend the slice job",
        lambda: (j := kube.get("Job", first, "vision")) and not j["spec"]["suspend"],
    )

    # Six more would make 8 one-slice devices: 8/7 of a GPU, over the guarantee (and limit) of 1.
    over = backend.submit(slice_request(502, "vision", 6)).split("/")[1]
    waiting = wait_for(
        "say why the slice job over quota waits",
        lambda: (w := workload_of(kube, "vision", over)) and "QuotaReserved" in conditions(w) and w,
        kube=kube,
    )
    assert not is_true(waiting, "QuotaReserved")
    message = conditions(waiting)["QuotaReserved"]["message"]
    assert f"insufficient unused quota for {one_g} in flavor {DEFAULT_FLAVOR}" in message, message
    backend.cancel(f"vision/{over}")

    # Five more make exactly 7: the whole guarantee in one-slice devices.
    fits = backend.submit(slice_request(503, "vision", 5)).split("/")[1]
    wait_for("admit the slice job that fills the quota", lambda: admitted(kube, "vision", fits), kube=kube)
    queue = wait_for(
        "count the slices in the ClusterQueue's status",
        lambda: (
            (q := kube.get("ClusterQueue", "vision"))
            and (q.get("status") or {}).get("admittedWorkloads") == 2
            and q
        ),
    )
    (usage,) = queue["status"]["flavorsUsage"]
    used = {u["name"]: u["total"] for u in usage["resources"]}
    assert used[one_g] == "7" and used[GPU_RESOURCE] == "0"
