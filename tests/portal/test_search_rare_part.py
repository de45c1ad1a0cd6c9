"""The older jobs of a long name read by its rarest part (portal.pages.search: _required_parts, _rarity,
Window._ranges). At 10,000 racks and 21 million jobs a lead's search for another department's whole job
name ("inference-serve-chat-h161531") read every trigram's list in the name's trigram index (244 ms: the
lists of "inference", "serve" and "chat" hold millions of jobs each); its part "h161531" alone, 6.5 ms. The
part must be in every name rank 3 finds, and the answers must be the same.

Runs on SQLite (`make test-fast`) and on PostgreSQL (`make test`; there the index condition is checked)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from core.time_limit import within
from portal.pages import search as search_module
from portal.pages.search import MIN_SUBSTRING, Rarity, _jobs, _rarity, _required_parts
from tests.factories import make_job

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_trgm is PostgreSQL's")

LONG_NAME = "inference-serve-chat-h161531"


def titles(user, q: str, limit: int = search_module.LIMIT) -> tuple[list[str], int, bool]:
    group, _exact = _jobs(user, q, True, limit, True)
    return [hit.title for hit in group.hits], group.more, group.more_at_least


def test_the_parts_of_a_name_are_its_runs_of_letters_and_digits_of_three_or_more():
    assert MIN_SUBSTRING == 3
    assert _required_parts(LONG_NAME) == ("inference", "serve", "chat", "h161531")
    assert _required_parts("llama pretrain") == ("llama", "pretrain")
    # A short word holds no part (it is looked for at a word's start only); "_" and "-" split parts; each
    # part once, in any case; letters of any script.
    assert _required_parts("gb r0 a-b") == ()
    assert _required_parts("gb r03") == ("r03",)
    assert _required_parts("Run_42 RUN-abc ümlaut") == ("RUN", "abc", "ümlaut")
    assert _required_parts("x7") == ()


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)


@given(before=text, q=text, after=text)
def test_a_name_holding_the_query_holds_each_of_its_parts(before, q, after):
    """Rank 3's first condition: the whole query inside the name, in any case."""
    name = (before + q.swapcase() + after).upper()
    for part in _required_parts(q):
        assert part.upper() in name


@given(words=st.lists(text.filter(lambda w: w.strip() and " " not in w), min_size=2, max_size=4), glue=text)
def test_a_name_holding_each_word_holds_each_part(words, glue):
    """Its second: each word of MIN_SUBSTRING or more inside the name (in any order, any case)."""
    q = " ".join(words)
    name = glue.join(reversed([word.swapcase() for word in q.split()])).upper()
    for part in _required_parts(q):
        assert part.upper() in name


def test_the_rarest_part_is_one_no_newest_name_holds(department_a):
    for n in range(3):
        make_job(department_a, f"inference-serve-chat-h{n:06d}", state="completed")
    assert _rarity(("inference", "serve", "chat", "h161531")).rare == "h161531"
    assert _rarity(("INFERENCE", "CHAT")).rare is None  # both seen, in any case
    assert _rarity(("h161531",)).rare == "h161531"  # one part: the query's own
    assert _rarity(("chat",)).rare is None
    assert _rarity(("zzzq", "h161531")).rare == "h161531"  # several unseen: the longest
    assert _rarity(()).rare is None


def test_only_the_newest_names_are_the_sample(monkeypatch, department_a):
    old = make_job(department_a, "legacy-h161531", state="completed")
    for n in range(3):
        make_job(department_a, f"train-h{n}", state="completed")
    monkeypatch.setattr(search_module, "RARITY_SAMPLE", 3)
    assert _rarity(("legacy", "train")).rare == "legacy"
    monkeypatch.setattr(search_module, "RARITY_SAMPLE", 4)
    assert old.name.startswith("legacy") and _rarity(("legacy", "train")).rare is None


