"""NVLink fabric-manager adapters against a local NMX-M stand-in, and the simulated default.

No database needed. The stand-in (tests/integrations/nmx_standin.py) serves the NMX-M partition API on
127.0.0.1 with GPU IDs in NMX-M's own form (24 hex digits) and an ID-based default partition, so the adapter
has to translate GPU UUIDs through locations and GET /nmx/v1/gpus exactly as against a real manager.
"""

from __future__ import annotations

import random
import uuid

import pytest

from integrations.fabric import (
    DEFAULT_PARTITION_ID,
    FabricInvalid,
    FabricManager,
    FabricPartition,
    FabricRejected,
    FabricUnavailable,
    GpuLocation,
    NmxFabricManager,
    SimulatedFabricManager,
)
from integrations.fabric.base import check_step_order, plan_changes
from tests.integrations.nmx_standin import NmxStandin, StandinGpu

RACK = "6f1c3a52-8d3e-4b7a-9a51-0c2f4e6d8b10"  # cluster UUID of rack gb-r01: one NVLink domain
OTHER_RACK = "0b9d7e21-3c4f-4a6b-8e5d-1f2a3b4c5d6e"
TRAYS, GPUS_PER_TRAY = 18, 4


def gpu_uuid(domain: str, slot: int, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.UUID(domain), f"{slot}.{index}"))


def tray_gpus(domain: str, slots) -> tuple[str, ...]:
    return tuple(gpu_uuid(domain, s, i) for s in slots for i in range(GPUS_PER_TRAY))


def rack_gpus(domain: str, *, nmx_ids: bool = True) -> list[StandinGpu]:
    gpus = []
    for slot in range(1, TRAYS + 1):
        for index in range(GPUS_PER_TRAY):
            uid = gpu_uuid(domain, slot, index)
            gpu_id = uuid.uuid5(uuid.UUID(domain), uid).hex[:24] if nmx_ids else uid
            gpus.append(StandinGpu(gpu_id, uid, domain, 1, slot, 1, index))
    return gpus


def locations(*domains: str) -> dict[str, GpuLocation]:
    return {
        gpu_uuid(d, slot, index): GpuLocation.for_tray(d, slot, index)
        for d in domains
        for slot in range(1, TRAYS + 1)
        for index in range(GPUS_PER_TRAY)
    }


def carve(domain: str, *sizes: int, first_id: int = 1) -> list[FabricPartition]:
    """Partitions p1.. of consecutive trays of the given sizes, IDs from first_id."""
    partitions, slot = [], 1
    for number, size in enumerate(sizes):
        partitions.append(
            FabricPartition(
                f"p{number + 1}", first_id + number, tray_gpus(domain, range(slot, slot + size)), domain
            )
        )
        slot += size
    return partitions


def default(domain: str, name: str = "default") -> list[FabricPartition]:
    return [FabricPartition(name, DEFAULT_PARTITION_ID, tray_gpus(domain, range(1, TRAYS + 1)), domain)]


@pytest.fixture
def standin():
    server = NmxStandin()
    server.add_domain(RACK, rack_gpus(RACK))
    server.add_domain(OTHER_RACK, rack_gpus(OTHER_RACK))
    with server:
        yield server


def nmx(server: NmxStandin, **options) -> NmxFabricManager:
    options.setdefault("locations", locations(RACK, OTHER_RACK))
    options.setdefault("poll_timeout", 5.0)
    return NmxFabricManager(server.url, poll_interval=0.001, max_poll_interval=0.004, **options)


class Progress:
    def __init__(self):
        self.calls: list[tuple[int, int, str]] = []

    def __call__(self, step: int, total: int, message: str) -> None:
        self.calls.append((step, total, message))


def writes(server: NmxStandin) -> list[tuple[str, str]]:
    """(method, partition name) of every write the stand-in received."""
    return [
        (r.method, r.body["Name"] if r.method == "POST" else server.name_of(r.path.rsplit("/", 1)[-1]))
        for r in server.writes
    ]


# --- the 2x9 carve against the stand-in -----------------------------------------------------------------


