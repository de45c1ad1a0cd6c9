"""Discovery at fleet scale: a report identical to the node's last one is a heartbeat (last-seen time only,
batched), the agent may send the report's hash instead of its body, and changed reports are reconciled
in bulk with every rule kept (inventory.ingest.heartbeats, inventory.api.discovery)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.models import AuditEvent
from inventory.choices import GpuHealth
from inventory.ingest import heartbeats
from inventory.models import ComputeTray, Gpu, HealthEvent, NVLinkPartition
from tests.factories import node_report, token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"
HOST = "gb-r02-t10"  # in gb-r02's partition p2 (clique 2)


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def tray(hostname: str = HOST) -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def body(t: ComputeTray, clique_id: int = 2, health: dict | None = None, **extra) -> dict:
    return node_report(
        t, clique_id, health=health, **{"agent": {"version": "0.1.0", "interval_s": 60}, **extra}
    )


def writes(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if not q["sql"].lstrip().upper().startswith(("SELECT", "SAVEPOINT", "RELEASE"))
    ]


def test_the_same_report_again_only_refreshes_last_seen(agent):
    first = agent.post(URL, body(tray()), format="json")
    assert first.status_code == 200, first.content
    answer = first.json()
    assert answer["unchanged"] is False and answer["applied"] is True
    sha256 = answer["report_sha256"]
    assert len(sha256) == 64
    before = tray()
    events, audits = HealthEvent.objects.count(), AuditEvent.objects.count()
    gpu_rows = list(Gpu.objects.filter(tray=before).order_by("index").values())

    with CaptureQueriesContext(connection) as queries:
        again = agent.post(URL, body(tray()), format="json")
    assert again.status_code == 200, again.content
    data = again.json()
    assert data["unchanged"] is True and data["report_sha256"] == sha256
    assert data["tray_clique"] == f"{before.rack.cluster_uuid}.2" and data["problems"] == []
    # No reconciliation: only the two last-seen UPDATEs (tray and its GPUs; written at once inside a
    # transaction, as this test is: batched on the broker otherwise, tests/inventory/test_heartbeat_batches).
    written = writes(queries.captured_queries)
    assert len(written) == 2, written
    assert all(sql.startswith("UPDATE") and "last_report_at" in sql for sql in written), written
    assert '"inventory_computetray"' in written[0] and '"inventory_gpu"' in written[1]
    assert len(queries) <= 12, [q["sql"][:100] for q in queries.captured_queries]
    after = tray()
    assert after.last_report_at > before.last_report_at
    assert (after.last_report, after.fabric_problems, after.report_key) == (
        before.last_report,
        before.fabric_problems,
        before.report_key,
    )
    assert HealthEvent.objects.count() == events and AuditEvent.objects.count() == audits
    now_rows = list(Gpu.objects.filter(tray=after).order_by("index").values())
    assert [{**r, "last_report_at": None} for r in now_rows] == [
        {**r, "last_report_at": None} for r in gpu_rows
    ]
    assert all(r["last_report_at"] > o["last_report_at"] for r, o in zip(now_rows, gpu_rows, strict=True))


def test_the_hash_alone_is_a_heartbeat_and_a_stranger_hash_asks_for_the_full_report(agent):
    sha256 = agent.post(URL, body(tray()), format="json").json()["report_sha256"]
    seen = tray().last_report_at

    with CaptureQueriesContext(connection) as queries:
        answer = agent.post(
            URL, {"host": HOST, "report_sha256": sha256, "agent": {"version": "0.1.0", "interval_s": 60}}
        )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"host": HOST, "unchanged": True, "report_sha256": sha256, "problems": []}
    assert writes(queries.captured_queries)[0].startswith("UPDATE")
    assert tray().last_report_at > seen

    other = "0" * 64
    refused = agent.post(URL, {"host": HOST, "report_sha256": other}, format="json")
    assert refused.status_code == 409
    assert refused.json()["full_report_needed"] is True
    assert "Post the full report" in refused.json()["detail"]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"report_sha256": "ab" * 31 + "a"}, "64 lower-case hex digits"),  # 63 characters
        ({"report_sha256": "AB" * 32}, "64 lower-case hex digits"),  # upper case
        ({"report_sha256": "zz" * 32}, "64 lower-case hex digits"),
        ({"report_sha256": "ab" * 32, "nvidia_smi": "x"}, "carries no nvidia_smi"),
        ({"report_sha256": "ab" * 32, "dry_run": True}, "dry run needs the full report"),
        (
            {
                "report_sha256": "ab" * 32,
                "xids": [
                    {"time": "2026-01-01T00:00:00Z", "xid": 79, "text": "NVRM: Xid (PCI:0008:01:00): 79"}
                ],
            },
            "carries no xids",
        ),
    ],
)
def test_a_bad_hash_is_a_400_that_writes_nothing(agent, extra, needle):
    before = tray()
    answer = agent.post(URL, {"host": HOST, **extra}, format="json")
    assert answer.status_code == 400, answer.content
    assert needle in str(answer.json()["report_sha256"])
    assert tray().last_report_at == before.last_report_at


def test_a_hash_for_an_unknown_host_is_a_400(agent):
    answer = agent.post(URL, {"host": "no-such-node", "report_sha256": "ab" * 32}, format="json")
    assert answer.status_code == 400
    assert "not in the inventory" in answer.json()["host"][0]


def test_a_changed_intent_makes_the_same_report_count_again(agent):
    """The inventory moves the tray to gb-r02's other partition: the node's unchanged report now drifts."""
    sha256 = agent.post(URL, body(tray()), format="json").json()["report_sha256"]
    t = tray()
    t.partition = NVLinkPartition.objects.get(rack=t.rack, clique_id=1)
    t.save(update_fields=["partition"])

    assert agent.post(URL, {"host": HOST, "report_sha256": sha256}, format="json").status_code == 409
    answer = agent.post(URL, body(tray()), format="json").json()
    assert answer["unchanged"] is False
    assert answer["drift"] == ["drift: the node reports clique 2, the inventory intends gb-r02 p1 (clique 1)"]
    assert tray().fabric_problems == answer["drift"] and tray().report_key == ""
    # Drift is open business: the same drifting report is reconciled in full every time.
    assert agent.post(URL, body(tray()), format="json").json()["unchanged"] is False


def test_a_tray_with_open_health_business_is_always_reconciled(agent):
    """An unhealthy GPU (health rules) is no heartbeat: every report of that tray is judged again."""
    sick = body(tray(), health={1: "unhealthy"})
    first = agent.post(URL, sick, format="json").json()
    assert first["health"]["healthy"] is False and tray().report_key == ""
    again = agent.post(URL, sick, format="json").json()
    assert again["unchanged"] is False
    assert (
        agent.post(URL, {"host": HOST, "report_sha256": again["report_sha256"]}, format="json").status_code
        == 409
    )
    # Healthy again: reconciled once, then heartbeats.
    assert agent.post(URL, body(tray()), format="json").json()["unchanged"] is False
    assert agent.post(URL, body(tray()), format="json").json()["unchanged"] is True
    assert Gpu.objects.get(tray=tray(), index=1).health == GpuHealth.HEALTHY


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_xids_are_never_a_heartbeat(agent):
    agent.post(URL, body(tray()), format="json")
    xid = {"time": timezone.now().isoformat(), "xid": 13, "text": "NVRM: Xid (PCI:0008:01:00): 13, pid=1"}
    answer = agent.post(URL, body(tray(), xids=[xid]), format="json").json()
    assert answer["unchanged"] is False and answer["health"]["new_events"] == 1


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_gpu_claimed_by_two_hosts_stays_flagged_under_heartbeats(agent):
    """The claim rule still holds: the other host's report names the GPU of this tray; this tray's
    heartbeats keep the GPU's last-seen time, so the GPU is not moved while this tray reports it."""
    agent.post(URL, body(tray()), format="json")
    assert agent.post(URL, body(tray()), format="json").json()["unchanged"] is True
    other = tray("gb-r02-t11")
    report = body(other)
    report["gpus"][0]["uuid"] = Gpu.objects.get(tray=tray(), index=0).uuid
    answer = agent.post(URL, report, format="json").json()
    assert any("is also reported by gb-r02-t10" in problem for problem in answer["problems"])
    assert Gpu.objects.get(uuid=report["gpus"][0]["uuid"]).tray.hostname == HOST
    assert tray("gb-r02-t11").report_key == ""  # contested: reconciled in full next time too


