"""A query of several words whose words lie in different fields of one result (portal.pages.search): each
word in one of its searched fields, in any order (AND over the words, OR over the fields). A walkthrough
found "hall A gb-r03" (a rack's location words and its name) and "sweep alice" (a word of a job's name and
its submitter) answering "0 results". Exact names still jump to their page; racks, departments, projects and
people holding the whole query or all its words in one field still come first (jobs newest first, as ever);
and nothing of another department is found by naming it in words: the search stays narrowed by
`visible_to`.

Runs on SQLite (`make test-fast`) and on PostgreSQL (`make test`; with pg_trgm, the trigram path)."""

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.pages import search as search_module
from portal.pages.search import LIMIT, MIN_SUBSTRING, WORD_MARKS, _jobs, search, suggestions
from scheduling.models import Job
from tenancy.models import Project
from tests.factories import make_job, make_member

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SEARCH = "/search/"
SUGGEST = "/search/suggest/"


def found(user, q: str) -> dict[str, list[str]]:
    return {g.kind: [h.title for h in g.hits] for g in search(user, q).groups}


def person(username: str, department, first_name: str, last_name: str):
    user = make_member(username, department)
    user.first_name, user.last_name = first_name, last_name
    user.save(update_fields=["first_name", "last_name"])
    return user


@pytest.fixture
def alice(department_a):
    return person("alice", department_a, "Alice", "Liddell")


@pytest.fixture
def jobs(department_a, alice, member_a):
    """Alice's and member-a's jobs in department A, oldest first."""
    return {
        "notes": make_job(department_a, "alice-sweep-notes", state="completed", submitted_by=member_a),
        "sweep-1": make_job(department_a, "llm-sweep-1", state="running", submitted_by=alice),
        "eval": make_job(department_a, "vision-eval", state="completed", submitted_by=alice),
        "sweep-2": make_job(department_a, "llm-sweep-2", state="pending", submitted_by=alice),
        "other": make_job(department_a, "llm-sweep-3", state="pending", submitted_by=member_a),
    }


@pytest.fixture
def beta(department_b):
    """Department B's person, job and project, to be named in words by department A's people."""
    zed = person("zed-elsewhere", department_b, "Zed", "Secretkeeper")
    make_job(department_b, "b-secret-sweep", state="running", submitted_by=zed)
    Project.objects.create(department=department_b, name="Classified Robotics", slug="robotics")
    return zed


# --- the walkthrough's two queries --------------------------------------------------------------------------


def test_a_rack_by_its_location_words_and_its_name(client_as, member_a):
    response = client_as("member_a").get(SEARCH, {"q": "hall A gb-r03"})
    assert response.status_code == 200
    assert [(g.kind, [h.title for h in g.hits]) for g in response.context["results"].groups] == [
        ("rack", ["gb-r03"])
    ]
    html = response.content.decode()
    assert "0 results" not in html
    # Each word marked where it matched: the name in the title, "hall" and "A" in the location.
    assert "<mark>gb-r03</mark>" in html
    assert '<span class="muted">DC1 <mark>hall</mark> <mark>A</mark> row 01 pos 03</span>' in html
    typeahead = client_as("member_a").get(SUGGEST, {"q": "hall A gb-r03"}).content.decode()
    assert reverse("scheduling:rack-detail", args=["gb-r03"]) in typeahead and "gb-r01" not in typeahead
    # Any order, any case; a word of the name and one of the location.
    assert found(member_a, "GB-R03 hall a")["rack"] == ["gb-r03"]
    assert found(member_a, "hall r01")["rack"] == ["gb-r01"]
    assert found(member_a, "r02 pos")["rack"] == ["gb-r02"]
    # Every word must match somewhere: a word no field of a rack holds leaves it out.
    assert "rack" not in found(member_a, "hall A gb-r03 zebra")
    assert "rack" not in found(member_a, "hall B gb-r03")  # "B" starts no word of its location


