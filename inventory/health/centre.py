"""The health centre's reads: the fleet's events a page at a time, events over time, and the repeat offenders.

Nothing here counts the whole table: the event list is a keyset page (newest first by `last_seen`, then id;
the index `inventory_health_seen`), the chart groups the filtered events of its window by hour, day or
week in the database, and the ranking groups the window's events by tray (or GPU) and keeps the worst
`OFFENDERS_SHOWN`. Every query starts from `visible_to(user)` (the views are for platform admins).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Case, CharField, Count, Max, Prefetch, Q, Sum, Value, When
from django.db.models.functions import TruncDay, TruncHour, TruncWeek
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.chart_style import GRID
from core.charts import layout, to_html
from inventory.choices import QUARANTINE_ACTIONS, ActionKind, HealthKind, HealthSeverity
from inventory.discovery.faults import Action, xid_info
from inventory.health.events import REGISTRATION_IN_PROGRESS
from inventory.health.service import current_marks
from inventory.models import ComputeTray, Gpu, HealthAction, ServiceRecord

EVENTS_PER_PAGE = 50
OFFENDERS_SHOWN = 50
CHART_DEFAULT_DAYS = 30  # the chart's window when the filter names no start
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
CURSOR_MAX = 40  # characters: two whole numbers and a dash


class CursorError(ValueError):
    """A `before` cursor the page cannot read (it is made by the page itself: `next_cursor`)."""


@dataclass(frozen=True)
class Cursor:
    last_seen: datetime
    pk: int


def cursor_text(event) -> str:
    """`<microseconds since 1970>-<id>` of an event: the next page starts after it."""
    return f"{(event.last_seen - EPOCH) // timedelta(microseconds=1)}-{event.pk}"


def parse_cursor(text: str) -> Cursor:
    micros, dash, pk = text.partition("-")
    if (
        len(text) > CURSOR_MAX
        or not dash
        or not (micros.isascii() and micros.isdigit())
        or not (pk.isascii() and pk.isdigit())
    ):
        raise CursorError(_("The page link is not one this page made (“before” must be two whole numbers)."))
    try:
        at = EPOCH + timedelta(microseconds=int(micros))
    except OverflowError:
        raise CursorError(_("The page link names a time out of range.")) from None
    return Cursor(at, int(pk))


def events_page(events, cursor: Cursor | None, per_page: int = EVENTS_PER_PAGE) -> tuple[list, str]:
    """One page of `events` (a filtered HealthEvent query set), newest first, after `cursor`; the cursor of
    the next page ("" on the last). Each event carries its decisions (`decisions`) and tray and GPU."""
    if cursor is not None:
        events = events.filter(
            Q(last_seen__lt=cursor.last_seen) | Q(last_seen=cursor.last_seen, pk__lt=cursor.pk)
        )
    decisions = HealthAction.objects.select_related("actor").order_by("created_at", "pk")
    rows = list(
        events.select_related("tray__rack", "gpu")
        .prefetch_related(Prefetch("actions", queryset=decisions, to_attr="decisions"))
        .order_by("-last_seen", "-pk")[: per_page + 1]
    )
    more = len(rows) > per_page
    rows = rows[:per_page]
    for row in rows:
        row.undecided = "" if row.decisions else undecided_words(row)
        for action in row.decisions:
            action.words = decision_html(action)
    return rows, cursor_text(rows[-1]) if more else ""


# ------------------------------------------------------------------------------- what a rule decided

# What a rule's decision about an event did, in the viewer's language, its name as the detail (the Decisions
# column; the badge beside it names the decision).
DECISION_WORDS = {
    ActionKind.DRAIN: gettext_lazy(
        "a health rule took the tray out of service: it takes no new work until it returns (rule %(rule)s)"
    ),
    ActionKind.NEEDS_SERVICE: gettext_lazy(
        "a health rule took the tray out for repair after repeated faults (rule %(rule)s)"
    ),
    ActionKind.DEGRADE: gettext_lazy(
        "a health rule marked the tray's NVLink partition degraded: no new multi-tray work is placed "
        "there (rule %(rule)s)"
    ),
    ActionKind.WARN: gettext_lazy(
        "a health rule warned the operators; the tray stays in service (rule %(rule)s)"
    ),
    ActionKind.WOULD_DRAIN: gettext_lazy(
        "dry run: a health rule would have taken the tray out of service (rule %(rule)s)"
    ),
    ActionKind.WOULD_NEEDS_SERVICE: gettext_lazy(
        "dry run: a health rule would have taken the tray out for repair (rule %(rule)s)"
    ),
    ActionKind.WOULD_DEGRADE: gettext_lazy(
        "dry run: a health rule would have marked the tray's NVLink partition degraded (rule %(rule)s)"
    ),
    ActionKind.BLOCKED: gettext_lazy(
        "a health rule would have taken the tray out, but the circuit breaker stopped it (rule %(rule)s)"
    ),
    ActionKind.BREAKER_TRIPPED: gettext_lazy(
        "this drain tripped the circuit breaker: the rules take no more trays out until a platform admin "
        "clears it (rule %(rule)s)"
    ),
    ActionKind.NOT_OURS: gettext_lazy(
        "a health rule would have taken the tray out, but it is already out for another owner's reason, "
        "which is kept (rule %(rule)s)"
    ),
}
DECIDED_BY_RULE = gettext_lazy("decided by a health rule (rule %(rule)s)")


def decision_html(action: HealthAction) -> SafeString:
    """What a rule's decision did, as HTML in the viewer's language, the rule's name marked as data; "" for
    a person's decision (the page names the person)."""
    if not action.rule_name:
        return mark_safe("")
    words = escape(str(DECISION_WORDS.get(action.kind, DECIDED_BY_RULE)))
    rule = format_html('<span class="decision-by" translate="no">{}</span>', action.rule_name)
    return mark_safe(words % {"rule": rule})


