"""The health centre: the fleet's events (filters, keyset pages, the chart), the repeat-offender ranking and
service / RMA tracking (who may see and change it, the steps it allows, and that a marked tray does not come
back by itself or by hand until it is marked returned)."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from core.models import AuditEvent
from inventory.choices import ActionKind, HealthKind, HealthSource, ServiceStatus, TrayState
from inventory.demo import DEGRADED_BY, FLEET_WARNINGS, seed_datacenter, seed_health_history
from inventory.health.actions import HealthError, drain_reason, record_action, set_state
from inventory.health.centre import (
    EVENTS_PER_PAGE,
    CursorError,
    cursor_text,
    events_chart,
    parse_cursor,
)
from inventory.health.events import HealthOutcome
from inventory.health.returns import consider_return, return_eligibility, return_to_service
from inventory.health.rules import RulesContext, seed_default_rules
from inventory.health.service import mark_service, open_mark
from inventory.models import (
    ComputeTray,
    Gpu,
    HealthAction,
    HealthEvent,
    HealthRule,
    HealthSettings,
    ServiceRecord,
)
from portal.web.middleware import TIMEZONE_COOKIE
from tests.portal.test_search_nfkc import full_width

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(db):
    """Two seeded racks: gb-r01 (one tray drained, gb-r01-t07) and gb-r02 (carved 2x9)."""
    return seed_datacenter(racks=2)


EVENTS = reverse("inventory:health-events")
OFFENDERS = reverse("inventory:health-offenders")
SERVICE = reverse("inventory:health-service")


def service_url(tray) -> str:
    return reverse("inventory:health-tray-service", args=[tray.pk])


def tray(hostname: str) -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


def event(hostname: str, *, gpu: int | None = 0, ago=timedelta(hours=1), xid=79, severity="drains", **fields):
    t = tray(hostname)
    g = t.gpus.get(index=gpu) if gpu is not None else None
    at = timezone.now() - ago
    values = {
        "tray": t,
        "gpu": g,
        "gpu_uuid": g.uuid if g else "",
        "source": HealthSource.AGENT,
        "kind": HealthKind.XID,
        "code": str(xid),
        "xid": xid,
        "mnemonic": "GPU_HAS_FALLEN_OFF_THE_BUS" if xid == 79 else "",
        "first_seen": at,
        "last_seen": at,
        **({severity: True} if severity else {}),
        **fields,
    }
    return HealthEvent.objects.create(**values)


def writes_nothing(client, url, **params):
    """GET `url` and return the response, checking no row of the health or audit tables changed."""
    before = [
        model.objects.count() for model in (HealthEvent, HealthAction, ServiceRecord, AuditEvent, ComputeTray)
    ]
    states = list(ComputeTray.objects.order_by("pk").values_list("state", "state_reason"))
    response = client.get(url, params)
    after = [
        model.objects.count() for model in (HealthEvent, HealthAction, ServiceRecord, AuditEvent, ComputeTray)
    ]
    assert after == before
    assert list(ComputeTray.objects.order_by("pk").values_list("state", "state_reason")) == states
    return response


# --------------------------------------------------------------------------------------------- access


@pytest.mark.slow(reason="4 cases, 0.8 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["lead_a", "member_a", "member_b", "outsider"])
def test_only_platform_admins_may_open_or_use_the_health_centre(client_as, persona, fleet):
    t = tray("gb-r02-t03")
    client = client_as(persona)
    for url in (EVENTS, OFFENDERS, SERVICE, service_url(t)):
        response = client.get(url)
        assert response.status_code == 403, url
        assert b"Only platform admins may use the health centre." in response.content
    response = client.post(service_url(t), {"status": "rma", "note": "RMA 1"})
    assert response.status_code == 403
    assert not ServiceRecord.objects.exists()
    assert tray("gb-r02-t03").state == TrayState.UP
    # Nor is the centre in their menu, nor the service link on the tray page.
    assert EVENTS not in client.get(reverse("home")).content.decode()
    assert service_url(t) not in client.get(reverse("inventory:tray-detail", args=[t.pk])).content.decode()


def test_anonymous_visitors_go_to_the_login_page(client, fleet):
    for url in (EVENTS, OFFENDERS, SERVICE, service_url(tray("gb-r02-t03"))):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("login")), url


def test_admins_find_it_in_the_menu_and_a_missing_tray_is_a_404(client_as, fleet):
    client = client_as("platform_admin")
    home = client.get(reverse("home")).content.decode()
    assert f'href="{EVENTS}"' in home
    page = client.get(EVENTS).content.decode()
    assert f'href="{EVENTS}" aria-current="page">Health</a>' in page
    assert client.get(reverse("inventory:health-tray-service", args=[999999])).status_code == 404


# --------------------------------------------------------------------------------------------- events


def test_events_newest_first_with_their_decisions_and_links(client_as, fleet):
    old = event("gb-r01-t02", gpu=1, ago=timedelta(days=2), xid=13, severity="warns", mnemonic="ROBUST")
    new = event("gb-r02-t05", gpu=2, ago=timedelta(minutes=5))
    t = new.tray
    record_action(None, t, ActionKind.DRAIN, drain_reason(new), new)
    response = writes_nothing(client_as("platform_admin"), EVENTS)
    assert response.status_code == 200
    page = response.content.decode()
    assert page.index("gb-r02-t05") < page.index("gb-r01-t02")
    assert "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)" in page and "XID 13 (ROBUST)" in page
    assert 'class="badge action-drain"' in page
    assert reverse("inventory:tray-detail", args=[t.pk]) in page
    assert reverse("inventory:gpu-detail", args=[new.gpu_id]) in page
    assert service_url(old.tray) in page
    # The chart of the last 30 days, drawn by the page's own plotly (never a CDN).
    assert 'data-plotly-figure="' in page and "health-events-chart" in page
    assert "/static/plotly/plotly.min." in page
    # No script or style sheet from elsewhere (not the letters "cdn" anywhere: ci155's CSRF token had them).
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)


@pytest.mark.parametrize(
    "params, shown",
    [
        ({"rack": "gb-r02"}, {"gb-r02-t05", "gb-r02-t09"}),
        ({"tray": "gb-r01-t02"}, {"gb-r01-t02"}),
        ({"kind": "fabric"}, {"gb-r02-t09"}),
        ({"severity": "warn"}, {"gb-r01-t02"}),
        ({"severity": ["drain", "warn"]}, {"gb-r01-t02", "gb-r02-t05"}),
        ({"severity": "info"}, {"gb-r02-t09"}),
        ({"since": "AGO_3H"}, {"gb-r02-t05", "gb-r02-t09"}),
        ({"until": "AGO_3H"}, {"gb-r01-t02"}),
        ({"rack": "gb-r03"}, set()),
    ],
)
def test_the_filters(client_as, fleet, params, shown):
    event("gb-r01-t02", gpu=1, ago=timedelta(days=2), xid=13, severity="warns")
    event("gb-r02-t05", gpu=2, ago=timedelta(minutes=5))
    event(
        "gb-r02-t09",
        gpu=None,
        ago=timedelta(hours=1),
        kind=HealthKind.FABRIC,
        code="ROUTE_RECOVERY",
        xid=None,
        severity="",
    )
    ago_3h = (timezone.now() - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M")
    params = {key: ago_3h if value == "AGO_3H" else value for key, value in params.items()}
    response = client_as("platform_admin").get(EVENTS, params)
    assert response.status_code == 200
    page = response.content.decode()
    for hostname in ("gb-r01-t02", "gb-r02-t05", "gb-r02-t09"):
        assert (f">{hostname}</a>" in page) == (hostname in shown), hostname
    if not shown:
        assert "No health events match the filter" in page


def test_the_forms_empty_values_are_no_filter(client_as, fleet):
    event("gb-r02-t05", gpu=2)
    empty = {name: "" for name in ("rack", "tray", "gpu", "kind", "severity", "since", "until")}
    response = client_as("platform_admin").get(EVENTS, empty)
    assert response.status_code == 200 and response.content.decode().count('class="event-row"') == 1
    assert client_as("platform_admin").get(OFFENDERS, {"rack": "", "window": ""}).status_code == 200


R02, BOTH = {"gb-r02-t05"}, {"gb-r01-t05", "gb-r02-t05"}


@pytest.mark.parametrize(
    "params, shown",
    [
        ({"rack": "r02"}, R02),  # a part of its name, as the search finds it
        ({"rack": "GB-R02"}, R02),  # any case (that rack names are lower case is a rule for new names)
        ({"rack": full_width("gb-r02")}, R02),  # full-width, as a Japanese input method types it (NFKC)
        ({"rack": " gb-r02 "}, R02),
        ({"rack": "gb-r0"}, BOTH),
        ({"tray": "r02-T05"}, R02),
        ({"tray": full_width("t05")}, BOTH),
    ],
)
def test_rack_and_tray_filters_take_a_part_of_the_name_in_any_case_and_width(client_as, fleet, params, shown):
    event("gb-r01-t05", gpu=1)
    event("gb-r02-t05", gpu=2)
    response = client_as("platform_admin").get(EVENTS, params)
    assert response.status_code == 200, response.content.decode()
    assert {row.tray.hostname for row in response.context["rows"]} == shown


@pytest.mark.parametrize("params", [{"rack": "r99"}, {"tray": "gb-r01-t05x"}, {"gpu": "ffffffffffff0000"}])
def test_a_filter_nothing_matches_says_so_without_an_error(client_as, fleet, params):
    event("gb-r02-t05", gpu=2)
    response = client_as("platform_admin").get(EVENTS, params)
    page = response.content.decode()
    assert response.status_code == 200 and 'role="alert"' not in page
    assert "No health events match the filter." in page and 'class="event-row"' not in page
    # The ranking too: a rack nothing matches is an empty ranking, not a 400.
    offenders = client_as("platform_admin").get(OFFENDERS, {"rack": params.get("rack", "r99")})
    assert offenders.status_code == 200 and offenders.context["trays"] == []


def test_a_gpu_filter_takes_a_part_of_its_uuid_in_any_case_and_width(client_as, fleet):
    e = event("gb-r02-t05", gpu=2)
    event("gb-r02-t05", gpu=1)
    part = e.gpu_uuid.split("-")[1]  # "f3aed0b6" of GPU-f3aed0b6-...: as one reads it off a page
    client = client_as("platform_admin")
    for typed in (part, part.upper(), full_width(part.upper()), e.gpu_uuid[-6:]):
        response = client.get(EVENTS, {"gpu": typed})
        assert response.status_code == 200, typed
        assert [row.gpu_uuid for row in response.context["rows"]] == [e.gpu_uuid], typed


def test_a_gpu_filter_matches_its_uuid_in_any_case(client_as, fleet):
    e = event("gb-r02-t05", gpu=2)
    event("gb-r02-t05", gpu=1)
    client = client_as("platform_admin")
    page = client.get(EVENTS, {"gpu": e.gpu_uuid.upper()}).content.decode()
    assert page.count('class="event-row"') == 1 and f'title="{e.gpu_uuid}">GPU 2</a>' in page


@pytest.mark.slow(reason="17 cases, 0.7 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "params, words",
    [
        ({"kind": "XID"}, "Kind: XID is not one of the choices"),  # wrong case
        ({"kind": "node_silent"}, "Kind: node_silent is not one"),  # not an event
        ({"severity": ["warn", "fatal"]}, "Severity: fatal is not one"),
        ({"since": "yesterday"}, "Enter a valid date/time"),
        ({"since": "99999-01-01T00:00"}, "Enter a valid date/time"),
        ({"since": "2026-11-02T00:00", "until": "2026-11-01T00:00"}, "must be after"),
        ({"since": "0001-01-01T00:00"}, "between 2000 and 2099"),
        ({"until": "9999-12-31T23:59"}, "between 2000 and 2099"),
        ({"rack": "gb-r01\u202e"}, ""),  # a bidi override
        ({"tray": "gb\x00r01"}, "NUL character"),  # the portal's own guard answers first
        ({"tray": "x" * 5000}, "at most 128"),
        ({"gpu": "GPU-" + "a" * 200}, "at most 128"),
        ({"rack": "gb\x07r01"}, "Rack"),  # a control character: the text rule names the filter
        ({"before": "1-2-3"}, "page link"),
        ({"before": "abc"}, "page link"),
        ({"before": "9" * 30 + "-1"}, ""),
        ({"before": "١٢٣-4"}, "page link"),  # Arabic-Indic digits are digits to str.isdigit
    ],
)
def test_hostile_filter_values_are_a_400_that_says_why_and_writes_nothing(client_as, fleet, params, words):
    event("gb-r02-t05", gpu=2)
    response = writes_nothing(client_as("platform_admin"), EVENTS, **params)
    assert response.status_code == 400, params
    page = response.content.decode()
    assert ('role="alert"' in page or "NUL" in words) and words in page
    assert 'class="event-row"' not in page


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York", "Etc/GMT+12"])
@pytest.mark.parametrize("params", [{"since": "0001-01-01T00:00"}, {"until": "9999-12-31T23:59"}])
def test_extreme_times_typed_in_any_zone_are_a_400_not_a_500(client_as, fleet, zone, params):
    client = client_as("platform_admin")
    client.cookies[TIMEZONE_COOKIE] = zone
    response = client.get(EVENTS, params)
    assert response.status_code == 400 and "between 2000 and 2099" in response.content.decode()
    shown = {"Etc/GMT+12": "-12"}.get(zone, zone)  # a fixed-offset zone is named by its offset
    # The zone as written, in an upper-case label (class as-written: portal.css keeps its case).
    assert f'Seen from (<span class="as-written">{shown}</span>)' in response.content.decode()


def test_keyset_pages_walk_every_event_once_without_counting(client_as, fleet):
    trays = list(ComputeTray.objects.order_by("pk")[:3])
    now = timezone.now()
    same_moment = now - timedelta(minutes=30)
    made = []
    for n in range(EVENTS_PER_PAGE * 2 + 7):
        # Some share a last_seen exactly: the id breaks the tie, so none is skipped or shown twice.
        at = same_moment if n % 5 == 0 else now - timedelta(minutes=n)
        made.append(
            HealthEvent.objects.create(
                tray=trays[n % 3],
                source=HealthSource.AGENT,
                kind=HealthKind.XID,
                code="13",
                xid=13,
                first_seen=at,
                last_seen=at,
                warns=True,
            ).pk
        )
    client = client_as("platform_admin")
    seen, params, pages = [], {}, 0
    while True:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(EVENTS, params)
        assert response.status_code == 200
        counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "healthevent" in q["sql"]]
        assert all("GROUP BY" in sql.upper() for sql in counts), counts  # the chart's groups only
        rows = response.context["rows"]
        seen += [row.pk for row in rows]
        pages += 1
        if not response.context["next_cursor"]:
            break
        params = {"before": response.context["next_cursor"]}
    assert pages == 3 and sorted(seen) == sorted(made) and len(seen) == len(set(seen))
    expected = list(HealthEvent.objects.order_by("-last_seen", "-pk").values_list("pk", flat=True))
    assert seen == expected


def test_a_cursor_reads_back_what_it_wrote():
    class Row:
        pk = 42
        last_seen = timezone.now()

    cursor = parse_cursor(cursor_text(Row))
    assert (cursor.last_seen, cursor.pk) == (Row.last_seen, 42)
    for bad in ["", "-", "12", "12-", "-12", "1.5-2", "1-2-3", " 1-2", "9" * 41, "99999999999999999999-1"]:
        with pytest.raises(CursorError):
            parse_cursor(bad)


@given(st.text(max_size=60))
def test_any_cursor_text_is_read_or_refused_in_words(text):
    """Whatever arrives as `before`, the page reads it or refuses it with its own words (never a 500)."""
    try:
        cursor = parse_cursor(text)
    except CursorError as error:
        assert "page link" in str(error)
    else:
        assert re.fullmatch(r"[0-9]+-[0-9]+", text) and cursor.pk == int(text.split("-")[1])


def test_the_chart_counts_events_per_day_by_severity(fleet):
    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    event("gb-r01-t02", ago=timezone.now() - (now - timedelta(days=2)), severity="drains")
    event("gb-r01-t03", ago=timezone.now() - (now - timedelta(days=2, hours=1)), severity="warns", xid=13)
    event("gb-r01-t04", ago=timezone.now() - (now - timedelta(days=40)), severity="drains")  # outside
    chart = events_chart(HealthEvent.objects.all(), None, None, now=now)
    assert chart.bucket == "day" and chart.total == 2
    day = (now - timedelta(days=2)).replace(hour=0)
    assert chart.counts == {(day, "drain"): 1, (day, "warn"): 1}
    hourly = events_chart(HealthEvent.objects.all(), now - timedelta(days=3), now)
    assert hourly.bucket == "hour" and hourly.total == 2


def _figure(chart) -> dict:
    """The plotly figure a chart's element carries (core.charts.to_html)."""
    import json
    from html import unescape

    return json.loads(unescape(re.search(r'data-plotly-figure="([^"]*)"', chart.html).group(1)))