def test_a_job_by_a_word_of_its_name_and_its_submitter(client_as, jobs, member_a, alice):
    notes, first, second = jobs["notes"], jobs["sweep-1"], jobs["sweep-2"]
    response = client_as("member_a").get(SEARCH, {"q": "sweep alice"})
    assert response.status_code == 200
    groups = {g.kind: g for g in response.context["results"].groups}
    # Alice's *sweep* jobs and the one with both words in its name, newest first (as every job of rank 3);
    # not her vision-eval (no "sweep"), not member-a's llm-sweep-3 (not alice's).
    assert [h.title for h in groups["job"].hits] == [
        f"#{second.pk} llm-sweep-2",
        f"#{first.pk} llm-sweep-1",
        f"#{notes.pk} alice-sweep-notes",
    ]
    assert groups["job"].more == 0
    html = response.content.decode()
    assert "0 results" not in html
    assert html.count("submitted by <mark>alice</mark>") == 2  # what matched, marked
    assert f"#{second.pk} llm-<mark>sweep</mark>-2" in html
    # The typeahead lists the same, as many as it shows.
    [typeahead] = [g for g in suggestions(member_a, "sweep alice") if g.kind == "job"]
    assert [h.title for h in typeahead.hits] == [h.title for h in groups["job"].hits]
    # Her person is not found by "sweep" (no field of hers holds it).
    assert "user" not in groups
    assert found(member_a, "ALICE llm 2")["job"] == [f"#{second.pk} llm-sweep-2"]


def test_a_person_by_a_word_of_the_username_and_one_of_the_name(department_a, lead_a):
    jane = person("jdoe", department_a, "Jane", "Smith")
    assert found(lead_a, "jdoe smith")["user"] == [jane.username]
    assert found(lead_a, "Jane jdoe")["user"] == [jane.username]
    assert found(lead_a, "smith jane")["user"] == [jane.username]  # as before: the full name, read as one
    assert "user" not in found(lead_a, "jdoe smythe")


def test_the_whole_query_or_all_its_words_in_one_field_come_first(department_a, lead_a):
    """Jane Smith (her full name holds both words) before aa-smith, Jane Doe (one word in her username, the
    other in her first name), though the alphabet, and on PostgreSQL the likeness, put aa-smith first."""
    person("zz-jdoe", department_a, "Jane", "Smith")
    person("aa-smith", department_a, "Jane", "Doe")
    assert found(lead_a, "jane smith")["user"] == ["zz-jdoe", "aa-smith"]
    # One word: both in one field each, in name order (SQLite) or likeness (PostgreSQL), as before.
    assert sorted(found(lead_a, "smith")["user"]) == ["aa-smith", "zz-jdoe"]


# --- what stays as it was -----------------------------------------------------------------------------------


def test_exact_names_single_words_and_whole_matches_are_unchanged(client_as, jobs, member_a):
    client = client_as("member_a")
    assert client.get(SEARCH, {"q": "gb-r03"})["Location"] == reverse(
        "scheduling:rack-detail", args=["gb-r03"]
    )
    assert (
        client.get(SEARCH, {"q": f"#{jobs['eval'].pk}"})["Location"] == f"/scheduling/jobs/{jobs['eval'].pk}/"
    )
    assert client.get(SEARCH, {"q": "vision-eval"})["Location"] == f"/scheduling/jobs/{jobs['eval'].pk}/"
    # One word: its name, or its submitter's username, as before.
    assert len(found(member_a, "sweep")["job"]) == 4
    assert found(member_a, "hall a")["rack"] == ["gb-r01", "gb-r02", "gb-r03"]  # every word in the location


def test_a_short_word_still_starts_a_word_in_whichever_field_it_is(member_a):
    assert MIN_SUBSTRING == 3
    # "a" and "03" start words of gb-r03's location ("hall A", "pos 03"); "gb" starts its name.
    assert found(member_a, "gb hall 03")["rack"] == ["gb-r03"]
    assert "rack" not in found(member_a, "al r03")  # "al" starts no word: "hall" holds it inside


# --- a long history ----------------------------------------------------------------------------------------


def job_titles(user, q: str, limit: int = LIMIT) -> tuple[list[str], int, bool]:
    group, _exact = _jobs(user, q, True, limit, True)
    return [hit.title for hit in group.hits], group.more, group.more_at_least


