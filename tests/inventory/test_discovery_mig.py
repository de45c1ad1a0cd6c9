"""MIG in node reports: the `-q -x` listing with the node's `nvidia-smi mig` listings (what the agent sends
when a GPU is in MIG mode), or a structured GPU's `mig`; stored on the GPU, shown on its page, and refused
whole, with nothing written, when it cannot be read."""

import json
import re
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.choices import MigMode
from inventory.models import ComputeTray, Gpu, MigDevice
from tests.factories import node_report, token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"
FIXTURES = Path(__file__).parent / "fixtures" / "mig"
XML = (FIXTURES / "gb200_mig.xml").read_text()
FIXTURE_UUIDS = re.findall(r"<uuid>(GPU-[^<]+)</uuid>", XML)
FIXTURE_CLUSTER = "3f7c2a91-5b1e-4d08-9c6a-2e4f8b0d1a73"
OUTPUTS = {key: (FIXTURES / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")}


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


@pytest.fixture
def tray() -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r02-t10")


def as_tray(text: str, tray: ComputeTray) -> str:
    """The fixture's GPUs, cluster and clique replaced by the tray's."""
    for fixture_uuid, gpu in zip(FIXTURE_UUIDS, tray.gpus.order_by("index"), strict=True):
        text = text.replace(fixture_uuid, gpu.uuid)
    text = text.replace(FIXTURE_CLUSTER, str(tray.rack.cluster_uuid))
    return text.replace("<cliqueId>32766</cliqueId>", f"<cliqueId>{tray.partition.clique_id}</cliqueId>")


def report(tray, **mig) -> dict:
    outputs = {key: as_tray(text, tray) for key, text in {**OUTPUTS, **mig}.items() if text is not None}
    return {"host": tray.hostname, "nvidia_smi": as_tray(XML, tray), "mig": outputs}


def test_a_mig_report_is_stored_on_the_gpu_and_shown_on_its_page(agent, tray, admin_user):
    response = agent.post(URL, report(tray), format="json")
    assert response.status_code == 200, response.content
    gpu = Gpu.objects.get(tray=tray, index=0)
    assert (gpu.mig_mode, gpu.mig_pending) == (MigMode.ENABLED, MigMode.ENABLED)
    assert gpu.mig["complete"] is True
    assert [(i["profile"], i["placement_start"], i["placement_size"]) for i in gpu.mig["instances"]] == [
        ("2g.47gb", 0, 2),
        ("1g.23gb", 2, 1),
        ("1g.23gb", 3, 1),
        ("3g.93gb", 4, 4),
    ]
    assert {g.mig_mode for g in Gpu.objects.filter(tray=tray).exclude(index=0)} == {MigMode.DISABLED}
    client = Client()
    client.force_login(admin_user)
    html = client.get(reverse("inventory:gpu-detail", args=[gpu.pk])).content.decode()
    assert "MIG (Multi-Instance GPU)" in html and '4\u20137 <span class="muted">of 0\u20137' in html
    assert "MIG-6f1a2b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b" in html and "1g.47gb" in html  # an offered profile
    rack = client.get(reverse("scheduling:rack-detail", args=[tray.rack.name])).content.decode()
    assert 'aria-label="MIG mode"' in rack
    listed = client.get("/api/v1/gpus/?mig_mode=enabled").json()
    assert [row["id"] for row in listed["results"]] == [gpu.pk]
    assert client.get("/api/v1/gpus/?mig_mode=on").status_code == 400
    api = client.get(f"/api/v1/gpus/{gpu.pk}/").json()
    assert (api["mig_mode"], api["mig"]["instances"][3]["uuid"]) == (
        "enabled",
        gpu.mig["instances"][3]["uuid"],
    )

    # The same listing again is the same report (a heartbeat may follow); a changed instance is not.
    again = agent.post(URL, report(tray), format="json").json()
    assert again["report_sha256"] == response.json()["report_sha256"]
    # Without -lgipp the profiles' placements are not known: another report, stored as such.
    changed = agent.post(URL, report(tray, lgipp=None), format="json")
    assert changed.status_code == 200 and changed.json()["report_sha256"] != again["report_sha256"]
    assert all(p["placements"] == [] for p in Gpu.objects.get(pk=gpu.pk).mig["profiles"])


def test_mig_listings_that_cannot_be_read_are_refused_and_nothing_is_written(agent, tray):
    before = list(Gpu.objects.filter(tray=tray).values_list("mig_mode", "mig"))
    overlapping = OUTPUTS["lgi"].replace("2:1", "1:1")  # 1g.23gb on slice 1, inside the 2g.47gb at 0:2
    for bad in (
        report(tray, lgi=overlapping),
        report(tray, lgip="| GPU instance profiles: |\n|   0  MIG 1g.23gb  19  9/7  22.00  No  18  1  0 |\n"),
        {**report(tray), "mig": {"lgi": OUTPUTS["lgi"], "extra": "x"}},
        {**report(tray), "mig": {"lgi": 7}},
        {**report(tray), "mig": {"lgi": "\ud800"}},
    ):
        response = agent.post(URL, json.dumps(bad), content_type="application/json")
        assert response.status_code == 400, response.content
        assert "mig" in str(response.json()), response.json()
    # MIG listings beside a CSV listing, or beside a hash only: refused in words.
    t = tray
    csv = "".join(f"{gpu.uuid}, {t.rack.cluster_uuid}, 2\n" for gpu in t.gpus.order_by("index"))
    response = agent.post(URL, {"host": t.hostname, "nvidia_smi": csv, "mig": {"lgi": OUTPUTS["lgi"]}})
    assert response.status_code == 400 and "-q -x" in response.json()["mig"][0]
    assert list(Gpu.objects.filter(tray=tray).values_list("mig_mode", "mig")) == before


def test_a_structured_report_carries_each_gpus_mig_and_a_listing_without_it_keeps_what_was_known(agent, tray):
    first = agent.post(URL, report(tray), format="json")
    assert first.status_code == 200
    stored = Gpu.objects.get(tray=tray, index=0).mig
    # The structured path: the GPU's own state, read by the same rule.
    ok = node_report(
        tray, tray.partition.clique_id, gpu_fields=lambda gpu: {"mig": stored} if gpu.index == 0 else {}
    )
    assert agent.post(URL, ok, format="json").status_code == 200
    assert Gpu.objects.get(tray=tray, index=0).mig == stored
    # Another GPU's state, or a bad one: refused naming the GPU.
    for wrong in ({**stored, "uuid": Gpu.objects.get(tray=tray, index=1).uuid}, {**stored, "current": "on"}):
        bad = node_report(
            tray,
            tray.partition.clique_id,
            gpu_fields=lambda gpu, wrong=wrong: {"mig": wrong} if gpu.index == 0 else {},
        )
        response = agent.post(URL, bad, format="json")
        assert response.status_code == 400, response.content
        assert "gpus[0].mig" in str(response.json()), response.json()
    # A CSV listing says nothing of MIG: what was known stays.
    csv = "".join(
        f"{gpu.uuid}, {tray.rack.cluster_uuid}, {tray.partition.clique_id}\n"
        for gpu in tray.gpus.order_by("index")
    )
    assert agent.post(URL, {"host": tray.hostname, "nvidia_smi": csv}, format="json").status_code == 200
    assert Gpu.objects.get(tray=tray, index=0).mig_mode == MigMode.ENABLED


def test_a_mig_uuid_another_gpu_still_holds_is_not_taken_and_the_tray_says_why(agent, tray):
    assert agent.post(URL, report(tray), format="json").status_code == 200
    held = set(MigDevice.objects.filter(gpu__tray=tray).values_list("uuid", flat=True))
    assert len(held) == 4  # the fixture's four MIG devices
    # Another tray's node reports the same MIG UUIDs on its GPU 0 (a copied listing, a broken agent).
    other = ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r02-t11")
    answer = agent.post(URL, report(other), format="json")
    assert answer.status_code == 200, answer.content
    [problem] = [p for p in answer.json()["problems"] if "MIG device" in p]
    assert "which GPU" in problem and tray.hostname in problem
    assert Gpu.objects.get(tray=other, index=0).mig is None  # not applied to the claiming GPU
    assert set(MigDevice.objects.filter(gpu__tray=tray).values_list("uuid", flat=True)) == held
    assert not MigDevice.objects.filter(gpu__tray=other).exists()
    # Once the holder stopped reporting (past the claim window), the devices move with the next report.
    Gpu.objects.filter(tray=tray).update(last_report_at=timezone.now() - timedelta(hours=1))
    assert agent.post(URL, report(other), format="json").status_code == 200
    assert set(MigDevice.objects.filter(gpu__tray=other).values_list("uuid", flat=True)) == held
    assert not MigDevice.objects.filter(gpu__tray=tray).exists()


def test_a_refusal_names_the_input_at_fault(agent, tray):
    bad_mode = report(tray)
    bad_mode["nvidia_smi"] = bad_mode["nvidia_smi"].replace(
        "<current_mig>Enabled</current_mig>", "<current_mig>Sometimes</current_mig>", 1
    )
    for body in (bad_mode, {key: value for key, value in bad_mode.items() if key != "mig"}):
        answer = agent.post(URL, body, format="json")
        assert answer.status_code == 400 and set(answer.json()) == {"nvidia_smi"}, answer.json()
    bad_listing = report(tray, lgi=OUTPUTS["lgi"].replace("4:4", "4:5"))
    answer = agent.post(URL, bad_listing, format="json")
    assert answer.status_code == 400 and set(answer.json()) == {"mig"}, answer.json()


def test_a_host_token_never_takes_a_mig_uuid_from_another_racks_gpu_however_silent(agent, tray):
    assert agent.post(URL, report(tray), format="json").status_code == 200  # gb-r02-t10 holds the devices
    held = set(MigDevice.objects.filter(gpu__tray=tray).values_list("uuid", flat=True))
    Gpu.objects.filter(tray=tray).update(last_report_at=timezone.now() - timedelta(days=1))  # silent
    elsewhere = ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r01-t05")
    out = StringIO()
    call_command("discovery_agent_token", "--host", elsewhere.hostname, stdout=out)
    scoped = APIClient()
    scoped.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip().rsplit(' ', 1)[1]}")
    answer = scoped.post(URL, report(elsewhere), format="json")
    assert answer.status_code == 200, answer.content
    assert any("outside this token's scope" in p for p in answer.json()["problems"]), answer.json()
    assert set(MigDevice.objects.filter(gpu__tray=tray).values_list("uuid", flat=True)) == held
    assert Gpu.objects.get(tray=elsewhere, index=0).mig is None
