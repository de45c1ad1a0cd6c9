"""The desired state built from the database (integrations.state) and the files it renders."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from integrations import kept_rows
from integrations import state as configstate
from integrations.kubernetes.render import DEPARTMENT_LABEL, SERVICE_TIER_LABEL
from integrations.kubernetes.tenants import to_yaml
from integrations.slurm.render import MANAGED_HEADER
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.services import dedicate_partition
from tests.factories import make_department, make_job, run_job

pytestmark = pytest.mark.django_db

EXPECTED_FILES = {
    "slurm/topology.conf",
    "slurm/rackplane.conf",
    "kubernetes/01-namespaces.yaml",
    "kubernetes/02-nodes.yaml",
    "kubernetes/03-topologies.yaml",
    "kubernetes/04-resourceflavors.yaml",
    "kubernetes/05-clusterqueues.yaml",
    "kubernetes/06-localqueues.yaml",
    "kubernetes/07-resourcequotas.yaml",
    "kubernetes/08-networkpolicies.yaml",
    "kubernetes/09-persistentvolumes.yaml",
    "kubernetes/10-persistentvolumeclaims.yaml",
    "opensm/partitions.conf",
    "nfs/exports",
}


def guids(*hostnames: str) -> list[str]:
    rows = ComputeTray.objects.filter(hostname__in=hostnames).values_list("ib_port_guids", flat=True)
    return sorted(g for row in rows for g in row)


@pytest.fixture
def tenants(demo_inventory):
    """Inference owns gb-r02's p2 (dedicated); Research runs a job on gb-r03-t01 and t02."""
    inference = make_department("Inference", guaranteed_gpus=36, limit_gpus=72)
    research = make_department("Research", guaranteed_gpus=16)
    dedicate_partition(inference, NVLinkPartition.objects.get(rack__name="gb-r02", name="p2"))
    run_job(research, trays=["gb-r03-t01", "gb-r03-t02"])
    # A pending job (no allocations) and a finished one do not make a department a member anywhere.
    make_job(research, "waiting", JobState.PENDING, gpus=8)
    return inference, research


def test_topology_conf_for_the_demo(tenants):
    files = configstate.render_files(configstate.build_state())

    # gb-r02 is carved 2x9: the smallest partition (9 trays) is the base block, so the uncarved racks are
    # written as two base blocks each and the level of 18 keeps each rack together.
    assert files["slurm/topology.conf"] == "\n".join(
        [
            MANAGED_HEADER,
            "BlockName=r01-1 Nodes=gb-r01-t[01-09]",
            "BlockName=r01-2 Nodes=gb-r01-t[10-18]",
            "BlockName=r02p1 Nodes=gb-r02-t[01-09]",
            "BlockName=r02p2 Nodes=gb-r02-t[10-18]",
            "BlockName=r03-1 Nodes=gb-r03-t[01-09]",
            "BlockName=r03-2 Nodes=gb-r03-t[10-18]",
            "BlockSizes=9,18",
            "",
        ]
    )


def test_one_slurm_partition_per_service_tier(tenants):
    files = configstate.render_files(configstate.build_state())

    assert files["slurm/rackplane.conf"] == "\n".join(
        [
            MANAGED_HEADER,
            # Every tray is a node (the drained one too: its state is slurmd's, not the file's).
            "NodeName=gb-r[01-03]-t[01-18] CPUs=144 Gres=gpu:4 State=UNKNOWN",
            # The shared tier: every tray outside a dedicated partition; the default partition.
            "PartitionName=gpu Nodes=gb-r02-t[01-09],gb-r[01,03]-t[01-18] Default=YES MaxTime=INFINITE "
            "PriorityTier=1 OverSubscribe=EXCLUSIVE State=UP",
            # One per department with dedicated partitions: only its two QOS, served first.
            "PartitionName=inference Nodes=gb-r02-t[10-18] Default=NO AllowQos=inference,inference--borrowed "
            "MaxTime=INFINITE PriorityTier=10 OverSubscribe=EXCLUSIVE State=UP",
            "",
        ]
    )


def test_a_partition_named_service_tier_becomes_its_own_slurm_partition(tenants):
    # The wizard's "Slurm partition" field: gb-r02 p1 (undedicated) gets a tier of its own.
    NVLinkPartition.objects.filter(rack__name="gb-r02", name="p1").update(service_tier="gpu_interactive")
    files = configstate.render_files(configstate.build_state())
    conf = files["slurm/rackplane.conf"]
    assert "PartitionName=gpu Nodes=gb-r[01,03]-t[01-18] Default=YES" in conf
    assert (
        "PartitionName=gpu_interactive Nodes=gb-r02-t[01-09] Default=NO MaxTime=INFINITE PriorityTier=1 "
        "OverSubscribe=EXCLUSIVE State=UP"
    ) in conf
    assert "PartitionName=inference Nodes=gb-r02-t[10-18] Default=NO AllowQos=inference" in conf
    assert f"{SERVICE_TIER_LABEL}: gpu_interactive" in files["kubernetes/02-nodes.yaml"]