def test_carving_the_default_partition_into_2x9(standin):
    fabric = nmx(standin)
    assert isinstance(fabric, FabricManager)
    assert fabric.read_back(RACK) == [
        FabricPartition("Default Partition", DEFAULT_PARTITION_ID, tray_gpus(RACK, range(1, 19)), RACK)
    ]
    desired = carve(RACK, 9, 9)
    progress = Progress()

    result = fabric.apply(RACK, desired, progress=progress)

    # Remove before add: the default partition gives up the GPUs, then the two partitions are created.
    assert [(o.step.action, o.step.name) for o in result.done] == [
        ("shrink", "Default Partition"),
        ("create", "p1"),
        ("create", "p2"),
    ]
    assert result.complete and result.failed is None and not result.not_done
    assert writes(standin) == [("PUT", "Default Partition"), ("POST", "p1"), ("POST", "p2")]
    # The default partition is ID-based (GPU IDs); new partitions are written with location members and
    # without a PartitionID (NMX-M assigns it).
    put, post_p1, _ = standin.writes
    assert put.body == {"Members": []}
    assert set(post_p1.body) == {"Name", "Members"}
    assert post_p1.body["Members"][0] == {
        "DomainUUID": RACK,
        "ChassisID": 1,
        "SlotID": 1,
        "HostID": 1,
        "DeviceID": 0,
    }
    assert len(post_p1.body["Members"]) == 36
    # Every operation was followed to completion (pending -> in-progress -> completed).
    assert all(o.operation_id and o.status == "completed" for o in result.done)
    assert [o.partition_id for o in result.done] == [None, 1, 2]

    assert progress.calls == [
        (0, 3, f"domain {RACK}: 3 changes to apply"),
        (1, 3, "step 1/3 done: remove 72 GPUs from the default partition (ID 32766), 0 stay"),
        (2, 3, "step 2/3 done: create partition p1: 36 GPUs"),
        (3, 3, "step 3/3 done: create partition p2: 36 GPUs"),
    ]

    assert fabric.read_back(RACK) == desired == result.read_back
    assert result.assigned_ids == {"p1": 1, "p2": 2} and result.renumbered == {}
    assert {p.health for p in result.read_back} == {"HEALTHY"}
    # The empty default partition stays on the fabric (it can grow again) and the other rack is untouched.
    assert standin.partitions(RACK)["Default Partition"] == (DEFAULT_PARTITION_ID, [])
    assert fabric.read_back(OTHER_RACK) == [
        FabricPartition(
            "Default Partition", DEFAULT_PARTITION_ID, tray_gpus(OTHER_RACK, range(1, 19)), OTHER_RACK
        )
    ]


def test_reapplying_the_same_partitions_is_a_no_op(standin):
    fabric = nmx(standin)
    fabric.apply(RACK, carve(RACK, 9, 9))
    before = len(standin.writes)
    progress = Progress()

    assert fabric.diff(RACK, carve(RACK, 9, 9)).is_empty
    result = fabric.apply(RACK, carve(RACK, 9, 9), progress=progress)

    assert len(standin.writes) == before
    assert not result.changed and result.done == []
    assert progress.calls == [(0, 0, f"domain {RACK}: the fabric already runs the planned partitions")]
    assert result.read_back == carve(RACK, 9, 9)


def test_diff_gives_gpu_level_detail_and_the_step_order(standin):
    fabric = nmx(standin)
    diff = fabric.diff(RACK, carve(RACK, 9, 9))

    assert standin.writes == []
    assert [c.name for c in diff.creates] == ["p1", "p2"]
    assert [(c.name, len(c.removed), c.added) for c in diff.updates] == [("Default Partition", 72, ())]
    assert diff.deletes == []
    assert diff.creates[0].added == tuple(sorted(tray_gpus(RACK, range(1, 10))))
    assert diff.moves[gpu_uuid(RACK, 10, 3)] == ("Default Partition", "p2")
    assert [s.action for s in diff.steps] == ["shrink", "create", "create"]
    assert diff.summary()[0] == "remove 72 GPUs from the default partition (ID 32766), 0 stay"


