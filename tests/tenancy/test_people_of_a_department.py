"""A member sees the people of their own department(s): username, full name and role, read-only, on the
department page, in the search page and the header's typeahead, and in the API's member list
(tenancy.models.MembershipRuleQuerySet, the one rule). Never an email or a token, never anyone of a
department they do not belong to, and no management controls (the walkthrough: member "bob" of Research
found neither "erin", a colleague without jobs, nor "alice" herself, and his department page showed only
"Your membership")."""

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token

from tenancy.models import Membership
from tests.factories import make_member, make_user, token_client

pytestmark = pytest.mark.django_db

SEARCH = "/search/"
SUGGEST = "/search/suggest/"


@pytest.fixture
def people(department_a, department_b, member_a, lead_a, lead_b, member_b):
    """Alpha: member-a, lead-a and erin (no jobs); Beta: lead-b, member-b and frank; "both" is in both."""
    erin = make_member("erin", department_a)
    frank = make_member("frank", department_b)
    for user, first, last in ((erin, "Erin", "Example"), (frank, "Frank", "Elsewhere")):
        user.first_name, user.last_name = first, last
        user.save(update_fields=["first_name", "last_name"])
    both = make_member("both-depts", department_a)
    Membership.objects.create(user=both, department=department_b)
    Token.objects.get_or_create(user=erin)
    return {"erin": erin, "frank": frank, "both": both}


def test_a_member_sees_their_departments_people_read_only_on_its_page(client_as, people, department_a):
    html = client_as("member_a").get(reverse("scheduling:department-detail", args=[department_a.slug]))
    page = html.content.decode()
    assert html.status_code == 200
    assert "Your membership" not in page
    members = page[page.index('id="members"') : page.index("</section>", page.index('id="members"'))]
    for username in ("member-a", "lead-a", "erin", "both-depts"):
        assert f'data-username="{username}"' in members
    assert "Erin Example" in members
    assert "Department lead" in members and "Department member" in members
    # Only Alpha's people; no email, no token, no management control.
    for absent in ("lead-b", "member-b", "frank", "@example.com", Token.objects.get(user=people["erin"]).key):
        assert absent not in page
    for control in ("<form", "<select", "Add member", "Remove"):
        assert control not in members
    # A lead still manages the same list.
    lead_page = client_as("lead_a").get(reverse("scheduling:department-detail", args=[department_a.slug]))
    assert "Add member" in lead_page.content.decode()


def people_found(client, q: str) -> tuple[set[str], set[str]]:
    """The usernames the search page (every result) and the typeahead list as people for `q`, after
    checking that neither page holds another department's person anywhere (a job note, a link)."""
    page = client.get(SEARCH, {"q": q, "all": "1"})
    typeahead = client.get(SUGGEST, {"q": q})
    found = []
    for groups in (page.context["results"].groups, typeahead.context["groups"]):
        found.append({hit.title for group in groups if group.kind == "user" for hit in group.hits})
    return found[0], found[1]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_member_finds_a_colleague_without_jobs_and_never_another_departments_people(client_as, people):
    client = client_as("member_a")
    for q in ("erin", "Erin Example", "eri", "example"):
        assert people_found(client, q) == ({"erin"}, {"erin"}), q
    # The colleague found opens the department page (where the people are listed).
    suggest = client.get(SUGGEST, {"q": "erin"}).content.decode()
    assert reverse("scheduling:department-detail", args=["alpha"]) in suggest
    # "lead" finds lead-a (Alpha), never lead-b (Beta only); Beta-only people are not found at all.
    assert people_found(client, "lead") == ({"lead-a"}, {"lead-a"})
    assert people_found(client, "member") == ({"member-a"}, {"member-a"})
    for q in ("frank", "Frank Elsewhere", "member-b", "lead-b"):
        assert people_found(client, q) == (set(), set()), q
    for q in ("lead", "member", "e"):
        for html in (client.get(SEARCH, {"q": q, "all": "1"}), client.get(SUGGEST, {"q": q})):
            for other in ("lead-b", "frank", "member-b", "Elsewhere", "@example.com"):
                assert other not in html.content.decode(), (q, other)
    # Beta's member in turn never finds Alpha's erin; the one in both departments finds both.
    assert people_found(client_as("member_b"), "erin") == (set(), set())
    both = client_as(people["both"])
    assert people_found(both, "erin") == ({"erin"}, {"erin"})
    assert people_found(both, "frank") == ({"frank"}, {"frank"})


def test_the_api_lists_a_members_colleagues_and_nobody_elses(people, member_a, department_a, department_b):
    api = token_client(member_a)
    listed = api.get(f"/api/v1/departments/{department_a.slug}/members/")
    assert listed.status_code == 200
    rows = listed.json()["results"] if isinstance(listed.json(), dict) else listed.json()
    assert {row["username"] for row in rows} == {"member-a", "lead-a", "erin", "both-depts"}
    assert all(set(row) == {"username", "department", "role", "created_at"} for row in rows)
    # Another department's people: its list is 404, as the department is; no change allowed in one's own.
    assert api.get(f"/api/v1/departments/{department_b.slug}/members/").status_code == 404
    assert api.get(f"/api/v1/departments/{department_b.slug}/members/frank/").status_code == 404
    added = api.post(f"/api/v1/departments/{department_a.slug}/members/", {"username": "outsider-x"})
    assert added.status_code == 403
    colleague = f"/api/v1/departments/{department_a.slug}/members/erin/"
    assert api.get(colleague).json() == {
        "username": "erin",
        "department": department_a.slug,
        "role": "member",
        "created_at": api.get(colleague).json()["created_at"],
    }
    assert api.patch(colleague, {"role": "lead"}, format="json").status_code == 403
    assert api.delete(colleague).status_code == 403
    assert Membership.objects.get(user=people["erin"]).role == "member"


def test_an_outsider_sees_no_one(client_as, people):
    client = client_as(make_user("nobody-here"))
    for q in ("erin", "frank", "lead"):
        assert people_found(client, q) == (set(), set())
