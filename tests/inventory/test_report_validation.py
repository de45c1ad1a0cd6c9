"""No node report corrupts the inventory or causes a 500, whatever path it takes.

Each hostile report goes through every input path: the structured JSON API, raw nvidia-smi text/XML/CSV in the
API body, and `manage.py ingest_nvidia_smi` run as from a shell. Each is refused (400, or the command exits
non-zero with one line naming the problem) and writes nothing: GPU, tray and rack rows and the audit log are
compared before and after.
"""

import re
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from core.models import AuditEvent
from inventory.discovery.nvidia_smi import ReportError, parse_any, validate_report
from inventory.ingest.gpus import CLAIM_WINDOW
from inventory.ingest.reports import ingest_report
from inventory.management.commands.ingest_nvidia_smi import Command as IngestCommand
from inventory.models import ComputeTray, Gpu, Rack
from tests.factories import token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"
HOST = "gb-r02-t10"
OTHER = "gb-r02-t11"  # same rack and partition


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def tray(hostname: str = HOST) -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def uuids(hostname: str = HOST) -> list[str]:
    return list(tray(hostname).gpus.order_by("index").values_list("uuid", flat=True))


def gpu_entry(gpu_uuid: str, index: int, clique_id: int = 2, cluster: str | None = None) -> dict:
    return {
        "uuid": gpu_uuid,
        "index": index,
        "fabric": {
            "state": "completed",
            "status": "Success",
            "cluster_uuid": cluster or str(tray().rack.cluster_uuid),
            "clique_id": clique_id,
            "health": "healthy",
        },
    }


def structured(gpu_uuids: list[str], host: str = HOST, **fabric) -> dict:
    return {"host": host, "gpus": [gpu_entry(u, i, **fabric) for i, u in enumerate(gpu_uuids)]}


def csv_rows(gpu_uuids: list[str], clique: str = "2") -> str:
    cluster = tray().rack.cluster_uuid
    return "".join(f"{u}, {cluster}, {clique}\n" for u in gpu_uuids)


def with_clique(fixture: str, clique: str) -> str:
    """A real nvidia-smi -q / -q -x output for four GPUs, every GPU printing `clique` as its CliqueId."""
    text = (FIXTURES / fixture).read_text()
    text = re.sub(r"(CliqueId\s*:\s*)32766", rf"\g<1>{clique}", text)
    return re.sub(r"<cliqueId>32766</cliqueId>", f"<cliqueId>{clique}</cliqueId>", text)


def snapshot() -> tuple:
    return (
        list(Gpu.objects.order_by("pk").values()),
        list(ComputeTray.objects.order_by("pk").values()),
        list(Rack.objects.order_by("pk").values()),
        AuditEvent.objects.count(),
    )


def run_command(capsys, tmp_path, content: str, host: str = HOST) -> tuple[int, str]:
    """`manage.py ingest_nvidia_smi --host HOST FILE` as a shell runs it: (exit status, stderr)."""
    report = tmp_path / "report.txt"
    report.write_text(content)
    capsys.readouterr()
    # run_from_argv closes every database connection when it ends (a shell's process ends there); the
    # test's connection holds its transaction, so it stays open.
    with pytest.raises(SystemExit) as exited, mock.patch.object(connections, "close_all"):
        IngestCommand().run_from_argv(["manage.py", "ingest_nvidia_smi", "--host", host, str(report)])
    return exited.value.code, capsys.readouterr().err


def assert_refused_by_the_command(capsys, tmp_path, content: str, words: str) -> None:
    before = snapshot()
    code, err = run_command(capsys, tmp_path, content)
    assert code != 0
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert words.lower() in err.lower() and "nothing was written" in err, err
    assert snapshot() == before


def assert_refused_by_the_api(agent, payload: dict, field: str, words: str) -> None:
    before = snapshot()
    response = agent.post(URL, payload, format="json")
    assert response.status_code == 400, response.content
    assert words.lower() in str(response.json()[field]).lower(), response.json()
    assert snapshot() == before


# ---------------------------------------------------------------------------------------- malformed UUID

DASHES = "GPU-" + "-" * 36


def test_a_uuid_of_dashes_is_refused_by_the_json_api(agent):
    assert_refused_by_the_api(agent, structured([DASHES, *uuids()[1:]]), "gpus", "not a GPU UUID")


def test_a_uuid_of_dashes_is_refused_in_raw_csv(agent, capsys, tmp_path):
    raw = csv_rows([DASHES, *uuids()[1:]])
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": raw}, "nvidia_smi", "not a GPU UUID")
    assert_refused_by_the_command(capsys, tmp_path, raw, "not a GPU UUID")


# ---------------------------------------------------------------------------------------- empty report


def test_an_empty_structured_report_is_refused_and_detaches_nothing(agent):
    assert_refused_by_the_api(agent, {"host": HOST, "gpus": []}, "gpus", "lists no GPUs")
    assert tray().gpus.count() == 4


