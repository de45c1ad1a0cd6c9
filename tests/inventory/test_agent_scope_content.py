"""An agent token's scope covers what its report says, not only the host it names.

A rack's (or a host's) agent token may report only for its trays; before this, a report for one of them
that listed GPUs the inventory had on another rack's tray moved them onto the reporting tray (unless that
tray had reported them in the last 15 minutes), and a GPU detached from another rack's tray was picked up.
Now such a report (full, dry run, with XIDs or checks, raw nvidia-smi output) is a 403 naming what it tried,
nothing of it is applied, and the audit log records the token that tried. A fleet token (an account with
`inventory.report_discovery`) still moves any GPU: a real RMA moves GPUs between racks.
"""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import AuditAction, AuditEvent
from inventory.models import AgentToken, ComputeTray, Gpu, HealthEvent, NVLinkPartition, Rack
from tests import factories

pytestmark = pytest.mark.django_db
REPORTS = "/api/v1/discovery/reports/"
OURS = "gb-r02-t10"  # the reporting tray, rack gb-r02
NEIGHBOUR = "gb-r02-t11"  # same rack
ELSEWHERE = "gb-r01-t05"  # another rack


def issue(*args) -> str:
    out = StringIO()
    call_command("discovery_agent_token", *args, stdout=out)
    return out.getvalue().strip().rsplit(" ", 1)[1]