def test_recarving_moves_gpus_out_before_it_moves_them_in(standin):
    """2x9 -> 3x6: trays 7-9 go p1 -> p2, trays 13-18 go p2 -> p3 (new)."""
    fabric = nmx(standin)
    fabric.apply(RACK, carve(RACK, 9, 9))
    start = len(standin.writes)
    desired = carve(RACK, 6, 6, 6)

    diff = fabric.diff(RACK, desired)
    assert [(s.action, s.name, len(s.added), len(s.removed)) for s in diff.steps] == [
        ("shrink", "p1", 0, 12),
        ("shrink", "p2", 0, 24),
        ("create", "p3", 24, 0),
        ("grow", "p2", 12, 0),
    ]
    assert check_step_order(fabric.read_back(RACK), diff.steps) == []
    assert diff.moves[gpu_uuid(RACK, 7, 0)] == ("p1", "p2")
    assert diff.moves[gpu_uuid(RACK, 13, 0)] == ("p2", "p3")

    result = fabric.apply(RACK, desired)

    assert [(w[0], w[1]) for w in writes(standin)[start:]] == [
        ("PUT", "p1"),
        ("PUT", "p2"),
        ("POST", "p3"),
        ("PUT", "p2"),
    ]
    assert fabric.read_back(RACK) == desired
    assert result.assigned_ids == {"p1": 1, "p2": 2, "p3": 3}


def test_a_gpu_another_client_took_mid_apply_stops_the_apply_with_the_fabrics_words(standin):
    """NMX-M refuses (409) a GPU that is still in another partition. Another client takes tray 18 into a
    partition of its own while Rackplane carves 2x9: the create of p2 is refused, the apply stops there and
    says so (permanent: re-plan rather than retry blindly), and applying again reads the fabric back and
    converges."""
    fabric = nmx(standin)
    tray_18 = [g.id for g in rack_gpus(RACK) if g.slot_id == 18]

    def another_client_takes_tray_18(step: int, total: int, message: str) -> None:
        if step == 1:  # the default partition has just given its GPUs up
            standin.add_partition("lab", RACK, tray_18, partition_id=40)

    with pytest.raises(FabricRejected) as caught:
        fabric.apply(RACK, carve(RACK, 9, 9), progress=another_client_takes_tray_18)

    error = caught.value
    assert (error.status, error.partition, error.transient) == (409, "p2", False)
    taken = rack_gpus(RACK)[68].id  # tray 18's first GPU
    assert "already belongs to partition lab (PartitionID 40)" in error.message
    assert f"GPU {taken}" in error.message
    assert "another partition holds these GPUs" in error.what_to_do
    assert [(o.step.action, o.step.name) for o in error.result.done] == [
        ("shrink", "Default Partition"),
        ("create", "p1"),
    ]
    assert error.result.failed.name == "p2" and error.result.not_done == []
    assert writes(standin) == [("PUT", "Default Partition"), ("POST", "p1"), ("POST", "p2")]
    assert set(standin.partitions(RACK)) == {"Default Partition", "p1", "lab"}

    result = fabric.apply(RACK, carve(RACK, 9, 9))
    assert [(o.step.action, o.step.name) for o in result.done] == [("delete", "lab"), ("create", "p2")]
    assert fabric.read_back(RACK) == carve(RACK, 9, 9)


def test_uncarving_returns_every_gpu_to_the_default_partition(standin):
    fabric = nmx(standin)
    fabric.apply(RACK, carve(RACK, 9, 9))
    start = len(standin.writes)

    result = fabric.apply(RACK, default(RACK))  # the inventory calls it "default": matched by ID 32766

    assert writes(standin)[start:][:2] == [("DELETE", "p1"), ("DELETE", "p2")]
    assert standin.writes[-1].method == "PUT"
    assert [o.step.action for o in result.done] == ["delete", "delete", "grow"]
    assert fabric.read_back(RACK) == [
        FabricPartition("Default Partition", DEFAULT_PARTITION_ID, tray_gpus(RACK, range(1, 19)), RACK)
    ]
    # The fabric's name stays (NMX-M cannot rename); a second apply changes nothing.
    assert fabric.diff(RACK, default(RACK)).is_empty


