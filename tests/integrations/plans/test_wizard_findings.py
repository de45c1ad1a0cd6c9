"""The wizard's findings about running work: one box per job listing its trays (not one per tray), and
"drain first" offered inline beside it, which re-checks the layout with drain first on."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from tests.factories import make_department, run_job

pytestmark = pytest.mark.django_db


def test_one_finding_per_job_with_drain_first_inline(demo_inventory, client_as, platform_admin):
    department = make_department("Ops")
    trays = [f"gb-r01-t{slot:02d}" for slot in range(1, 19)]
    run_job(department, trays=trays, name="ops-train", over_quota=True)
    client = client_as(platform_admin)
    layout = reverse("inventory:plan-layout", args=["gb-r01"])
    page = client.get(layout, {"preset": "2x9"})
    errors = [f for f in page.context["check"].findings if f.job == "ops-train"]
    assert len(errors) == 1 and errors[0].level == "error"
    assert errors[0].message.startswith("Trays 1-18 (gb-r01-t01, gb-r01-t02,")
    text = page.content.decode()
    assert text.count('class="button small drain-first-inline"') == 1
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