def test_an_empty_dry_run_is_refused_too(agent):
    response = agent.post(URL, {"host": HOST, "gpus": [], "dry_run": True}, format="json")
    assert response.status_code == 400 and "lists no GPUs" in str(response.json()["gpus"])


def test_empty_raw_output_is_refused_on_every_path(agent, capsys, tmp_path):
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": "\n"}, "nvidia_smi", "empty")
    assert_refused_by_the_command(capsys, tmp_path, "\n", "empty")


# ---------------------------------------------------------------------------------------- one UUID twice


@pytest.mark.parametrize("case", [str.lower, str.upper], ids=["same-case", "other-case"])
def test_a_known_uuid_twice_is_refused_on_every_path(agent, capsys, tmp_path, case):
    known = uuids()
    twice = [known[0], "GPU-" + case(known[0][4:]), known[2], known[3]]
    assert_refused_by_the_api(agent, structured(twice), "gpus", "more than once")
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": csv_rows(twice)}, "nvidia_smi", known[0])
    assert_refused_by_the_command(capsys, tmp_path, csv_rows(twice), "more than once")


def test_a_new_uuid_twice_is_a_400_not_a_500(agent, capsys, tmp_path):
    new = f"GPU-{uuid.uuid4()}"
    twice = [new, new, *uuids()[2:]]
    assert_refused_by_the_api(agent, structured(twice), "gpus", "more than once")
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": csv_rows(twice)}, "nvidia_smi", new)
    assert_refused_by_the_command(capsys, tmp_path, csv_rows(twice), new)


def test_more_gpus_than_a_tray_has_are_refused_not_a_500(agent):
    five = [*uuids(), f"GPU-{uuid.uuid4()}"]
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": csv_rows(five)}, "nvidia_smi", "index 4")


# ---------------------------------------------------------------------------------------- clique ID range


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize("clique", ["32768", "40000", str(2**31), str(10**20), "9" * 5000])
def test_a_clique_id_out_of_range_is_refused_on_every_path(agent, capsys, tmp_path, clique):
    raws = [
        csv_rows(uuids(), clique=clique),
        with_clique("gb200_default_partition.txt", clique),
        with_clique("gb200_default_partition.xml", clique),
    ]
    for raw in raws:
        assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": raw}, "nvidia_smi", "out of range")
        assert_refused_by_the_command(capsys, tmp_path, raw, "out of range")
    if len(clique) < 10:
        payload = structured(uuids(), clique_id=int(clique))
        assert_refused_by_the_api(agent, payload, "gpus", "32767")


def test_the_highest_nvml_clique_id_is_accepted(agent):
    response = agent.post(URL, {"host": HOST, "nvidia_smi": csv_rows(uuids(), clique="32767")}, format="json")
    assert response.status_code == 200, response.content
    assert set(tray().gpus.values_list("reported_clique_id", flat=True)) == {32767}


# ---------------------------------------------------------------------------------------- oversized CSV field


def test_a_csv_field_over_the_csv_module_limit_is_a_400_not_a_500(agent, capsys, tmp_path):
    raw = f'{uuids()[0]}, "{"x" * (129 * 1024)}", 2\n'
    assert_refused_by_the_api(agent, {"host": HOST, "nvidia_smi": raw}, "nvidia_smi", "CSV")
    assert_refused_by_the_command(capsys, tmp_path, raw, "field larger than field limit")


# ---------------------------------------------------------------------------------------- case and claims


