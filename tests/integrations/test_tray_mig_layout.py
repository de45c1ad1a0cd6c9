"""A tray's MIG layout chosen on its page (integrations.views.tray_actions.tray_mig_layout ->
scheduling.services.mig_layouts): the catalogue from the profiles its GPUs' model reported, the refusals, what
the pass stops doing, and what the configuration renders (node label, mig-parted ConfigMap, Slurm GRES)."""

from __future__ import annotations

from pathlib import Path

import hostlist
import pytest
import yaml
from django.urls import reverse

from core.models import AuditEvent
from integrations.kubernetes.render import MIG_CONFIG_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_MAP
from integrations.models import ConfigPush
from integrations.plans.service import rack_trays
from integrations.state import build_state, render_files
from inventory.choices import MigMode
from inventory.discovery.mig import combine
from inventory.mig_options import layout_options, layout_status, tray_layout
from inventory.models import ComputeTray, Gpu
from scheduling.models import Allocation
from tenancy.services import schedulable_gpus, schedulable_gpus_q
from tests import factories

pytestmark = pytest.mark.django_db
FIXTURES = Path(__file__).parents[1] / "inventory" / "fixtures" / "mig"
OUTPUTS = {key: (FIXTURES / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")}
REPORTED = next(s for s in combine((FIXTURES / "gb200_mig.xml").read_text(), OUTPUTS).values() if s.profiles)
SOURCE = "gb-r02-t10"  # the GPU that reported MIG profiles (its GPU 0 is in MIG mode)
TRAY = "gb-r03-t02"  # an idle tray of the same model, never in MIG mode


@pytest.fixture
def fleet(demo_inventory):
    """The demo inventory with one GB200 GPU in MIG mode that reported its profiles (as the fixtures say)."""
    gpu = Gpu.objects.get(tray__hostname=SOURCE, index=0)
    Gpu.objects.filter(pk=gpu.pk).update(
        mig_mode=MigMode.ENABLED, mig_pending=MigMode.ENABLED, mig={**REPORTED.as_dict(), "uuid": gpu.uuid}
    )
    Gpu.objects.update(product="NVIDIA GB200")
    factories.local_target()
    return demo_inventory


def _tray(hostname: str = TRAY) -> ComputeTray:
    return ComputeTray.objects.get(hostname=hostname)


def _node_line(files: dict[str, str], hostname: str) -> str:
    """The NodeName line of rackplane.conf that defines `hostname` (lines are compressed host lists)."""
    for line in files["slurm/rackplane.conf"].splitlines():
        if line.startswith("NodeName=") and hostname in hostlist.expand_hostlist(line.split()[0][9:]):
            return line
    raise AssertionError(f"no node line for {hostname}")


def _post(client, tray: ComputeTray, layout: str):
    return client.post(
        reverse("integrations:tray-mig-layout", args=[tray.pk]), {"mig-layout": layout}, follow=False
    )


def test_a_tray_that_never_had_mig_is_offered_the_layouts_its_model_reported(fleet):
    options = layout_options(_tray())
    assert options.source == Gpu.objects.get(tray__hostname=SOURCE, index=0).uuid
    assert [o.name for o in options.layouts][:3] == ["all-disabled", "all-balanced", "all-1g.23gb"]


def test_profiles_of_another_trays_gpu_are_said_to_be_so_naming_its_tray(fleet, admin_client_logged_in):
    # Found by a walkthrough (issue 31): gb-r08-t03's panel said "profiles reported by GPU-254b0c4e-…" of
    # gb-r01-t07, as if it were one of its own GPUs.
    source = Gpu.objects.get(tray__hostname=SOURCE, index=0)
    assert layout_options(_tray()).source_tray == SOURCE
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[_tray().pk])).content.decode()
    help_text = page[page.index('class="help small mig-source"') :]
    help_text = help_text[: help_text.index("</p>")]
    assert "a GPU of another tray of the same model" in help_text
    assert source.uuid in help_text and SOURCE in help_text and "NVIDIA GB200" in help_text
    # The tray whose own GPU reported them says so as before, naming no other tray.
    assert layout_options(_tray(SOURCE)).source_tray == ""
    own = admin_client_logged_in.get(
        reverse("inventory:tray-detail", args=[_tray(SOURCE).pk])
    ).content.decode()
    assert f"Profiles as {source.uuid} (NVIDIA GB200) reported them" in own
    assert "another tray" not in own


