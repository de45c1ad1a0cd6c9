"""A moment as people read it in a sentence: "07:24 UTC" when it is today, "2026-12-01 07:24 UTC" when it is
another day (or more than a day away), so that a time a day ahead never reads as one already past.

`clock` is the one formatter: the `clock` template filter (core.templatetags.rackplane) shows a moment in the
viewer's zone (the active time zone, portal.middleware), and stored English messages call it with UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from django.utils import formats, timezone

TIME_ONLY = "H:i T"
WITH_DATE = "Y-m-d H:i T"


def clock(moment: datetime, now: datetime | None = None, zone: tzinfo | None = None) -> str:
    """`moment` in `zone` (the active time zone by default): its time alone when it falls on the same day as
    `now` there and within a day of it, else with its date."""
    now = now or timezone.now()
    zone = zone or timezone.get_current_timezone()
    local = timezone.localtime(moment, zone)
    same_day = local.date() == timezone.localtime(now, zone).date() and abs(moment - now) < timedelta(days=1)
    return formats.date_format(local, TIME_ONLY if same_day else WITH_DATE)
