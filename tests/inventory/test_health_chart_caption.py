"""The health centre's chart caption says what the chart shows: the events of the whole range, drawn per day
(a walkthrough read "10 events per day from ... to ..." of 10 events in 30 days)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.demo import seed_datacenter
from tests.inventory.test_health_centre import event

pytestmark = pytest.mark.django_db

EVENTS = reverse("inventory:health-events")


def _events(count: int) -> None:
    for day in range(count):
        event("gb-r01-t02", gpu=1, ago=timedelta(days=day, hours=1), xid=13, severity="warns")


def test_the_caption_counts_the_ranges_events_and_says_the_chart_is_per_day(client_as):
    seed_datacenter(racks=1)
    _events(3)
    page = client_as("platform_admin").get(EVENTS).content.decode()
    caption = re.search(r"\d+ events? [^<]*?by what the rules made of them\.", page)
    assert caption, page
    assert re.fullmatch(
        r"3 events from \d{4}-\d\d-\d\d \d\d:\d\d \S+ to \d{4}-\d\d-\d\d \d\d:\d\d \S+, per day "
        r"\(the last 30 days: set “seen from” for another window\), by what the rules made of them\.",
        caption[0],
    ), caption[0]
    assert "per day from" not in page

    since = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    page = client_as("platform_admin").get(EVENTS, {"since": since}).content.decode()
    caption = re.search(r"\d+ events? from [^<]*?by what the rules made of them\.", page)
    assert caption and ", per " in caption[0] and "per day from" not in page and "per hour from" not in page
