"""Reconciling node reports with the inventory: inventory.ingest.reports: ingest_report / check_report."""

import uuid

import pytest
from django.utils import timezone

from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
from inventory.ingest.gpus import CLAIM_WINDOW
from inventory.ingest.reports import check_report, ingest_report
from inventory.ingest.results import UnknownHost
from inventory.models import ComputeTray, Gpu, Rack

pytestmark = pytest.mark.django_db


def reported(tray: ComputeTray, clique_id: int | None = None, cluster: str | None = None, **changes) -> list:
    """What the tray's GPUs would report today; `changes` maps a GPU index to field overrides."""
    cluster = cluster or str(tray.rack.cluster_uuid)
    clique_id = clique_id if clique_id is not None else tray.partition.clique_id
    gpus = []
    for gpu in tray.gpus.order_by("index"):
        fields = dict(
            uuid=gpu.uuid,
            index=gpu.index,
            cluster_uuid=cluster,
            clique_id=clique_id,
            state=FabricState.COMPLETED,
            status="Success",
            health=GpuHealth.HEALTHY,
        )
        fields.update(changes.get(f"gpu{gpu.index}", {}))
        gpus.append(ReportedGpu(**fields))
    return gpus


@pytest.fixture
def tray(demo_inventory):
    return ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r01-t01")


def test_a_consistent_report_changes_nothing_but_freshness(tray):
    before = list(tray.gpus.values_list("uuid", "index", "reported_clique_id"))
    result = ingest_report(tray.hostname, "json", reported(tray))
    tray.refresh_from_db()
    assert result.applied and not result.drift and not result.report.problems
    assert result.created == result.moved == result.removed == []
    assert tray.fabric_problems == []
    assert tray.reported_clique == f"{tray.rack.cluster_uuid}.32766"
    assert tray.last_report["host"] == "gb-r01-t01" and tray.last_report_at is not None
    assert list(tray.gpus.values_list("uuid", "index", "reported_clique_id")) == before
    assert set(tray.gpus.values_list("last_report_at", flat=True)) == {tray.last_report_at}


def test_unknown_gpus_are_created_and_gpus_no_longer_reported_are_detached_not_lost(tray):
    gpus = reported(tray)
    replaced = gpus[3].uuid
    gpus[3] = ReportedGpu(
        **{**gpus[3].__dict__, "uuid": "GPU-" + str(uuid.uuid4()), "serial": "1650000000001"}
    )
    result = ingest_report(tray.hostname, "json", gpus)
    assert result.created == [gpus[3].uuid] and result.removed == [replaced]
    new = Gpu.objects.get(uuid=gpus[3].uuid)
    assert (new.tray_id, new.index, new.serial) == (tray.pk, 3, "1650000000001")
    old = Gpu.objects.get(uuid=replaced)
    assert old.tray is None and old.index is None


def test_a_gpu_that_moved_to_another_tray_is_followed(tray):
    other = ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r01-t02")
    gpus = reported(other)
    moving = tray.gpus.get(index=0)
    # Its old tray last reported it longer ago than the claim window (else it stays: test_report_validation).
    Gpu.objects.filter(pk=moving.pk).update(last_report_at=timezone.now() - CLAIM_WINDOW * 2)
    displaced = gpus[0].uuid
    gpus[0] = ReportedGpu(**{**gpus[0].__dict__, "uuid": moving.uuid})
    result = ingest_report(other.hostname, "json", gpus)
    moving.refresh_from_db()
    assert result.moved == [moving.uuid] and result.removed == [displaced]
    assert (moving.tray_id, moving.index) == (other.pk, 0)
    assert tray.gpus.count() == 3


def test_gpus_swapping_indexes_on_one_tray_do_not_trip_the_unique_constraint(tray):
    gpus = reported(tray)
    gpus[0], gpus[1] = (
        ReportedGpu(**{**gpus[1].__dict__, "index": 0}),
        ReportedGpu(**{**gpus[0].__dict__, "index": 1}),
    )
    ingest_report(tray.hostname, "json", gpus)
    assert list(tray.gpus.order_by("index").values_list("uuid", flat=True))[:2] == [
        gpus[0].uuid,
        gpus[1].uuid,
    ]