def test_the_chart_counts_the_viewers_days_and_says_so_in_either_language(fleet):
    """A day is the viewer's day (as the other charts' times are the viewer's), and the axis says which:
    "Per day (Asia/Tokyo)" and its Japanese (not "UTC、日ごと")."""
    from django.utils import translation

    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    # 20:30 UTC two days ago is 05:30 the next day in Tokyo: a UTC day would count it a day early.
    at = (now - timedelta(days=2)).replace(hour=20, minute=30)
    event("gb-r01-t02", ago=timezone.now() - at, severity="drains")
    with timezone.override("Asia/Tokyo"):
        chart = events_chart(HealthEvent.objects.all(), None, None, now=now)
        tokyo_day = timezone.localtime(at).replace(hour=0, minute=0)
        assert tokyo_day.date() == (at + timedelta(days=1)).date()
        assert chart.counts == {(tokyo_day, "drain"): 1}
        figure = _figure(chart)
        assert figure["layout"]["xaxis"]["title"]["text"] == "Per day (Asia/Tokyo)"
        drains = next(trace for trace in figure["data"] if 1 in trace["y"])
        # plotly draws Tokyo's wall clock (it ignores an offset): the bar stands on Tokyo's date.
        assert drains["x"][drains["y"].index(1)] == tokyo_day.replace(tzinfo=None).isoformat()
        with translation.override("ja"):
            japanese = _figure(events_chart(HealthEvent.objects.all(), None, None, now=now))
        assert japanese["layout"]["xaxis"]["title"]["text"] == "日ごと（Asia/Tokyo）"  # noqa: RUF001