# ------------------------------------------------------------------------------- an event nothing decided

# What the XIDs NVIDIA's catalog says need no action from the platform are (inventory.discovery.faults'
# XID_CATALOG, actions IGNORE, RESTART_APP, INFORMATIONAL and OPERATIONAL), in the viewer's language.
XID_MEANINGS = {
    13: gettext_lazy("a graphics engine exception in an application"),
    31: gettext_lazy("a GPU memory page fault of an application"),
    43: gettext_lazy("an application whose GPU work stopped"),
    63: gettext_lazy("a row-remap record (a memory row marked for remapping at the next GPU reset)"),
    68: gettext_lazy("a video decoder exception in an application"),
    92: gettext_lazy("a high rate of corrected single-bit ECC errors"),
    94: gettext_lazy("a contained memory error (only the application that hit it is affected)"),
    121: gettext_lazy("a corrected error on the Grace C2C link"),
    137: gettext_lazy("a peer MMU fault over NVLink, usually the application's"),
    154: gettext_lazy("a change of the GPU's recovery action"),
    157: gettext_lazy("a resource retirement that failed"),
    162: gettext_lazy("power smoothing engaged"),
    163: gettext_lazy("power smoothing disengaged"),
    164: gettext_lazy("power smoothing lifetime running low"),
    165: gettext_lazy("power smoothing lifetime exhausted"),
    171: gettext_lazy("the details of an uncorrectable DRAM error (XID 48)"),
    172: gettext_lazy("the details of an uncorrectable SRAM error (XID 48)"),
}


def undecided_words(event) -> str:
    """Why the health rules decided nothing about `event`, in the viewer's language: the health centre's
    Decisions column says so in words (never a bare dash)."""
    if event.drains or event.degrades or event.warns:
        # A rule matched, yet no decision was recorded: the tray was out already (the rules' own drain, or
        # a dry run's earlier "would"), or the fault was reported too late to act on (rules.STALE_AFTER).
        return _(
            "no action recorded: a rule matched, but the tray was already out of service or the event "
            "was reported too late to act on"
        )
    if event.kind == HealthKind.FABRIC and event.code == REGISTRATION_IN_PROGRESS:
        return _(
            "no action: the GPU is still registering with the NVLink fabric; until it completes, only work "
            "within its tray is placed there"
        )
    info = xid_info(event.xid) if event.kind == HealthKind.XID and event.xid is not None else None
    meaning = XID_MEANINGS.get(event.xid) if info is not None else None
    if meaning is not None and info.action == Action.IGNORE:
        return _(
            "no action: XID %(xid)s is %(meaning)s; NVIDIA's XID catalog says it needs none, and the GPU "
            "keeps working"
        ) % {"xid": event.xid, "meaning": meaning}
    if meaning is not None and info.action == Action.RESTART_APP:
        return _(
            "no action: XID %(xid)s is %(meaning)s; NVIDIA's XID catalog says restart the application, so "
            "the tray stays in service"
        ) % {"xid": event.xid, "meaning": meaning}
    if meaning is not None:
        return _("no action: XID %(xid)s is %(meaning)s, for information only; the tray stays in service") % {
            "xid": event.xid,
            "meaning": meaning,
        }
    if info is not None:
        return _(
            "no action: no enabled health rule matches XID %(xid)s (NVIDIA's XID catalog says %(action)s)"
        ) % {"xid": event.xid, "action": info.action}
    return _("no action: no enabled health rule matches this event")