def test_the_default_partition_covers_what_carved_partitions_do_not(standin):
    fabric = nmx(standin)
    fabric.apply(RACK, carve(RACK, 9, 9))
    only_p1 = carve(RACK, 9)

    result = fabric.apply(RACK, only_p1)

    assert [(o.step.action, o.step.name) for o in result.done] == [
        ("delete", "p2"),
        ("grow", "Default Partition"),
    ]
    assert fabric.read_back(RACK) == [
        *only_p1,
        FabricPartition("Default Partition", DEFAULT_PARTITION_ID, tray_gpus(RACK, range(10, 19)), RACK),
    ]


def test_the_fabric_assigns_partition_ids_and_the_result_reports_them(standin):
    fabric = nmx(standin)
    desired = carve(RACK, 9, 9, first_id=7)

    result = fabric.apply(RACK, desired)

    assert result.assigned_ids == {"p1": 1, "p2": 2}
    assert result.renumbered == {"p1": (7, 1), "p2": (8, 2)}
    assert "update the inventory's clique IDs" in result.log[-1]
    # Re-applying with the IDs the caller took over is a no-op; with the old ones nothing is changed either
    # (an ID cannot be changed on the fabric): the mismatch is reported.
    assert fabric.diff(RACK, carve(RACK, 9, 9)).is_empty
    diff = fabric.diff(RACK, desired)
    assert diff.is_empty and diff.id_mismatches == [("p1", 1, 7), ("p2", 2, 8)]


# --- failures ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_a_failed_operation_stops_the_apply_and_says_what_was_done(standin, status):
    fabric = nmx(standin)
    standin.fail_next_operation("NVLink switch tray 3 does not answer", status=status, after=1)
    progress = Progress()

    with pytest.raises(FabricRejected) as caught:
        fabric.apply(RACK, carve(RACK, 9, 9), progress=progress)

    error = caught.value
    assert not error.transient
    assert error.partition == "p1"
    assert error.operation_id
    assert f"ended {status}: {status.upper()}: NVLink switch tray 3 does not answer" in error.message
    assert "create partition p1" in str(error)
    assert [o.step.action for o in error.result.done] == ["shrink"]
    assert error.result.failed.name == "p1"
    assert [s.name for s in error.result.not_done] == ["p2"]
    assert "not attempted: create partition p2: 36 GPUs" in str(error)
    # Later steps were not sent; the fabric is where the error says it is.
    assert writes(standin) == [("PUT", "Default Partition"), ("POST", "p1")]
    assert set(standin.partitions(RACK)) == {"Default Partition"}
    assert progress.calls[-1][0] == 1

    # Retrying finishes the job: it reads back and does only what is missing.
    result = fabric.apply(RACK, carve(RACK, 9, 9))
    assert [(o.step.action, o.step.name) for o in result.done] == [("create", "p1"), ("create", "p2")]
    assert fabric.read_back(RACK) == carve(RACK, 9, 9)


def test_a_fabric_manager_that_is_down_is_unavailable(standin):
    fabric = nmx(standin)
    standin.stop()

    with pytest.raises(FabricUnavailable) as caught:
        fabric.read_back(RACK)
    assert caught.value.transient
    assert "not reachable" in caught.value.message
    with pytest.raises(FabricUnavailable):
        fabric.apply(RACK, carve(RACK, 9, 9))

    standin.start()  # same port, same state: a retry works
    assert standin.writes == []
    assert fabric.apply(RACK, carve(RACK, 9, 9)).complete


