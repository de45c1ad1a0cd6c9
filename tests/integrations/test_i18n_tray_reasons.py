"""A tray's maintenance and its return, read in the viewer's language: the reasons are stored in English
(Slurm and Kubernetes read them; inventory.health.words), and the flash message, the tray's state and its
health timeline show them in Japanese, what the admin typed kept as typed (the walkthrough's "rackplane:
admin: maintenance: ファン交換" and "admin: returned to service: it was out for maintenance, ...")."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

from inventory.choices import TrayState
from inventory.models import ComputeTray, HealthAction
from tests.i18n_check import shown_text

pytestmark = pytest.mark.django_db

HOST = "gb-r03-t05"  # up and free in the seeded racks


def _flash(html: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", m)) for m in re.findall(r'role="status">(.*?)</div>', html, re.S)]


def test_maintenance_and_return_read_in_japanese_and_stay_english_for_the_schedulers(
    client_as, platform_admin, demo_inventory
):
    client = client_as("platform_admin")
    name = platform_admin.get_username()
    tray = ComputeTray.objects.get(hostname=HOST)
    page = reverse("inventory:tray-detail", args=[tray.pk])
    response = client.post(
        reverse("integrations:tray-maintenance", args=[tray.pk]),
        {"maintenance-reason": "ファン交換"},
        HTTP_ACCEPT_LANGUAGE="ja",
        follow=True,
    )
    tray.refresh_from_db()
    # Stored in English, as Slurm reads it.
    assert tray.state == TrayState.MAINTENANCE
    assert tray.state_reason == f"rackplane: {name}: maintenance: ファン交換"
    shown = f"Rackplane: {name} によるメンテナンス: ファン交換"
    assert any(shown in message for message in _flash(response.content.decode())), _flash(
        response.content.decode()
    )
    html = client.get(page, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    text = shown_text(html)
    assert shown in text and "maintenance:" not in text and "rackplane:" not in text

    response = client.post(
        reverse("integrations:tray-return", args=[tray.pk]), HTTP_ACCEPT_LANGUAGE="ja", follow=True
    )
    tray.refresh_from_db()
    assert tray.state == TrayState.UP
    action = HealthAction.objects.filter(tray=tray).latest("pk")
    assert action.reason == f"{name}: returned to service: it was out for maintenance, with no fault since"
    back = f"{name} によりサービスに復帰: メンテナンスで離脱しており、その後障害はありません"
    flashes = _flash(response.content.decode())
    assert any(back in message for message in flashes), flashes
    assert not any("returned to service" in message for message in flashes)
    timeline = shown_text(client.get(page, HTTP_ACCEPT_LANGUAGE="ja").content.decode())
    assert back in timeline and shown in timeline
    assert "returned to service" not in timeline and "maintenance:" not in timeline

    # English viewers read them as stored.
    english = shown_text(client.get(page).content.decode())
    assert action.reason in english and f"rackplane: {name}: maintenance: ファン交換" in english