def test_upper_case_uuids_are_stored_lower_case(agent):
    new = f"GPU-{uuid.uuid4()}"
    response = agent.post(URL, structured([new.upper(), *uuids()[1:]]), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["created_gpus"] == [new]
    assert Gpu.objects.get(tray__hostname=HOST, index=0).uuid == new


def test_upper_case_copies_of_another_trays_uuids_create_no_rows_and_move_nothing(agent):
    theirs, mine = uuids(OTHER), uuids()
    copies = ["GPU-" + u[4:].upper() for u in theirs]
    count = Gpu.objects.count()
    response = agent.post(URL, structured(copies), format="json")
    assert response.status_code == 200, response.content
    assert Gpu.objects.count() == count
    assert uuids(OTHER) == theirs  # still on the tray that reports them
    problems = response.json()["problems"]
    assert all(any(u in p and OTHER in p and HOST in p for p in problems) for u in theirs), problems
    assert tray().fabric_problems[: len(problems)] == problems
    assert set(Gpu.objects.filter(uuid__in=mine).values_list("tray", flat=True)) == {None}


def test_a_gpu_two_hosts_report_stays_put_and_is_flagged_on_every_report(agent):
    claimed = uuids(OTHER)[0]
    report = structured([claimed, *uuids()[1:]])
    for _ in range(3):  # B, then A, then B again: it does not go back and forth
        response = agent.post(URL, report, format="json")
        assert response.status_code == 200 and response.json()["moved_gpus"] == []
        assert any(claimed in p and OTHER in p for p in response.json()["problems"])
        assert agent.post(URL, structured(uuids(OTHER), host=OTHER), format="json").status_code == 200
        assert Gpu.objects.get(uuid=claimed).tray.hostname == OTHER
    assert any(claimed in p for p in tray().fabric_problems)


def test_a_dry_run_names_the_other_host_too(agent):
    claimed = uuids(OTHER)[0]
    response = agent.post(URL, {**structured([claimed, *uuids()[1:]]), "dry_run": True}, format="json")
    assert response.status_code == 200 and any(OTHER in p for p in response.json()["problems"])


def test_a_gpu_its_old_tray_stopped_reporting_is_followed(agent):
    moving = uuids(OTHER)[0]
    Gpu.objects.filter(uuid=moving).update(
        last_report_at=timezone.now() - CLAIM_WINDOW - timedelta(minutes=1)
    )
    response = agent.post(URL, structured([moving, *uuids()[1:]]), format="json")
    assert response.status_code == 200 and response.json()["moved_gpus"] == [moving]
    assert Gpu.objects.get(uuid=moving).tray.hostname == HOST


# ---------------------------------------------------------------------------------------- the shared check


def test_services_refuse_what_the_api_refuses():
    """An agent calling the service directly meets the same check (validate_report)."""
    _fmt, gpus = parse_any(with_clique("gb200_default_partition.txt", "32766"))
    with pytest.raises(ReportError, match="more than once"):
        validate_report([gpus[0], replace(gpus[1], uuid=gpus[0].uuid.upper())])
    with pytest.raises(ReportError, match="share index 0"):
        validate_report([gpus[0], replace(gpus[1], index=0)])
    with pytest.raises(ReportError, match="lists no GPUs"):
        validate_report([])


def test_ingest_report_refuses_a_duplicate_before_writing(demo_inventory):
    fmt, gpus = parse_any(csv_rows(uuids()))
    before = snapshot()
    with pytest.raises(ReportError, match="more than once"):
        ingest_report(HOST, fmt, [gpus[0], replace(gpus[1], uuid=gpus[0].uuid)])
    assert snapshot() == before


# ---------------------------------------------------------------------------------------- the database


def test_the_database_refuses_an_upper_case_duplicate(demo_inventory):
    existing = Gpu.objects.first().uuid
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.create(uuid="GPU-" + existing[4:].upper())


def test_the_database_refuses_an_upper_case_uuid(demo_inventory):
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.create(uuid=f"GPU-{uuid.uuid4()}".upper())


# ---------------------------------------------------------------------------------------- migration 0004

BEFORE_0004 = [("inventory", "0003_partition_plans")]
AT_0004 = [("inventory", "0004_gpu_uuid_case_insensitive")]


@pytest.mark.slow(reason="runs migrations")
@pytest.mark.django_db(transaction=True)
def test_migration_0004_lower_cases_uuids_and_drops_case_copies_and_is_reversible(scratch_database):
    # On an empty database of its own (tests/scratch_database.py): forward to 0003 and the little it depends
    # on, then back and forth between 0003 and 0004 only; the suite's test database is never migrated back
    # (unapplying the rest of the project for it took a minute on 2 cores, and as long again forward).
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_0004)
    executor.loader.build_graph()
    old_apps = executor.loader.project_state(BEFORE_0004).apps
    Gpu_ = old_apps.get_model("inventory", "Gpu")
    lone, pair = uuid.uuid4(), uuid.uuid4()
    Gpu_.objects.create(uuid=f"GPU-{lone}".upper())  # only ever reported in upper case
    kept = Gpu_.objects.create(uuid=f"GPU-{pair}").pk
    Gpu_.objects.create(uuid=f"GPU-{pair}".upper())  # the copy the bug made

    executor.loader.build_graph()
    executor.migrate(AT_0004)
    Gpu4 = executor.loader.project_state(AT_0004).apps.get_model("inventory", "Gpu")
    assert sorted(Gpu4.objects.values_list("uuid", flat=True)) == sorted([f"GPU-{lone}", f"GPU-{pair}"])
    assert Gpu4.objects.get(uuid=f"GPU-{pair}").pk == kept
    with pytest.raises(IntegrityError), transaction.atomic():  # 0004's constraint holds
        Gpu4.objects.create(uuid=f"GPU-{lone}".upper())

    executor.loader.build_graph()
    executor.migrate(BEFORE_0004)  # reversible: the constraints go, the canonical UUIDs stay
    assert Gpu_.objects.count() == 2
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes("inventory"))  # today's Gpu: inventory's latest
    assert Gpu.objects.count() == 2