def test_qos_per_department(tenants):
    state = configstate.build_state()
    # Its own at the guarantee, the borrowed one without a GPU limit of its own (the account's holds it).
    assert [(q.name, q.gpu_limit) for q in state.qos] == [
        ("inference", 36),
        ("inference--borrowed", None),
        ("research", 16),
        ("research--borrowed", None),
    ]


def test_opensm_members_are_the_trays_a_department_owns_or_runs_on(tenants):
    _, research = tenants
    state = configstate.build_state()
    members = {t.slug: sorted(t.port_guids) for t in state.tenants}

    dedicated = [f"gb-r02-t{slot:02d}" for slot in range(10, 19)]
    assert members["inference"] == guids(*dedicated)
    assert members["research"] == guids("gb-r03-t01", "gb-r03-t02")
    conf = configstate.render_files(state)["opensm/partitions.conf"]
    lines = conf.splitlines()
    assert lines[0] == "Default=0x7fff, ipoib : ALL=full ;"
    research_line = next(line for line in lines if line.startswith("research="))
    assert research_line == (
        f"research={research.pkey_hex}, ipoib, defmember=full : "
        + ", ".join(f"{g}=full" for g in guids("gb-r03-t01", "gb-r03-t02"))
        + " ;"
    )
    inference_line = next(line for line in lines if line.startswith("inference="))
    assert all(f"{g}=full" in inference_line for g in guids(*dedicated))


def test_a_finished_job_is_no_membership(tenants):
    _, research = tenants
    Job.objects.filter(department=research, state=JobState.RUNNING).update(state=JobState.COMPLETED)
    state = configstate.build_state()
    assert {t.slug: t.port_guids for t in state.tenants}["research"] == ()


def test_render_files_keys_exactly(tenants):
    files = configstate.render_files(configstate.build_state())
    assert set(files) == EXPECTED_FILES
    assert files["nfs/exports"].splitlines() == [
        "/exports/tenants/inference 10.64.0.0/24(rw,sync,no_subtree_check,root_squash)",
        "/exports/tenants/research 10.64.1.0/24(rw,sync,no_subtree_check,root_squash)",
    ]


def test_without_departments_only_kinds_with_objects_have_files(demo_inventory):
    files = configstate.render_files(configstate.build_state())
    assert set(files) == {
        "slurm/topology.conf",
        "slurm/rackplane.conf",
        "kubernetes/02-nodes.yaml",
        "kubernetes/03-topologies.yaml",
        "kubernetes/04-resourceflavors.yaml",
        "opensm/partitions.conf",
        "nfs/exports",
    }
    assert files["nfs/exports"] == ""


def test_kubernetes_labels_follow_the_service_tiers(tenants):
    objects = configstate.kubernetes_objects(configstate.build_state())
    nodes = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects if o["kind"] == "Node"}
    assert nodes["gb-r02-t10"][DEPARTMENT_LABEL] == "inference"
    assert nodes["gb-r02-t10"][SERVICE_TIER_LABEL] == "inference"
    assert nodes["gb-r01-t01"][SERVICE_TIER_LABEL] == "gpu"
    assert DEPARTMENT_LABEL not in nodes["gb-r01-t01"]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"} == {"inference", "research"}


def test_fast_yaml_is_byte_identical_to_the_tenancy_renderer(tenants):
    objects = configstate.kubernetes_objects(configstate.build_state())
    files = configstate.kubernetes_files(objects)
    by_kind: dict[str, list] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    for kind, items in by_kind.items():
        assert files[configstate.KUBERNETES_FILES[kind]] == to_yaml(items)


def test_rendering_is_deterministic(tenants):
    assert configstate.render_files(configstate.build_state()) == configstate.render_files(
        configstate.build_state()
    )


def test_fabric_racks_hold_every_gpu_by_partition(demo_inventory):
    racks = configstate.fabric_racks(configstate.build_state(fabric=True))
    assert [r["rack"] for r in racks] == ["gb-r01", "gb-r02", "gb-r03"]
    carved = racks[1]
    assert [(p["name"], p["partition_id"], len(p["gpus"])) for p in carved["partitions"]] == [
        ("p1", 1, 36),
        ("p2", 2, 36),
    ]
    assert carved["domain"] == str(Rack.objects.get(name="gb-r02").cluster_uuid)
    uuid, slot, index = carved["partitions"][1]["gpus"][0]
    gpu = Gpu.objects.select_related("tray").get(uuid=uuid)
    assert (gpu.tray.slot, gpu.index) == (slot, index)


def test_slurm_node_overrides_for_a_target(demo_inventory):
    state = configstate.build_state()
    nodes = configstate.slurm_nodes(
        state,
        cpus=4,
        memory_mb=1000,
        node_hostname="localhost",
        node_address="127.0.0.1",
        node_port_base=17000,
    )
    by_name = {n.hostname: n for n in nodes}
    assert by_name["gb-r01-t01"].port == 17000
    assert by_name["gb-r01-t18"].port == 17017
    assert by_name["gb-r02-t01"].port == 17018
    text = configstate.slurm_files(state, cpus=4, node_address="127.0.0.1", node_port_base=17000)[
        "rackplane.conf"
    ]
    assert "NodeName=gb-r[01-03]-t[01-18] NodeAddr=127.0.0.1 Port=[17000-17053] CPUs=4 Gres=gpu:4" in text