def test_a_changed_report_is_reconciled_with_one_statement_per_kind_of_change(agent):
    """Changing one GPU or three in different ways costs the same statements: the freshness of all in one
    UPDATE, the changed GPUs in one bulk UPDATE, whatever they changed."""
    agent.post(URL, body(tray()), format="json")
    agent.post(URL, body(tray("gb-r02-t11"), clique_id=2), format="json")

    def counted(host: str, sick: dict) -> tuple[int, int]:
        with CaptureQueriesContext(connection) as queries:
            answer = agent.post(URL, body(tray(host), health=sick), format="json")
        assert answer.status_code == 200 and answer.json()["unchanged"] is False
        updates = [
            sql for sql in writes(queries.captured_queries) if sql.startswith('UPDATE "inventory_gpu"')
        ]
        return len(queries), len(updates)

    one = counted(HOST, {0: "limited_capacity"})
    three = counted("gb-r02-t11", {0: "limited_capacity", 1: "unhealthy", 3: "unknown"})
    assert one == three, (one, three)
    assert one[1] == 2
    health = dict(Gpu.objects.filter(tray=tray("gb-r02-t11")).values_list("index", "health"))
    assert health == {0: "limited_capacity", 1: "unhealthy", 2: "healthy", 3: "unknown"}
    # Every GPU of the tray is fresh, changed or not.
    assert len(set(Gpu.objects.filter(tray=tray("gb-r02-t11")).values_list("last_report_at", flat=True))) == 1


def test_last_seen_never_goes_back(agent):
    agent.post(URL, body(tray()), format="json")
    later = timezone.now() + timedelta(minutes=5)
    ComputeTray.objects.filter(hostname=HOST).update(last_report_at=later)
    heartbeats._write_last_seen({tray().pk: timezone.now()})
    assert tray().last_report_at == later
