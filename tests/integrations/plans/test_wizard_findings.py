"""The wizard's findings about running work: one box per job listing its trays (not one per tray), and
"drain first" offered inline beside it, which re-checks the layout with drain first on."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from integrations.plans import service as plans
from tests.factories import make_department, run_job

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_one_finding_per_job_with_drain_first_inline(demo_inventory, client_as, platform_admin):
    department = make_department("Ops")
    trays = [f"gb-r01-t{slot:02d}" for slot in range(1, 19)]
    run_job(department, trays=trays, name="ops-train", over_quota=True)
    client = client_as(platform_admin)
    layout = reverse("integrations:plan-layout", args=["gb-r01"])
    page = client.get(layout, {"preset": "2x9"})
    errors = [f for f in page.context["check"].findings if f.job == "ops-train"]
    assert len(errors) == 1 and errors[0].level == "error"
    assert errors[0].message.startswith("Trays 1-18 (gb-r01-t01, gb-r01-t02,")
    text = page.content.decode()
    assert text.count('class="button small drain-first-inline"') == 1
    # The button is part of the finding's sentence (one grid cell beside the icon), not a cell of its own.
    assert re.search(
        r'<span class="finding-text"><span class="visually-hidden">error: </span>[^<]*ops-train[^<]* '
        r'<a class="button small drain-first-inline"',
        text,
    )
    href = html.unescape(
        re.search(r'<a class="button small drain-first-inline" href="([^"]+)"', text).group(1)
    )
    assert href.startswith(layout + "?") and "drain_first=on" in href and "preset=2x9" in href

    again = client.get(href)
    check = again.context["check"]
    assert check.ok, [f.message for f in check.findings]
    [warning] = [f for f in check.findings if "ops-train" in f.message]
    assert warning.level == "warning" and "will be drained" in warning.message
    assert "drain-first-inline" not in again.content.decode()
    assert 'id="drain-first" checked' in again.content.decode()

    # On the names step it stays on the names step (it led back to the layout step: an outside test).
    names = reverse("integrations:plan-names", args=["gb-r01"])
    text = client.get(names, {"preset": "2x9"}).content.decode()
    href = html.unescape(
        re.search(r'<a class="button small drain-first-inline" href="([^"]+)"', text).group(1)
    )
    assert href.startswith(names + "?") and "drain_first=on" in href


def test_a_busy_rack_gets_one_summary_and_one_drain_first(demo_inventory, client_as, platform_admin):
    department = make_department("Ops")
    for first in (1, 5, 9, 13):
        trays = [f"gb-r01-t{slot:02d}" for slot in range(first, first + 4)]
        run_job(department, trays=trays, name=f"ops-{first}", over_quota=True, time_limit_minutes=120)
    page = client_as(platform_admin).get(
        reverse("integrations:plan-layout", args=["gb-r01"]), {"preset": "2x9"}
    )
    busy = [f for f in page.context["check"].findings if "jobs run on" in f.message]
    assert len(busy) == 1 and busy[0].level == "error"
    assert busy[0].message.startswith(
        "4 jobs run on trays 1-16, which would change partition (ops-1, ops-5, ops-9,"
    )
    assert "within about 2.0 h at the latest" in busy[0].message
    assert page.content.decode().count('class="button small drain-first-inline"') == 1


def test_greyed_layouts_say_why_about_the_rack_being_planned_once(demo_inventory, client_as, platform_admin):
    """gb-r03's layouts that Slurm 24.11's block sizes refuse beside gb-r01 (18 trays) and gb-r02 (2x9) are
    greyed out: the rule is said once, naming the rack being planned; each greyed layout says briefly why,
    naming no other rack's partition."""
    page = client_as(platform_admin).get(reverse("integrations:plan-layout", args=["gb-r03"]))
    text = page.content.decode()
    why = {
        preset: html.unescape(reason)
        for preset, reason in re.findall(
            r'<small class="preset-why" id="preset-([0-9x]+)-why">([^<]*)</small>', text
        )
    }
    assert set(why) == {"3x6", "6x3", "9x2", "18x1"}
    assert (
        why["3x6"]
        == "6 trays each: the other racks' partitions of 9 and 18 trays are not 6 times a power of two."
    )
    assert why["18x1"] == "1 tray each: the other racks' partitions of 9 and 18 trays are not a power of two."
    for reason in why.values():
        assert "gb-r01" not in reason and "gb-r02" not in reason, reason
    assert len(set(why.values())) == len(why)  # no sentence repeated under every layout
    for preset in why:
        assert f'id="preset-{preset}" disabled aria-describedby="preset-{preset}-why preset-notes"' in text
    assert 'id="preset-2x9" disabled' not in text and 'id="preset-1x18" checked' in text
    [note] = page.context["preset_notes"]
    assert (
        note.startswith("Slurm 24.11 keeps an NVLink partition whole only when")
        and "Layouts of gb-r03" in note
    )
    assert text.count("Slurm 24.11 keeps an NVLink partition whole") == 1


def test_block_size_reasons_are_brief_and_name_no_rack():
    assert plans._block_size_reason([6, 6, 6], [9, 9, 18]) == (
        "6 trays each: the other racks' partitions of 9 and 18 trays are not 6 times a power of two."
    )
    assert plans._block_size_reason([18], [2, 2, 4]) == (
        "18 trays each: not 2 times a power of two (2: the other racks' smallest partition)."
    )
    assert plans._block_size_reason([1] * 18, [9, 9]) == (
        "1 tray each: the other racks' partitions of 9 trays are not a power of two."
    )
