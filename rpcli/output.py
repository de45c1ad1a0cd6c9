"""What `rp` prints: plain tables for people, JSON for scripts (`--json`), dates shortened to the minute."""

from __future__ import annotations

import datetime
import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from rpcli.api import printable

MAX_CELL = 60


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        value = ",".join(str(item) for item in value)
    text = printable(str(value), MAX_CELL).replace("\n", " ").replace("\t", " ")
    return text


def when(value: Any, zone: datetime.tzinfo | None = None) -> str:
    """An ISO 8601 time as `2026-11-30 19:02 JST`: in this machine's time zone (`TZ`; `zone` in tests), with
    the zone named (the API sends UTC; a bare "10:02" read as local time would be hours off)."""
    if not isinstance(value, str):
        return cell(value)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return cell(value)
    if moment.tzinfo is None:  # not what the API sends: shown as it came
        return cell(value)
    local = moment.astimezone(zone)
    name = local.tzname() or local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M} {name}"


# A moment inside a stored sentence, as the API sends it (core.moments.utc_words: "2026-11-30 15:20 UTC").
UTC_IN_TEXT = re.compile(r"\b(\d{4}-\d\d-\d\d \d\d:\d\d)(:\d\d)? UTC\b")


def moments_in_zone(value: Any, zone: datetime.tzinfo | None = None) -> Any:
    """A text with its UTC moments ("... ends at 2026-11-30 15:20 UTC") in this machine's zone, named, as
    `when` shows the job's own times (one zone on one screen); anything else as it is."""
    if not isinstance(value, str):
        return value

    def local(match: re.Match) -> str:
        seconds = match.group(2) or ""
        form = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
        moment = datetime.datetime.strptime(match.group(1) + seconds, form).replace(tzinfo=datetime.UTC)
        shown = moment.astimezone(zone)
        return f"{shown.strftime(form)} {shown.tzname() or shown.strftime('%z')}"

    return UTC_IN_TEXT.sub(local, value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    cells = [[cell(value) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = [headers, *cells]
    for line in lines:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n")


def pairs(items: Sequence[tuple[str, Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    width = max(len(key) for key, _ in items)
    for key, value in items:
        out.write(
            f"{key.ljust(width)}  {cell(value) if not isinstance(value, str) else printable(value, 500)}\n"
        )


def as_json(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def json_line(data: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(data, ensure_ascii=False) + "\n")
    out.flush()