def test_through_a_window_the_jobs_and_their_count_are_the_same(monkeypatch, department_a, alice, member_a):
    """A history longer than WINDOW is read through a Window, branch by branch (the words in the names: the
    newest WINDOW jobs walked, then up to WIDER, the older ones through the indexes; a submitter's: her own
    jobs newest first): the same jobs, newest first across each edge, and the same count."""
    hers = [make_job(department_a, f"sweep-{n:02d}", state="completed", submitted_by=alice) for n in range(8)]
    for n in range(4):  # the newest jobs hold none of them
        make_job(department_a, f"eval-{n}", state="completed", submitted_by=member_a)
    expected = [f"#{job.pk} {job.name}" for job in reversed(hers)]
    assert search_module.Window.of_jobs(Job.objects.all(), []) is None  # fewer than WINDOW jobs: as ever
    unwindowed = {q: (job_titles(member_a, q), job_titles(member_a, q, 3)) for q in ("sweep alice", "sweep")}
    pages = ((expected, 0, False), (expected[:3], 5, False))
    assert unwindowed["sweep alice"] == unwindowed["sweep"] == pages

    monkeypatch.setattr(search_module, "WINDOW", 3)
    monkeypatch.setattr(search_module, "WIDER", 6)
    window = search_module.Window.of_jobs(Job.objects.all(), [])
    assert window is not None and len(window.edges) == 2
    # "sweep": its name branch, walked through the newest 3 (none), the next 3 (two), then the older ones;
    # "sweep alice": alice's jobs newest first (her branch), and the name branch (none hold "alice").
    for q in ("sweep alice", "sweep"):
        assert (job_titles(member_a, q), job_titles(member_a, q, 3)) == unwindowed[q], q
        [typeahead] = [g for g in suggestions(member_a, q) if g.kind == "job"]
        assert [hit.title for hit in typeahead.hits] == expected[:5]
    # One in the newest window, the rest older: newest first across its edges.
    newest = make_job(department_a, "sweep-new", state="pending", submitted_by=alice)
    assert job_titles(member_a, "alice sweep")[0] == job_titles(member_a, "sweep")[0]
    assert job_titles(member_a, "sweep")[0] == [f"#{newest.pk} sweep-new", *expected]
    # A window holding more than a page of a name's matches: only its own are counted, and the count says
    # "at least". A submitter's branch is counted through her own jobs: all of them.
    late = [
        make_job(department_a, f"sweep-late-{n}", state="pending", submitted_by=member_a) for n in range(3)
    ]
    titles, more, at_least = job_titles(member_a, "sweep", 2)
    assert titles == [f"#{job.pk} {job.name}" for job in reversed(late[1:])]
    assert (more, at_least) == (1, True)  # sweep-late-0 counted; the nine older ones not
    assert job_titles(member_a, "sweep")[1:] == (0, False)  # a page holds them all: no count
    assert job_titles(member_a, "sweep alice", 2)[1:] == (7, False)  # her nine, two shown


def test_a_job_two_branches_find_is_shown_and_counted_once(monkeypatch, department_a, alice, member_a):
    """ "sweep alice": a job named with both words, submitted by alice, is in two branches of rank 3."""
    both = make_job(department_a, "sweep-alice-1", state="completed", submitted_by=alice)
    only_name = make_job(department_a, "sweep-alice-2", state="completed", submitted_by=member_a)
    only_hers = make_job(department_a, "sweep-3", state="completed", submitted_by=alice)
    for n in range(4):
        make_job(department_a, f"eval-{n}", state="completed", submitted_by=member_a)
    monkeypatch.setattr(search_module, "WINDOW", 2)
    monkeypatch.setattr(search_module, "WIDER", 4)
    shown = [f"#{job.pk} {job.name}" for job in (only_hers, only_name, both)]
    assert job_titles(member_a, "sweep alice") == (shown, 0, False)
    assert job_titles(member_a, "sweep alice", 1) == (shown[:1], 2, False)