def agent(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def tray(hostname: str) -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def gpu_on(hostname: str, index: int = 0) -> Gpu:
    return Gpu.objects.get(tray__hostname=hostname, index=index)


def report_with(hostname: str, uuid: str, index: int = 3, **extra) -> dict:
    """`hostname`'s own report (tests.factories.node_report) with GPU `index` replaced by `uuid`."""
    own = tray(hostname)
    body = factories.node_report(own, own.partition.clique_id, **extra)
    body["gpus"][index]["uuid"] = uuid
    return body


def silent(hostname: str) -> None:
    """The tray's node has not reported for an hour (its GPUs are no longer contested: see CLAIM_WINDOW)."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    ComputeTray.objects.filter(hostname=hostname).update(last_report_at=an_hour_ago)
    Gpu.objects.filter(tray__hostname=hostname).update(last_report_at=an_hour_ago)


def snapshot() -> tuple:
    return (
        list(Gpu.objects.order_by("pk").values()),
        list(ComputeTray.objects.order_by("pk").values()),
        list(Rack.objects.order_by("pk").values()),
        list(NVLinkPartition.objects.order_by("pk").values()),
        HealthEvent.objects.count(),
    )


def refusals() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=AuditAction.REFUSE).order_by("pk"))


@pytest.fixture
def rack_secret(demo_inventory) -> str:
    silent(ELSEWHERE)
    return issue("--rack", "gb-r02")


@pytest.fixture
def fleet(demo_inventory) -> APIClient:
    return factories.token_client(factories.make_node_agent())


# --- a GPU on another rack's tray -------------------------------------------------------------------------


XID_79 = {
    "xids": [
        {
            "time": "2026-01-01T00:00:00Z",
            "pci_bus_id": "00000008:01:00.0",
            "xid": 79,
            "text": "NVRM: Xid (PCI:0008:01:00): 79, pid=0, GPU has fallen off the bus.",
        }
    ]
}


def _with_xid(body: dict) -> dict:
    body["gpus"][3]["pci_bus_id"] = "00000008:01:00.0"
    body["gpus"][3]["recovery_action"] = "GPU_RESET"
    return {**body, **XID_79, "xids": [{**XID_79["xids"][0], "time": timezone.now().isoformat()}]}


def _checks(body: dict) -> dict:
    check = {
        "name": "dcgmi diag -r 2",
        "exit_status": 1,
        "output": "fail",
        "started": timezone.now().isoformat(),
        "seconds": 1.0,
    }
    return {**body, "checks": [check]}


def _raw(body: dict) -> dict:
    """The same listing as raw `nvidia-smi --query-gpu=uuid,fabric.clusterUuid,fabric.cliqueId` output."""
    lines = [
        f"{gpu['uuid']}, {gpu['fabric']['cluster_uuid']}, {gpu['fabric']['clique_id']}"
        for gpu in body["gpus"]
    ]
    return {"host": body["host"], "nvidia_smi": "\n".join(lines) + "\n"}


KINDS = {
    "full": lambda body: body,
    "dry run": lambda body: {**body, "dry_run": True},
    "with an XID on it": _with_xid,
    "with a failed check": _checks,
    "raw nvidia-smi": _raw,
}


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize("kind", KINDS)
def test_a_rack_token_may_not_move_a_gpu_of_another_rack_in_any_report(rack_secret, kind):
    foreign = gpu_on(ELSEWHERE, 1)
    before = snapshot()
    response = agent(rack_secret).post(REPORTS, KINDS[kind](report_with(OURS, foreign.uuid)), format="json")
    assert response.status_code == 403, response.content
    assert (
        f"GPU {foreign.uuid} belongs to tray {ELSEWHERE} of rack gb-r01; this token speaks for rack gb-r02"
        in response.json()["detail"]
    )
    assert response.json()["refused_gpus"] == [
        {"gpu": foreign.uuid, "tray": ELSEWHERE, "rack": "gb-r01", "where": "on"}
    ]
    assert snapshot() == before  # nothing applied: not the move, not our tray's health, freshness or report


def test_the_refusal_is_audited_on_the_token_that_tried(rack_secret):
    foreign = [gpu_on(ELSEWHERE, 0).uuid, gpu_on(ELSEWHERE, 2).uuid]
    body = report_with(OURS, foreign[0], index=0)
    body["gpus"][1]["uuid"] = foreign[1]
    assert agent(rack_secret).post(REPORTS, body, format="json").status_code == 403
    (event,) = refusals()
    token = AgentToken.objects.get()
    assert (event.object_type, event.object_id, event.source) == (
        "inventory.agenttoken",
        str(token.pk),
        "api",
    )
    assert token.prefix in event.object_repr and "rack gb-r02" in event.object_repr
    assert event.after["scope"] == "rack gb-r02" and event.after["host"] == OURS
    assert event.after["token"] == token.prefix and event.after["dry_run"] is False
    assert sorted(o["gpu"] for o in event.after["refused_gpus"]) == sorted(foreign)
    assert {(o["tray"], o["rack"]) for o in event.after["refused_gpus"]} == {(ELSEWHERE, "gb-r01")}


def test_a_gpu_still_reported_by_another_rack_is_refused_not_only_flagged(demo_inventory):
    """Even inside the claim window (where a fleet report only gets a problem), the token may not send it:
    the problem would tell it another rack's host names, and its health would land on that GPU."""
    secret = issue("--rack", "gb-r02")
    foreign = gpu_on(ELSEWHERE, 1)  # the demo's trays reported just now
    before = snapshot()
    response = agent(secret).post(REPORTS, _with_xid(report_with(OURS, foreign.uuid)), format="json")
    assert response.status_code == 403, response.content
    assert snapshot() == before
    assert not HealthEvent.objects.filter(gpu=foreign).exists()


# --- a GPU detached from another rack's tray --------------------------------------------------------------


def test_a_gpu_that_fell_off_another_racks_bus_is_not_picked_up(rack_secret, fleet):
    elsewhere = tray(ELSEWHERE)
    lost = gpu_on(ELSEWHERE, 3)
    three = factories.node_report(elsewhere, elsewhere.partition.clique_id)
    three["gpus"] = three["gpus"][:3]
    assert fleet.post(REPORTS, three, format="json").status_code == 200
    lost.refresh_from_db()
    assert lost.tray is None and lost.detached_from_id == elsewhere.pk
    silent(ELSEWHERE)

    before = snapshot()
    response = agent(rack_secret).post(REPORTS, report_with(OURS, lost.uuid), format="json")
    assert response.status_code == 403, response.content
    assert (
        f"GPU {lost.uuid} was detached from tray {ELSEWHERE} of rack gb-r01; "
        "this token speaks for rack gb-r02" in response.json()["detail"]
    )
    assert snapshot() == before
    assert refusals()[0].after["refused_gpus"][0]["where"] == "detached from"


def test_a_detached_gpu_whose_tray_is_not_known_needs_an_operator(rack_secret, fleet):
    lost = gpu_on(ELSEWHERE, 3)
    Gpu.objects.filter(pk=lost.pk).update(tray=None, index=None)  # detached before detached_from existed
    body = report_with(OURS, lost.uuid)
    response = agent(rack_secret).post(REPORTS, body, format="json")
    assert response.status_code == 403, response.content
    assert f"GPU {lost.uuid} is on no tray and the tray it left is not known" in response.json()["detail"]
    assert Gpu.objects.get(pk=lost.pk).tray is None
    # The operator's way: a fleet token's report (or the admin) places it.
    assert fleet.post(REPORTS, body, format="json").status_code == 200
    assert Gpu.objects.get(pk=lost.pk).tray.hostname == OURS


# --- host tokens speak for their host ---------------------------------------------------------------------


def test_a_host_token_may_not_take_its_neighbours_gpu(demo_inventory):
    secret = issue("--host", OURS)
    silent(NEIGHBOUR)
    theirs = gpu_on(NEIGHBOUR, 0)
    before = snapshot()
    response = agent(secret).post(REPORTS, report_with(OURS, theirs.uuid), format="json")
    assert response.status_code == 403, response.content
    assert (
        f"GPU {theirs.uuid} belongs to tray {NEIGHBOUR} of rack gb-r02; this token speaks for host {OURS}"
        in response.json()["detail"]
    )
    assert snapshot() == before


# --- what still applies -----------------------------------------------------------------------------------


def test_the_same_report_through_the_fleet_token_moves_the_gpu(rack_secret, fleet):
    """An RMA: the fleet token moves a GPU across racks (after the rack token was refused the same report)."""
    foreign = gpu_on(ELSEWHERE, 1)
    body = report_with(OURS, foreign.uuid)
    replaced = gpu_on(OURS, 3)
    assert agent(rack_secret).post(REPORTS, body, format="json").status_code == 403
    response = fleet.post(REPORTS, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["moved_gpus"] == [foreign.uuid]
    foreign.refresh_from_db()
    assert (foreign.tray.hostname, foreign.index, foreign.detached_from_id) == (OURS, 3, None)
    replaced.refresh_from_db()
    assert replaced.tray is None and replaced.detached_from_id == tray(OURS).pk
    assert len(refusals()) == 1  # the fleet report is no refusal


def test_a_rack_token_moves_gpus_within_its_rack_and_takes_back_its_own(rack_secret):
    """Naming only its own rack, a report applies: a GPU of a neighbour tray of the rack follows, and a GPU
    that fell off this tray's bus comes back (the tray it left remembered, then cleared)."""
    ours, client = tray(OURS), agent(rack_secret)
    comeback = gpu_on(OURS, 3)
    three = factories.node_report(ours, ours.partition.clique_id)
    three["gpus"] = three["gpus"][:3]
    assert client.post(REPORTS, three, format="json").status_code == 200
    comeback.refresh_from_db()
    assert comeback.tray is None and comeback.detached_from_id == ours.pk

    silent(NEIGHBOUR)
    neighbours = gpu_on(NEIGHBOUR, 2)
    body = factories.node_report(ours, ours.partition.clique_id)  # three GPUs now
    body["gpus"].append({**body["gpus"][0], "uuid": comeback.uuid, "index": 3})
    body["gpus"][0]["uuid"] = neighbours.uuid
    response = client.post(REPORTS, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["moved_gpus"] == [neighbours.uuid]
    comeback.refresh_from_db()
    neighbours.refresh_from_db()
    assert (comeback.tray_id, comeback.detached_from_id) == (ours.pk, None)
    assert neighbours.tray_id == ours.pk
    assert refusals() == []


def test_the_operators_command_may_move_a_gpu_across_racks(rack_secret, tmp_path):
    """`manage.py ingest_nvidia_smi` runs with the operator's rights (a shell on the portal): no token."""
    foreign = gpu_on(ELSEWHERE, 1)
    path = tmp_path / "smi.csv"
    path.write_text(_raw(report_with(OURS, foreign.uuid))["nvidia_smi"])
    call_command("ingest_nvidia_smi", "--host", OURS, str(path), stdout=StringIO(), stderr=StringIO())
    assert gpu_on(OURS, 3).uuid == foreign.uuid
