"""The header box's typeahead (`/search/suggest/`, portal.pages.search.suggest): the first few matches per
kind as an HTML fragment of listbox options, narrowed by `visible_to`, bounded, never writing, and calm
under hostile input (a 4xx in words or an empty list, never a 500)."""

import re
import unicodedata

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from inventory.models import ComputeTray
from portal.pages.search import MAX_QUERY, SUGGEST_LIMIT, clean
from tests.factories import make_job

# Alpha and Beta (tests/conftest.py) on three seeded racks.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SUGGEST = "/search/suggest/"


def options(response) -> list[tuple[str, str]]:
    """(kind, title) of each suggested object, in order; each is one option of the fragment."""
    assert response.status_code == 200
    found = [(group.kind, hit.title) for group in response.context["groups"] for hit in group.hits]
    html = response.content.decode()
    assert html.count('role="option"') == len(found) + (1 if response.context["q"] else 0)  # + "every result"
    return found


def test_the_first_matches_of_each_kind_as_options(client_as, department_a, member_a):
    job = make_job(department_a, "train-pretrain-0001", state="pending")
    response = client_as("member_a").get(SUGGEST, {"q": "r03"})
    got = options(response)
    assert [title for kind, title in got if kind == "rack"] == ["gb-r03"]
    trays = [title for kind, title in got if kind == "tray"]
    assert trays == [f"gb-r03-t{n:02d}" for n in range(1, SUGGEST_LIMIT + 1)]
    html = response.content.decode()
    tray = ComputeTray.objects.get(hostname="gb-r03-t01")
    assert f'href="{reverse("inventory:tray-detail", args=[tray.pk])}"' in html
    # The last option searches everything.
    assert 'id="suggest-all" href="/search/?q=r03&amp;all=1"' in html
    assert "and " not in html and "more" not in html  # nothing counted
    jobs = options(client_as("member_a").get(SUGGEST, {"q": "pretrain"}))
    assert jobs == [("job", f"#{job.pk} train-pretrain-0001")]


def test_an_empty_query_is_an_empty_list(client_as, demo_inventory):
    for params in ({}, {"q": ""}, {"q": "   "}, {"q": "\t\r\n"}):
        response = client_as("member_a").get(SUGGEST, params)
        assert response.status_code == 200
        assert 'role="option"' not in response.content.decode()


def test_a_member_is_suggested_nothing_of_another_department(client_as, department_a, department_b, member_a):
    make_job(department_b, "beta-hidden-pretrain", state="pending")
    make_job(department_a, "alpha-open-pretrain", state="pending")
    html = client_as("member_a").get(SUGGEST, {"q": "pretrain"}).content.decode()
    text = re.sub(r"<[^>]+>", "", html)  # the matched parts are marked (<mark>)
    assert "alpha-open-pretrain" in text and "alpha-open-<mark>pretrain</mark>" in html
    assert "beta-hidden-pretrain" not in text


def test_it_never_writes_and_its_queries_are_bounded(client_as, department_a, member_a):
    client = client_as("member_a")
    client.get(SUGGEST, {"q": "warm"})
    with CaptureQueriesContext(connection) as few:
        client.get(SUGGEST, {"q": "pretrain"})
    for n in range(40):
        make_job(department_a, f"sweep-pretrain-{n}", state="pending")
    with CaptureQueriesContext(connection) as many:
        response = client.get(SUGGEST, {"q": "pretrain"})
    assert len([kind for kind, _ in options(response) if kind == "job"]) == SUGGEST_LIMIT
    sql = [query["sql"].lstrip().upper() for query in many.captured_queries]
    assert all(statement.startswith(("SELECT", "SAVEPOINT", "RELEASE")) for statement in sql), sql
    assert not any("COUNT(" in statement for statement in sql)  # nothing counted
    assert len(many) == len(few)
    # Not a form: other methods are refused.
    assert client.post(SUGGEST, {"q": "pretrain"}).status_code == 405


def test_a_huge_query_is_a_400_in_words(client_as, demo_inventory):
    client = client_as("member_a")
    response = client.get(SUGGEST, {"q": "x" * (MAX_QUERY + 1)})
    assert response.status_code == 400
    assert f"at most {MAX_QUERY} are searched" in response.content.decode()
    assert client.get(SUGGEST, {"q": "x" * MAX_QUERY}).status_code == 200
    assert client.get(SUGGEST, {"q": "x" * 100_000}).status_code == 400


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_hostile_characters(client_as, demo_inventory):
    client = client_as("member_a")
    # Control characters are spaces; a NUL is refused before any view (PostgreSQL cannot hold one).
    response = client.get(SUGGEST, {"q": "gb\x1br03\x7f"})
    assert response.status_code == 200 and "gb r03" in response.content.decode()
    assert client.get(SUGGEST, {"q": "\x00r03"}).status_code == 400
    # A lone surrogate in the URL (bytes of UTF-16 half) and undecodable bytes: answered, not a 500.
    for raw in ("q=%ED%A0%80r03", "q=%FF%FEr03", "q=r03%ED%B3%BF", "q[]=r03", "q=%25%5F%5C"):
        response = client.get(f"{SUGGEST}?{raw}")
        assert response.status_code == 200, raw
    # Digits that are no ASCII digits (hypothesis found "¹": a digit to str.isdigit(), no number to int()).
    for q in ("¹", "#²³", "٣", "#٣"):
        assert client.get(SUGGEST, {"q": q}).status_code == 200, q
        assert client.get("/search/", {"q": q}).status_code == 200, q
    # And the cleaning itself turns a lone surrogate into a space.
    assert clean("r0\ud8003") == "r0 3"


@pytest.mark.slow(reason="many requests (hypothesis): beyond make test-fast's budget")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=260))
@example(q="0" * (MAX_QUERY + 1))
@example(q=" " + "0" * MAX_QUERY + "\x07")
def test_any_text_is_a_list_or_a_400(client_as, demo_inventory, q):
    response = client_as("member_a").get(SUGGEST, {"q": q})
    # As searched: NFKC-normalised, control characters become spaces, then the ends are trimmed (clean()
    # itself raises when it is too long, so the length is counted here).
    searched = "".join(
        " " if unicodedata.category(c) == "Cc" else c for c in unicodedata.normalize("NFKC", q)
    )
    searched = searched.strip()
    if "\x00" in q or len(searched) > MAX_QUERY:
        assert response.status_code == 400
    else:
        assert response.status_code == 200


def test_signed_out_it_sends_the_page_to_the_login_form(client):
    # As htmx asks (the session expired while typing): the whole page goes to the login form, nothing of
    # the login page is put into the list.
    response = client.get(SUGGEST, {"q": "r03"}, headers={"HX-Request": "true", "HX-Current-URL": "/jobs/"})
    assert response.status_code == 200 and response["HX-Redirect"].startswith(reverse("login"))
    assert client.get(SUGGEST, {"q": "r03"})["Location"].startswith(reverse("login"))
