"""Times in the viewer's time zone (portal.web.middleware.ViewerTimezoneMiddleware): the `rackplane_tz` cookie
static/portal/ux.js keeps equal to the browser's zone makes pages print times there, with the zone's name, and
makes a maintenance window typed in the form mean that zone; without it, or with anything but an IANA zone
name, UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from inventory.models import ComputeTray
from portal.web.middleware import TIMEZONE_COOKIE, viewer_timezone
from tests.i18n_check import shown_text
from tests.integrations.test_tray_actions import _state

pytestmark = pytest.mark.django_db
AT = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)


def audit_event_at(user, at: datetime) -> AuditEvent:
    """One audit event by `user` at `at`, shown on the audit log (a page every admin has)."""
    event = AuditEvent.objects.create(
        actor=user,
        actor_name=user.username,
        source="web",
        action="change",
        object_type="tenancy.department",
        object_id="1",
        object_repr="Alpha",
    )
    AuditEvent.objects.filter(pk=event.pk).update(at=at)
    return event


@pytest.fixture
def audited(platform_admin):
    return audit_event_at(platform_admin, AT)


def _audit_page(client) -> str:
    return client.get(reverse("audit-list")).content.decode()


def test_a_page_prints_times_in_the_viewers_zone_with_its_name(client_as, audited):
    client = client_as("platform_admin")
    assert "2026-11-30 01:02:03 UTC" in _audit_page(client)
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    page = _audit_page(client)
    assert "2026-11-30 10:02:03 JST" in page and "01:02:03 UTC" not in page
    client.cookies[TIMEZONE_COOKIE] = "America/New_York"
    assert "2026-11-29 20:02:03 EST" in _audit_page(client)


@pytest.mark.parametrize(
    "value", ["", "UTC+9", "../../../etc/passwd", "Asia/Tokyo\x00", "asia/tokyo", "A" * 500, "Etc/../Asia"]
)
def test_anything_but_a_zone_name_means_utc_and_never_fails(client_as, audited, value):
    assert viewer_timezone(value) is None
    client = client_as("platform_admin")
    client.cookies[TIMEZONE_COOKIE] = value
    response = client.get(reverse("audit-list"))
    assert response.status_code == 200
    assert "2026-11-30 01:02:03 UTC" in response.content.decode()


def test_the_zone_does_not_leak_into_the_next_request(client_as, audited):
    client = client_as("platform_admin")
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    _audit_page(client)
    assert timezone.get_current_timezone_name() == "UTC"
    del client.cookies[TIMEZONE_COOKIE]
    assert "2026-11-30 01:02:03 UTC" in _audit_page(client)


def test_a_maintenance_window_typed_in_tokyo_is_kept_in_utc(client_as, demo_inventory):
    client = client_as("platform_admin")
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    page = client.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "Optional window, in Asia/Tokyo" in page
    start = timezone.now().astimezone(viewer_timezone("Asia/Tokyo")) + timedelta(days=1)
    start = start.replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=2)
    response = client.post(
        reverse("integrations:tray-maintenance", args=[tray.pk]),
        {
            "maintenance-reason": "fan swap",
            "maintenance-start": start.strftime("%Y-%m-%dT%H:%M"),
            "maintenance-end": end.strftime("%Y-%m-%dT%H:%M"),
        },
    )
    assert response.status_code == 303
    utc_start = start.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    utc_end = end.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    assert _state("gb-r02-t03")[1].endswith(f"maintenance window {utc_start} UTC to {utc_end} UTC: fan swap")
    # Read back on the tray page, in the viewer's zone (named) and, in Japanese, in Japanese words: the
    # reason Slurm keeps stays English in UTC.
    shown = f"{start:%Y-%m-%d %H:%M} JST"
    for language, words in (("en", "maintenance window"), ("ja", "メンテナンス期間")):
        page = client.get(
            reverse("inventory:tray-detail", args=[tray.pk]), HTTP_ACCEPT_LANGUAGE=language
        ).content.decode()
        assert f">{shown}</time>" in page and words in shown_text(page), language
        assert f"{utc_start} UTC" not in shown_text(page), language  # (a <time>'s title holds it)
    assert "maintenance window" not in shown_text(page)  # (the Japanese page)