def test_through_the_rare_part_the_jobs_and_their_count_are_the_same(
    monkeypatch, department_a, department_b, member_a
):
    """An old job named LONG_NAME, newer ones holding its common parts, and the same name in another
    department: read by the rare part alone, the same jobs and counts as read by the whole query through
    the windows, and the other department's job never."""
    old = [make_job(department_a, LONG_NAME, state="completed") for _ in range(2)]
    near = make_job(department_a, "inference-serve-chat-h161531-retry", state="completed")
    theirs = make_job(department_b, LONG_NAME, state="completed")
    for n in range(6):
        make_job(department_a, f"inference-serve-chat-h{n:06d}", state="completed")
    monkeypatch.setattr(search_module, "WINDOW", 2)
    monkeypatch.setattr(search_module, "WIDER", 4)
    monkeypatch.setattr(search_module, "RARITY_SAMPLE", 4)
    queries = (LONG_NAME, LONG_NAME.upper(), "serve h161531", "chat inference-serve", "h161531 retry")
    with monkeypatch.context() as whole:
        whole.setattr(search_module, "_rarity", lambda parts, jobs=None: Rarity())  # as before: windows
        by_whole = {q: (titles(member_a, q), titles(member_a, q, 1)) for q in queries}
    assert by_whole[LONG_NAME][0] == ([f"#{job.pk} {job.name}" for job in (*reversed(old), near)], 0, False)
    assert by_whole["h161531 retry"][0] == ([f"#{near.pk} {near.name}"], 0, False)
    with CaptureQueriesContext(connection) as captured:
        for q in queries:
            assert (titles(member_a, q), titles(member_a, q, 1)) == by_whole[q], q
    assert all(f"#{theirs.pk} " not in title for q in queries for title in titles(member_a, q)[0])
    # The older jobs were read by the rare part: "h161531" on the name itself, the whole query only in the
    # form no index is on (a Concat).
    older = [
        query["sql"]
        for query in captured.captured_queries
        if "NULLS LAST" in query["sql"] and "%h161531%" in query["sql"].lower()
    ]
    assert older
    # ... and only so: no window of the newest jobs walked for a query holding it.
    walked = [
        query["sql"]
        for query in captured.captured_queries
        if "%h161531%" in query["sql"].lower() and '"created_at" >=' in query["sql"]
    ]
    assert not walked, walked[0]
    on_name = re.compile(
        r"""(UPPER\()?"scheduling_job"\."name"(::text\))? LIKE (UPPER\()?'(%[^']*%)'""", re.I
    )
    for sql in older:
        # One pattern on the name itself, the rare part (the others are on the Concat: SQLite writes it
        # `COALESCE(name, '') || ...`).
        assert [match[3].lower() for match in on_name.findall(sql)] == ["%h161531%"], sql