def test_block_names():
    assert configstate.short_rack_names(["gb-r01", "gb-r02"]) == {"gb-r01": "r01", "gb-r02": "r02"}
    # Two halls with the same rack numbers: the full names keep blocks unique.
    assert configstate.short_rack_names(["a-r01", "b-r01"]) == {"a-r01": "a-r01", "b-r01": "b-r01"}
    assert configstate.block_name("r02", "p1", 1) == "r02p1"
    assert configstate.block_name("r01", "default", 32766) == "r01"
    assert configstate.block_name("r01", "big one", 3) == "r01big-one"


def test_a_carving_slurm_24_11_cannot_express_is_refused_with_the_reason(demo_inventory):
    rack = Rack.objects.get(name="gb-r03")
    ComputeTray.objects.filter(rack=rack).update(partition=None)
    NVLinkPartition.objects.filter(rack=rack).delete()
    for number, start in enumerate((1, 7, 13), 1):
        partition = NVLinkPartition.objects.create(rack=rack, clique_id=number, name=f"p{number}")
        ComputeTray.objects.filter(rack=rack, slot__gte=start, slot__lt=start + 6).update(partition=partition)

    with pytest.raises(ValueError, match=r"Slurm 24\.11 cannot express NVLink partition"):
        configstate.render_files(configstate.build_state())


def test_malformed_port_guids_are_left_out_and_reported(tenants):
    ComputeTray.objects.filter(hostname="gb-r02-t10").update(ib_port_guids=["0x12", "0x" + "0" * 16])
    state = configstate.build_state()
    assert len(state.problems) == 2
    assert "gb-r02-t10" in state.problems[0]
    assert configstate.render_files(state)["opensm/partitions.conf"]


def _add_racks(count: int) -> None:
    """More carved racks with trays and GPUs, the way the demo seeds them (bulk)."""
    start = Rack.objects.count() + 1
    racks = Rack.objects.bulk_create(Rack(name=f"gb-r{n:02d}") for n in range(start, start + count))
    partitions = NVLinkPartition.objects.bulk_create(
        NVLinkPartition(rack=rack, clique_id=c, name=f"p{c}") for rack in racks for c in (1, 2)
    )
    trays = ComputeTray.objects.bulk_create(
        ComputeTray(
            rack=p.rack,
            slot=slot,
            hostname=f"{p.rack.name}-t{slot:02d}",
            partition=p,
            ib_port_guids=[f"0x{0xB000000000000000 + p.rack_id * 100 + slot:016x}"],
        )
        for p in partitions
        for slot in (range(1, 10) if p.clique_id == 1 else range(10, 19))
    )
    Gpu.objects.bulk_create(
        Gpu(tray=t, index=i, uuid=f"GPU-{t.hostname}-{i}") for t in trays for i in range(4)
    )


def test_query_count_does_not_grow_with_racks(tenants):
    def count(fabric: bool) -> int:
        configstate.forget_kept()  # a cold read (a kept one reads only the racks changed since)
        with CaptureQueriesContext(connection) as queries:
            configstate.build_state(fabric=fabric)
        return len(queries)

    configstate.build_state()  # once a process: whether the database logs changes (integrations.kept_rows)

    small = (count(False), count(True))
    _add_racks(6)
    _, research = tenants
    run_job(research, trays=["gb-r05-t01", "gb-r06-t10"])
    large = (count(False), count(True))

    assert large == small
    # 8 before slurmdbd's associations, whose three queries (POSIX accounts, department and project
    # memberships: integrations.state._submitters) read everyone at once; on PostgreSQL one more, the check
    # of the render's change log (integrations.kept_rows).
    assert small[0] <= 11 + kept_rows.has_log()
    assert len(configstate.build_state().slurm.nodes) == 9 * 18


def test_block_names_that_run_together_are_told_apart(demo_inventory):
    # Rack gb-r0's partition "2" and rack gb-r02 both shorten to `r02`: each gets `<rack>.<partition>`.
    Rack.objects.filter(name="gb-r02").update(name="gb-r0")
    Rack.objects.filter(name="gb-r03").update(name="gb-r02")
    NVLinkPartition.objects.filter(rack__name="gb-r0", name="p1").update(name="2")
    topology = configstate.render_files(configstate.build_state())["slurm/topology.conf"]
    names = [line.split()[0] for line in topology.splitlines() if line.startswith("BlockName=")]
    assert len(names) == len(set(names)), topology
    assert "BlockName=gb-r0.2 " in topology and "BlockName=gb-r02.default-1 " in topology
    assert "BlockName=r0p2 " in topology  # a name given once keeps its short form
