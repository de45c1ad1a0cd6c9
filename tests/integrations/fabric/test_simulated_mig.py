"""The simulated nodes' MIG manager (integrations.fabric.mig_nodes): in the embedded mode a tray given a MIG
layout reports its GPUs in it after the push, through the discovery service, mode pending first, then the
layout's instances made from the profiles and placements its GPUs' model reported; all-disabled turns MIG off
again; a tray with no layout, or one already reporting its layout, reports nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from django.urls import reverse

from integrations.fabric import adapter, mig_nodes
from integrations.fabric.nodes import REPORT_NODES, SETTLE_SECONDS
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.tasks import report_simulated_nodes
from inventory.choices import MigMode
from inventory.discovery.mig import GpuMig, combine
from inventory.mig_layouts import LayoutError, place
from inventory.mig_options import layout_status, tray_layout
from inventory.models import ComputeTray, Gpu, MigDevice
from scheduling.services.mig_layouts import set_mig_layout
from tenancy.services import schedulable_gpus_q
from tests import factories

FIXTURES = Path(__file__).parents[2] / "inventory" / "fixtures" / "mig"
OUTPUTS = {key: (FIXTURES / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")}
REPORTED = next(s for s in combine((FIXTURES / "gb200_mig.xml").read_text(), OUTPUTS).values() if s.profiles)
SOURCE = "gb-r02-t10"  # the GPU that reported MIG profiles (its GPU 0 is in MIG mode)
TRAY = "gb-r03-t02"  # an idle tray of the same model, never in MIG mode
GPU_UUID = "GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9"


@pytest.fixture
def fleet(demo_inventory, monkeypatch):
    """The demo inventory with one GB200 GPU in MIG mode that reported its profiles, the local directory
    target and the demo's simulated fabric target."""
    monkeypatch.setattr(adapter, "_SIMULATED", {})
    gpu = Gpu.objects.get(tray__hostname=SOURCE, index=0)
    Gpu.objects.filter(pk=gpu.pk).update(
        mig_mode=MigMode.ENABLED, mig_pending=MigMode.ENABLED, mig={**REPORTED.as_dict(), "uuid": gpu.uuid}
    )
    Gpu.objects.update(product="NVIDIA GB200")
    factories.local_target()
    ConfigTarget.objects.create(name="fabric", kind="fabric", settings={"kind": "simulated"})
    return demo_inventory


# --- the pure part: what the MIG manager makes ---------------------------------------------------------


