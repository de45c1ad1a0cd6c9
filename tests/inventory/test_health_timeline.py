"""The health timeline on the tray and GPU pages: events and decisions, newest first, in a time range, shown
to whoever may see the tray; kernel lines and check output (process names of other departments' jobs) only to
platform admins."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse
from django.utils import timezone

from inventory.choices import ActionKind, HealthKind, HealthSource
from inventory.health.actions import drain_reason
from inventory.health.timeline import timeline
from inventory.models import ComputeTray, HealthAction, HealthCheckResult, HealthEvent

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
KERNEL_LINE = (
    "NVRM: Xid (PCI:0008:01:00): 79, pid=4242, name=secret_training_job, GPU has fallen off the bus."
)


@pytest.fixture
def faulty(demo_inventory):
    """gb-r02-t10: an XID 79 on GPU 0 three hours ago (drained by the rules), an XID 13 on GPU 1 ten days ago,
    and a failed check."""
    tray = ComputeTray.objects.get(hostname="gb-r02-t10")
    gpu0, gpu1 = tray.gpus.get(index=0), tray.gpus.get(index=1)
    now = timezone.now()
    recent = HealthEvent.objects.create(
        tray=tray,
        gpu=gpu0,
        gpu_uuid=gpu0.uuid,
        source=HealthSource.AGENT,
        kind=HealthKind.XID,
        code="79",
        xid=79,
        mnemonic="GPU_HAS_FALLEN_OFF_THE_BUS",
        message=KERNEL_LINE,
        first_seen=now - timedelta(hours=3),
        last_seen=now - timedelta(hours=3),
        count=2,
        drains=True,
    )
    old = HealthEvent.objects.create(
        tray=tray,
        gpu=gpu1,
        gpu_uuid=gpu1.uuid,
        source=HealthSource.DCGM,
        kind=HealthKind.XID,
        code="13",
        xid=13,
        mnemonic="ROBUST_CHANNEL_GR_EXCEPTION",
        first_seen=now - timedelta(days=10),
        last_seen=now - timedelta(days=10),
        warns=True,
    )
    HealthAction.objects.create(
        tray=tray,
        kind=ActionKind.DRAIN,
        event=recent,
        rule_name="XID 79 drain",
        reason=drain_reason(recent),
        created_at=now - timedelta(hours=3) + timedelta(seconds=1),
    )
    HealthAction.objects.create(
        tray=tray,
        kind=ActionKind.WARN,
        event=old,
        rule_name="XID 13 warn",
        reason="XID 13 warn",
        created_at=now - timedelta(days=10),
    )
    HealthCheckResult.objects.create(
        tray=tray,
        name="dcgmi diag -r 2",
        exit_status=1,
        output="Fail: GPU 0 memory bandwidth 2.1 TB/s",
        started=now - timedelta(hours=1),
        seconds=118.0,
    )
    return tray


def tray_page(client, tray, query=""):
    return client.get(reverse("inventory:tray-detail", args=[tray.pk]) + query, headers=HTMX).content.decode()


def test_anonymous_users_see_no_timeline(client, faulty):
    response = client.get(reverse("inventory:tray-detail", args=[faulty.pk]) + "?health=all")
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["outsider", "member_b", "lead_a"])
def test_signed_in_users_see_the_timeline_but_not_kernel_lines(client_as, faulty, persona):
    html = tray_page(client_as(persona), faulty)
    assert "Health timeline" in html
    assert "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)" in html and "Drained" in html
    assert "\u00d72" in html  # the repeat count (a multiplication sign, then 2)
    assert "XID 13" not in html  # ten days ago: outside the default 7 days
    assert "Fail: GPU 0 memory bandwidth" not in html and "secret_training_job" not in html
    assert "Failed (exit 1)" in html  # the check's result is shown, its output is not


def test_platform_admins_see_kernel_lines_and_check_output(client_as, faulty):
    html = tray_page(client_as("platform_admin"), faulty)
    assert "secret_training_job" in html and "Fail: GPU 0 memory bandwidth" in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_range_and_the_order(client_as, faulty):
    client = client_as("member_a")
    html = tray_page(client, faulty, "?health=all")
    assert "XID 13 (ROBUST_CHANNEL_GR_EXCEPTION)" in html
    # Newest first: the drain (a second after the XID 79), the XID 79, then the XID 13 and its warning.
    order = [html.index(text) for text in ("Drained", "XID 79 (GPU", "XID 13 (ROBUST", "Warning")]
    assert order == sorted(order)
    day = tray_page(client, faulty, "?health=24h")
    assert "XID 79" in day and "XID 13" not in day
    assert 'aria-current="true">24 hours<' in day
    # An unknown range falls back to the default (7 days) instead of failing.
    assert 'aria-current="true">7 days<' in tray_page(client, faulty, "?health=forever")


def test_the_gpu_page_shows_that_gpus_events_only(client_as, faulty):
    client = client_as("outsider")
    gpu0, gpu1 = faulty.gpus.get(index=0), faulty.gpus.get(index=1)
    html = client.get(
        reverse("inventory:gpu-detail", args=[gpu0.pk]) + "?health=all", headers=HTMX
    ).content.decode()
    assert "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)" in html and "Drained" in html and "XID 13" not in html
    html = client.get(
        reverse("inventory:gpu-detail", args=[gpu1.pk]) + "?health=all", headers=HTMX
    ).content.decode()
    assert "XID 13 (ROBUST_CHANNEL_GR_EXCEPTION)" in html and "XID 79" not in html


def test_visibility_is_the_trays(outsider, faulty):
    assert HealthEvent.objects.visible_to(outsider).count() == 2
    assert not HealthEvent.objects.visible_to(AnonymousUser()).exists()
    assert not HealthAction.objects.visible_to(AnonymousUser()).exists()
    entries, used = timeline(AnonymousUser(), tray=faulty, range_key="all")
    assert entries == [] and used == "all"


def test_an_empty_range_says_so(client_as, faulty):
    HealthEvent.objects.all().delete()
    HealthAction.objects.all().delete()
    assert "No health events or decisions in this range" in tray_page(client_as("outsider"), faulty)


def test_a_degraded_partition_is_shown_on_its_trays(client_as, faulty):
    partition = faulty.partition
    partition.degraded_reason = "rackplane: XID 149 (NVLINK_NETIR_ERROR) on gb-r02-t10"
    partition.degraded_since = timezone.now()
    partition.save()
    neighbour = partition.trays.exclude(pk=faulty.pk).first()
    html = tray_page(client_as("member_a"), neighbour)
    assert f"NVLink partition {partition.name} degraded" in html and "XID 149" in html


def test_the_timeline_costs_the_same_queries_however_long_it_is(
    client_as, faulty, django_assert_max_num_queries
):
    client = client_as("platform_admin")
    url = reverse("inventory:tray-detail", args=[faulty.pk]) + "?health=all"
    client.get(url, headers=HTMX)  # the session and the user are loaded once per request either way
    event = HealthEvent.objects.filter(tray=faulty).first()
    for n in range(30):
        HealthAction.objects.create(tray=faulty, kind=ActionKind.WARN, event=event, reason=f"warning {n}")
    # + the node silent policy (a stale tray), the MIG layout catalogue (profiles of the GPU model), the
    # service marks of the timeline and the tray's own mark.
    with django_assert_max_num_queries(11):
        html = client.get(url, headers=HTMX).content.decode()
    assert "warning 29" in html


def test_range_links_load_the_panel_in_the_rack_view_and_the_whole_page_on_its_own_page(client_as, faulty):
    """In the rack view's side panel a range link swaps the panel (#detail); on the tray's own page it is a
    plain link, so the page keeps what only the full page shows (its utilization chart, the jobs it held)."""
    client = client_as("member_a")
    url = reverse("inventory:tray-detail", args=[faulty.pk])
    panel = tray_page(client, faulty)
    assert f'hx-get="{url}?health=30d" hx-target="#detail"' in panel
    page = client.get(url).content.decode()
    assert f'<a href="{url}?health=30d">' in page
    assert f'hx-get="{url}?health=30d"' not in page
