"""A moment as people read it in a sentence: "07:24 UTC" when it is today, "2026-12-01 07:24 UTC" when it is
another day (or more than a day away), so that a time a day ahead never reads as one already past.

`clock` is the one formatter: the `clock` template filter (core.templatetags.rackplane) shows a moment in the
viewer's zone (the active time zone, portal.middleware), and stored English messages call it with UTC.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo

from django.utils import formats, timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

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


def dated(moment: datetime, seconds: bool = False) -> str:
    """`moment` with its date, in the active time zone (the viewer's on a page, UTC elsewhere: a stored
    record's), the zone named ("2026-11-30 21:42 JST"): for a row's name (its str(), the admin's titles)."""
    return formats.date_format(timezone.localtime(moment), IN_ZONE if seconds else WITH_DATE)


# ---- lines a worker stamped: "2026-11-30 01:02:03 <words>", the moment in UTC (integrations.pushes) -------
STAMP = "%Y-%m-%d %H:%M:%S"
STAMPED_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?= |$)", re.MULTILINE)
IN_ZONE = "Y-m-d H:i:s T"


def stamp(moment: datetime) -> str:
    """`moment` as a stored log line starts with it: its UTC time, without a zone (lines are kept in UTC)."""
    return moment.astimezone(UTC).strftime(STAMP)


def _lines_html(text: str, words: Callable[[str], str]) -> str:
    """Each line of `text` through `words` (its leading spaces escaped as they are)."""
    lines = []
    for line in text.split("\n"):
        body = line.lstrip(" ")
        lines.append(escape(line[: len(line) - len(body)]) + (str(words(body)) if body else ""))
    return "\n".join(lines)


def stamped_lines_html(text: str, words: Callable[[str], str] = escape) -> SafeString:
    """Stored log lines as HTML: each line's leading UTC stamp as a <time> in the viewer's zone with the zone
    named ("2026-11-30 10:02:03 JST"), the rest of the line escaped, as written, or as `words` makes it HTML
    (a stored sentence read back in the viewer's language, core.sentences_i18n.translate_html). The stored
    text is unchanged (the API and a download give it as written); a line without a stamp (an older row's, a
    target's own output) is shown as it is."""
    out = []
    position = 0
    for match in STAMPED_LINE.finditer(text):
        try:
            moment = datetime.strptime(match.group(1), STAMP).replace(tzinfo=UTC)
        except ValueError:  # "2026-13-45 ...": not a stamp, a line's own words
            continue
        out.append(_lines_html(text[position : match.start()], words))
        local = timezone.localtime(moment)
        out.append(
            format_html(
                '<time datetime="{}" data-log-time title="{}">{}</time>',
                moment.isoformat(),
                match.group(1) + " UTC",
                formats.date_format(local, IN_ZONE),
            )
        )
        position = match.end()
    out.append(_lines_html(text[position:], words))
    return mark_safe("".join(str(part) for part in out))


# ---- a moment inside a stored English sentence: "2026-11-30 01:02 UTC", "2026-11-30 01:02:03 UTC" ---------
UTC_WORDS = r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? UTC"


def utc_words(moment: datetime, seconds: bool = True) -> str:
    """`moment` as a stored sentence holds it: its UTC date and time, "UTC" named (a page shows it in the
    viewer's zone: moment_html)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")


def moment_html(words: str) -> SafeString | None:
    """A moment a stored sentence holds (utc_words) as a <time> in the viewer's zone with the zone named, with
    as many digits as were stored ("2026-11-30 10:02 JST"); None for other words (a time without its date,
    which an older release wrote: shown as written)."""
    if not re.fullmatch(UTC_WORDS, words):
        return None
    seconds = words.count(":") == 2
    try:
        moment = datetime.strptime(words, "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")
    except ValueError:
        return None
    moment = moment.replace(tzinfo=UTC)
    shown = formats.date_format(timezone.localtime(moment), IN_ZONE if seconds else WITH_DATE)
    html = '<time class="nowrap" datetime="{}" title="{}">{}</time>'
    return format_html(html, moment.isoformat(), words, shown)