def test_the_instances_are_the_placements_of_the_reported_profiles():
    made = mig_nodes.made_by_manager(
        GPU_UUID, "all-balanced", {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}, REPORTED.profiles
    )
    assert (made.current, made.pending, made.complete) == ("enabled", "enabled", True)
    got = [(i.profile, i.placement_start, i.placement_size) for i in made.instances]
    assert got == place({"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2}, REPORTED.profiles)
    by_name = {p.name: p for p in REPORTED.profiles}
    for instance in made.instances:  # memory and SMs as the driver reported the profile, never from a name
        assert (instance.memory_mib, instance.multiprocessors) == (
            by_name[instance.profile].memory_mib,
            by_name[instance.profile].multiprocessors,
        )
        assert instance.uuid.startswith("MIG-") and instance.compute_instance_id == 0
    assert (
        len({i.uuid for i in made.instances}) == 4 and len({i.gpu_instance_id for i in made.instances}) == 4
    )
    # What is left free, as -lgip's Free column would say: no room for another 3g, 4g or 7g.
    free = {p.name: p.instances_free for p in made.profiles}
    assert free["7g.186gb"] == free["4g.93gb"] == free["3g.93gb"] == 0
    # It reads back as a report the discovery service accepts (the strict structured form).
    assert GpuMig.from_dict(made.as_dict()) == made
    # The same GPU, layout and instance: the same UUIDs (a report sent again changes nothing).
    assert (
        mig_nodes.made_by_manager(
            GPU_UUID, "all-balanced", {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}, REPORTED.profiles
        )
        == made
    )


def test_all_of_the_smallest_profile_fills_every_slice():
    made = mig_nodes.made_by_manager(GPU_UUID, "all-1g.23gb", {"1g.23gb": 7}, REPORTED.profiles)
    assert [(i.profile, i.placement_start) for i in made.instances] == [("1g.23gb", s) for s in range(7)]
    assert {p.name: p.instances_free for p in made.profiles}["1g.23gb"] == 0


def test_a_renamed_profile_is_made_under_the_name_the_driver_reported():
    # Early GB200 drivers printed 1g.24gb for what later ones call 1g.23gb: the manager makes what is listed.
    renamed = tuple(replace(p, name="1g.24gb") if p.name == "1g.23gb" else p for p in REPORTED.profiles)
    made = mig_nodes.made_by_manager(GPU_UUID, "all-1g.24gb", {"1g.24gb": 7}, renamed)
    assert {i.profile for i in made.instances} == {"1g.24gb"}
    with pytest.raises(LayoutError):
        mig_nodes.made_by_manager(GPU_UUID, "all-1g.23gb", {"1g.23gb": 7}, renamed)


# --- the loop in the embedded mode ----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_layout_applied_is_reported_by_the_simulated_nodes_then_whole_gpus_again(
    fleet, django_capture_on_commit_callbacks, monkeypatch
):
    later = []  # the settled reports' task message, held as a worker holds one with a countdown
    monkeypatch.setattr(mig_nodes, "enqueue", lambda name, reports, **options: later.append(reports))
    tray = ComputeTray.objects.get(hostname=TRAY)
    with django_capture_on_commit_callbacks(execute=True):
        set_mig_layout(tray.pk, "all-balanced")
    # The push renders the layout; the simulated fabric's payload carries it for its nodes.
    fabric_push = ConfigPush.objects.filter(target__kind="fabric").latest("pk")
    assert fabric_push.status == PushStatus.SUCCEEDED, fabric_push.error
    assert fabric_push.payload["mig_nodes"] == [
        {"host": TRAY, "layout": "all-balanced", "devices": {"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2}}
    ]
    assert f"MIG manager (simulated): {TRAY} apply their layout" in fabric_push.log
    # Right after the push: MIG pending on every GPU of the tray, no instances yet; the page says how far.
    tray.refresh_from_db()
    gpus = list(tray.gpus.order_by("index"))
    assert {(g.mig_mode, g.mig_pending) for g in gpus} == {(MigMode.DISABLED, MigMode.ENABLED)}
    assert layout_status(tray, tray_layout(tray)).applied == 0
    assert not MigDevice.objects.filter(gpu__tray=tray).exists()

    # SETTLE_SECONDS later a worker runs the message: the nodes report the layout's instances, in effect.
    [reports] = later
    with django_capture_on_commit_callbacks(execute=True):
        assert report_simulated_nodes(reports) == [TRAY]
    status = layout_status(tray, tray_layout(tray))
    assert status.done, status.differs
    devices = MigDevice.objects.filter(gpu__tray=tray)
    assert devices.count() == 16
    assert sorted(devices.filter(gpu=gpus[0]).values_list("profile", "placement_start")) == [
        ("1g.23gb", 2),
        ("1g.23gb", 3),
        ("2g.47gb", 0),
        ("3g.93gb", 4),
    ]
    assert not Gpu.objects.filter(schedulable_gpus_q(), tray=tray).exists()
    # The other trays' nodes did not report; the GPU that reported the profiles kept its own instances.
    assert Gpu.objects.filter(mig_mode=MigMode.ENABLED).exclude(tray=tray).count() == 1

    # Back to whole GPUs: MIG off on every GPU, the devices gone, the GPUs given whole again.
    with django_capture_on_commit_callbacks(execute=True):
        set_mig_layout(tray.pk, "all-disabled")
    with django_capture_on_commit_callbacks(execute=True):
        assert report_simulated_nodes(later[-1]) == [TRAY]
    tray.refresh_from_db()
    assert layout_status(tray, tray_layout(tray)).done
    assert not MigDevice.objects.filter(gpu__tray=tray).exists()
    assert set(tray.gpus.values_list("mig_mode", "mig_pending")) == {(MigMode.DISABLED, MigMode.DISABLED)}
    assert Gpu.objects.filter(schedulable_gpus_q(), tray=tray).count() == 4


@pytest.mark.django_db
def test_the_settled_reports_are_sent_to_arrive_later(fleet, django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr(
        mig_nodes, "enqueue", lambda name, *args, **options: sent.append((name, args, options))
    )
    tray = ComputeTray.objects.get(hostname=TRAY)
    with django_capture_on_commit_callbacks(execute=True):
        set_mig_layout(tray.pk, "all-1g.23gb")
    [(name, (reports,), options)] = sent
    assert (name, options) == (REPORT_NODES, {"countdown": SETTLE_SECONDS})
    assert [r["host"] for r in reports] == [TRAY] and len(reports[0]["gpus"]) == 4
    # Sent again (a later push for another reason), the tray still pending: the same reports.
    assert (
        mig_nodes.mig_reports([{"host": TRAY, "layout": "all-1g.23gb", "devices": {"1g.23gb": 7}}])[1]
        == reports
    )


@pytest.mark.django_db
def test_trays_without_a_layout_or_reporting_theirs_already_report_nothing(fleet):
    assert mig_nodes.mig_reports([]) == ([], [], [])
    # The GPU that reported the profiles has no layout chosen: nothing asks its node to change.
    assert mig_nodes.mig_nodes([]) == []
    # A tray whose GPUs already report the layout (here: all-disabled on GPUs never in MIG mode).
    assert mig_nodes.mig_reports([{"host": TRAY, "layout": "all-disabled", "devices": {}}]) == ([], [], [])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "node",
    [
        {"host": TRAY, "layout": "All-Balanced", "devices": {"1g.23gb": 2}},  # wrong case
        {"host": TRAY, "layout": "all-1g\x00", "devices": {"1g.23gb": 7}},  # a control character
        {"host": TRAY, "layout": "all-1g.23gb", "devices": {"1G.23GB": 7}},  # a profile nobody reported
        {"host": TRAY, "layout": "all-1g.23gb", "devices": {"1g.23gb": 8}},  # more than fits
        {"host": TRAY, "layout": "all-1g.23gb", "devices": {"1g.23gb": "7"}},  # a count as text
    ],
)
def test_a_layout_the_gpus_cannot_hold_is_refused_in_words_and_nothing_reported(fleet, node):
    before = list(Gpu.objects.order_by("pk").values_list("mig_mode", "mig_pending", "mig"))
    now, later, refused = mig_nodes.mig_reports([node])
    assert (now, later) == ([], []) and len(refused) == 1 and refused[0].startswith(f"{TRAY}: ")
    assert list(Gpu.objects.order_by("pk").values_list("mig_mode", "mig_pending", "mig")) == before


@pytest.mark.django_db
def test_the_tray_page_says_the_layout_is_in_effect(
    fleet, admin_client_logged_in, django_capture_on_commit_callbacks
):
    tray = ComputeTray.objects.get(hostname=TRAY)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client_logged_in.post(
            reverse("integrations:tray-mig-layout", args=[tray.pk]), {"mig-layout": "all-balanced"}
        )
    assert response.status_code == 303
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "All 4 GPUs report it." in page and 'data-mig-status="in-effect"' in page
