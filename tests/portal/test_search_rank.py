"""Which group of results comes first (portal.pages.search.by_rank): a kind whose best hit is the whole name
searched for, then one whose hit starts with it, then one that only holds it; among equals a container before
its parts (a rack before its trays, a tray before its GPUs). The walkthrough: "r03" in the header listed the
trays gb-r03-t01..t05 first and the rack gb-r03 last, and the search page all 18 trays before the rack."""

import re

import pytest

from portal.pages.search import search, suggestions
from tests.factories import make_job, make_member

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SEARCH = "/search/"
SUGGEST = "/search/suggest/"


def kinds(groups) -> list[str]:
    return [group.kind for group in groups]


def shown_kinds(html: str) -> list[str]:
    """The groups of a page or of the typeahead fragment, in the order shown."""
    return re.findall(r'data-kind="(\w+)"', html)


@pytest.mark.parametrize("q", ["r03", "R03", "gb-r0", "gb-r03"])
def test_a_rack_comes_before_its_trays_on_the_typeahead_and_the_page(client_as, member_a, q):
    client = client_as("member_a")
    typeahead = client.get(SUGGEST, {"q": q})
    assert kinds(typeahead.context["groups"])[:2] == ["rack", "tray"]
    assert shown_kinds(typeahead.content.decode())[:2] == ["rack", "tray"]
    first = next(hit.title for group in typeahead.context["groups"] for hit in group.hits)
    assert re.fullmatch(r"gb-r0\d", first)

    page = client.get(SEARCH, {"q": q, "all": "1"})
    assert kinds(page.context["results"].groups)[:2] == ["rack", "tray"]
    assert shown_kinds(page.content.decode())[:2] == ["rack", "tray"]


def test_an_exact_or_prefix_name_comes_before_mere_substrings(member_a, lead_a, department_a):
    # "alice": the person (her whole username) before the jobs she submitted (found by their submitter).
    alice = make_member("alice", department_a)
    make_job(department_a, "train-llm", state="pending", submitted_by=alice)
    assert kinds(search(member_a, "alice").groups) == ["user", "job"]
    assert kinds(suggestions(member_a, "alice")) == ["user", "job"]
    # A job whose name starts with the query before racks and trays that only hold it.
    make_job(department_a, "r03-sweep", state="pending")
    assert kinds(search(member_a, "r03").groups)[:3] == ["job", "rack", "tray"]
    # A GPU UUID prefix: only GPUs.
    assert kinds(search(member_a, "GPU-").groups) == ["gpu"]