def test_a_server_error_is_unavailable_and_a_refusal_is_rejected(standin):
    fabric = nmx(standin)
    standin.fail_next_requests(500, message="database is restarting")
    with pytest.raises(FabricUnavailable, match="HTTP 500: database is restarting"):
        fabric.read_back(RACK)

    # A 5xx on a write midway: transient, with the partial result.
    standin.fail_next_requests(503, methods=("POST",))
    with pytest.raises(FabricUnavailable) as caught:
        fabric.apply(RACK, carve(RACK, 9, 9))
    assert caught.value.status == 503 and caught.value.partition == "p1"
    assert [o.step.action for o in caught.value.result.done] == ["shrink"]

    # A 4xx: permanent, with the fabric manager's words.
    plain = nmx(standin, locations=None)  # GPU UUIDs used as NMX-M GPU IDs: the stand-in knows none
    with pytest.raises(FabricRejected) as caught:
        plain.apply(RACK, [FabricPartition("p9", 9, ("GPU-not-on-this-fabric",), RACK)])
    assert caught.value.status == 400
    assert "unknown GPU ID(s) GPU-not-on-this-fabric" in caught.value.message


def test_credentials_are_sent_as_basic_auth(standin):
    standin.token = "cnctdXNlcjpzZWNyZXQ="  # base64 of rw-user:secret
    with pytest.raises(FabricRejected) as caught:
        nmx(standin).read_back(RACK)
    assert caught.value.status == 401 and "credentials" in caught.value.what_to_do
    assert len(nmx(standin, token="cnctdXNlcjpzZWNyZXQ=").read_back(RACK)) == 1
    assert len(nmx(standin, username="rw-user", password="secret").read_back(RACK)) == 1


# --- where the API is served: /nmx/v1 (NMX-M, NetQ 5.0) or /v1 (NetQ 5.2) -------------------------------


def paths(server: NmxStandin) -> list[str]:
    return [f"{r.method} {r.path}" for r in server.requests]


@pytest.mark.parametrize("prefix", ["/v1", "/nmx/v1"])
def test_the_path_the_server_serves_is_found_then_used_for_everything(standin, prefix):
    standin.prefix = prefix
    fabric = nmx(standin)
    result = fabric.apply(RACK, carve(RACK, 9, 9))
    assert result.complete and fabric.facts == {"nmx_api": prefix}
    # Newest first: /v1, then /nmx/v1; once found, every read, write and poll goes there.
    probes = ["GET /v1/partitions"] + (["GET /nmx/v1/partitions"] if prefix == "/nmx/v1" else [])
    assert paths(standin)[: len(probes)] == probes
    assert all(path.split(" ", 1)[1].startswith(f"{prefix}/") for path in paths(standin)[len(probes) :])
    assert [p.name for p in fabric.read_back(RACK)] == ["p1", "p2"]


@pytest.mark.parametrize("prefix", ["/v1", "/nmx/v1"])
def test_an_address_with_the_path_or_a_remembered_path_asks_nothing_first(standin, prefix):
    standin.prefix = prefix
    for fabric in (
        NmxFabricManager(f"{standin.url}{prefix}/", locations=locations(RACK)),
        nmx(standin, api=prefix),
    ):
        standin.requests.clear()
        assert len(fabric.read_back(RACK)) == 1
        assert paths(standin) == [f"GET {prefix}/gpus", f"GET {prefix}/partitions"]


def test_a_remembered_path_that_stopped_answering_is_looked_for_again_once(standin):
    standin.prefix = "/v1"  # the site moved from NMX-M to NetQ 5.2 since the target was tested
    fabric = nmx(standin, api="/nmx/v1")
    assert fabric.apply(RACK, carve(RACK, 18)).complete
    assert paths(standin)[:3] == ["GET /nmx/v1/gpus", "GET /v1/partitions", "GET /v1/gpus"]
    assert fabric.facts == {"nmx_api": "/v1"}


def test_a_server_serving_neither_path_is_refused_in_words_and_nothing_is_written(standin):
    standin.prefix = "/api/v3"
    with pytest.raises(FabricRejected) as caught:
        nmx(standin).apply(RACK, carve(RACK, 9, 9))
    assert "serves neither /v1/partitions nor /nmx/v1/partitions" in caught.value.message
    assert "without a path" in caught.value.what_to_do
    assert standin.writes == [] and paths(standin) == ["GET /v1/partitions", "GET /nmx/v1/partitions"]


