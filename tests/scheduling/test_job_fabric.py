"""A job's place in the compute fabric on its page (issue 33): the Placement panel's *Fabric* line names the
narrowest level holding all its racks (inventory.fabric.span), each rack its scalable unit; in the full page
and the polled status alike. The browser walk is tests/e2e/test_fabric_jobs.py."""

import html as html_module
import re

import pytest
from django.urls import reverse

from inventory import fabric_import
from inventory.discovery.fabric.parsed import ParsedFabric
from inventory.fabric import Span, span
from tests.factories import make_job, run_job

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def _import(units: dict[str, tuple[str, list[str]]]) -> None:
    parsed = ParsedFabric(source="site_file")
    for unit, (spine, racks) in units.items():
        parsed.units[unit] = spine
        parsed.racks.update(dict.fromkeys(racks, unit))
    fabric_import.apply(parsed, label="site.yaml")


def _trays(rack: str, *slots: int) -> list[str]:
    return [f"{rack}-t{slot:02d}" for slot in slots]


def _fabric_line(client, job) -> tuple[str | None, str]:
    """(data-level, the line's text) of the job page's Fabric line; (None, "") when there is none. The
    polled status (htmx) says the same."""
    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    polled = client.get(reverse("scheduling:job-detail", args=[job.pk]), headers=HTMX).content.decode()
    found = re.search(r'<p class="job-fabric" data-level="([a-z]+)">(.*?)</p>', html, re.S)
    assert bool(found) == bool(re.search(r'class="job-fabric"', polled))
    if not found:
        return None, ""
    return found.group(1), " ".join(html_module.unescape(re.sub(r"<[^>]+>", "", found.group(2))).split())


def test_without_a_fabric_the_page_says_nothing_of_one(client_as, demo_inventory, department_a, member_a):
    job = make_job(department_a, trays=_trays("gb-r01", 1, 2) + _trays("gb-r03", 1))
    assert _fabric_line(client_as("member_a"), job) == (None, "")


def test_a_job_inside_one_unit_names_it_and_each_rack_its_unit(
    client_as, demo_inventory, department_a, member_a
):
    _import({"su-1": ("spine-a", ["gb-r01", "gb-r03"]), "su-2": ("spine-b", ["gb-r02"])})
    job = make_job(department_a, trays=_trays("gb-r01", 1, 2) + _trays("gb-r03", 1))
    client = client_as("member_a")
    level, words = _fabric_line(client, job)
    assert level == "unit"
    assert words.startswith(
        "Fabric: Inside scalable unit su-1 of spine group spine-a: its racks reach each other"
    )
    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert re.findall(r'data-rack="(gb-r0\d)".*?class="rack-unit"[^>]*>([^<]+)<', html, re.S) == [
        ("gb-r01", "su-1"),
        ("gb-r03", "su-1"),
    ]
    # One rack: inside its unit, nothing said of racks reaching each other.
    single = make_job(department_a, "single", trays=_trays("gb-r02", 1))
    assert _fabric_line(client, single) == (
        "unit",
        "Fabric: Inside scalable unit su-2 of spine group spine-b.",
    )


def test_across_units_of_one_spine_group_across_spine_groups_and_partly_outside(
    client_as, demo_inventory, department_a, member_a
):
    _import({"su-1": ("spine-a", ["gb-r01"]), "su-2": ("spine-a", ["gb-r02"])})
    client = client_as("member_a")
    spine = make_job(department_a, "spine", trays=_trays("gb-r01", 1) + _trays("gb-r02", 1))
    assert _fabric_line(client, spine) == (
        "spine",
        "Fabric: Across scalable units su-1, su-2, inside spine group spine-a: its traffic between units "
        "crosses that group's spine switches.",
    )
    outside = make_job(department_a, "outside", trays=_trays("gb-r01", 2) + _trays("gb-r03", 2))
    assert _fabric_line(client, outside) == (
        "site",
        "Fabric: Partly outside the fabric in use: gb-r03 in no scalable unit, so its traffic may cross any "
        "switch.",
    )
    _import({"su-1": ("spine-a", ["gb-r01"]), "su-9": ("spine-b", ["gb-r03"])})  # re-imported: gb-r03 placed
    assert _fabric_line(client, outside) == (
        "site",
        "Fabric: Across spine groups spine-a, spine-b (scalable units su-1, su-9): its traffic between them "
        "crosses the top of the fabric.",
    )


def test_span_is_the_narrowest_level_holding_the_racks():
    assert span({}) is None
    assert span({"r1": (None, None)}) is None  # the fabric places none of them: nothing to say
    assert span({"r1": ("a", "u1"), "r2": ("a", "u1")}) == Span("unit", ["u1"], ["a"], [])
    assert span({"r1": ("a", "u1"), "r2": ("a", "u2")}) == Span("spine", ["u1", "u2"], ["a"], [])
    assert span({"r1": ("a", "u1"), "r2": ("b", "u2")}) == Span(None, ["u1", "u2"], ["a", "b"], [])
    assert span({"r1": ("a", "u1"), "r2": (None, None)}) == Span(None, ["u1"], ["a"], ["r2"])


def test_the_placement_table_never_breaks_inside_a_name_and_gives_the_unit_its_own_line(
    client_as, demo_inventory, department_a, member_a
):
    """At 390 px the table scrolls in its box rather than squeezing its cells: a tray's name, the rack's
    tray range and the GPUs held never wrap inside (nowrap), and the rack's unit takes a line of its own.
    The browser's check at 390 px is tests/e2e/test_fabric_jobs.py."""
    _import({"su-2": ("spine-b", ["gb-r01", "gb-r02"])})
    job = run_job(department_a, trays=_trays("gb-r01", 2, 3) + _trays("gb-r02", 1))
    html = client_as("member_a").get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    table = re.search(r'<table class="data placement">(.*?)</table>', html, re.S).group(1)
    trays = re.findall(r'<td class="([^"]*)"><a [^>]*>(gb-r0\d-t\d\d)</a></td>', table)
    assert [(set(classes.split()) >= {"mono", "nowrap"}, name) for classes, name in trays] == [
        (True, "gb-r01-t02"),
        (True, "gb-r01-t03"),
        (True, "gb-r02-t01"),
    ]
    ranges = re.findall(
        r'<div class="small muted nowrap">[^<]*<code class="hostlist">([^<]+)</code></div>', table
    )
    assert ranges == ["gb-r01-t[02-03]", "gb-r02-t01"]
    units = re.findall(
        r'<div class="small muted nowrap"><span class="rack-unit"[^>]*>([^<]+)</span></div>', table
    )
    assert units == ["su-2", "su-2"]
    gpus = re.findall(r'<td class="small nowrap">([^<]+)</td>', table)
    assert gpus == ["GPU 0, GPU 1, GPU 2, GPU 3"] * 3
