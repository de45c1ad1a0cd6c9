"""Scheduling's pages in Japanese: no English wording left on them (tests.i18n_check), for a platform admin,
a department lead and a member; and messages, form errors and API errors come back in the asker's language.

English stays the default: the same pages without Accept-Language are checked in English by the app's other
tests. Data (job names, hostnames, the engine's stored reasons) is shown as stored.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.html import strip_tags

from core.access import Role
from scheduling.choices import JobState
from tests import factories
from tests.i18n_check import english_left_but

pytestmark = pytest.mark.django_db

# Only data is taken out of a text before it is checked, each for the reason given; the wording around it is
# still checked, and no wording is let through (integrations' work inputs once were, and are translated now:
# an allow-list of wording would hide exactly its regression).
DATA_SHOWN = (
    # A GPU's UUID (in its title on the rack view): its hex digits read as words ("be").
    re.compile(r"GPU-[0-9a-f-]{36}"),
    # The demo's drained tray's stored reason (data, shown as stored).
    "XID 79 (GPU fell off the bus) on GPU 2; awaiting RMA",
    # The names a department's slug may not take (tenancy's help): identifiers, "all" among them.
    "default、kube-…、root、gpu、all",
)


def english_of_scheduling(html: str) -> list[str]:
    """tests.i18n_check.english_left, the data above taken out first."""
    return english_left_but(html, DATA_SHOWN)


def assert_japanese(client, url: str, **get_kwargs) -> str:
    """tests.i18n_check.assert_japanese with english_of_scheduling."""
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja", **get_kwargs)
    # 286: htmx's "stop polling" (a finished job's status, a list with nothing active), with the page.
    assert response.status_code in (200, 286), (url, response.status_code)
    assert response.headers.get("Content-Language") == "ja", url
    html = response.content.decode()
    left = english_of_scheduling(html)
    assert not left, f"{url} in Japanese still shows English: {left}"
    return html


# People whose names are no English words (the checker reads "member-a" as the word "member"): a platform
# admin, a lead and a member of department_a.
@pytest.fixture
def people(department_a):
    return {
        "kato": factories.make_user("kato", staff=True),
        "sato": factories.make_member("sato", department_a, Role.LEAD),
        "suzuki": factories.make_member("suzuki", department_a),
    }


@pytest.fixture
def jobs(demo_inventory, department_a, people):
    """A running job of department_a on two trays, a pending one and a finished one."""
    running = factories.make_job(
        department_a, name="train-llm", trays=factories.free_trays(2), submitted_by=people["suzuki"]
    )
    pending = factories.make_job(
        department_a, name="eval-sweep", state=JobState.PENDING, gpus=8, submitted_by=people["suzuki"]
    )
    finished = factories.make_job(
        department_a, name="build-img", state=JobState.COMPLETED, submitted_by=people["suzuki"], exit_code=0
    )
    return running, pending, finished


PERSONAS = ["kato", "sato", "suzuki"]


@pytest.mark.slow(reason="3 cases, 1.2 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", PERSONAS)
def test_the_job_pages_are_japanese(client_as, persona, people, jobs):
    client = client_as(people[persona])
    running, _pending, finished = jobs
    assert_japanese(client, reverse("scheduling:job-list"))
    assert_japanese(client, reverse("scheduling:job-list") + "?state=pending")
    assert_japanese(client, reverse("scheduling:job-list") + "?name=nothing-matches")
    for job in jobs:
        assert_japanese(client, reverse("scheduling:job-detail", args=[job.pk]))
        assert_japanese(client, reverse("scheduling:job-detail", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert_japanese(client, reverse("scheduling:job-new"))
    assert_japanese(client, reverse("scheduling:job-new") + f"?clone={running.pk}")
    assert_japanese(client, reverse("scheduling:job-resubmit", args=[finished.pk]))


def test_the_job_list_table_and_empty_list_are_japanese(client_as, people):
    client = client_as(people["suzuki"])
    html = assert_japanese(client, reverse("scheduling:job-list"))
    assert "ジョブはまだありません" in html
    html = assert_japanese(client, reverse("scheduling:job-list"), HTTP_HX_REQUEST="true")
    assert "ジョブはまだありません" in html


def test_the_preview_is_japanese(client_as, demo_inventory, department_a, people):
    client = client_as(people["suzuki"])
    preview = reverse("scheduling:job-preview")
    html = assert_japanese(client, preview)
    html = assert_japanese(client, preview + f"?department={department_a.slug}&gpus=abc")
    assert "整数を入力してください" in html
    assert_japanese(client, preview + f"?department={department_a.slug}&gpus=4&backend=slurm")


def test_a_form_error_comes_back_in_japanese(client_as, demo_inventory, department_a, people):
    client = client_as(people["suzuki"])
    response = client.post(
        reverse("scheduling:job-new"),
        {"department": department_a.slug, "name": "train", "gpus": "many", "backend": "slurm"},
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "整数を入力してください" in html
    assert not english_of_scheduling(html), english_of_scheduling(html)
    # English stays the default.
    response = client.post(
        reverse("scheduling:job-new"),
        {"department": department_a.slug, "name": "train", "gpus": "many", "backend": "slurm"},
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert "Enter a whole number (for example 4)." in response.content.decode()


def test_cancelling_answers_in_japanese(client_as, people, jobs):
    running, _, _ = jobs
    client = client_as(people["suzuki"])
    response = client.post(
        reverse("scheduling:job-cancel", args=[running.pk]), HTTP_HX_REQUEST="true", HTTP_ACCEPT_LANGUAGE="ja"
    )
    html = response.content.decode()
    assert "キャンセルしました。GPU は再び空いています。" in html
    assert not english_of_scheduling(html), english_of_scheduling(html)


def test_the_jobs_api_answers_a_japanese_client_in_japanese(api_as, demo_inventory, people):
    body = {"department": "no-such-department", "name": "x", "gpus": 4, "work": {"script": "#!/bin/bash\n"}}
    answer = api_as(people["suzuki"]).post("/api/v1/jobs/", body, format="json", HTTP_ACCEPT_LANGUAGE="ja")
    assert answer.status_code == 400
    assert "のメンバーではありません" in str(answer.json()["department"])
    answer = api_as(people["suzuki"]).post("/api/v1/jobs/", body, format="json")
    assert "you are not a member of a department" in str(answer.json()["department"])


@pytest.mark.parametrize("persona", PERSONAS)
def test_the_department_pages_are_japanese(client_as, persona, people, jobs, department_a, department_b):
    client = client_as(people[persona])
    assert_japanese(client, reverse("scheduling:department-list"))
    page = reverse("scheduling:department-detail", args=[department_a.slug])
    assert_japanese(client, page)
    for key in ("1h", "24h", "7d", "30d", "nonsense"):
        assert_japanese(client, reverse("scheduling:quota-chart", args=[department_a.slug]) + f"?range={key}")


def test_a_department_with_projects_is_japanese(client_as, people, jobs, department_a):
    from tenancy.models import Project

    Project.objects.create(department=department_a, name="Vision", slug="vision", guaranteed_gpus=0)
    for persona in PERSONAS:
        assert_japanese(
            client_as(people[persona]), reverse("scheduling:department-detail", args=[department_a.slug])
        )


def test_the_empty_department_list_is_japanese(client, db):
    client.force_login(factories.make_user("yamada"))
    html = assert_japanese(client, reverse("scheduling:department-list"))
    assert "どの部門のメンバーでもありません" in html


def test_the_admin_dashboard_and_the_rack_view_are_japanese(client_as, people, jobs):
    running, _pending, _finished = jobs
    client = client_as(people["kato"])
    assert_japanese(client, reverse("scheduling:admin-dashboard"))
    rack = running.placement[0].rsplit("-", 1)[0]
    for query in ("", "?colour=health", "?colour=utilization", f"?job={running.pk}", "?job=999999"):
        assert_japanese(client, reverse("scheduling:rack-detail", args=[rack]) + query)
    for persona in ("sato", "suzuki"):
        assert_japanese(client_as(people[persona]), reverse("scheduling:rack-detail", args=[rack]))


def test_people_search_and_member_errors_are_japanese(client_as, people, department_a):
    client = client_as(people["sato"])
    search = reverse("scheduling:people-search", args=[department_a.slug])
    html = assert_japanese(client, search + "?q=ab", HTTP_HX_REQUEST="true")
    assert "文字以上入力してください" in html
    assert_japanese(client, search + "?q=zzzzzz", HTTP_HX_REQUEST="true")
    response = client.post(
        reverse("scheduling:member-set", args=[department_a.slug]),
        {"username": "", "role": "member"},
        HTTP_HX_REQUEST="true",
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    html = response.content.decode()
    assert "メンバーを追加" in html
    assert not english_of_scheduling(html), english_of_scheduling(html)


def test_the_schedulers_stored_reason_is_shown_in_japanese(client_as, people, demo_inventory, department_a):
    """A pending reason is stored in English (scheduling.engine.words); the job list, the job page and the
    department page show it in Japanese (scheduling.words), and in English to an English reader."""
    reason = "waiting: no NVLink partition has 6 free trays; the largest free block is 4 trays in gb-r02 p2"
    job = factories.make_job(department_a, "wide", JobState.PENDING, gpus=24, pending_reason=reason)
    client = client_as(people["suzuki"])
    for url in (
        reverse("scheduling:job-list"),
        reverse("scheduling:job-detail", args=[job.pk]),
        reverse("scheduling:department-detail", args=[department_a.slug]),
    ):
        html = strip_tags(assert_japanese(client, url))  # the job page marks its data (translate="no")
        assert "空きトレイが 6 台ある NVLink パーティションがありません" in html, url
        assert "最大の空きブロックは gb-r02 p2 の 4 トレイです" in html, url
    english = client.get(reverse("scheduling:job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert (
        "No NVLink partition has 6 free trays; the largest free block is 4 trays" in english.content.decode()
    )


def test_the_preview_reads_the_engines_refusal_in_japanese(client_as, people, demo_inventory, department_a):
    client = client_as(people["suzuki"])
    url = reverse("scheduling:job-preview") + f"?department={department_a.slug}&gpus=6&backend=slurm"
    html = assert_japanese(client, url)
    assert "1 トレイを超えるジョブはトレイ単位で使用するため、4 の倍数で指定してください" in html
    english = client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "6 GPUs: a job above one tray takes whole trays, so a multiple of 4" in english