def test_without_any_reported_profiles_the_page_says_how_to_get_them(demo_inventory, admin_client_logged_in):
    tray = _tray()
    options = layout_options(tray)
    assert options.layouts == () and "nvidia-smi -i 0 -mig 1" in options.problem
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[tray.pk]))
    assert "has reported its MIG profiles yet" in page.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_an_admin_applies_a_layout_and_everything_renders_it(
    fleet, admin_client_logged_in, admin_user, django_capture_on_commit_callbacks
):
    tray = _tray()
    before = schedulable_gpus()
    pushes = ConfigPush.objects.count()
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "Apply layout" in page and 'value="all-balanced"' in page
    assert 'value="all-1g.23gb"' in page

    with django_capture_on_commit_callbacks(execute=True):
        response = _post(admin_client_logged_in, tray, "all-1g.23gb")
    assert response.status_code == 303, response.content
    tray.refresh_from_db()
    assert (tray.mig_layout, tray.mig_layout_devices) == ("all-1g.23gb", {"1g.23gb": 7})
    # Audited with who did it; a push queued; its GPUs are no longer given whole.
    event = AuditEvent.objects.filter(object_type="inventory.computetray", object_id=str(tray.pk)).latest(
        "pk"
    )
    assert event.actor_name == admin_user.username and event.before["mig_layout"] == ""
    assert ConfigPush.objects.count() > pushes
    assert "tray gb-r03-t02: MIG layout  -> all-1g.23gb" in ConfigPush.objects.latest("pk").reason
    assert schedulable_gpus() == before - 4
    assert not Gpu.objects.filter(schedulable_gpus_q(), tray=tray).exists()

    state = build_state()
    files = render_files(state)
    node_line = _node_line(files, TRAY)
    assert "Gres=gpu:1g.23gb:28" in node_line and "Gres=gpu:4" not in node_line
    nodes = [
        doc
        for name, text in files.items()
        if name.startswith("kubernetes/")
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] == "Node"
    ]
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    assert labels[TRAY][MIG_CONFIG_LABEL] == "all-1g.23gb"
    assert MIG_CONFIG_LABEL not in labels["gb-r03-t03"]
    [config_map] = [
        doc
        for name, text in files.items()
        if name.startswith("kubernetes/")
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] == "ConfigMap"
    ]
    assert config_map["metadata"]["name"] == MIG_CONFIG_MAP
    assert yaml.safe_load(config_map["data"][MIG_CONFIG_KEY])["mig-configs"]["all-1g.23gb"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.23gb": 7}}
    ]

    # The partition wizard sees the tray as MIG from the choice on (inventory.planning warns by it).
    [info] = [t for t in rack_trays(tray.rack) if t.hostname == TRAY]
    assert (info.mig_gpus, info.mig_layout) == (4, "all-1g.23gb")

    # Until the GPUs report it, the page says how far it is; then it is done.
    status = layout_status(tray, tray_layout(tray))
    assert (status.applied, status.gpus, status.done) == (0, 4, False)
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "0 of 4 GPUs report it so far" in page
    # the form shows the chosen layout (its name is data: translate="no", inventory.forms.DataChoices)
    assert '<option value="all-1g.23gb" selected translate="no">' in page

    # The GPUs report the layout: the page says so.
    for gpu in tray.gpus.all():
        instances = [
            {**REPORTED.instances[0].as_dict(), "gpu_instance_id": gi, "profile": "1g.23gb", "profile_id": 19}
            | {"placement_start": gi, "placement_size": 1, "uuid": None, "compute_instance_id": 0}
            for gi in range(7)
        ]
        Gpu.objects.filter(pk=gpu.pk).update(
            mig_mode=MigMode.ENABLED,
            mig={**REPORTED.as_dict(), "uuid": gpu.uuid, "instances": instances},
        )
    status = layout_status(tray, tray_layout(tray))
    assert (status.applied, status.done) == (4, True), status.differs
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "All 4 GPUs report it." in page