def test_wrong_credentials_while_looking_for_the_path_say_credentials(standin):
    standin.token = "cnctdXNlcjpzZWNyZXQ="
    with pytest.raises(FabricRejected) as caught:
        nmx(standin).read_back(RACK)
    assert caught.value.status == 401 and "credentials" in caught.value.what_to_do
    assert "serves neither" not in caught.value.message


def test_an_operation_that_never_finishes_times_out_as_unavailable(standin):
    standin.hold_operations = True
    fabric = nmx(standin, poll_timeout=0.05)

    with pytest.raises(FabricUnavailable) as caught:
        fabric.apply(RACK, carve(RACK, 9, 9))
    assert caught.value.operation_id and "still in-progress" in caught.value.message
    assert caught.value.partition == "Default Partition"

    standin.hold_operations = False
    assert fabric.apply(RACK, carve(RACK, 9, 9)).complete


def test_polling_backs_off_exponentially(standin):
    standin.operation_steps = ("pending", "in-progress", "in-progress", "in-progress", "completed")
    sleeps: list[float] = []
    fabric = NmxFabricManager(
        standin.url,
        locations=locations(RACK),
        poll_interval=0.01,
        poll_backoff=2.0,
        max_poll_interval=0.03,
        sleep=sleeps.append,
    )
    fabric.apply(RACK, carve(RACK, 18))
    # Two operations (shrink the default, create p1), five polls each.
    assert sleeps == pytest.approx([0.01, 0.02, 0.03, 0.03, 0.03] * 2)


@pytest.mark.parametrize(
    ("desired", "problem"),
    [
        (
            [
                FabricPartition("p1", 1, tray_gpus(RACK, range(1, 10)), RACK),
                FabricPartition("p2", 2, tray_gpus(RACK, range(9, 19)), RACK),
            ],
            "is in both p1 and p2",
        ),
        (
            [
                FabricPartition("p1", 1, tray_gpus(RACK, range(1, 10)), RACK),
                FabricPartition("p2", 2, tray_gpus(OTHER_RACK, range(10, 19)), OTHER_RACK),
            ],
            "a partition stays within one NVLink domain",
        ),
        ([FabricPartition("p0", 0, tray_gpus(RACK, range(1, 10)), RACK)], "ID 0 is outside 1..32766"),
        ([FabricPartition("p", 32767, tray_gpus(RACK, [1]), RACK)], "ID 32767 is outside 1..32766"),
        (
            [
                FabricPartition("a", 3, tray_gpus(RACK, [1]), RACK),
                FabricPartition("b", 3, tray_gpus(RACK, [2]), RACK),
            ],
            "partition ID 3 is used by both a and b",
        ),
        (
            [
                FabricPartition("a", 3, tray_gpus(RACK, [1]), RACK),
                FabricPartition("a", 4, tray_gpus(RACK, [2]), RACK),
            ],
            "partition name 'a' is used twice",
        ),
    ],
    ids=["gpu-in-two-partitions", "two-domains", "id-0", "id-too-large", "duplicate-id", "duplicate-name"],
)
def test_an_invalid_desired_state_is_refused_before_any_request(standin, desired, problem):
    fabric = nmx(standin)
    with pytest.raises(FabricInvalid) as caught:
        fabric.apply(RACK, desired)
    assert problem in str(caught.value)
    with pytest.raises(FabricInvalid):
        fabric.diff(RACK, desired)
    assert standin.requests == []  # not even a read: so zero writes

    simulated = SimulatedFabricManager(default(RACK))
    with pytest.raises(FabricInvalid, match=problem.replace("(", r"\(").replace(".", r"\.")):
        simulated.apply(RACK, desired)
    assert simulated.applied_steps == []


def test_a_gpu_without_a_location_is_refused_before_any_write(standin):
    fabric = nmx(standin, locations=locations(OTHER_RACK))
    with pytest.raises(FabricInvalid, match="has no location for NMX-M"):
        fabric.apply(RACK, carve(RACK, 9, 9))
    assert standin.writes == []