def test_an_hourly_chart_ticks_hours_and_whole_events(fleet):
    """Hourly buckets are ticked with their hour (not the same date under every bar), a daily chart with its
    date; a few events are counted in whole events (no 0.2 ticks), many in whole numbers."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    event("gb-r01-t02", ago=timedelta(hours=2), severity="drains")
    hourly = _figure(
        events_chart(HealthEvent.objects.all(), now - timedelta(hours=6), now + timedelta(hours=1))
    )
    assert hourly["layout"]["xaxis"]["tickformat"] == "%m-%d %H:%M"
    assert hourly["layout"]["yaxis"]["dtick"] == 1
    daily = _figure(events_chart(HealthEvent.objects.all(), None, None, now=now))
    assert daily["layout"]["xaxis"]["tickformat"] == "%Y-%m-%d"
    for hour in range(12):
        event(f"gb-r01-t{hour + 3:02d}", ago=timedelta(hours=2), severity="drains")
    busy = _figure(
        events_chart(HealthEvent.objects.all(), now - timedelta(hours=6), now + timedelta(hours=1))
    )
    assert "dtick" not in busy["layout"]["yaxis"] and busy["layout"]["yaxis"]["tickformat"] == ",d"


# ------------------------------------------------------------------------------------- repeat offenders


def test_offenders_are_ranked_by_serious_faults_then_events_then_occurrences(client_as, fleet):
    # t05: 2 serious; t06: 1 serious + 3 warnings; t07 (drained in the demo): 1 serious + 1 warning, but more
    # occurrences than t06 would not lift it over t06's events; t08: warnings only, many occurrences.
    for ago in (1, 2):
        event("gb-r02-t05", ago=timedelta(days=ago))
    event("gb-r02-t06", ago=timedelta(days=1))
    for ago in (1, 2, 3):
        event("gb-r02-t06", ago=timedelta(days=ago), xid=13, severity="warns")
    event("gb-r02-t07", ago=timedelta(days=1), count=9)
    event("gb-r02-t07", ago=timedelta(days=1), xid=13, severity="warns")
    event("gb-r02-t08", ago=timedelta(days=1), xid=13, severity="warns", count=50)
    event("gb-r02-t04", ago=timedelta(days=45))  # outside the 30 days
    t05 = tray("gb-r02-t05")
    record_action(None, t05, ActionKind.DRAIN, "rackplane: XID 79", rule=None)
    response = writes_nothing(client_as("platform_admin"), OFFENDERS)
    assert response.status_code == 200
    ranked = [row.tray.hostname for row in response.context["trays"]]
    assert ranked == ["gb-r02-t05", "gb-r02-t06", "gb-r02-t07", "gb-r02-t08"]
    first = response.context["trays"][0]
    assert (first.serious, first.events, first.taken_out) == (2, 2, 1)
    assert response.context["trays"][2].occurrences == 10
    gpus = response.context["gpus"]
    assert gpus[0].gpu.tray.hostname == "gb-r02-t05" and gpus[0].serious == 2
    page = response.content.decode()
    assert service_url(t05) in page and reverse("inventory:tray-detail", args=[t05.pk]) in page
    # A longer window takes the old fault in; a rack filter keeps to the rack.
    wider = client_as("platform_admin").get(OFFENDERS, {"window": "90d"})
    assert "gb-r02-t04" in [row.tray.hostname for row in wider.context["trays"]]
    other_rack = client_as("platform_admin").get(OFFENDERS, {"rack": "gb-r01"})
    assert other_rack.context["trays"] == []


@pytest.mark.parametrize(
    "params", [{"window": "31d"}, {"window": "30D"}, {"rack": "gb\tr01"}, {"rack": "r" * 129}]
)
def test_bad_offender_filters_are_a_400(client_as, fleet, params):
    response = writes_nothing(client_as("platform_admin"), OFFENDERS, **params)
    assert response.status_code == 400 and 'role="alert"' in response.content.decode()


def test_the_ranking_shows_each_trays_state_and_service_mark(client_as, platform_admin, fleet):
    event("gb-r02-t05")
    event("gb-r02-t06", xid=13, severity="warns")
    mark_service(tray("gb-r02-t05"), ServiceStatus.RMA, actor=platform_admin, note="RMA 77")
    page = client_as("platform_admin").get(OFFENDERS).content.decode()
    row = page[page.index(">gb-r02-t05</a>") :]
    row = row[: row.index("</tr>")]
    assert "state-needs_service" in row and "Sent for RMA" in row


# ------------------------------------------------------------------------------------ service and RMA


def test_marking_a_tray_for_rma_takes_it_out_and_records_who_and_when(client_as, platform_admin, fleet):
    t = tray("gb-r02-t03")
    client = client_as("platform_admin")
    form = writes_nothing(client, service_url(t))
    assert form.status_code == 200 and 'name="status"' in form.content.decode()
    response = client.post(service_url(t), {"status": "rma", "gpu": "2", "note": " RMA 4711 to the vendor "})
    assert response.status_code == 303 and response["Location"] == service_url(t)
    record = ServiceRecord.objects.get()
    gpu = t.gpus.get(index=2)
    assert (record.status, record.note, record.actor, record.gpu, record.gpu_uuid) == (
        ServiceStatus.RMA,
        "RMA 4711 to the vendor",
        platform_admin,
        gpu,
        gpu.uuid,
    )
    t.refresh_from_db()
    assert t.state == TrayState.NEEDS_SERVICE
    assert (
        t.state_reason
        == f"rackplane: needs service: platform-admin: sent for RMA ({gpu.uuid}): RMA 4711 to the vendor"
    )
    action = HealthAction.objects.get(tray=t)
    assert (action.kind, action.actor) == (ActionKind.NEEDS_SERVICE, platform_admin)
    audit = AuditEvent.objects.get(object_type="inventory.servicerecord", object_id=str(record.pk))
    assert audit.actor == platform_admin and audit.after["status"] == "rma"
    # Shown after the redirect, on the service list and on the tray page (mark and timeline).
    page = client.get(response["Location"]).content.decode()
    assert "sent for RMA by platform-admin" in page and "RMA 4711 to the vendor" in page
    listing = client.get(SERVICE).content.decode()
    assert ">gb-r02-t03</a>" in listing and "RMA 4711 to the vendor" in listing
    tray_page = client.get(reverse("inventory:tray-detail", args=[t.pk])).content.decode()
    assert 'class="note note-bad service-mark"' in tray_page and "RMA 4711 to the vendor" in tray_page
    assert 'class="timeline-service service-rma"' in tray_page


def test_members_see_the_mark_on_the_tray_page_but_not_the_link(client_as, platform_admin, fleet):
    t = tray("gb-r02-t03")
    mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="fan noise")
    page = client_as("member_a").get(reverse("inventory:tray-detail", args=[t.pk])).content.decode()
    assert "service-mark" in page and "fan noise" in page and service_url(t) not in page


@pytest.mark.parametrize(
    "data, status, words",
    [
        ({"status": "needs_service"}, 400, "Say what is wrong"),
        ({"status": "rma", "note": "  "}, 400, "RMA number"),
        ({"status": "lost", "note": "x"}, 400, "Choose needs service"),
        ({"status": "RMA", "note": "x"}, 400, "Choose needs service"),
        ({"note": "x"}, 400, "Choose a step"),
        ({"status": "rma", "note": "x", "gpu": "4"}, 400, "Choose the whole tray or one of its GPUs"),
        ({"status": "rma", "note": "x", "gpu": "-1"}, 400, "Choose the whole tray"),
        ({"status": "rma", "note": "a\u202eb"}, 400, "The note"),
        ({"status": "rma", "note": "a\x07b"}, 400, "The note"),
        ({"status": "rma", "note": "rackplane: mine"}, 400, "leave it out"),
        ({"status": "rma", "note": "x" * 301}, 400, "at most 300"),
        ({"status": "returned", "note": "back"}, 409, "has no open service mark"),
    ],
)
def test_bad_or_impossible_steps_write_nothing(client_as, fleet, data, status, words):
    t = tray("gb-r02-t03")
    response = client_as("platform_admin").post(service_url(t), data)
    assert response.status_code == status, response.content.decode()[:2000]
    assert words in response.content.decode()
    assert not ServiceRecord.objects.exists() and not HealthAction.objects.exists()
    assert tray("gb-r02-t03").state == TrayState.UP


def test_the_steps_follow_each_other(platform_admin, fleet):
    t = tray("gb-r02-t03")
    mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="ECC errors")
    with pytest.raises(HealthError, match="already needs service"):
        mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="again")
    mark_service(t, ServiceStatus.RMA, actor=platform_admin, note="RMA 1")
    with pytest.raises(HealthError, match="mark it returned first"):
        mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="x")
    back = mark_service(t, ServiceStatus.RETURNED, actor=platform_admin, note="")
    assert back.record.status == ServiceStatus.RETURNED and open_mark(t) is None
    with pytest.raises(HealthError, match="no open service mark"):
        mark_service(t, ServiceStatus.RETURNED, actor=platform_admin)
    other = tray("gb-r02-t04").gpus.first()
    with pytest.raises(HealthError, match="is not in gb-r02-t03"):
        mark_service(t, ServiceStatus.RMA, actor=platform_admin, note="x", gpu=other)
    assert list(ServiceRecord.objects.order_by("pk").values_list("status", flat=True)) == [
        "needs_service",
        "rma",
        "returned",
    ]


def test_another_owners_state_is_kept_and_the_mark_recorded(platform_admin, fleet):
    t = tray("gb-r02-t03")
    ComputeTray.objects.filter(pk=t.pk).update(state=TrayState.DRAIN, state_reason="slurm admin: bad PSU")
    outcome = mark_service(t, ServiceStatus.RMA, actor=platform_admin, note="PSU RMA")
    assert not outcome.taken_out and "owner's reason" in outcome.kept_state
    t.refresh_from_db()
    assert (t.state, t.state_reason) == (TrayState.DRAIN, "slurm admin: bad PSU")
    assert not HealthAction.objects.exists()


# --------------------------------------------------------------------------- returns.py respects the mark


def _drained_by_rules(hostname: str, *, healthy_for=timedelta(hours=2)) -> ComputeTray:
    t = tray(hostname)
    e = event(hostname, ago=timedelta(hours=5))
    set_state(t, TrayState.DRAIN, drain_reason(e), source="rules", actor=None)
    record_action(None, t, ActionKind.DRAIN, drain_reason(e), e, at=timezone.now() - timedelta(hours=5))
    HealthAction.objects.filter(tray=t).update(rule_name="XID 79 drain")
    ComputeTray.objects.filter(pk=t.pk).update(healthy_since=timezone.now() - healthy_for)
    t.refresh_from_db()
    return t


def _earlier(hours: int, **which) -> None:
    """Move the steps and decisions recorded so far back in time (a story told in one instant)."""
    at = timezone.now() - timedelta(hours=hours)
    ServiceRecord.objects.filter(**which).update(created_at=at)
    if not which:
        HealthAction.objects.filter(kind=ActionKind.NEEDS_SERVICE).update(created_at=at)


def _ingest_moment(t: ComputeTray) -> ComputeTray:
    """What an agent's healthy report does at its end: the rules' return (consider_return)."""
    t = ComputeTray.objects.select_related("rack").get(pk=t.pk)
    consider_return(t, RulesContext.load(timezone.now()), HealthOutcome())
    t.refresh_from_db()
    return t


def test_a_drained_tray_returns_by_itself_without_a_mark(fleet):
    t = _ingest_moment(_drained_by_rules("gb-r02-t03"))
    assert t.state == TrayState.UP  # the control: the same tray without a mark comes back


def test_a_marked_tray_does_not_return_by_itself_or_by_hand_until_marked_returned(platform_admin, fleet):
    t = _drained_by_rules("gb-r02-t03")
    mark_service(t, ServiceStatus.RMA, actor=platform_admin, note="RMA 9")
    _earlier(3)
    t = _ingest_moment(t)
    assert t.state == TrayState.NEEDS_SERVICE
    verdict = return_eligibility(t)
    assert not verdict.eligible and "sent for RMA by platform-admin" in verdict.why
    with pytest.raises(HealthError, match="mark it returned from service first"):
        return_to_service(t, actor=platform_admin, force=True)
    assert tray("gb-r02-t03").state == TrayState.NEEDS_SERVICE

    # Marked returned: it must be healthy for return_after_s after the return, then it comes back by itself.
    mark_service(t, ServiceStatus.RETURNED, actor=platform_admin, note="GPU 0 replaced")
    t = _ingest_moment(t)
    assert t.state == TrayState.NEEDS_SERVICE
    verdict = return_eligibility(t)
    assert not verdict.eligible and "more minutes" in verdict.why
    ServiceRecord.objects.filter(status=ServiceStatus.RETURNED).update(
        created_at=timezone.now() - timedelta(hours=1)
    )
    t = _ingest_moment(t)
    assert (t.state, t.state_reason) == (TrayState.UP, "")
    assert HealthAction.objects.filter(tray=t, kind=ActionKind.RETURN).exists()


def test_a_returned_tray_still_needs_its_return_check(platform_admin, fleet):
    settings = HealthSettings.load()
    settings.return_check = "dcgmi diag -r 2"
    settings.save()
    t = _drained_by_rules("gb-r02-t03")
    mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="reseat")
    _earlier(3)
    mark_service(t, ServiceStatus.RETURNED, actor=platform_admin, note="reseated")
    _earlier(1, status=ServiceStatus.RETURNED)
    verdict = return_eligibility(tray("gb-r02-t03"))
    assert not verdict.eligible and "since it came back from service" in verdict.why
    assert _ingest_moment(t).state == TrayState.NEEDS_SERVICE


def test_a_needs_service_tray_without_a_return_mark_stays_out(platform_admin, fleet):
    t = _drained_by_rules("gb-r02-t03")
    ComputeTray.objects.filter(pk=t.pk).update(
        state=TrayState.NEEDS_SERVICE, state_reason="rackplane: needs service: 3 faults in 7 days"
    )
    assert _ingest_moment(t).state == TrayState.NEEDS_SERVICE


def test_get_requests_never_write(client_as, platform_admin, fleet):
    HealthSettings.load()  # the settings row, made on first use (by ingest, the rules or the tray page)
    event("gb-r02-t05")
    t = tray("gb-r02-t05")
    mark_service(t, ServiceStatus.NEEDS_SERVICE, actor=platform_admin, note="x")
    client = client_as("platform_admin")
    for url in (EVENTS, OFFENDERS, SERVICE, service_url(t), reverse("inventory:tray-detail", args=[t.pk])):
        assert writes_nothing(client, url).status_code == 200, url


def test_a_post_without_the_csrf_token_is_refused(platform_admin, fleet):
    client = Client(enforce_csrf_checks=True)
    client.force_login(platform_admin)
    t = tray("gb-r02-t03")
    assert client.post(service_url(t), {"status": "rma", "note": "x"}).status_code == 403
    assert not ServiceRecord.objects.exists()


# ------------------------------------------------------------------------------------------------- demo


def test_the_demo_explains_each_drained_tray_and_changes_no_state(client_as, fleet):
    states = dict(ComputeTray.objects.values_list("hostname", "state"))
    HealthRule.objects.all().delete()
    seed_default_rules()
    up = ComputeTray.objects.filter(state=TrayState.UP).count()
    # The drained tray's XID 79, the fault of every other GPU seeded unhealthy or limited, the warnings.
    degraded = Gpu.objects.filter(health__in=list(DEGRADED_BY)).exclude(tray__state=TrayState.DRAIN, index=2)
    warnings = len([w for w in FLEET_WARNINGS if w[0] < up])  # 2 racks: 3 of 5
    assert seed_health_history() == 1 + degraded.count() + warnings
    assert dict(ComputeTray.objects.values_list("hostname", "state")) == states
    drained = ComputeTray.objects.exclude(state=TrayState.UP)
    assert drained.exists()
    client = client_as("platform_admin")
    for t in drained:
        events = HealthEvent.objects.filter(tray=t, drains=True)
        assert [e.xid for e in events] == [79], t.hostname
        page = client.get(reverse("inventory:tray-detail", args=[t.pk])).content.decode()
        assert "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)" in page and "awaiting RMA" in page
        centre = client.get(EVENTS, {"tray": t.hostname}).content.decode()
        assert centre.count('class="event-row"') == HealthEvent.objects.filter(tray=t).count()
        assert open_mark(t).status == ServiceStatus.NEEDS_SERVICE
    # The trays in service stay so: nothing seeded on them drains or degrades.
    assert not HealthEvent.objects.filter(tray__state=TrayState.UP).filter(Q(drains=True) | Q(degrades=True))
    ranking = client.get(OFFENDERS).context["trays"]
    assert ranking[0].tray.state != TrayState.UP  # the drained tray leads the repeat offenders


# ------------------------------------------------------------------------------ an event nothing decided


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"kind": "xid", "xid": 63}, "no action: XID 63 is a row-remap record"),
        ({"kind": "xid", "xid": 63}, "the GPU keeps working"),
        ({"kind": "xid", "xid": 94}, "no action: XID 94 is a contained memory error"),
        ({"kind": "xid", "xid": 94}, "restart the application, so the tray stays in service"),
        ({"kind": "xid", "xid": 162}, "for information only"),
        (
            {"kind": "xid", "xid": 79},
            "no enabled health rule matches XID 79 (NVIDIA's XID catalog says RESTART_BM)",
        ),
        ({"kind": "xid", "xid": 999}, "no action: no enabled health rule matches this event"),
        ({"kind": "fabric", "code": "REGISTRATION_IN_PROGRESS"}, "still registering with the NVLink fabric"),
        ({"kind": "xid", "xid": 79, "drains": True}, "no action recorded: a rule matched"),
        ({"kind": "check_failed", "code": "dcgmi diag"}, "no enabled health rule matches this event"),
    ],
)
def test_an_event_nothing_decided_says_why_in_words(fields, words):
    from inventory.health.centre import undecided_words

    assert words in undecided_words(HealthEvent(**fields))


def test_every_catalog_xid_nvidia_says_needs_no_platform_action_has_its_meaning():
    from inventory.discovery.faults import XID_CATALOG, Action
    from inventory.health.centre import XID_MEANINGS

    quiet = (Action.IGNORE, Action.RESTART_APP, Action.INFORMATIONAL, Action.OPERATIONAL)
    assert {n for n, x in XID_CATALOG.items() if x.action in quiet and x.gb200} <= set(XID_MEANINGS)