# --- tenants ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q",
    [
        "secret zed",  # B's job name and B's person
        "sweep zed-elsewhere",  # a word of A's jobs and B's person
        "b-secret sweep",  # B's job, by its name's words
        "zed secretkeeper",  # B's person: username and last name
        "classified robotics",  # B's project
        "robotics beta",  # B's project and B's department
        "alice secret",  # A's person and a word of B's job
    ],
)
def test_words_naming_another_departments_things_find_none_of_them(
    client_as, jobs, beta, member_a, lead_a, q
):
    for viewer in (member_a, lead_a):
        result = search(viewer, q)
        for group in result.groups:
            assert group.kind in ("job", "user"), (q, group.kind)  # A's own, if any
            for hit in group.hits:
                assert "secret" not in hit.title.lower() and "zed" not in hit.title, (q, hit.title)
                assert "zed" not in hit.note and "Beta" not in hit.note, (q, hit.note)
        html = client_as(viewer).get(SEARCH, {"q": q}).content.decode()
        typeahead = client_as(viewer).get(SUGGEST, {"q": q}).content.decode()
        assert "Nothing you may see matches" in typeahead or 'role="group"' in typeahead
        for theirs in ("b-secret-sweep", "zed-elsewhere", "Secretkeeper", "Classified Robotics", "Beta"):
            if theirs.lower() not in q.lower():  # (the query itself is shown back)
                assert theirs not in html and theirs not in typeahead, (viewer, q, theirs)


def test_the_admin_finds_them_by_the_same_words(jobs, beta, platform_admin):
    """The counterpart: the rows are there, for whoever may see them."""
    assert [t.split(" ", 1)[1] for t in found(platform_admin, "secret zed")["job"]] == ["b-secret-sweep"]
    assert found(platform_admin, "zed secretkeeper")["user"] == ["zed-elsewhere"]
    assert found(platform_admin, "classified robotics")["project"] == ["Beta / Classified Robotics"]
    assert [t.split(" ", 1)[1] for t in found(platform_admin, "sweep zed-elsewhere")["job"]] == [
        "b-secret-sweep"
    ]


# --- any words ----------------------------------------------------------------------------------------------

# Words of both departments' names, parts of them, short ones, marks and a stranger.
VOCABULARY = [
    "alice",
    "ALI",
    "a",
    "al",
    "sweep",
    "swe",
    "llm",
    "llm-sweep",
    "1",
    "2",
    "notes",
    "eval",
    "vision",
    "member",
    "member-a",
    "zed",
    "zed-elsewhere",
    "secret",
    "b-secret",
    "keeper",
    "robotics",
    "beta",
    "%",
    "_",
    "-",
    "x\\y",
    "zzz",
]


def word_in(word: str, text: str) -> bool:
    """As rank 3 reads one word in one field: inside it, or (short) where a word of it starts."""
    word, text = word.lower(), text.lower()
    if len(word) >= MIN_SUBSTRING:
        return word in text
    return text.startswith(word) or any(mark + word in text for mark in WORD_MARKS)


@pytest.mark.slow(reason="many searches (hypothesis): beyond make test-fast's budget")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(VOCABULARY), min_size=2, max_size=4))
def test_any_words_find_exactly_the_viewers_jobs_that_hold_each_word(jobs, beta, member_a, words):
    """The jobs found for any query of these words are exactly the visible jobs with each word in their name
    or their submitter's username (or, as ever, the whole query in one, or at the start of one); never
    department B's."""
    q = " ".join(words)
    lower = q.lower()
    long_word = any(len(word) >= MIN_SUBSTRING for word in q.split())
    expected = set()
    for job in [*jobs.values()]:
        fields = (job.name, job.submitted_by.username)
        if (
            job.name == q
            or any(field.lower().startswith(lower) for field in fields)
            or (
                long_word
                and (
                    any(lower in field.lower() for field in fields)
                    or all(any(word_in(word, field) for field in fields) for word in q.split())
                )
            )
        ):
            expected.add(f"#{job.pk} {job.name}")
    assert len(expected) < LIMIT
    assert set(found(member_a, q).get("job", [])) == expected, q