# --- other shapes of the API ---------------------------------------------------------------------------


def test_gpu_ids_instead_of_locations(standin):
    """Without locations, GPU UUIDs are NMX-M GPU IDs (a manager set up that way, here a second stand-in)."""
    server = NmxStandin(expose_domain=False)  # partitions placed in a domain by their members
    server.add_domain(RACK, rack_gpus(RACK, nmx_ids=False))
    with server:
        fabric = nmx(server, locations=None)
        result = fabric.apply(RACK, carve(RACK, 9, 9))
        assert sorted(server.writes[1].body["Members"]) == sorted(tray_gpus(RACK, range(1, 10)))
        assert result.read_back == carve(RACK, 9, 9)
        assert fabric.apply(RACK, carve(RACK, 6, 6, 6)).read_back == carve(RACK, 6, 6, 6)


def test_a_partition_someone_else_made_is_read_back_and_replaced(standin):
    owned_by_nobody = [g.id for g in rack_gpus(RACK) if g.slot_id == 18]
    standin.add_partition("lab", RACK, owned_by_nobody, partition_id=40)
    fabric = nmx(standin)
    assert FabricPartition("lab", 40, tray_gpus(RACK, [18]), RACK) in fabric.read_back(RACK)

    result = fabric.apply(RACK, carve(RACK, 9, 9))

    assert [(o.step.action, o.step.name) for o in result.done] == [
        ("delete", "lab"),
        ("shrink", "Default Partition"),
        ("create", "p1"),
        ("create", "p2"),
    ]
    assert fabric.read_back(RACK) == carve(RACK, 9, 9)


# --- the simulated fabric: same results as the NMX adapter ------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_simulated_manager_gives_the_same_results_as_the_nmx_adapter():
    server = NmxStandin(default_name="default")
    server.add_domain(RACK, rack_gpus(RACK))
    simulated = SimulatedFabricManager(default(RACK))
    sequence = [
        carve(RACK, 9, 9),
        carve(RACK, 9, 9),  # no-op
        carve(RACK, 6, 6, 6),
        carve(RACK, 6),  # p2 and p3 go; the default partition takes their trays back
        default(RACK),
        carve(RACK, 4, 4, 4, 6),
    ]
    with server:
        fabric = nmx(server)
        assert fabric.read_back(RACK) == simulated.read_back(RACK)
        for desired in sequence:
            nmx_diff, sim_diff = fabric.diff(RACK, desired), simulated.diff(RACK, desired)
            assert nmx_diff.steps == sim_diff.steps
            assert (nmx_diff.creates, nmx_diff.updates, nmx_diff.deletes) == (
                sim_diff.creates,
                sim_diff.updates,
                sim_diff.deletes,
            )
            nmx_progress, sim_progress = Progress(), Progress()
            nmx_result = fabric.apply(RACK, desired, progress=nmx_progress)
            sim_result = simulated.apply(RACK, desired, progress=sim_progress)
            assert nmx_progress.calls == sim_progress.calls
            assert [o.step for o in nmx_result.done] == [o.step for o in sim_result.done]
            assert nmx_result.read_back == sim_result.read_back
            assert fabric.read_back(RACK) == simulated.read_back(RACK)
            assert nmx_result.assigned_ids == sim_result.assigned_ids
            assert nmx_result.renumbered == sim_result.renumbered == {}


def test_the_simulated_manager_stops_at_a_failed_step():
    simulated = SimulatedFabricManager(default(RACK))
    progress = Progress()
    simulated.apply(RACK, [])  # nothing planned: the default keeps everything
    simulated.fail_next_step("switch tray 3 does not answer")
    with pytest.raises(FabricRejected) as caught:
        simulated.apply(RACK, carve(RACK, 9, 9), progress=progress)
    assert caught.value.partition == "default"
    assert "ended failed: switch tray 3 does not answer" in caught.value.message
    assert caught.value.result.done == [] and [s.name for s in caught.value.result.not_done] == ["p1", "p2"]
    assert simulated.read_back(RACK) == default(RACK)
    assert simulated.apply(RACK, carve(RACK, 9, 9)).read_back == carve(RACK, 9, 9)


