"""core.moments.clock, the one formatter of a moment in a sentence: the time alone only when it is today and
within a day; else with its date (a job's time limit a day ahead never reads as if it had passed). The
`clock` template filter uses it; the embedded backend's stored "ends at its time limit" message holds its
moment in full (core.moments.utc_words)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from core.moments import clock
from integrations.embedded import RenderedJobBackend
from integrations.jobs import DispatchRequest

NOW = datetime(2026, 11, 30, 7, 26, tzinfo=UTC)
TOKYO = ZoneInfo("Asia/Tokyo")


def test_today_is_the_time_alone_and_another_day_has_its_date():
    assert clock(NOW + timedelta(hours=2), NOW, UTC) == "09:26 UTC"
    assert clock(NOW - timedelta(hours=2), NOW, UTC) == "05:26 UTC"
    # A 1,440-minute limit from 07:26 ends at 07:26 tomorrow: with its date, not as a time already past.
    assert clock(NOW + timedelta(minutes=1440), NOW, UTC) == "2026-12-01 07:26 UTC"
    assert clock(NOW + timedelta(hours=17), NOW, UTC) == "2026-12-01 00:26 UTC"  # past midnight
    assert clock(NOW - timedelta(days=1), NOW, UTC) == "2026-11-29 07:26 UTC"


def test_the_day_is_the_viewers_in_their_zone():
    # 16:00 UTC is 01:00 the next day in Tokyo: today in UTC, another day there.
    later = NOW.replace(hour=16, minute=0)
    assert clock(later, NOW, UTC) == "16:00 UTC"
    assert clock(later, NOW, TOKYO) == "2026-12-01 01:00 JST"
    with timezone.override(TOKYO):  # the active zone (the viewer's) by default, as the template filter
        assert clock(later, NOW) == "2026-12-01 01:00 JST"
        when = timezone.now() + timedelta(days=3)
        rendered = Template("{% load rackplane %}{{ when|clock }}|{{ none|clock }}").render(
            Context({"when": when, "none": None})
        )
        shown = f"{when.astimezone(TOKYO):%Y-%m-%d %H:%M} JST"
        assert rendered == f'<time class="nowrap" datetime="{when.isoformat()}">{shown}</time>|'


@given(st.integers(min_value=-3 * 24 * 60, max_value=3 * 24 * 60))
def test_a_time_without_its_date_is_always_today_and_within_a_day(minutes):
    moment = NOW + timedelta(minutes=minutes)
    text = clock(moment, NOW, UTC)
    if len(text) == len("07:26 UTC"):
        assert moment.date() == NOW.date() and abs(moment - NOW) < timedelta(days=1)
    else:
        assert text == f"{moment:%Y-%m-%d %H:%M} UTC"


@pytest.mark.parametrize("limit", [60, 1440, 3 * 1440])
def test_the_embedded_backends_running_message_dates_its_end_in_utc(tmp_path, limit):
    # Stored in full and in UTC, named (core.moments.utc_words): a page shows it in the viewer's zone
    # (core.moments.moment_html), so the stored words never hold a time whose day is left to the reader.
    backend = RenderedJobBackend(tmp_path, "slurm", lambda request: "#!/bin/bash\n", ".json")
    request = DispatchRequest(
        job_id=57, name="train", department="ops", priority_class="train", hostnames=("gb-r01-t01",),
        gpus_per_tray=4, time_limit_minutes=limit, work={"script": "#!/bin/bash\n"},
    )  # fmt: skip
    started = datetime.now(UTC)
    backend_id = backend.submit(request, started_at=started)
    message = backend.status([backend_id])[backend_id].message
    ends = started + timedelta(minutes=limit)
    assert message.endswith(f"ends at its time limit, {ends:%Y-%m-%d %H:%M} UTC")