# --------------------------------------------------------------------------------------------- the chart

SEVERITY_COLOURS = {
    HealthSeverity.DRAIN: "#dc2626",
    HealthSeverity.DEGRADE: "#f59e0b",
    HealthSeverity.WARN: "#2563eb",
    HealthSeverity.INFO: "#94a3b8",
}
_SEVERITY = Case(
    When(drains=True, then=Value(HealthSeverity.DRAIN.value)),
    When(degrades=True, then=Value(HealthSeverity.DEGRADE.value)),
    When(warns=True, then=Value(HealthSeverity.WARN.value)),
    default=Value(HealthSeverity.INFO.value),
    output_field=CharField(),
)


@dataclass
class Chart:
    html: str
    since: datetime
    until: datetime
    bucket: str  # "hour" | "day" | "week"
    total: int = 0
    counts: dict = field(default_factory=dict)  # {(bucket start, severity): events}

    @property
    def bucket_shown(self) -> str:
        """`bucket` in the viewer's language."""
        return str(BUCKET_WORDS[self.bucket])


# A bucket's name as the chart's words say it ("per hour"); Chart.bucket_shown.
BUCKET_WORDS = {"hour": gettext_lazy("hour"), "day": gettext_lazy("day"), "week": gettext_lazy("week")}
# The time axis's ticks per bucket (plotly's d3 formats): an hour's with its time, a day's or week's date.
TICK_FORMATS = {"hour": "%m-%d %H:%M", "day": "%Y-%m-%d", "week": "%Y-%m-%d"}
FEW_EVENTS = 10  # below it, the events axis ticks every event


def _bucket(span: timedelta):
    if span <= timedelta(days=3):
        return "hour", TruncHour, timedelta(hours=1)
    if span <= timedelta(days=120):
        return "day", TruncDay, timedelta(days=1)
    return "week", TruncWeek, timedelta(weeks=1)


def events_chart(
    events, since: datetime | None, until: datetime | None, now: datetime | None = None
) -> Chart:
    """Events per hour, day or week (by the span) and severity, stacked, over [since, until) (the last
    CHART_DEFAULT_DAYS days when the filter names no start). One grouped query. The buckets are the viewer's
    hours, days and weeks (portal.web.middleware.ViewerTimezoneMiddleware), as the other time charts'."""
    until = until or now or timezone.now()
    since = since or until - timedelta(days=CHART_DEFAULT_DAYS)
    name, trunc, step = _bucket(until - since)
    zone = timezone.get_current_timezone()
    rows = (
        events.filter(last_seen__gte=since, last_seen__lt=until)
        .order_by()
        .annotate(bucket=trunc("last_seen", tzinfo=zone), severity=_SEVERITY)
        .values("bucket", "severity")
        .annotate(events=Count("pk"))
    )
    counts = {(row["bucket"], row["severity"]): row["events"] for row in rows}
    starts = _starts(since, until, name, step, zone)
    traces = []
    for severity in HealthSeverity:
        traces.append(
            {
                "type": "bar",
                "name": str(severity.label),
                # Wall-clock times in the viewer's zone: plotly.js ignores an ISO offset.
                "x": [moment.replace(tzinfo=None).isoformat() for moment in starts],
                "y": [counts.get((moment, severity.value), 0) for moment in starts],
                "marker": {"color": SEVERITY_COLOURS[severity]},
                "hovertemplate": _("%(count)s events") % {"count": "%{y:,}"}
                + f"<extra>{severity.label}</extra>",
            }
        )
    spec = {
        "data": traces,
        "layout": layout(
            barmode="stack",
            bargap=0.15,
            hovermode="x unified",
            xaxis={
                # "Per day (Asia/Tokyo)": the bucket, then the zone it is counted in, as other charts say.
                "title": {
                    "text": _("Per %(bucket)s (%(zone)s)")
                    % {"bucket": BUCKET_WORDS[name], "zone": timezone.get_current_timezone_name()}
                },
                "gridcolor": GRID,
                # Dates as numbers, the same in every language (plotly's month names are English only); an
                # hourly chart's ticks with their hour.
                "tickformat": TICK_FORMATS[name],
                "hoverformat": "%Y-%m-%d %H:%M",
            },
            yaxis={
                "title": {"text": _("Events")},
                "rangemode": "tozero",
                "gridcolor": GRID,
                "zeroline": False,
                # Whole events: a tick at every event while they are few (plotly would draw 0.2, 0.4 ...).
                **({"dtick": 1} if _highest(counts, starts) < FEW_EVENTS else {"tickformat": ",d"}),
            },
        ),
    }
    return Chart(
        html=to_html(spec, div_id="health-events-chart", height=280),
        since=since,
        until=until,
        bucket=name,
        total=sum(counts.values()),
        counts=counts,
    )


