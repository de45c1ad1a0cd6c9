"""A plan's push log in the viewer's zone (issue 31, "times in the viewer's zone with the zone shown"): the
worker stamps each stored line with its UTC time (integrations.pushes.log_lines); the progress page and the
push page show that moment in the viewer's zone, named, while the stored text stays as written."""

from datetime import UTC, datetime

import pytest
from django.urls import reverse

from core.moments import stamped_lines_html
from integrations.models import ConfigPush
from integrations.pushes import log_lines
from inventory.models import PartitionPlan

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

AT = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)  # 10:02:03 in Tokyo


@pytest.fixture
def plan_with_a_stamped_log(admin_client_logged_in, demo_inventory):
    admin_client_logged_in.post(reverse("integrations:plan-apply", args=["gb-r01"]), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    push = ConfigPush.objects.filter(plan_id=plan.pk).order_by("pk").first()
    ConfigPush.objects.filter(pk=push.pk).update(log=log_lines(["pushing <p1> to the target", "done"], AT))
    return plan, push


def test_the_stored_line_keeps_its_utc_stamp():
    assert log_lines(["done"], AT) == "2026-11-30 01:02:03 done\n"


def test_a_tokyo_viewer_reads_the_push_log_in_jst(admin_client_logged_in, plan_with_a_stamped_log):
    plan, push = plan_with_a_stamped_log
    client = admin_client_logged_in
    client.cookies["rackplane_tz"] = "Asia/Tokyo"
    for address in (
        reverse("integrations:plan-detail", args=[plan.pk]),
        reverse("integrations:push-detail", args=[push.pk]),
    ):
        html = client.get(address).content.decode()
        assert '<time datetime="2026-11-30T01:02:03+00:00" data-log-time' in html, address
        assert ">2026-11-30 10:02:03 JST</time> pushing &lt;p1&gt; to the target" in html, address
        assert "2026-11-30 01:02:03 pushing" not in html, address
    assert ConfigPush.objects.get(pk=push.pk).log.startswith("2026-11-30 01:02:03 pushing <p1>")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_without_a_zone_the_log_says_utc(admin_client_logged_in, plan_with_a_stamped_log):
    plan, _push = plan_with_a_stamped_log
    html = admin_client_logged_in.get(reverse("integrations:plan-detail", args=[plan.pk])).content.decode()
    assert ">2026-11-30 01:02:03 UTC</time> done" in html


def test_lines_without_a_stamp_are_shown_as_written():
    text = "a target's own words\n2026-13-45 99:00:00 not a moment\n<b>"
    assert str(stamped_lines_html(text)) == (
        "a target&#x27;s own words\n2026-13-45 99:00:00 not a moment\n&lt;b&gt;"
    )