@postgresql_only
def test_postgresql_reads_only_the_rare_parts_trigrams(monkeypatch, department_a, member_a):
    """The plan of the older jobs' read: the only condition the trigram index can serve is the rare part's."""
    from portal.pages import search_indexes

    if not search_indexes.has_extension(connection):
        pytest.skip("pg_trgm could not be created by this role")
    make_job(department_a, LONG_NAME, state="completed")
    for n in range(6):
        make_job(department_a, f"inference-serve-chat-h{n:06d}", state="completed")
    monkeypatch.setattr(search_module, "WINDOW", 2)
    monkeypatch.setattr(search_module, "WIDER", 4)
    monkeypatch.setattr(search_module, "RARITY_SAMPLE", 4)
    with CaptureQueriesContext(connection) as captured:
        titles(member_a, LONG_NAME + "-x")  # no job holds it: the older jobs are read
    [sql] = [q["sql"] for q in captured.captured_queries if "NULLS LAST" in q["sql"] and "LIMIT" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # The only pattern on the indexed expression, UPPER(name), is the rare part's; the whole query is on
    # the Concat, which no index is on.
    on_name = re.findall(r"upper\(\(name\)::text\) ~~ '([^']*)'", plan)
    assert on_name == ["%H161531%"], plan
    assert "'%INFERENCE-SERVE-CHAT-H161531-X%'" in plan


# --- the older jobs, bounded -------------------------------------------------------------------------------


def test_the_older_jobs_are_read_by_the_least_common_part_the_whole_query_or_not_at_all(monkeypatch):
    monkeypatch.setattr(search_module, "MAX_CHECKED", 50_000)
    monkeypatch.setattr(search_module, "MAX_LISTED", 500_000)
    parts = ("pretrain", "chat")
    # 21 million jobs, a sample of 2,000: one name in the sample holds a part of ~10,500 jobs.
    assert Rarity(parts, (200, 1), 0, 2000).older(21_000_000) == "chat"  # 10,500 names to check
    assert Rarity(parts, (200, 100), 0, 2000).older(21_000_000) is None  # common words: not read
    # At 1,000 racks' 2 million jobs their lists are short enough to read (200,000 and 100,000 names).
    assert Rarity(parts, (200, 100), 0, 2000).older(2_000_000) is True
    assert Rarity(parts, (400, 300), 100, 2000).older(2_000_000) is None  # 100,000 names hold both
    assert Rarity(parts, (0, 5), 0, 2000).rare == "pretrain"
    assert Rarity().older(21_000_000) is True and Rarity().rare is None  # no part: as ever
    assert Rarity(parts, (3, 3), 0, 2000).least == ("pretrain", 3)  # the longest of the least held


def common_names(department) -> None:
    """Twelve newer jobs whose names hold "pretrain" or "chat", never both."""
    for n in range(6):
        make_job(department, f"pretrain-h{n}", state="completed")
        make_job(department, f"serve-chat-h{n}", state="completed")


def small_windows(monkeypatch) -> None:
    """Windows of 2 and 4 jobs, a sample of 4: a test's few jobs are a long history."""
    monkeypatch.setattr(search_module, "WINDOW", 2)
    monkeypatch.setattr(search_module, "WIDER", 4)
    monkeypatch.setattr(search_module, "RARITY_SAMPLE", 4)


def test_common_words_never_together_leave_the_older_jobs_unsearched_and_say_so(
    monkeypatch, client_as, department_a, member_a
):
    """Two words each in many names, never together in the newest ones: their older jobs would be checked
    by the million at scale. They are not read; the jobs group says from when, and counts "at least"."""
    old = make_job(department_a, "pretrain-chat-v1", state="completed")
    common_names(department_a)
    small_windows(monkeypatch)
    assert titles(member_a, "pretrain chat")[0] == [f"#{old.pk} pretrain-chat-v1"]  # read, at this size
    monkeypatch.setattr(search_module, "MAX_CHECKED", 1)
    monkeypatch.setattr(search_module, "MAX_LISTED", 1)
    with CaptureQueriesContext(connection) as captured:
        group, _exact = _jobs(member_a, "pretrain chat", True, search_module.LIMIT, True)
    assert group.hits == [] and "were not searched" in group.note and group.more_at_least
    # Two samples: every tenant's newest names (how to read) and the viewer's own (whether to read).
    assert sum(' AS "part_0"' in query["sql"] for query in captured.captured_queries) == 2
    # The two windows walked once (and the viewer's own sample of them): no count walks them again.
    assert sum('"created_at" >=' in query["sql"] for query in captured.captured_queries) == 3
    response = client_as(member_a).get("/search/", {"q": "pretrain chat"})
    page = response.content.decode()
    assert response.status_code == 200 and 'data-note="job"' in page and "were not searched" in page
    assert 'count-pill">0+</span>' in page and "0+ results for" in page  # not "0": some were not searched
    assert "Nothing you may see matches" not in page
    # A rarer word reads them again.
    assert titles(member_a, "pretrain-chat-v1")[0][0] == f"#{old.pk} pretrain-chat-v1"


def test_what_other_tenants_names_hold_never_leaves_a_members_jobs_unsearched(
    monkeypatch, client_as, department_a, department_b, member_a
):
    """Department B's newest names are full of "pretrain" and "chat"; A's are not. Read for A's member, the
    older jobs are read (how may follow B's names; what is found may not): her old job is found, no note."""
    old = make_job(department_a, "pretrain-chat-v1", state="completed")
    make_job(department_a, "eval-1", state="completed")
    common_names(department_b)
    small_windows(monkeypatch)
    monkeypatch.setattr(search_module, "MAX_CHECKED", 1)
    monkeypatch.setattr(search_module, "MAX_LISTED", 1)
    assert _rarity(("pretrain", "chat")).older(1000) is None  # every tenant's names: not to be read
    group, _exact = _jobs(member_a, "pretrain chat", True, search_module.LIMIT, True)
    assert [hit.title for hit in group.hits] == [f"#{old.pk} pretrain-chat-v1"] and group.note == ""
    page = client_as(member_a).get("/search/", {"q": "pretrain chat"}).content.decode()
    assert reverse("scheduling:job-detail", args=[old.pk]) in page and "were not searched" not in page


def test_the_jobs_are_estimated_by_postgresql_or_counted(department_a, monkeypatch):
    from portal.pages.search import _jobs_estimate

    for n in range(3):
        make_job(department_a, f"train-{n}", state="completed")
    if connection.vendor != "postgresql":
        assert _jobs_estimate() == 3
        return
    monkeypatch.setattr(search_module, "ESTIMATE_COUNTED_UP_TO", 2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = 'scheduling_job'::regclass")
        [(never,)] = cursor.fetchall()
    if never <= 0:  # a table never estimated (new, or just restored): counted up to a bound
        assert _jobs_estimate() == 2
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_job")
    assert _jobs_estimate() == 3  # the planner's figure


def slow_older(monkeypatch, seconds: float) -> None:
    """The older jobs' read made slow by the database itself (a sleep in its condition): a stand-in for the
    millions of rows a test has not."""
    older = search_module.Window._older

    def slow(self, *args):
        jobs = older(self, *args)
        return None if jobs is None else jobs.extra(where=[f"pg_sleep({seconds}) IS NOT NULL"])

    monkeypatch.setattr(search_module.Window, "_older", slow)


@postgresql_only
def test_older_jobs_too_slow_to_read_are_left_unsearched_and_the_page_says_so(
    monkeypatch, client_as, department_a, member_a
):
    """The older jobs' read (and their count) stops after OLDER_READ_MS: at 21 million jobs a lead's two
    words that fill other departments' names, never together, read them whole in 1.3 s. Here the old job is
    not found, the page says which jobs were not searched and why; given the time, the same read finds it."""
    old = make_job(department_a, "pretrain-chat-v1", state="completed")
    common_names(department_a)
    small_windows(monkeypatch)
    assert titles(member_a, "pretrain chat")[0] == [f"#{old.pk} pretrain-chat-v1"]
    slow_older(monkeypatch, 0.5)
    monkeypatch.setattr(search_module, "OLDER_READ_MS", 50)
    group, _exact = _jobs(member_a, "pretrain chat", True, search_module.LIMIT, True)
    assert group.hits == [] and "took longer than this search may take" in group.note
    assert group.more_at_least
    page = client_as(member_a).get("/search/", {"q": "pretrain chat"}).content.decode()
    assert 'data-note="job"' in page and "took longer than this search may take" in page
    monkeypatch.setattr(search_module, "OLDER_READ_MS", 20_000)
    assert titles(member_a, "pretrain chat")[0] == [f"#{old.pk} pretrain-chat-v1"]


@postgresql_only
def test_a_count_too_slow_to_finish_says_at_least(monkeypatch, department_a, member_a):
    """A page read in time whose older jobs' count is not: the hits are shown, the count says "at least".
    The count alone is made slow (the read before it spends little of the shared OLDER_READ_MS), and the
    database itself stops it: a statement cancelled, not a budget already spent."""
    for n in range(3):
        make_job(department_a, f"pretrain-chat-v{n}", state="completed")
    common_names(department_a)
    small_windows(monkeypatch)
    assert titles(member_a, "pretrain chat", limit=1)[1:] == (2, False)
    count = search_module.Window._ids

    def slow_count(self, branch, limit):
        with monkeypatch.context() as slow:
            slow_older(slow, 0.2)
            return count(self, branch, limit)

    stops = []

    def recorded(ms, read, using):
        found, finished = within(ms, read, using)
        stops.append((ms, finished))
        return found, finished

    monkeypatch.setattr(search_module.Window, "_ids", slow_count)
    monkeypatch.setattr(search_module, "within", recorded)
    monkeypatch.setattr(search_module, "OLDER_READ_MS", 100)
    found, _more, at_least = titles(member_a, "pretrain chat", limit=1)
    assert len(found) == 1 and at_least
    assert stops[0][1] is True and stops[-1][1] is False and stops[-1][0] >= search_module.MIN_READ_MS