def test_the_simulated_manager_keeps_planned_ids_and_domains_apart():
    simulated = SimulatedFabricManager(default(RACK) + carve(OTHER_RACK, 9, 9))
    result = simulated.apply(RACK, carve(RACK, 9, 9, first_id=7))
    assert result.assigned_ids == {"p1": 7, "p2": 8} and result.renumbered == {}
    assert simulated.read_back(OTHER_RACK) == carve(OTHER_RACK, 9, 9)
    assert simulated.domains() == sorted([RACK, OTHER_RACK])


# --- the step order, exhaustively on random layouts ---------------------------------------------------------


def random_layout(rng: random.Random, domain: str, with_default: bool) -> list[FabricPartition]:
    slots = list(range(1, TRAYS + 1))
    rng.shuffle(slots)
    partitions, names = [], rng.sample([f"p{i}" for i in range(1, 9)], k=rng.randint(0, 5))
    for number, name in enumerate(names):
        take = slots[: rng.randint(1, 4)]
        slots = slots[len(take) :]
        partitions.append(FabricPartition(name, number + 1, tray_gpus(domain, take), domain))
    if with_default and slots and rng.random() < 0.7:
        partitions.append(FabricPartition("default", DEFAULT_PARTITION_ID, tray_gpus(domain, slots), domain))
    return partitions


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_no_step_order_ever_puts_a_gpu_in_two_partitions():
    rng = random.Random(20250607)
    for _ in range(500):
        current = random_layout(rng, RACK, with_default=True)
        desired = random_layout(rng, RACK, with_default=True)
        diff = plan_changes(RACK, current, desired)
        assert check_step_order(current, diff.steps) == [], (current, desired)
        # Every removal comes before every addition.
        actions = [s.action for s in diff.steps]
        adding = [i for i, a in enumerate(actions) if a in ("create", "grow")]
        removing = [i for i, a in enumerate(actions) if a in ("delete", "shrink")]
        assert not adding or not removing or max(removing) < min(adding)
        # Applying the steps to a simulated fabric lands exactly on the plan's target.
        simulated = SimulatedFabricManager(current)
        result = simulated.apply(RACK, desired)
        assert {(p.name, p.gpu_uuids) for p in result.read_back} == {
            (p.name, p.gpu_uuids) for p in diff.target
        }


def test_check_step_order_finds_an_unsafe_order():
    current = carve(RACK, 9, 9)
    diff = plan_changes(RACK, current, carve(RACK, 6, 6, 6))
    unsafe = [diff.steps[-1], *diff.steps[:-1]]  # grow p2 first
    assert check_step_order(current, unsafe)


@pytest.mark.parametrize("manager", ["nmx", "simulated"])
def test_gpus_left_in_no_partition_by_a_stopped_apply_go_back_to_the_default(standin, manager):
    if manager == "nmx":
        fabric = nmx(standin)
        standin.fail_next_operation("switch tray 3 does not answer", after=1)
    else:
        fabric = SimulatedFabricManager(default(RACK, "Default Partition"))
        fabric.fail_next_step("switch tray 3 does not answer", after=1)
    with pytest.raises(FabricRejected) as caught:
        fabric.apply(RACK, carve(RACK, 9, 9))
    # The default partition was emptied, then the create of p1 failed: 72 GPUs are in no partition.
    assert caught.value.partition == "p1"
    assert fabric.read_back(RACK) == []

    result = fabric.apply(RACK, carve(RACK, 9))  # p1 only: the default partition takes trays 10-18 back

    assert [(o.step.action, o.step.name) for o in result.done] == [
        ("create", "p1"),
        ("grow", "Default Partition"),
    ]
    assert fabric.read_back(RACK) == [
        *carve(RACK, 9),
        FabricPartition("Default Partition", DEFAULT_PARTITION_ID, tray_gpus(RACK, range(10, 19)), RACK),
    ]
