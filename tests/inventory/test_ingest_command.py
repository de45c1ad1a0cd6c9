"""manage.py ingest_nvidia_smi: format detection, the JSON it prints, dry runs, errors that write nothing."""

import json
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from inventory.models import ComputeTray, Gpu

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia_smi"


def run(*args) -> dict:
    out, err = StringIO(), StringIO()
    call_command("ingest_nvidia_smi", *args, stdout=out, stderr=err)
    return json.loads(out.getvalue())


def compact_csv(tray: ComputeTray, clique_id: int) -> str:
    """`nvidia-smi --query-gpu=uuid,fabric.clusterUuid,fabric.cliqueId --format=csv,noheader` for the tray."""
    return "".join(
        f"{uuid_}, {tray.rack.cluster_uuid}, {clique_id}\n"
        for uuid_ in tray.gpus.order_by("index").values_list("uuid", flat=True)
    )


def test_csv_report_is_reconciled_and_printed_as_one_json_object(demo_inventory, tmp_path):
    tray = ComputeTray.objects.select_related("rack").get(hostname="gb-r02-t03")
    report = tmp_path / "smi.csv"
    report.write_text(compact_csv(tray, clique_id=2))
    printed = run("--host", tray.hostname, str(report))
    assert set(printed) == {"host", "format", "gpus", "tray_clique", "problems"}
    assert printed["format"] == "csv" and printed["host"] == "gb-r02-t03"
    assert printed["tray_clique"] == f"{tray.rack.cluster_uuid}.2"
    assert set(printed["gpus"][0]) == {
        "uuid",
        "index",
        "cluster_uuid",
        "clique_id",
        "state",
        "status",
        "health",
        "mig_mode",
    }
    tray.refresh_from_db()
    # gb-r02-t03 is intended for p1 (clique 1): reporting clique 2 is drift, flagged on the tray.
    assert tray.fabric_problems == [
        "drift: the node reports clique 2, the inventory intends gb-r02 p1 (clique 1)"
    ]


def test_dry_run_writes_nothing_and_accepts_unknown_hosts(demo_inventory, tmp_path):
    tray = ComputeTray.objects.select_related("rack").get(hostname="gb-r02-t03")
    report = tmp_path / "smi.csv"
    report.write_text(compact_csv(tray, clique_id=2))
    run("--host", tray.hostname, str(report), "--dry-run")
    tray.refresh_from_db()
    assert tray.fabric_problems == []
    printed = run("--host", "not-yet-racked", str(report), "--dry-run")
    assert printed["host"] == "not-yet-racked" and printed["problems"] == []


def test_unknown_host_without_dry_run_fails_and_writes_nothing(demo_inventory, tmp_path):
    report = tmp_path / "smi.csv"
    new_uuid = f"GPU-{uuid.uuid4()}"
    report.write_text(f"{new_uuid}, {uuid.uuid4()}, 1\n")
    with pytest.raises(CommandError, match="not in the inventory"):
        run("--host", "gb-r77-t01", str(report))
    assert not Gpu.objects.filter(uuid=new_uuid).exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "empty"),
        ("<nvidia_smi_log><gpu>", "XML"),
        ("GPU-1234, not-a-uuid\n", "column"),
    ],
)
def test_unparseable_input_exits_non_zero_saying_what_was_wrong(demo_inventory, tmp_path, content, message):
    report = tmp_path / "bad.txt"
    report.write_text(content)
    before = list(ComputeTray.objects.values_list("hostname", "fabric_problems", "last_report_at"))
    with pytest.raises(CommandError) as caught:
        run("--host", "gb-r01-t01", str(report))
    assert message.lower() in str(caught.value).lower() and "nothing was written" in str(caught.value)
    assert list(ComputeTray.objects.values_list("hostname", "fabric_problems", "last_report_at")) == before


def test_a_missing_file_is_a_clear_error(demo_inventory, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        run("--host", "gb-r01-t01", str(tmp_path / "absent.txt"))


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "fixture, fmt",
    [
        ("gb200_default_partition.txt", "text"),
        ("gb200_default_partition.xml", "xml"),
        ("gb200_default_partition.csv", "csv"),
    ],
)
def test_full_nvidia_smi_output_creates_the_gpus_it_reports(demo_inventory, fixture, fmt):
    path = FIXTURES / fixture
    printed = run("--host", "gb-r03-t02", str(path))
    assert printed["format"] == fmt and len(printed["gpus"]) == 4
    tray = ComputeTray.objects.get(hostname="gb-r03-t02")
    assert sorted(tray.gpus.values_list("uuid", flat=True)) == sorted(gpu["uuid"] for gpu in printed["gpus"])
    assert Gpu.objects.filter(tray__isnull=True).count() == 4  # the four it replaced are kept, detached


@pytest.mark.parametrize(
    "fixture, expected",
    [
        ("gb200_in_progress.txt", "still in progress"),
        ("gb200_insufficient_resources.xml", "Insufficient Resources"),
        ("gb200_clique_mismatch.txt", "disagree"),
    ],
)
def test_reasons_a_node_cannot_join_a_partition_are_printed_and_flagged(demo_inventory, fixture, expected):
    printed = run("--host", "gb-r03-t02", str(FIXTURES / fixture))
    assert printed["tray_clique"] is None
    assert any(expected.lower() in problem.lower() for problem in printed["problems"]), printed["problems"]
    tray = ComputeTray.objects.get(hostname="gb-r03-t02")
    assert tray.fabric_problems[: len(printed["problems"])] == printed["problems"]
