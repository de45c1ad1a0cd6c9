"""The tray page's "What would this do?" (integrations.views.tray_actions.tray_mig_whatif): the chosen MIG
layout's what-if on the site's own history, run as the wizard's what-ifs (scheduling.whatif_runs, Celery),
shown on the what-if's page. Platform admins only; a GET starts nothing; bad input is a 400 that writes
nothing."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from inventory.models import ComputeTray, Gpu
from scheduling.choices import WhatIfState
from scheduling.models import WhatIfRun
from tests import factories
from tests.factories import make_department

pytestmark = pytest.mark.django_db
TRAY = "gb-r03-t02"  # idle, never in MIG mode: it learns its profiles from gb-r02-t17's GPUs (same model)
HTMX = {"HX-Request": "true"}


@pytest.fixture
def site(demo_inventory):
    """gb-r02-t17 in MIG mode (all-balanced, its GPUs reporting the GB200's profiles) and a few notebooks
    that asked for a 1g.23gb slice in the last hours."""
    Gpu.objects.update(product="NVIDIA GB200")
    factories.mig_tray("gb-r02-t17")
    research = make_department("Research", guaranteed_gpus=96)
    for k in range(6):
        factories.finished_job(
            research,
            f"notebook-{k}",
            mig_profile="1g.23gb",
            mig_slices=1,
            ago=timedelta(hours=3, minutes=k),
            ran=timedelta(hours=1),
        )
    return demo_inventory


def _tray(hostname: str = TRAY) -> ComputeTray:
    return ComputeTray.objects.get(hostname=hostname)


def _url(tray: ComputeTray) -> str:
    return reverse("integrations:tray-mig-whatif", args=[tray.pk])


def test_the_tray_page_offers_the_what_if_beside_apply(site, admin_client_logged_in):
    page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[_tray().pk])).content.decode()
    form = re.search(r'<form [^>]*class="tray-action mig-layout-form".*?</form>', page, re.S).group(0)
    assert f'formaction="{_url(_tray())}"' in form
    assert "What would this do?" in form and "Apply layout" in form


def test_a_post_starts_the_what_if_and_its_page_shows_the_figures_side_by_side(
    site, admin_client_logged_in, django_capture_on_commit_callbacks
):
    tray = _tray()
    with django_capture_on_commit_callbacks(execute=True):  # eager Celery: the tasks run on commit
        response = admin_client_logged_in.post(_url(tray), {"mig-layout": "all-1g.23gb"})
        run = WhatIfRun.objects.get()
        assert response.status_code == 303
        assert response["Location"] == reverse("integrations:whatif-detail", args=[run.pk])
    run.refresh_from_db()
    assert (run.state, run.tray, run.days, run.rack) == (WhatIfState.DONE, TRAY, 7, "")
    now, candidate = run.layouts.order_by("position")
    assert candidate.label == "gb-r03-t02 with all-1g.23gb"
    assert (now.figures["mig_gpus"], candidate.figures["mig_gpus"]) == (4, 8)
    # Nothing applied: the tray keeps whole GPUs.
    tray.refresh_from_db()
    assert tray.mig_layout == ""

    page = admin_client_logged_in.get(response["Location"]).content.decode()
    assert "a MIG layout for" in page and reverse("inventory:tray-detail", args=[tray.pk]) in page
    table = re.search(r'<table class="data whatif-table">.*?</table>', page, re.S).group(0)
    for figure in (
        "Average wait, jobs of 1 GPU or smaller",
        "Slice utilisation",
        "Stranded slices (average)",
        "Average wait, multi-tray jobs",
        "Multi-tray jobs in one partition",
    ):
        assert figure in table
    assert "The cluster now" in table and "all-1g.23gb" in table
    assert "Stranded slices" in page and 'class="plotly-chart whatif-chart"' in page


def test_a_queued_what_if_polls_and_says_so(site, admin_client_logged_in):
    # Without the commit callbacks the tasks never ran: the page shows the run waiting and polls it.
    response = admin_client_logged_in.post(_url(_tray()), {"mig-layout": "all-balanced", "mig-days": "3"})
    run = WhatIfRun.objects.get()
    assert run.days == 3 and run.state == WhatIfState.QUEUED
    poll = admin_client_logged_in.get(response["Location"], headers=HTMX)
    assert poll.status_code == 200 and "Queued: waiting for a worker" in poll.content.decode()


def test_a_get_starts_nothing(site, admin_client_logged_in):
    assert admin_client_logged_in.get(_url(_tray()), {"mig-layout": "all-1g.23gb"}).status_code == 405
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize("persona", ["lead_a", "member_a"])
def test_only_platform_admins_ask(site, client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    assert client.post(_url(_tray()), {"mig-layout": "all-1g.23gb"}).status_code == 403
    assert not WhatIfRun.objects.exists()


def test_anonymous_is_sent_to_sign_in(site, client):
    response = client.post(_url(_tray()), {"mig-layout": "all-1g.23gb"})
    assert response.status_code in (302, 403) and not WhatIfRun.objects.exists()


@pytest.mark.slow(reason="9 cases, 1.5 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"mig-layout": "all-3g.95gb"}, "That is not a layout these GPUs allow"),
        ({"mig-layout": "ALL-BALANCED"}, "That is not a layout these GPUs allow"),
        ({"mig-layout": "all\u202ebalanced"}, "That is not a layout these GPUs allow"),
        ({"mig-layout": "x" * 5000}, "That is not a layout these GPUs allow"),
        ({}, "Choose a layout."),
        ({"mig-layout": "all-balanced", "mig-days": "0"}, "Replay at least 1 day of history."),
        ({"mig-layout": "all-balanced", "mig-days": "31"}, "At most 30 days"),
        ({"mig-layout": "all-balanced", "mig-days": "7\x00"}, "Give the days as a whole number"),
        ({"mig-layout": "all-disabled"}, "already has the layout all-disabled"),
    ],
)
def test_bad_input_is_a_400_in_words_and_starts_nothing(site, admin_client_logged_in, data, words):
    response = admin_client_logged_in.post(_url(_tray()), data)
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not WhatIfRun.objects.exists()


def test_the_layout_a_tray_has_already_is_no_candidate(site, admin_client_logged_in):
    response = admin_client_logged_in.post(_url(_tray("gb-r02-t17")), {"mig-layout": "all-balanced"})
    assert response.status_code == 400
    assert "gb-r02-t17 already has the layout all-balanced" in response.content.decode()
    assert not WhatIfRun.objects.exists()


def test_an_unknown_tray_is_a_404(site, admin_client_logged_in):
    missing = ComputeTray.objects.order_by("-pk").first().pk + 1
    url = reverse("integrations:tray-mig-whatif", args=[missing])
    assert admin_client_logged_in.post(url, {"mig-layout": "all-balanced"}).status_code == 404
    assert not WhatIfRun.objects.exists()


def test_a_tray_whose_model_reported_no_profiles_is_a_400(demo_inventory, admin_client_logged_in):
    response = admin_client_logged_in.post(_url(_tray()), {"mig-layout": "all-balanced"})
    assert response.status_code == 400
    assert "has reported its MIG profiles yet" in response.content.decode()  # the page says how to get them
    assert not WhatIfRun.objects.exists()


def _done_run(client, capture) -> WhatIfRun:
    with capture(execute=True):
        client.post(_url(_tray()), {"mig-layout": "all-1g.23gb"})
    return WhatIfRun.objects.get()


def test_the_header_marks_racks_where_the_breadcrumb_starts(
    site, admin_client_logged_in, django_capture_on_commit_callbacks
):
    run = _done_run(admin_client_logged_in, django_capture_on_commit_callbacks)
    page = admin_client_logged_in.get(reverse("integrations:whatif-detail", args=[run.pk])).content.decode()
    nav = re.search(r'<nav aria-label="Main">.*?</nav>', page, re.S).group(0)
    current = re.findall(r'<a href="([^"]+)" aria-current="page"', nav)
    assert current == [reverse("inventory:rack-list")]
    breadcrumb = re.search(r'<nav class="breadcrumb".*?</nav>', page, re.S).group(0)
    assert breadcrumb.startswith(f'<nav class="breadcrumb" aria-label="Breadcrumb"><a href="{current[0]}">')


@pytest.mark.parametrize(
    "label",
    ["gb-r03-t02 with all-1g.23gb", "gb-r03-t02, gb-r03-t03 with all-balanced"],
)
def test_a_mig_layouts_label_is_read_back_as_its_sentence(label):
    # Its tray names are names, not a count: the label is the template's, so it is shown translated.
    from core import sentences_i18n
    from scheduling.whatif_runs import AS_MIG_LAYOUT

    template, values = sentences_i18n._match(label)
    assert template == AS_MIG_LAYOUT
    assert label.startswith(values["hosts"]) and label.endswith(values["layout"])


def test_the_mig_what_if_page_is_japanese(site, admin_client_logged_in, django_capture_on_commit_callbacks):
    from tests.i18n_check import english_left_but

    run = _done_run(admin_client_logged_in, django_capture_on_commit_callbacks)
    response = admin_client_logged_in.get(
        reverse("integrations:whatif-detail", args=[run.pk]), HTTP_ACCEPT_LANGUAGE="ja"
    )
    html = response.content.decode()
    heading = re.search(r"<h1>(.*?)</h1>", html, re.S).group(1)
    current = re.search(r'<span aria-current="page">(.*?)</span>', html).group(1)
    # The heading names the run as the breadcrumb does ("シミュレーション #4"), not "What-if #4".
    assert heading.startswith(current) and "What-if" not in heading
    table = re.search(r'<table class="data whatif-table">.*?</table>', html, re.S).group(0)
    assert not re.search(r">\s*same\s*<", table), "a figure's unchanged difference left in English"
    # The candidate's label ("<tray> with <layout>") in Japanese, in the byline and the column header.
    assert " with " not in re.sub(r"<[^>]+>", "", table) and " with " not in re.sub(r"<[^>]+>", "", heading)
    # The layout's name is data ("all-1g.23gb" holds "all"): only the words around it must be Japanese.
    left = english_left_but(html, ["all-1g.23gb"])
    assert not left, left