def _highest(counts: dict, starts: list[datetime]) -> int:
    """The most events in one bucket (its bar's height, severities stacked)."""
    totals = dict.fromkeys(starts, 0)
    for (moment, _severity), events in counts.items():
        totals[moment] = totals.get(moment, 0) + events
    return max(totals.values(), default=0)


def _starts(since: datetime, until: datetime, name: str, step: timedelta, zone=UTC) -> list[datetime]:
    """The buckets' starts from the one holding `since` to the one holding the last moment before `until`,
    in `zone` (as the database truncates them there; a step is wall-clock time, so a day stays a day
    across a change of summer time)."""
    first = since.astimezone(zone).replace(minute=0, second=0, microsecond=0)
    if name in ("day", "week"):
        first = first.replace(hour=0)
    if name == "week":
        first -= timedelta(days=first.weekday())  # weeks start on Monday, as TruncWeek's
    starts, moment = [], first
    while moment < until:
        starts.append(moment)
        moment += step
    return starts


# ------------------------------------------------------------------------------------- repeat offenders


@dataclass
class Offender:
    """A tray (or GPU) and its faults in the window: `serious` (drained the tray or degraded its partition),
    every event, every occurrence (events count repeats), when last seen, and (trays) how often the tray was
    taken out."""

    tray: ComputeTray
    gpu: Gpu | None
    serious: int
    events: int
    occurrences: int
    last_seen: datetime
    taken_out: int = 0
    mark: ServiceRecord | None = None


def _ranked(events, key: str, limit: int) -> list[dict]:
    return list(
        events.order_by()
        .values(key)
        .annotate(
            serious=Count("pk", filter=Q(drains=True) | Q(degrades=True)),
            events=Count("pk"),
            occurrences=Sum("count"),
            last=Max("last_seen"),
        )
        .order_by("-serious", "-events", "-occurrences", key)[:limit]
    )


def tray_offenders(events, since: datetime, limit: int = OFFENDERS_SHOWN) -> list[Offender]:
    """The trays with the most serious faults among `events` (the window's, filtered), then the most
    events, then the most occurrences; each with how often it was taken out since `since` and its service
    mark. Four queries."""
    rows = _ranked(events, "tray", limit)
    trays = ComputeTray.objects.select_related("rack").in_bulk([row["tray"] for row in rows])
    taken_out = dict(
        HealthAction.objects.filter(
            tray__in=list(trays), kind__in=QUARANTINE_ACTIONS, created_at__gte=since, dry_run=False
        )
        .order_by()
        .values("tray")
        .annotate(n=Count("pk"))
        .values_list("tray", "n")
    )
    marks = _marks(list(trays))
    return [
        Offender(
            tray=trays[row["tray"]],
            gpu=None,
            serious=row["serious"],
            events=row["events"],
            occurrences=row["occurrences"],
            last_seen=row["last"],
            taken_out=taken_out.get(row["tray"], 0),
            mark=marks.get(row["tray"]),
        )
        for row in rows
    ]


def gpu_offenders(events, limit: int = OFFENDERS_SHOWN) -> list[Offender]:
    """The GPUs ranked as trays are (events naming no GPU left out); each with its tray's service mark
    when that mark names it. Three queries."""
    rows = _ranked(events.filter(gpu__isnull=False), "gpu", limit)
    gpus = Gpu.objects.select_related("tray__rack").in_bulk([row["gpu"] for row in rows])
    marks = _marks([gpu.tray_id for gpu in gpus.values()])
    out = []
    for row in rows:
        gpu = gpus[row["gpu"]]
        mark = marks.get(gpu.tray_id)
        out.append(
            Offender(
                tray=gpu.tray,
                gpu=gpu,
                serious=row["serious"],
                events=row["events"],
                occurrences=row["occurrences"],
                last_seen=row["last"],
                mark=mark if mark is not None and mark.gpu_id == gpu.pk else None,
            )
        )
    return out


def _marks(tray_ids: list[int]) -> dict[int, ServiceRecord]:
    """{tray id: its current service record} (open or returned) of these trays."""
    records = current_marks(ServiceRecord.objects.filter(tray_id__in=tray_ids)).select_related("actor")
    return {record.tray_id: record for record in records}