def test_the_rack_learns_its_cluster_uuid_from_its_first_consistent_report(tray):
    learned = str(uuid.uuid4())
    Rack.objects.filter(pk=tray.rack_id).update(cluster_uuid=None)
    tray.refresh_from_db()
    result = ingest_report(tray.hostname, "json", reported(tray, cluster=learned))
    assert result.learned_cluster_uuid == learned
    assert str(Rack.objects.get(pk=tray.rack_id).cluster_uuid) == learned


def test_a_cluster_uuid_owned_by_another_rack_is_not_learned(tray):
    other = Rack.objects.get(name="gb-r02")
    Rack.objects.filter(pk=tray.rack_id).update(cluster_uuid=None)
    tray.refresh_from_db()
    result = ingest_report(tray.hostname, "json", reported(tray, cluster=str(other.cluster_uuid)))
    assert result.learned_cluster_uuid is None
    assert Rack.objects.get(pk=tray.rack_id).cluster_uuid is None
    assert any("gb-r02" in problem for problem in result.report.problems)


def test_a_cluster_uuid_differing_from_the_racks_is_a_problem(tray):
    result = ingest_report(tray.hostname, "json", reported(tray, cluster=str(uuid.uuid4())))
    tray.refresh_from_db()
    assert any("differs from the rack" in problem for problem in tray.fabric_problems)
    assert result.report.tray_clique is not None


def test_drift_is_flagged_when_the_node_reports_another_partition(tray):
    result = ingest_report(tray.hostname, "json", reported(tray, clique_id=5))
    tray.refresh_from_db()
    assert result.drift == [
        "drift: the node reports clique 5, the inventory intends gb-r01 default (clique 32766)"
    ]
    assert result.drift[0] in tray.fabric_problems
    assert tray.gpus.filter(reported_clique_id=5).count() == 4


def test_health_changes_reach_only_the_gpus_that_changed(tray):
    limited = {"health": GpuHealth.LIMITED_CAPACITY}
    ingest_report(tray.hostname, "json", reported(tray, gpu1=limited))
    assert dict(tray.gpus.values_list("index", "health")) == {
        0: "healthy",
        1: "limited_capacity",
        2: "healthy",
        3: "healthy",
    }


def test_a_problem_report_keeps_the_previous_good_fabric_values(tray):
    good = tray.reported_clique
    in_progress = {"state": FabricState.IN_PROGRESS, "status": None, "cluster_uuid": None, "clique_id": None}
    result = ingest_report(tray.hostname, "json", reported(tray, gpu2=in_progress))
    tray.refresh_from_db()
    gpu = tray.gpus.get(index=2)
    assert result.report.tray_clique is None
    assert any("in progress" in problem for problem in tray.fabric_problems)
    assert tray.reported_clique == good
    assert gpu.fabric_state == "in_progress"
    assert (str(gpu.reported_cluster_uuid), gpu.reported_clique_id) == (str(tray.rack.cluster_uuid), 32766)
    # A later good report clears the problems.
    ingest_report(tray.hostname, "json", reported(tray))
    tray.refresh_from_db()
    assert tray.fabric_problems == []


def test_an_unknown_host_is_refused_and_nothing_is_written(demo_inventory):
    gpus = [
        ReportedGpu(
            "GPU-" + str(uuid.uuid4()), 0, None, None, FabricState.NOT_SUPPORTED, None, GpuHealth.UNKNOWN
        )
    ]
    with pytest.raises(UnknownHost, match="not in the inventory"):
        ingest_report("gb-r77-t01", "json", gpus)
    assert not Gpu.objects.filter(uuid=gpus[0].uuid).exists()


def test_check_report_writes_nothing_and_works_for_unknown_hosts(tray):
    result = check_report(tray.hostname, "json", reported(tray, clique_id=7))
    tray.refresh_from_db()
    assert not result.applied and result.drift and tray.fabric_problems == []
    assert not tray.gpus.filter(reported_clique_id=7).exists()
    alone = check_report("new-host", "json", reported(tray))
    assert alone.report.host == "new-host" and alone.drift == []
