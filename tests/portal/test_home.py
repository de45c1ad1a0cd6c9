import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inventory.choices import GpuHealth
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from inventory.selectors import overview

pytestmark = pytest.mark.django_db

# Session + user, the user's roles (which home: portal.pages.home.home), then the overview's own aggregate
# queries.
OVERVIEW_MAX_QUERIES = 12  # (the twelfth: the open service marks, counted as Service & RMA lists them)


def _clear_inventory():
    Gpu.objects.all().delete()
    ComputeTray.objects.all().delete()
    NVLinkPartition.objects.all().delete()
    Rack.objects.all().delete()


def test_anonymous_is_sent_to_login(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=/")


def test_login_page_is_public_and_has_the_form(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="id_username"' in html
    assert 'id="id_password"' in html
    assert 'type="submit"' in html
    # No CDN, no external assets.
    assert "https://" not in html and "http://" not in html


def test_login_then_overview(client, user):
    response = client.post(
        reverse("login"), {"username": "operator", "password": "operator-password-1"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("home")
    assert "Fleet overview" in response.content.decode()


def test_wrong_password_shows_an_error(client, user):
    response = client.post(reverse("login"), {"username": "operator", "password": "nope"})
    assert response.status_code == 200
    assert "form-error" in response.content.decode()


def test_overview_counts_and_problems(user_client, demo_inventory):
    response = user_client.get(reverse("home"))
    assert response.status_code == 200
    o = response.context["overview"]
    assert o.racks == 3
    assert o.partitions == 4
    assert o.trays["total"] == 54
    assert o.trays["drain"] == 1
    assert o.trays["fabric_problems"] == 1
    assert o.gpus["total"] == 216
    degraded = Gpu.objects.filter(health__in=[GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY]).count()
    assert o.gpus_degraded == degraded >= 3
    assert o.gpus["healthy"] == 216 - degraded
    assert o.gpus["fabric_incomplete"] == 1
    assert o.gpus["drift"] == 0

    html = response.content.decode()
    # The drained tray with its reason.
    drained = ComputeTray.objects.get(state="drain")
    assert drained.hostname in html
    assert "XID 79 (GPU fell off the bus) on GPU 2; awaiting RMA" in html
    # The in-progress fabric problem the seed puts on gb-r03's tray 5, linking to its rack.
    assert "gb-r03-t05" in html
    assert "fabric registration is still in progress" in html
    assert reverse("scheduling:rack-detail", args=["gb-r03"]) + "#tray-5" in html
    # Unhealthy GPUs are listed.
    for gpu in Gpu.objects.filter(health=GpuHealth.UNHEALTHY)[:3]:
        assert reverse("inventory:gpu-detail", args=[gpu.pk]) in html


def test_overview_counts_drift(user, demo_inventory):
    # gb-r02 is carved 2x9 (cliques 1 and 2): a GPU still reporting the default clique has drifted.
    gpu = Gpu.objects.filter(tray__rack__name="gb-r02").first()
    Gpu.objects.filter(pk=gpu.pk).update(reported_clique_id=32766)
    # A GPU that has not reported a clique yet is unknown, not drift.
    Gpu.objects.filter(pk=gpu.pk + 1).update(reported_clique_id=None)
    assert overview(user).gpus["drift"] == 1


def test_overview_is_empty_for_anonymous(demo_inventory):
    from django.contrib.auth.models import AnonymousUser

    assert overview(AnonymousUser()).racks == 0


def test_overview_lists_are_bounded(user_client, demo_inventory):
    Gpu.objects.update(health=GpuHealth.UNHEALTHY)
    response = user_client.get(reverse("home"))
    o = response.context["overview"]
    assert len(o.degraded_gpus) == o.limit
    assert o.degraded_gpus_more == 216 - o.limit
    assert f"and {216 - o.limit} more" in response.content.decode()


def test_overview_on_an_empty_inventory(user_client):
    response = user_client.get(reverse("home"))
    assert response.status_code == 200
    assert "No tray reports a fabric problem." in response.content.decode()


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_overview_queries_do_not_grow_with_racks(user_client, django_assert_max_num_queries):
    seed_datacenter(racks=3)
    with CaptureQueriesContext(connection) as three:
        assert user_client.get(reverse("home")).status_code == 200
    _clear_inventory()
    seed_datacenter(racks=12)
    with django_assert_max_num_queries(OVERVIEW_MAX_QUERIES), CaptureQueriesContext(connection) as twelve:
        response = user_client.get(reverse("home"))
    assert response.context["overview"].racks == 12
    assert len(twelve) == len(three)


def test_an_expired_session_on_an_htmx_click_redirects_the_whole_page(client, demo_inventory):
    gpu = Gpu.objects.first()
    response = client.get(
        f"/inventory/gpus/{gpu.pk}/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/inventory/racks/gb-r01/",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/login/?next=/inventory/racks/gb-r01/"


def test_unknown_pages_get_the_portal_404(user_client):
    response = user_client.get("/inventory/racks/no-such-rack/")
    assert response.status_code == 404
    assert b"There is nothing at" in response.content


def test_maintenance_and_drain_are_counted_and_labelled_apart(user_client, demo_inventory, django_user_model):
    """An admin's planned maintenance is not a health drain: the tray goes to the maintenance state, and the
    home page's breakdown and its list of trays out of service count and label each on its own (one count:
    inventory.selectors.tray_state_counts, which the metrics read too)."""
    from inventory.choices import TrayState
    from inventory.health.actions import drain_tray
    from portal.ops.metrics import discovery_figures

    admin = django_user_model.objects.create_user("ops-admin", is_staff=True)
    drain_tray(ComputeTray.objects.get(hostname="gb-r01-t03"), "fan swap", actor=admin, maintenance=True)
    assert ComputeTray.objects.get(hostname="gb-r01-t03").state == TrayState.MAINTENANCE
    response = user_client.get(reverse("home"))
    o = response.context["overview"]
    assert (o.trays["drain"], o.trays["maintenance"], o.trays_not_up) == (1, 1, 2)
    assert [(row["value"], row["count"]) for row in o.not_up_counts] == [("drain", 1), ("maintenance", 1)]
    html = response.content.decode()
    counts = html[
        html.index('class="not-up-counts"') : html.index("</ul>", html.index('class="not-up-counts"'))
    ]
    assert re.search(r"state-drain.*?Drain <b>1</b>", counts, re.S)
    assert re.search(r"state-maintenance.*?Maintenance <b>1</b>", counts, re.S)
    states = {row["value"]: row["count"] for row in o.tray_states}
    assert (states["drain"], states["maintenance"]) == (1, 1)
    samples = {
        (sample.labels.get("state"), sample.value)
        for family in discovery_figures()
        if family.name == "rackplane_trays"
        for sample in family.samples
    }
    assert {("drain", 1), ("maintenance", 1)} <= samples


def test_an_open_service_mark_shows_on_the_home_page_whatever_the_trays_state(
    user_client, demo_inventory, django_user_model
):
    """The walkthrough's gb-r01-t07 case: a tray drained for another owner's reason keeps its state under a
    service mark, so "Needs service" counts it nowhere; the list of trays out of service names its mark and
    the panel says how many trays have one, as Service & RMA lists them. A returned mark is closed."""
    from inventory.choices import ServiceStatus, TrayState
    from inventory.health.service import mark_service, open_marks

    admin = django_user_model.objects.create_user("ops-admin", is_staff=True)
    tray = ComputeTray.objects.get(hostname="gb-r01-t03")
    ComputeTray.objects.filter(pk=tray.pk).update(state=TrayState.DRAIN, state_reason="slurm admin: cable")
    outcome = mark_service(tray, ServiceStatus.NEEDS_SERVICE, actor=admin, note="NVLink cable")
    assert outcome.kept_state  # another owner's drain: the state stays, the mark is open
    html = user_client.get(reverse("home")).content.decode()
    service_url = reverse("inventory:health-service")
    assert f'<a href="{service_url}">1 tray has an open service mark</a>' in html
    row = re.search(r"<tr>\s*<td><a [^>]*>gb-r01-t03</a>.*?</tr>", html, re.S).group(0)
    assert "state-drain" in row and "marked: Needs service" in row
    assert reverse("inventory:health-tray-service", args=[tray.pk]) in row
    assert open_marks(admin).count() == 1  # the figure Service & RMA lists

    mark_service(tray, ServiceStatus.RETURNED, actor=admin, note="cable replaced")
    html = user_client.get(reverse("home")).content.decode()
    assert "open service mark" not in html and "marked:" not in html
