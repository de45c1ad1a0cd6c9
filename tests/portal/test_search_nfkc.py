"""A query typed through a Japanese input method (full-width letters and digits, U+FF01-U+FF5E: "gb-r03" or
"carol" typed wide) finds what its ASCII spelling finds: the search page and its typeahead read the query
NFKC-normalised (portal.pages.search.clean)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import make_job

# Alpha and Beta (tests/conftest.py) on three seeded racks.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SUGGEST = "/search/suggest/"
QUERIES = ("gb-r03", "r03", "GB-R02-T0", "pretrain", "t07", "member_a", "research")


def full_width(text: str, which: list[bool] | None = None) -> str:
    """`text` with the ASCII characters picked by `which` typed full-width (U+FF01-U+FF5E), as an input
    method writes them."""
    return "".join(
        chr(ord(ch) + 0xFEE0) if pick and "!" <= ch <= "~" else ch
        for ch, pick in zip(text, (which or []) + [True] * len(text), strict=False)
    )


def found(response) -> list:
    assert response.status_code == 200
    results = response.context.get("results")
    groups = results.groups if results is not None else response.context["groups"]
    return [(group.kind, [hit.title for hit in group.hits], group.more) for group in groups]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_full_width_finds_what_ascii_finds(client_as, department_a):
    make_job(department_a, "train-pretrain-0001", state="pending")
    client = client_as("platform_admin")
    for typed, ascii_q in (
        (full_width("GB-R03"), "gb-r03"),
        (full_width("r03"), "r03"),
        (full_width("pretrain"), "pretrain"),
    ):
        page = found(client.get("/search/", {"q": typed, "all": "1"}))
        assert page and page == found(client.get("/search/", {"q": ascii_q, "all": "1"})), typed
        suggested = found(client.get(SUGGEST, {"q": typed}))
        assert suggested and suggested == found(client.get(SUGGEST, {"q": ascii_q})), typed
    # A rack named exactly, full-width: the same redirect to it as its ASCII name.
    rack = client.get("/search/", {"q": "gb-r03"})["Location"]
    assert client.get("/search/", {"q": full_width("gb-r03")})["Location"] == rack


@pytest.mark.slow(reason="generated cases: 15 examples of four searches each")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.sampled_from(QUERIES), which=st.lists(st.booleans(), max_size=12))
def test_nfkc_equal_queries_give_the_same_results(client_as, q, which):
    client = client_as("member_a")
    typed = full_width(q, which)
    assert found(client.get(SUGGEST, {"q": typed})) == found(client.get(SUGGEST, {"q": q}))
    assert found(client.get("/search/", {"q": typed, "all": "1"})) == found(
        client.get("/search/", {"q": q, "all": "1"})
    )