def test_whole_gpus_again(fleet, admin_client_logged_in):
    tray = _tray()
    assert _post(admin_client_logged_in, tray, "all-balanced").status_code == 303
    assert _post(admin_client_logged_in, tray, "all-disabled").status_code == 303
    tray.refresh_from_db()
    assert tray.mig_layout == "all-disabled"
    assert Gpu.objects.filter(schedulable_gpus_q(), tray=tray).count() == 4
    files = render_files(build_state())
    node_line = _node_line(files, TRAY)
    assert "Gres=gpu:4" in node_line
    # The label stays (all-disabled tells the MIG manager to turn MIG off); the ConfigMap keeps that config.
    assert "nvidia.com/mig.config: all-disabled" in "".join(files.values())


def test_a_busy_tray_is_refused_and_nothing_changes(fleet, admin_client_logged_in, department_a):
    tray = _tray()
    job = factories.make_job(department_a, trays=[tray])
    pushes = ConfigPush.objects.count()
    response = _post(admin_client_logged_in, tray, "all-1g.23gb")
    assert response.status_code == 303
    page = admin_client_logged_in.get(response["Location"]).content.decode()
    assert "Nothing was changed" in page and f"job {job.pk}" in page
    tray.refresh_from_db()
    assert tray.mig_layout == "" and ConfigPush.objects.count() == pushes
    assert Allocation.objects.filter(job=job).count() == 4


@pytest.mark.parametrize(
    "bad", ["all-3g.95gb", "ALL-BALANCED", "all-balanced\x00", "../all", "x" * 5000, "all\u202ebalanced"]
)
def test_a_layout_not_in_the_catalogue_is_refused_with_a_400(fleet, admin_client_logged_in, bad):
    tray = _tray()
    response = _post(admin_client_logged_in, tray, bad)
    assert response.status_code == 400
    page = response.content.decode()
    assert "That is not a layout these GPUs allow" in page
    assert len(bad) < 20 or bad not in page  # a long value is not echoed back
    tray.refresh_from_db()
    assert tray.mig_layout == ""


@pytest.mark.parametrize("persona", ["lead_a", "member_a"])
def test_only_platform_admins_choose_layouts(fleet, client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    tray = _tray()
    response = _post(client, tray, "all-1g.23gb")
    assert response.status_code == 403
    tray.refresh_from_db()
    assert tray.mig_layout == ""
    assert client.get(reverse("integrations:tray-mig-layout", args=[tray.pk])).status_code in (403, 405)


def test_one_layout_name_means_one_layout_across_the_fleet(fleet, admin_client_logged_in):
    # Another GPU model's all-balanced (a GB300's profiles) already on a tray: the name cannot mean both.
    ComputeTray.objects.filter(hostname="gb-r03-t09").update(
        mig_layout="all-balanced", mig_layout_devices={"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}
    )
    tray = _tray()
    response = _post(admin_client_logged_in, tray, "all-balanced")
    assert response.status_code == 303
    page = admin_client_logged_in.get(response["Location"]).content.decode()
    assert "gb-r03-t09 already has a layout named all-balanced with other devices" in page
    tray.refresh_from_db()
    assert tray.mig_layout == ""


def test_a_tray_added_or_removed_asks_for_no_push_only_its_mig_layout_does(
    fleet, django_capture_on_commit_callbacks
):
    """Trays come and go through discovery and partition plans, which push on their own terms; the push
    watcher hears a tray only for its MIG layout (integrations.signals.RENDERED)."""
    from integrations import signals

    def pushes(callbacks) -> int:
        return sum(isinstance(c, signals._PushOnCommit) for c in callbacks)

    tray = ComputeTray.objects.get(hostname="gb-r03-t18")
    rack, slot, partition = tray.rack, tray.slot, tray.partition
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        Gpu.objects.filter(tray=tray).update(tray=None, index=None)
        tray.delete()
        ComputeTray.objects.create(rack=rack, slot=slot, hostname="gb-r03-t18", partition=partition)
    assert pushes(callbacks) == 0
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        ComputeTray.objects.filter(hostname="gb-r03-t18").update(mig_layout="all-disabled")  # bulk, no signal
        again = ComputeTray.objects.get(hostname="gb-r03-t18")
        again.mig_layout = "all-balanced"
        again.save()
    assert pushes(callbacks) == 1
