"""Global search (the box in the header, `/search/?q=`, and its typeahead `/search/suggest/?q=`): GPUs,
trays, racks, jobs, departments, projects and users.

Each kind is searched through its model's `visible_to(user)`, so a member finds only their departments' jobs
and the people they may see (users: platform admins see everyone, others the people of their own departments,
as `Membership.objects.visible_to` says; projects: `Project.objects.visible_to`, i.e.
admins, the department's leads and the project's own members). An exact match (a full GPU UUID or serial,
a MIG device's UUID, a tray hostname, a job id, a rack name or cluster UUID, an IB port GUID, a department's
or a project's name or slug or namespace / Slurm account (`research-llm`), a job's whole name) answers with a
redirect to the object. A project's or a job's name redirects only
when one visible object has it: several projects with one slug (one per department), or several jobs with
one name, are listed instead (the jobs with that very name first).

What matches, in three ranks per kind (each kind shows at most LIMIT, the typeahead SUGGEST_LIMIT):
1. the exact match; 2. names that start with the query; 3. names that hold it anywhere, or results that hold
each of its words in any order, each word in any of their searched fields ("pretrain" in
`train-pretrain-0042`, "r03" in `gb-r03-t07`, "hall b row 12" in a rack's location, "hall A gb-r03" in a
rack's location and name, "sweep alice" in a job's name and its submitter's username, "jane smith" in a
person's first and last names; a word shorter than MIN_SUBSTRING must start a word there: "b" finds "hall B",
not "gb-r01"). Within rank 3, racks, departments, projects and people holding the whole query or all its words
in one field (a person's first and last names read as one) come first (_together). Each result shows the field
that matched (a rack its location, a GPU its serial, a tray the IB port GUID), the matched parts marked
(`matched_parts`: in its title, and in the parts of its note that are searched fields, `Detail.searched`).
Rank 3 looks at:
GPU UUIDs (a hex fragment) and serials (a fragment with a digit), tray hostnames, rack names and locations,
job names and the usernames of their submitters (jobs visible to the viewer only: a member finds a
colleague's jobs by her username though the person is not theirs to find), department and project names
and slugs, usernames and first and last names; MIG device UUIDs are
found exactly only. A query without a word of MIN_SUBSTRING (3) characters looks at prefixes only. Within rank
3, jobs come newest first, GPUs and trays in name order, and racks, departments, projects and people by
trigram similarity on PostgreSQL (the word most like the query, then the whole name most like it; name order
elsewhere).

Cost at 1,000 racks (72,000 GPUs, 18,000 trays) and a year of jobs (2.1 million): ranks 1 and 2 on the
inventory are an equality or a prefix *range* (`>= q AND < q + U+FFFF`, then the `startswith` itself as a
filter) on a column with a unique index (GPU uuid, tray hostname, rack name, rack cluster UUID), so each is an
index range scan reading at most LIMIT + 1 rows, plus one bounded count per kind when there are more. The
inventory stores these names in lower case (GPU UUIDs are canonical "GPU-" + lower-case hex), so the query is
lower-cased for them, which makes the search case-insensitive without a case-folding index. The exact job
name reads the b-tree index on scheduling_job.name (at most two rows). Rank 3 and the case-insensitive
prefixes of job, project and user names are Django's `icontains` / `istartswith`, which PostgreSQL runs as
`UPPER(column::text) LIKE '%Q%'`: migration portal 0003 (portal.pages.search_indexes) gives each of those
columns a GIN index on that very expression with pg_trgm's `gin_trgm_ops`, so the database reads the rows
holding the query's trigrams instead of the table (a rare part of 2.1 million job names: about 1 ms
instead of 500), and job names a b-tree on it with `text_pattern_ops` for prefixes (a trigram index would
return every name *holding* "pretrain" for the prefix "pretrain"). Jobs are read newest first from the
index on (created_at, id) (scheduling 0021): for a word in a tenth of all jobs the planner walks it
backwards and stops at the first LIMIT + 1 that match (0.2 ms instead of sorting 190,000 matches in
900). Each rank is its own bounded query; rank 3 is fetched only while the first ranks leave room (at most
LIMIT + the rows shown + 1 rows), and every count stops at COUNT_CAP ("and at least N more"): it never
counts a million jobs. Rank 3 of the jobs is read branch by branch through a Window (its words in the name:
the newest WINDOW, then WIDER, jobs walked, the older ones through the trigram index, as the planner misjudges
how many jobs hold two common words together and reads an unordered count in any index's order; its words
in a submitter's username: that submitter's jobs newest first, from the index on (submitter, created_at,
id); _job_matches). A query with a rare part (a run of letters and digits, "h161531" in
"inference-serve-chat-h161531", that none of the newest RARITY_SAMPLE job names holds: _rarity, one query over
them) is read through the trigram index alone, by that part's trigrams, the whole query checked on the rows
they give: the index reads the lists of every trigram it is asked for, and those of common words hold
millions of jobs (a lead's search for another department's whole job name at 21 million jobs: 244 ms in the
index, against 6.5 ms for its rare part), and walking the windows for a rare name reads their 50,000 jobs
to find few (a part rare lately but common long ago would read its many rows instead). Without one, the
older jobs are read as Rarity.older says, or not at all when the viewer's own newest names are full of its
every word (the page then says from when; MAX_CHECKED). How the jobs are read may follow every tenant's names
(the same results either way); what is found never does. On SQLite (`make run`),
and on a PostgreSQL whose role could not create pg_trgm, the same lookups scan the tables: the same results,
slower at scale, and no similarity ranking. The exact GPU serial (only for a query that looks like a serial)
reads the b-tree on the serial (inventory 0024: a scan of 720,000 GPUs at 10,000 racks took 130 ms). Two
lookups are not on an index: the IB port GUID (only when the query looks like a GUID; a scan of the tray
table's JSON lists) and departments (tens of rows).

A query naming one object exactly is answered by exact_url() alone (one to seven lookups, one per kind, no
grouped search) unless `all=1` asks for every result; the GPU UUID prefix search is skipped for queries no
UUID can start with. The typeahead runs the same ranks with SUGGEST_LIMIT rows per kind and counts nothing.
`make bench` measures both (benchmarks/search.py).
"""

from __future__ import annotations

import functools
import operator
import re
import time
import unicodedata
import uuid
from dataclasses import dataclass, field
from functools import reduce

from django.contrib.auth import get_user_model
from django.contrib.postgres.search import TrigramSimilarity, TrigramWordSimilarity
from django.db import connections
from django.db.models import (
    BooleanField,
    Case,
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Concat, Greatest, Lower
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_safe

from core.access import is_admin
from core.time_limit import within
from inventory.models import ComputeTray, Gpu, MigDevice, Rack
from portal.pages import search_indexes
from scheduling.models import Job
from tenancy import naming
from tenancy.models import Department, Membership, Project

MAX_QUERY = 200
LIMIT = 20  # results shown per kind; the rest is counted ("and N more")
SUGGEST_LIMIT = 5  # the header's typeahead: at most this many per kind, nothing counted
MIN_SUBSTRING = 3  # a substring or word search needs a word this long (a trigram; shorter: prefixes only)
WORD_MARKS = (" ", "-", "_", ".", "/", ":")  # what starts a word inside a name
COUNT_CAP = 1000  # substring matches are counted up to this many ("and at least N more" beyond)
# A job query's words in a name are walked through the newest WINDOW jobs, then the next up to WIDER (Window);
# older ones are read through the trigram index.
WINDOW = 5_000
WIDER = 50_000
NEWEST = ("-created_at", "-pk")  # the jobs' order: the index on (created_at, id), read backwards
# The same order, but not one that index gives (it holds no NULLS LAST order): PostgreSQL reads the matches
# through the trigram and submitter indexes and sorts them instead of walking the jobs (Window).
SORTED_NEWEST = (F("created_at").desc(nulls_last=True), "-pk")
# A job query's parts are looked for in the newest RARITY_SAMPLE job names (_rarity): a part none holds is
# rare, and the jobs are read by it alone (Window._ranges).
RARITY_SAMPLE = 2_000
# Without a part none of the sample holds, the older jobs are read by the least common part alone when about
# fewer than MAX_CHECKED jobs hold it (each checked against the whole query), else by the whole query when
# its every part is in fewer than MAX_LISTED jobs (the index's lists read) and fewer than MAX_CHECKED hold
# them all; else, when the viewer's own newest jobs say the same (a tenant's search is never narrowed by what
# other tenants' names hold), not at all, and the page says which jobs were not searched; else by the whole
# query. At 21 million jobs "chat-serve"
# checked the 1.5 million names holding both words in 11 s, and "pretrain chat" read the index's lists of
# two words in a tenth and a twentieth of the names (15,000 pages).
MAX_CHECKED = 50_000
MAX_LISTED = 500_000
# The reads of the older jobs (and their counts) of one search stop after OLDER_READ_MS in all on PostgreSQL
# (core.time_limit, Window._in_time): a lead whose own names lack two words that fill other departments'
# names read them whole in 1.3 s at 21 million jobs. A read stopped so leaves the older jobs unsearched, and
# the page says so; a count stopped so says "at least".
OLDER_READ_MS = 120
MIN_READ_MS = 10  # a read of older jobs is not begun with less of OLDER_READ_MS left
PART = re.compile(rf"[^\W_]{{{MIN_SUBSTRING},}}")  # a run of letters and digits: a word to pg_trgm
HIGH = "\uffff"
GUID = re.compile(r"^(0x)?[0-9a-f]{16}$")
GUID_PREFIX = re.compile(r"^0x[0-9a-f]{4,16}$")
UUID_TAIL = re.compile(r"^[0-9a-f-]*$")
# A GPU serial as nvidia-smi prints it is a number (13 digits on GB200); letters are allowed, separators are
# not. Only such a query looks at the serial column, which has no index (a scan of every GPU).
SERIAL = re.compile(r"^(?=.*[0-9])[0-9A-Za-z]{6,64}$")
SERIAL_FRAGMENT = re.compile(r"^(?=.*[0-9])[0-9A-Za-z]{3,64}$")  # a part of one: looked for inside serials


class QueryTooLong(ValueError):
    pass


@dataclass(frozen=True)
class Detail:
    """One part of a result's note, shown after its title: `text` as shown, and `searched`, the part of it
    the query is looked for in (the whole text, a value inside it, "serial 1873582090772"'s number), which
    the pages mark where the query matched it; "" for a part no search looks at (never marked)."""

    text: str
    searched: str = ""


@dataclass
class Hit:
    title: str
    url: str
    details: tuple[Detail, ...] = ()  # what the pages show after the title, the matched field among them
    name: str = ""  # its whole name, when the title is more than that (a job's "#12 name"): ranked

    @property
    def note(self) -> str:
        return " · ".join(detail.text for detail in self.details)

    def rank(self, q: str) -> int:
        """0: its whole name is `q`; 1: its name starts with it; 2: `q` is elsewhere (inside the name, in
        another field: a job found by its submitter's name)."""
        name, lower = (self.name or self.title).lower(), q.lower()
        return 0 if name == lower else 1 if name.startswith(lower) else 2


@dataclass
class Group:
    kind: str
    label: str
    hits: list[Hit] = field(default_factory=list)
    more: int = 0
    more_at_least: bool = False  # `more` stopped at COUNT_CAP matches: there may be more
    note: str = ""  # a sentence above the hits (several jobs with the name searched for; jobs not searched)


@dataclass
class Results:
    query: str
    groups: list[Group]
    exact: str | None = None  # the URL of the one object the query names exactly

    @property
    def total(self) -> int:
        return sum(len(g.hits) + g.more for g in self.groups)

    @property
    def at_least(self) -> bool:
        """Whether there may be more than `total` (a count stopped, or older jobs not searched): "N+"."""
        return any(g.more_at_least for g in self.groups)


def clean(raw) -> str:
    """The query as searched: control characters and lone surrogates (no database can hold one) become
    spaces, the rest is NFKC-normalised (the full-width letters, digits and dashes a Japanese input method
    types, U+FF01-U+FF5E, read as the ASCII the names are stored in: "gb-r03", "carol"), then trimmed.
    Longer than MAX_QUERY characters raises QueryTooLong."""
    text = unicodedata.normalize("NFKC", str(raw or ""))  # makes no control character of another
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text).strip()
    if len(text) > MAX_QUERY:
        raise QueryTooLong(
            _(
                "The search is %(length)s characters long; at most %(max)s are searched. Search for a "
                "shorter part of the name, for example the start of a hostname or a GPU UUID."
            )
            % {"length": len(text), "max": MAX_QUERY}
        )
    return text


def _prefix(field_name: str, value: str) -> Q:
    """`field_name` starts with `value`, as an index range scan (see the module docstring)."""
    return Q(
        **{f"{field_name}__gte": value, f"{field_name}__lt": value + HIGH, f"{field_name}__startswith": value}
    )


def _bounded(queryset, limit: int = LIMIT, count: bool = True) -> tuple[list, int]:
    """The first `limit` rows and how many more there are, counted up to COUNT_CAP rows in all (0 when not
    `count`ed): a prefix shared by a tenth of a year's jobs is not counted to the end."""
    rows = list(queryset[: limit + 1])
    if len(rows) <= limit:
        return rows, 0
    return rows[:limit], _count(queryset) - limit if count else 0


def _count(queryset) -> int:
    """The rows of `queryset`, counted up to COUNT_CAP (`SELECT COUNT(*) FROM (... LIMIT COUNT_CAP)`)."""
    return queryset.order_by()[:COUNT_CAP].count()


def _inside(fields: tuple[str, ...], text: str) -> Q:
    """`text` inside one of `fields`, in any case (`icontains`: on PostgreSQL `UPPER(field::text) LIKE
    '%TEXT%'`, the expression the trigram indexes of migration portal 0003 are built on)."""
    return reduce(operator.or_, (Q(**{f"{name}__icontains": text}) for name in fields))


def _word_start(fields: tuple[str, ...], word: str) -> Q:
    """A short `word` at the start of a word of one of `fields` ("b" in "hall B row 12", not in "gb-r01")."""
    return reduce(
        operator.or_,
        (
            Q(**{f"{name}__istartswith": word})
            | reduce(operator.or_, (Q(**{f"{name}__icontains": mark + word}) for mark in WORD_MARKS))
            for name in fields
        ),
    )


def _words(q: str) -> list[str]:
    """The words of `q`, each once (in any case: "a A" is one word)."""
    return list({word.lower(): word for word in q.split()}.values())


def _word(fields: tuple[str, ...], word: str) -> Q:
    """One word of a query in one of `fields`: anywhere in it, or, shorter than MIN_SUBSTRING, where a word
    of it starts."""
    return _inside(fields, word) if len(word) >= MIN_SUBSTRING else _word_start(fields, word)


def _fields(texts: tuple[str | tuple[str, ...], ...]) -> tuple[str, ...]:
    return tuple(name for text in texts for name in ((text,) if isinstance(text, str) else text))


def _substring(texts: tuple[str | tuple[str, ...], ...], q: str) -> Q | None:
    """The third rank: `q` inside one of the fields of `texts`, or each of its words in one of them, in any
    order, each word in any field ("llama pretrain" in a job's name; "hall A gb-r03": a rack's location
    holds "hall" and "A", its name "gb-r03"; a word shorter than MIN_SUBSTRING at the start of a word).
    None when no word has MIN_SUBSTRING characters: a trigram index cannot narrow shorter ones, so such a
    query looks at prefixes only. _together() says which of these matches come first."""
    words = _words(q)
    if not any(len(word) >= MIN_SUBSTRING for word in words):
        return None
    fields = _fields(texts)
    condition = _inside(fields, q)
    if len(q.split()) > 1:  # ("alice alice" is one word, not the text "alice alice")
        condition |= reduce(operator.and_, (_word(fields, word) for word in words))
    return condition


def _together(texts: tuple[str | tuple[str, ...], ...], q: str) -> Q | None:
    """The closer matches of rank 3, shown before the others: `q` inside one field, or all of its words in
    the same text (a text is a field, or a tuple of fields read as one: a person's first and last names,
    "jane smith"). None when they are all of rank 3's matches (a query of one word; one field)."""
    words = _words(q)
    fields = _fields(texts)
    if len(words) < 2 or len(fields) < 2 or not any(len(word) >= MIN_SUBSTRING for word in words):
        return None
    condition = _inside(fields, q)
    for text in texts:
        text = (text,) if isinstance(text, str) else text
        condition |= reduce(operator.and_, (_word(text, word) for word in words))
    return condition


def matched_parts(text: str, q: str) -> list[tuple[str, bool]]:
    """`text` cut into (part, whether the query matched it) pieces, as rank 3 matches: the whole query
    wherever it is, else each of its words (one shorter than MIN_SUBSTRING only at the start of a word, or
    of `text`); any case. The pages mark the matched parts (portal.templatetags.search_marks)."""
    words = q.split()
    if not text or not words:
        return [(text, False)] if text else []
    starts = "".join(re.escape(mark) for mark in WORD_MARKS)

    def spans(word: str, anywhere: bool) -> list[tuple[int, int]]:
        pattern = re.escape(word) if anywhere else rf"(?:^|(?<=[{starts}])){re.escape(word)}"
        return [m.span() for m in re.finditer(pattern, text, re.IGNORECASE)]

    found = spans(q, any(len(word) >= MIN_SUBSTRING for word in words)) or [
        span for word in words for span in spans(word, len(word) >= MIN_SUBSTRING)
    ]
    parts, at = [], 0
    for start, end in sorted(found):
        if end <= at:
            continue
        start = max(start, at)
        if start > at:
            parts.append((text[at:start], False))
        parts.append((text[start:end], True))
        at = end
    if at < len(text):
        parts.append((text[at:], False))
    return parts


@functools.cache
def _has_trigrams(alias: str) -> bool:
    """Whether the database can rank by trigram similarity: PostgreSQL with pg_trgm installed (migration
    portal 0003 creates it when the role may; without it the same matches come back in name order). Asked
    once per process."""
    connection = connections[alias]
    return connection.vendor == "postgresql" and search_indexes.has_extension(connection)


def _alike_first(queryset, fields: tuple[str, ...], q: str, order: tuple) -> tuple:
    """`order` behind the trigram similarity of `q` to the best of `fields` on PostgreSQL: the word most
    like it first, then (among equals) the name most like it as a whole (the shorter "Vision" before "Big
    vision transformer zoo"); `order` alone elsewhere. Only for the small tables: it is computed for every
    match."""
    if not _has_trigrams(queryset.db):
        return order

    def best(alike: list):
        return (Greatest(*alike) if len(alike) > 1 else alike[0]).desc()

    words = best([TrigramWordSimilarity(q, name) for name in fields])
    wholes = best([TrigramSimilarity(name, q) for name in fields])  # (expression, string): Django's order
    return (words, wholes, *order)


def _together_first(texts: tuple[str | tuple[str, ...], ...], q: str, order: tuple) -> tuple:
    """`order` behind _together(): the closer matches first, in one query (the small tables, whose matches
    are all sorted anyway: _alike_first)."""
    closer = _together(texts, q)
    if closer is None:
        return order
    return (Case(When(closer, then=Value(0)), default=Value(1)), *order)


def _matching(queryset, condition: Q | None):
    """`queryset` narrowed to rank 3's `condition`, or None when there is none (a query too short)."""
    return queryset.filter(condition) if condition is not None else None


@dataclass(frozen=True)
class Branch:
    """One way a job matches rank 3 (_job_matches): `condition` on _job_fields(); `by_submitter`: it names
    its submitters (`job_by IN (ids)`), so its jobs are read newest first from the index on (submitter,
    created_at, id), the submitters' own history, not the whole one."""

    condition: Q
    by_submitter: bool = False
    parts: tuple[str, ...] = ()  # text every job it matches holds in its name (_required_parts)


def _required_parts(q: str) -> tuple[str, ...]:
    """The parts of `q` that every name rank 3 finds for it holds, in any case: the runs of letters and
    digits of MIN_SUBSTRING characters or more inside its words of MIN_SUBSTRING or more ("H161531" and
    "SERVE" in "inference-serve-chat-h161531"; a name holding the whole query or each of its words holds
    them), each once."""
    words = [word for word in _words(q) if len(word) >= MIN_SUBSTRING]
    return tuple({part.lower(): part for word in words for part in PART.findall(word)}.values())


@dataclass(frozen=True)
class Rarity:
    """What the newest `sample` job names say of a query's parts (_rarity): how many of them hold each part
    (`held`, in the parts' order) and every part (`together`)."""

    parts: tuple[str, ...] = ()
    held: tuple[int, ...] = ()
    together: int = 0
    sample: int = 0

    @property
    def least(self) -> tuple[str, int] | None:
        """The part the fewest names hold (the longest of those) and how many; None without parts."""
        if not self.parts:
            return None
        return min(zip(self.parts, self.held, strict=True), key=lambda pair: (pair[1], -len(pair[0])))

    @property
    def rare(self) -> str | None:
        """The longest part none of the sample's names holds, if any."""
        least = self.least
        return least[0] if least is not None and least[1] == 0 else None

    def older(self, jobs: int) -> str | bool | None:
        """How the older jobs of `jobs` in all are read: by a part (it), by the whole query (True) or not at
        all (None); see MAX_CHECKED."""
        least = self.least
        if least is None or not self.sample:
            return True
        if least[1] * jobs < MAX_CHECKED * self.sample:
            return least[0]
        if (
            max(self.held) * jobs < MAX_LISTED * self.sample
            and self.together * jobs < MAX_CHECKED * self.sample
        ):
            return True
        return None


def _rarity(parts: tuple[str, ...], jobs=None) -> Rarity:
    """`parts` looked for in the newest RARITY_SAMPLE job names (of `jobs`, by default every job), each and
    all together (one query: the sample's names read through the index on (created_at, id)); an empty
    Rarity for no part."""
    if not parts:
        return Rarity()
    newest = (Job.objects if jobs is None else jobs).order_by(*NEWEST).values("pk")[:RARITY_SAMPLE]
    held = [Q(name__icontains=part) for part in parts]
    seen = Job.objects.filter(pk__in=Subquery(newest)).aggregate(
        sample=Count("pk"),
        together=Count("pk", filter=reduce(operator.and_, held)),
        **{f"part_{n}": Count("pk", filter=condition) for n, condition in enumerate(held)},
    )
    counts = tuple(seen[f"part_{n}"] for n in range(len(parts)))
    return Rarity(parts, counts, seen["together"], seen["sample"])


ESTIMATE_COUNTED_UP_TO = 1_000_000  # a table PostgreSQL has not estimated yet is counted up to this many


def _jobs_estimate() -> int:
    """How many jobs there are: PostgreSQL's own estimate (the planner's, kept by ANALYZE and autovacuum: no
    count of 21 million rows), or, before its first (a table just restored), a count stopping at
    ESTIMATE_COUNTED_UP_TO; counted elsewhere (SQLite, `make run`'s few)."""
    if connections[Job.objects.db].vendor != "postgresql":
        return Job.objects.count()
    with connections[Job.objects.db].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [Job._meta.db_table]
        )
        row = cursor.fetchone()
    if row and row[0] > 0:
        return int(row[0])
    return Job.objects.order_by()[:ESTIMATE_COUNTED_UP_TO].count()


@dataclass(frozen=True)
class Older:
    """A branch's jobs created before `before` (the last window's edge), read through the indexes
    (Window._older) in at most OLDER_READ_MS."""

    jobs: object  # a QuerySet, SORTED_NEWEST
    before: object  # a datetime


def _either(branches: list[Branch]) -> Q:
    return reduce(operator.or_, (branch.condition for branch in branches))


class Window:
    """How a job query is read newest first without walking the whole history: branch by branch
    (_job_matches: its words in the name; each set of submitters with the words their username does not
    hold in the name), each read in the way its own size calls for, merged newest first.

    PostgreSQL estimates the jobs matching "distill erin" (a word of a tenth of the names, the submitter of
    an eighth of the jobs) as the product of the two, 1 % of them, and walks the index on (created_at, id)
    backwards expecting the first LIMIT + 1 within a few thousand rows; when no job of hers is named so, it
    reads all 2 million (1.6 s), and a count stopping at COUNT_CAP reads as many. An unordered count is no
    better: it may read the b-tree on the name in its order (a word of a tenth of the names, all of them
    late in it: 19 million entries, 4 s at 21 million jobs). So the branch of the words in a job's name
    walks the WINDOW newest jobs (at most 5,000 rows, ~3 ms; 1 ms when they hold a page of matches:
    _job_fields walked), then, when they hold too few, the next ones up to WIDER (45,000 rows, ~40 ms), and
    only then reads the older ones in an order that index cannot give (SORTED_NEWEST): PostgreSQL then takes
    the matches from the trigram index and sorts them, fewer than one in 2,500 jobs by then. A branch naming
    its submitters is read newest first from the index on (submitter, created_at, id), where it stops at the
    first matches: read with the others as one condition, PostgreSQL intersected the submitter's 1.3 million
    jobs with the 1.9 million named *finetune* and sorted the 120,000 left (6 s at 10,000 racks, 21 million
    jobs, for "finetune erin"; issue 32).
    """

    def __init__(self, jobs, edges: list, branches: list[Branch]):
        self.jobs = jobs  # the jobs the viewer may see
        self.edges = edges  # the created_at of the WINDOW-th and WIDER-th newest job (those there are)
        self.branches = branches
        self.narrowed: dict[tuple[str, ...], Rarity] = {}  # a branch's parts -> _rarity, asked once
        # The created_at before which jobs were not read (too many names to check, MAX_CHECKED, or too slow
        # to read, OLDER_READ_MS), if any, and which of the two (`unsearched_slow`).
        self.unsearched_before = None
        self.unsearched_slow = False
        self.unread: set[int] = set()  # the branches (id) whose older jobs are not read, for either reason
        self.estimate: int | None = None  # _jobs_estimate(), when asked
        self.spent_ms = 0.0  # of OLDER_READ_MS, by the reads and counts of older jobs so far

    @classmethod
    def of_jobs(cls, jobs, branches: list[Branch]) -> Window | None:
        """The window over `jobs`, or None while there are fewer than WINDOW jobs in all (an index-only
        read of WINDOW entries, and of WIDER when there are that many)."""
        edges = []
        for size in (WINDOW, WIDER):
            edge = list(Job.objects.order_by(*NEWEST).values_list("created_at", flat=True)[size - 1 : size])
            if not edge:
                break
            edges.append(edge[0])
        return cls(jobs, edges, branches) if edges else None

    def _ranges(self, branch: Branch):
        """The branch's jobs in each window, newest window first (walked, see _job_fields), then the older
        ones (through the indexes, SORTED_NEWEST). A query holding a rare part (one no name of the sample
        holds, _rarity) has few matches: its jobs are all read through the trigram index, by that part's
        trigrams only (the branch's condition, in a form no index is on, checked on the rows they give),
        without walking the windows, which would read their 50,000 jobs to find none or few (~50-100 ms at
        21 million jobs). Otherwise the older jobs are read as `Rarity.older` says (by the least common part,
        by the whole condition, or not: then None stands for them, and `unsearched_before` says from when)."""
        condition = branch.condition
        if branch.parts not in self.narrowed:
            self.narrowed[branch.parts] = _rarity(branch.parts)
        rarity = self.narrowed[branch.parts]
        if rarity.rare is not None:
            yield (
                _job_fields(self.jobs, walked=True)
                .filter(condition, name__icontains=rarity.rare)
                .order_by(*SORTED_NEWEST)
            )
            return
        newer = None
        for edge in self.edges:
            walked = _job_fields(self.jobs, walked=True).filter(condition, created_at__gte=edge)
            yield walked.filter(created_at__lt=newer) if newer is not None else walked
            newer = edge
        older = self._older(branch, rarity, newer)
        yield Older(older, newer) if older is not None else None

    def _older(self, branch: Branch, rarity: Rarity, newer):
        """The jobs older than `newer` (the last window's edge) as `Rarity.older` says, or None when they are
        not read (`unsearched_before` set, or the branch's read was stopped for its time before)."""
        condition = branch.condition
        if id(branch) in self.unread:  # decided, or stopped for its time, before: not for the count either
            return None
        if self.estimate is None and rarity.sample:
            self.estimate = _jobs_estimate()
        how = rarity.older(self.estimate or 0)
        # Not read only when the viewer's own newest jobs (in the windows: a bounded read) say so too: what a
        # tenant finds never depends on what other tenants' names hold (they may say how to read: the same
        # results either way).
        own = self.jobs.filter(created_at__gte=newer)
        if how is None and _rarity(branch.parts, own).older(self.estimate or 0) is None:
            self.unsearched_before = newer
            self.unread.add(id(branch))
            return None
        if how is None or how is True:
            return _job_fields(self.jobs).filter(condition, created_at__lt=newer).order_by(*SORTED_NEWEST)
        # the condition in a form no index is on; the part on the trigram index
        return (
            _job_fields(self.jobs, walked=True)
            .filter(condition, name__icontains=how, created_at__lt=newer)
            .order_by(*SORTED_NEWEST)
        )

    def _by_submitter(self, condition: Q):
        return _job_fields(self.jobs).filter(condition).order_by(*NEWEST)

    def _read(self, branch: Branch, n: int) -> list:
        if branch.by_submitter:
            return list(self._by_submitter(branch.condition)[:n])
        rows: list = []
        for jobs in self._ranges(branch):
            if jobs is None:  # the older jobs, not read (MAX_CHECKED, OLDER_READ_MS)
                break
            if isinstance(jobs, Older):
                page = jobs.jobs[: n - len(rows)]
                found, finished = self._in_time(functools.partial(list, page))
                if not finished:
                    self._stopped(branch, jobs.before)
                    break
                rows += found or []
            else:
                rows += (jobs if jobs.query.order_by else jobs.order_by(*NEWEST))[: n - len(rows)]
            if len(rows) == n:
                break
        return rows

    def _in_time(self, read):
        """`read()` of older jobs within what is left of OLDER_READ_MS: the reads and counts of one search
        share it (core.time_limit.within); (None, False) when it ran out."""
        if connections[Job.objects.db].vendor != "postgresql":  # no limit there (core.time_limit)
            return read(), True
        left = OLDER_READ_MS - self.spent_ms
        if left < MIN_READ_MS:  # too little left to read anything: as if stopped
            return None, False
        started = time.perf_counter()
        try:
            return within(int(left), read, using=Job.objects.db)
        finally:
            self.spent_ms += (time.perf_counter() - started) * 1000

    def _stopped(self, branch: Branch, before) -> None:
        """The branch's jobs created before `before` took longer than OLDER_READ_MS to read: unsearched."""
        self.unread.add(id(branch))
        self.unsearched_before = max(before, self.unsearched_before or before)
        self.unsearched_slow = True

    def read(self, n: int) -> list:
        """The first `n` jobs of any branch, newest first: each branch's first `n`, merged."""
        jobs = {job.pk: job for branch in self.branches for job in self._read(branch, n)}
        return sorted(jobs.values(), key=lambda job: (job.created_at, job.pk), reverse=True)[:n]

    def _ids(self, branch: Branch, limit: int) -> tuple[set[int], bool]:
        """A branch's jobs (ids) up to COUNT_CAP, and whether it stopped at a window: when the windows read
        so far hold more than a page (`limit`) of them, the older ones are not read."""
        if branch.by_submitter:
            return set(self._by_submitter(branch.condition).values_list("pk", flat=True)[:COUNT_CAP]), False
        ids: set[int] = set()
        for jobs in self._ranges(branch):
            if jobs is None:  # the older jobs, not read (MAX_CHECKED, OLDER_READ_MS): there may be more
                return ids, True
            if isinstance(jobs, Older):  # a count stopped for its time says "at least"
                pks = jobs.jobs.values_list("pk", flat=True)[: COUNT_CAP - len(ids)]
                found, finished = self._in_time(functools.partial(set, pks))
                return ids | (found or set()), not finished
            ids |= set(jobs.order_by().values_list("pk", flat=True)[: COUNT_CAP - len(ids)])
            if len(ids) > limit and self.narrowed[branch.parts].rare is None:  # a window's: not the older
                return ids, True
        return ids, False

    def count(self, limit: int) -> tuple[int, bool]:
        """The jobs of any branch up to COUNT_CAP (a job two branches find counted once), and whether there
        may be more ("and at least N more": a branch stopped at a window, or the cap was reached)."""
        ids: set[int] = set()
        partial = False
        for branch in self.branches:
            found, stopped = self._ids(branch, limit)
            ids |= found
            partial = partial or stopped
        return min(len(ids), COUNT_CAP), partial


def _widen(
    found, rows: list, more: int, order: tuple, limit: int, count: bool, window=None
) -> tuple[list, int, bool]:
    """The exact and prefix rows `rows` (`more`: how many prefix matches are left out), then the substring
    and word matches `found` (a queryset, or None) that are not among them, in `order`: at most `limit` rows
    in all, the rest
    counted up to COUNT_CAP (the third value: the count stopped there, or did not read every row). With a
    `window` (jobs, `order` NEWEST), the window's branches are read and counted instead of `found`."""
    if found is None:
        return rows, more, len(rows) + more >= COUNT_CAP

    def read(queryset, n: int) -> list:
        return window.read(n) if window else list(queryset.order_by(*order)[:n])

    if len(rows) < limit:
        seen = {row.pk for row in rows}
        fetched = read(found, limit + len(seen) + 1)
        extra = [row for row in fetched if row.pk not in seen]
        room = limit - len(rows)
        rows = [*rows, *extra[:room]]
        if len(fetched) <= limit + len(seen):  # every match read is here: the rest needs no count
            # ... and "at least" when older jobs were not searched (the windows' matches are all here: no
            # branch's read filled a page).
            unread = window is not None and window.unsearched_before is not None
            return rows, max(0, len(extra) - room), unread
    if not count:
        return rows, 0, False
    total, partial = window.count(limit) if window else (_count(found), False)
    more = max(more, total - len(rows))
    return rows, more, partial or len(rows) + more >= COUNT_CAP


def _gpu_uuid(q: str) -> str:
    lower = q.lower()
    return "GPU-" + lower[4:] if lower.startswith("gpu-") else "GPU-" + lower


def _could_be_uuid_prefix(canonical: str) -> bool:
    """Whether any GPU UUID ("GPU-" + lower-case hex and dashes) can start with `canonical`."""
    return UUID_TAIL.match(canonical[4:]) is not None


def _gpu_exact(q: str) -> Q:
    """The GPU `q` names: its UUID (indexed), its serial when `q` looks like one (SERIAL), or one of its MIG
    devices' UUIDs ("MIG-...", the unique index on the lower-cased UUID)."""
    condition = Q(uuid=_gpu_uuid(q))
    if SERIAL.match(q):
        condition |= Q(serial__in={q, q.upper()})
    if q.lower().startswith("mig-"):
        devices = MigDevice.objects.annotate(lowered=Lower("uuid")).filter(lowered=q.lower())
        condition |= Q(pk__in=devices.values("gpu_id"))
    return condition


def _gpu_inside(q: str) -> Q | None:
    """GPUs with `q` inside their UUID (a hex fragment: "3fa9c", "-4e1b-") or their serial (a fragment of
    letters and digits with a digit); None for a query that can be in neither."""
    fragment = q.lower().removeprefix("gpu-")
    conditions = []
    if len(fragment) >= MIN_SUBSTRING and UUID_TAIL.match(fragment):
        conditions.append(Q(uuid__icontains=fragment))
    if SERIAL_FRAGMENT.match(q):
        conditions.append(Q(serial__icontains=q))
    return reduce(operator.or_, conditions) if conditions else None


def _gpus(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    gpus = Gpu.objects.visible_to(user).select_related("tray").order_by("uuid")
    canonical = _gpu_uuid(q)
    exact = gpus.filter(_gpu_exact(q)).first() if look_exact else None
    group = Group("gpu", _("GPUs"))
    found = _matching(gpus, _gpu_inside(q))  # holds the prefix matches too: its count is theirs
    if _could_be_uuid_prefix(canonical):
        rows, group.more = _bounded(gpus.filter(_prefix("uuid", canonical)), limit, count and found is None)
    else:  # "gb-r01", "train-llm": no UUID starts so, no query
        rows = []
    if exact is not None and all(row.pk != exact.pk for row in rows):
        rows = [exact, *rows[: limit - 1]]
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, ("uuid",), limit, count)
    for gpu in rows:
        where = f"{gpu.tray.hostname} · GPU {gpu.index}" if gpu.tray else _("removed from its tray")
        details = [Detail(where)]
        if gpu.serial:  # a searched field: a GPU found by it shows it marked
            details.append(Detail(_("serial %(serial)s") % {"serial": gpu.serial}, gpu.serial))
        group.hits.append(Hit(gpu.uuid, reverse("inventory:gpu-detail", args=[gpu.pk]), tuple(details)))
    return group, reverse("inventory:gpu-detail", args=[exact.pk]) if exact else None


def _trays(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    trays = ComputeTray.objects.visible_to(user).select_related("rack").order_by("hostname")
    lower = q.lower()
    group = Group("tray", _("Compute trays"))
    found = _matching(trays, _substring(("hostname",), lower))
    rows, group.more = _bounded(trays.filter(_prefix("hostname", lower)), limit, count and found is None)
    exact = next((t for t in rows if t.hostname == lower), None)
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, ("hostname",), limit, count)
    guid = lower if lower.startswith("0x") else "0x" + lower
    by_guid = []
    if GUID.match(lower) or GUID_PREFIX.match(lower):
        # Not indexed (a JSON list per tray): only for a query that looks like a GUID.
        by_guid = list(trays.filter(ib_port_guids__icontains=guid)[:limit])
        if len(by_guid) == 1 and guid in [str(g).lower() for g in by_guid[0].ib_port_guids or []]:
            exact = exact or by_guid[0]
        rows = [*rows, *(t for t in by_guid if t not in rows)][:limit]
    for tray in rows:
        details = [Detail(_("%(rack)s · slot %(slot)s") % {"rack": tray.rack.name, "slot": tray.slot})]
        if tray in by_guid:  # found by an IB port GUID: the ports that hold the query, marked
            for port in (str(g) for g in tray.ib_port_guids or []):
                if guid in port.lower():
                    details.append(Detail(_("IB port %(guid)s") % {"guid": port}, port))
        url = reverse("inventory:tray-detail", args=[tray.pk])
        group.hits.append(Hit(tray.hostname, url, tuple(details)))
    return group, reverse("inventory:tray-detail", args=[exact.pk]) if exact else None


def _racks(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    racks = Rack.objects.visible_to(user).order_by("name")
    group = Group("rack", _("Racks"))
    exact = racks.filter(name__in={q, q.lower()}).first() if look_exact else None
    try:
        cluster = uuid.UUID(q) if look_exact else None
    except ValueError:
        cluster = None
    if cluster is not None:
        exact = exact or racks.filter(cluster_uuid=cluster).first()
    fields = ("name", "location")
    found = _matching(racks, _substring(fields, q))
    rows, group.more = _bounded(racks.filter(_prefix("name", q.lower())), limit, count and found is None)
    if exact is not None and exact not in rows:
        rows = [exact, *rows[: limit - 1]]
    order = _together_first(fields, q, _alike_first(racks, fields, q, ("name",)))
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, order, limit, count)
    for rack in rows:
        # Its location (a rack found by it shows what matched); its cluster UUID when it has no location or
        # the query named that cluster.
        details = [Detail(rack.location, rack.location)] if rack.location else []
        if rack.cluster_uuid and (not details or rack.cluster_uuid == cluster):
            value = str(rack.cluster_uuid)
            details.append(Detail(_("cluster %(uuid)s") % {"uuid": value}, value))
        group.hits.append(Hit(rack.name, reverse("scheduling:rack-detail", args=[rack.name]), tuple(details)))
    return group, reverse("scheduling:rack-detail", args=[exact.name]) if exact else None


def _job_named(user, q: str) -> str | None:
    """The job whose whole name is `q` when exactly one visible job has it (at most two rows read)."""
    jobs = list(Job.objects.visible_to(user).filter(name=q).order_by().values_list("pk", flat=True)[:2])
    return reverse("scheduling:job-detail", args=[jobs[0]]) if len(jobs) == 1 else None


def _job_number(text: str) -> bool:
    """Whether `text` is a job number: ASCII digits that fit the id column ("¹" and "٣" are digits to
    str.isdigit(), and "¹" is no number to int())."""
    return text.isascii() and text.isdigit() and len(text) < 19


def _same_name_note(q: str, same_name: int, at_least: bool) -> str:
    """The sentence above jobs that share the name searched for."""
    if at_least:
        note = _("At least %(n)s jobs are named %(name)s: they are listed first, newest first.")
    else:
        note = _("%(n)s jobs are named %(name)s: they are listed first, newest first.")
    return note % {"n": same_name, "name": repr(q)}


def job_where(job) -> str:
    """A job's department and project, "Research / Default", as the jobs list's two columns read; a job
    that names no project (the department's own work) says so: one shape for every job."""
    if job.project_id:
        names = {"department": job.department.name, "project": job.project.name}
        return _("%(department)s / %(project)s") % names
    return _("%(department)s / no project") % {"department": job.department.name}


def _job_details(job, by_submitter: bool = False) -> tuple[Detail, ...]:
    """Where a job found is, its state, its GPUs and who submitted it (as the jobs list: "by bob"); a job
    found by its submitter's username says so, "submitted by bob", the matched part marked."""
    details = [
        Detail(
            ngettext("%(where)s · %(state)s · %(n)s GPU", "%(where)s · %(state)s · %(n)s GPUs", job.gpus)
            % {"where": job_where(job), "state": job.get_state_display(), "n": job.gpus}
        )
    ]
    if job.submitted_by_id:
        who = job.submitted_by.get_username()
        if by_submitter:
            details.append(Detail(_("submitted by %(who)s") % {"who": who}, who))
        else:
            details.append(Detail(_("by %(who)s") % {"who": who}))
    return tuple(details)


@dataclass
class Submitters:
    """The accounts whose username starts with the query (`starting`), holds it or each of its words as rank
    3 reads a name (`holding`: none for a query without a word of MIN_SUBSTRING) and, for a query of several
    words, those holding each word (`by_word`, every word of _words() a key: "sweep alice" finds alice's
    jobs named *sweep*), as ids."""

    starting: list[int]
    holding: list[int] = field(default_factory=list)
    by_word: dict[str, list[int]] = field(default_factory=dict)

    def ids(self) -> set[int]:
        return {*self.starting, *self.holding, *(pk for ids in self.by_word.values() for pk in ids)}


def _submitters(user, q: str) -> Submitters:
    """The accounts that may have submitted the jobs `q` names (see Submitters), each narrowed to the
    accounts that submitted a job `user` may see (one index probe each: the index on submitter and
    department); one query for those that start with `q`, one for those holding it or its words. Without
    that, an account with no such job (a person of another department, someone who never submitted) made
    the job query walk the newest-first index through every job to find none: 5-10 s for a lead at 2
    million jobs (issue 32).

    Only ever a filter on the jobs the viewer may see (`Job.objects.visible_to`): a member finds the jobs of
    their own departments by who submitted them ("by alice", as the jobs list shows) and never learns of an
    account elsewhere, as no result, count or note comes from these ids alone. The lists are read first (a
    small table, the username's trigram index) so that the job query is an `IN (ids)` on the index of
    scheduling_job.submitted_by_id, which PostgreSQL can OR with the name's indexes."""
    users = _submitted_where_seen(user)
    found = Submitters(list(users.filter(username__istartswith=q).values_list("pk", flat=True)))
    condition = _substring(("username",), q)
    words = _words(q)
    if condition is None:
        return found
    if len(words) == 1:
        found.holding = list(users.filter(condition).values_list("pk", flat=True))
        return found
    # One query for every word: each account with whether it holds the whole query and each word.
    name = ("username",)
    marks = {
        f"word_{n}": ExpressionWrapper(_word(name, word), BooleanField()) for n, word in enumerate(words)
    }
    rows = list(
        users.filter(reduce(operator.or_, (_word(name, word) for word in words)))
        .annotate(whole=ExpressionWrapper(_inside(name, q), BooleanField()), **marks)
        .values_list("pk", "whole", *marks)
    )
    found.holding = [pk for pk, whole, *held in rows if whole or all(held)]
    found.by_word = {word: [row[0] for row in rows if row[2 + n]] for n, word in enumerate(words)}
    return found


def _submitted_where_seen(user):
    """The accounts that submitted a job `user` may see: per account, one look into an index for the newest
    such job's time (in each of the viewer's departments: the index on (submitter, department, created_at);
    for a platform admin, any job: the index on (submitter, created_at, id)).

    Each look is a scalar subquery (`(SELECT created_at ... ORDER BY created_at DESC LIMIT 1) IS NOT NULL`)
    in the order its index gives. An EXISTS is turned into a semi join, and an unordered probe may be read by
    a sequential scan the planner expects to stop at once (it expects each of a few submitters in every
    department): at 21 million jobs both read the whole table for an account with no job there (2 s for a
    lead's "heidi" and for an admin's "bench", issue 32). In the index's order the look reads one entry, or
    none; it runs after the cheaper username conditions. For a lead the departments are a list, one look
    each (with visible_to's subquery alone, PostgreSQL read every job of the lead's department for an
    account with none there: 400 ms at 2 million jobs for "frank", "embed grace")."""
    submitted = Job.objects.visible_to(user).filter(submitted_by=OuterRef("pk")).order_by("-created_at")
    if is_admin(user):
        looks = [submitted]
    else:
        departments = Department.objects.visible_to(user).order_by("pk").values_list("pk", flat=True)
        looks = [submitted.filter(department_id=department) for department in departments]
    if not looks:
        return get_user_model().objects.none()
    marks = {f"newest_{n}": Subquery(look.values("created_at")[:1]) for n, look in enumerate(looks)}
    seen = reduce(operator.or_, (Q(**{f"{mark}__isnull": False}) for mark in marks))
    return get_user_model().objects.order_by().alias(**marks).filter(seen)


def _job_fields(jobs, walked: bool = False):
    """`jobs` with the two fields rank 3 reads, `job_name` and `job_by` (its submitter): the columns
    themselves, which the trigram and submitter indexes are on; or, `walked`, the same values in a form no
    index is on, so that PostgreSQL reads a Window's newest jobs in the order of the index on (created_at,
    id) and stops at the first matches (given the indexes, it intersected their lists of 200,000 jobs:
    45 ms where the walk takes 1)."""
    if walked:
        return jobs.alias(
            job_name=Concat("name", Value("")),
            job_by=ExpressionWrapper(F("submitted_by_id") + 0, output_field=IntegerField()),
        )
    return jobs.alias(job_name=F("name"), job_by=F("submitted_by_id"))


def _job_matches(q: str, submitters: Submitters) -> list[Branch] | None:
    """Rank 3 of the jobs, as conditions on _job_fields() (None for a query too short), any of which a job
    matches: `q` inside the name, or each of its words in the name (the first Branch); or in the submitter's
    username (`submitters`), each set of submitters its own Branch. They come newest first, as ever: no
    closer ones before the others, which would read the jobs twice.

    The words in a username are written per submitter: "sweep alice" is alice's jobs with "sweep" in their
    name, read from alice's own jobs newest first (written as "each word in the name or in the username",
    PostgreSQL read every job of alice's to check their names: 260 ms at 2 million jobs, against 50 ms)."""
    name = ("job_name",)
    in_name = _substring(name, q)
    if in_name is None:
        return None
    branches = [Branch(in_name, parts=_required_parts(q))]
    if submitters.holding:
        branches.append(Branch(Q(job_by__in=sorted(submitters.holding)), by_submitter=True))
    held: dict[int, set[str]] = {}  # each submitter: the words of `q` their username holds
    for word, ids in submitters.by_word.items():
        for pk in ids:
            held.setdefault(pk, set()).add(word)
    by_words: dict[frozenset[str], list[int]] = {}
    for pk, words in held.items():
        if len(words) < len(submitters.by_word):  # (holding every word: in `holding`)
            by_words.setdefault(frozenset(words), []).append(pk)
    for words, ids in by_words.items():
        in_name_too = [_word(name, word) for word in submitters.by_word if word not in words]
        branches.append(
            Branch(reduce(operator.and_, in_name_too, Q(job_by__in=sorted(ids))), by_submitter=True)
        )
    return branches


def _jobs(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    """Jobs by number, by the start of their name or of their submitter's username (those named exactly `q`
    first), then by a part or the words of either, each newest first (see _submitters: a member finds
    "alice"'s jobs that they may see, and only those). The exact URL is the job number's only: a job's name
    comes last among exact matches (search() asks _job_named).

    Each rank is its own query in the jobs' newest-first order, which the index on (created_at, id) gives:
    a name shared by a tenth of a year's jobs is read from the newest until LIMIT match, not sorted whole.
    """
    jobs = Job.objects.visible_to(user).select_related("department", "project", "submitted_by")
    group = Group("job", _("Jobs"))
    number = q.removeprefix("#")
    by_number = look_exact and _job_number(number)
    exact = jobs.filter(pk=int(number)).first() if by_number else None
    named = list(jobs.filter(name=q).order_by(*NEWEST)[: limit + 1])  # the index on the name
    submitters = _submitters(user, q)
    branches = _job_matches(q, submitters)
    window = Window.of_jobs(jobs, branches) if branches is not None else None
    # Through a window, its branches are read one by one (Window.read); else as one condition.
    found = _matching(_job_fields(jobs), _either(branches)) if branches is not None else None
    starting, group.more = _bounded(
        jobs.filter(Q(name__istartswith=q) | Q(submitted_by_id__in=submitters.starting)).order_by(*NEWEST),
        limit,
        count and found is None,
    )
    rows = [*named, *(job for job in starting if job.name != q)][:limit]
    group.more = max(0, len(starting) + group.more - len(rows))  # the named jobs start with it too
    if exact is not None and exact not in rows:
        rows = [exact, *rows[: limit - 1]]
    same_name = sum(1 for job in rows if job.name == q)
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, NEWEST, limit, count, window)
    if same_name > 1:
        group.note = _same_name_note(q, same_name, at_least=len(named) > same_name)
    if window is not None and window.unsearched_before is not None:
        unsearched = _unsearched_note(window.unsearched_before, window.unsearched_slow)
        group.note = " ".join(filter(None, (group.note, unsearched)))
    group.hits += _job_hits(rows, submitters.ids())
    return group, reverse("scheduling:job-detail", args=[exact.pk]) if exact else None


def _unsearched_note(before, slow: bool = False) -> str:
    """The sentence above jobs whose older ones were not read (Window.unsearched_before: `before`; `slow`:
    their read was stopped for its time, OLDER_READ_MS)."""
    when = formats.date_format(timezone.localtime(before), "SHORT_DATETIME_FORMAT")
    if slow:
        return _(
            "Jobs created before %(when)s were not searched: reading them took longer than this search may "
            "take. Add a rarer word (the number in a job's name, a username) to search them."
        ) % {"when": when}
    return _(
        "Jobs created before %(when)s were not searched: every word of this query is in too many of their "
        "names to check them all. Add a rarer word (the number in a job's name, a username) to search them."
    ) % {"when": when}


def _job_hits(rows, by_submitter) -> list[Hit]:
    """The found jobs as hits, each saying when it was found by its submitter (`by_submitter`: their ids)."""
    return [
        Hit(
            f"#{job.pk} {job.name}",
            reverse("scheduling:job-detail", args=[job.pk]),
            _job_details(job, by_submitter=job.submitted_by_id in by_submitter),
            name=job.name,
        )
        for job in rows
    ]


def _departments(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    departments = Department.objects.visible_to(user).order_by("name")
    group = Group("department", _("Departments"))
    fields = ("name", "slug")
    found = _matching(departments, _substring(fields, q))
    starting = departments.filter(Q(name__istartswith=q) | Q(slug__istartswith=q))
    rows, group.more = _bounded(starting, limit, count and found is None)
    order = _together_first(fields, q, _alike_first(departments, fields, q, ("name",)))
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, order, limit, count)
    for department in rows:
        group.hits.append(
            Hit(
                department.name,
                reverse("scheduling:department-detail", args=[department.slug]),
                (Detail(department.slug, department.slug),),
            )
        )
    exact = next((d for d in rows if q.lower() in (d.name.lower(), d.slug.lower())), None)
    return group, reverse("scheduling:department-detail", args=[exact.slug]) if exact else None


def _project_url(department_slug: str, project_slug: str) -> str:
    """A project's place: its row in its department page's projects panel."""
    return f"{reverse('scheduling:department-detail', args=[department_slug])}#project-{project_slug}"


def _namespace_q(q: str, exact: bool) -> Q:
    """Projects whose namespace / Slurm account (`<department slug>--<project slug>`, tenancy.naming) is
    `q` (`exact`) or starts with it. The `--` splits it in exactly one place (no slug holds `--`); nothing
    for a query without it. `research--` (not exact): all of its projects."""
    department, separator, project = q.lower().partition(naming.SEPARATOR)
    if not separator or not department or (exact and not project):
        return Q(pk__in=[])
    # A default project runs as its department (tenancy.Project.namespace): it has no `--` name.
    return Q(
        department__slug=department,
        is_default=False,
        **({"slug": project} if exact else {"slug__startswith": project}),
    )


def _project_named(user, q: str) -> str | None:
    """The project whose name, slug or namespace / Slurm account is `q` (any case) when exactly one visible
    project has it (a slug is unique per department only); at most two rows read."""
    found = list(
        Project.objects.visible_to(user)
        .filter(Q(name__iexact=q) | Q(slug=q.lower()) | _namespace_q(q, exact=True))
        .order_by()
        .values_list("department__slug", "slug")[:2]
    )
    return _project_url(*found[0]) if len(found) == 1 else None


def _projects(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    projects = (
        Project.objects.visible_to(user).select_related("department").order_by("department__name", "name")
    )
    group = Group("project", _("Projects"))
    rows, group.more = _bounded(
        projects.filter(
            Q(name__istartswith=q) | Q(slug__istartswith=q.lower()) | _namespace_q(q, exact=False)
        ),
        limit,
        count,
    )
    fields = ("name", "slug")
    found = _matching(projects, _substring(fields, q))  # not every namespace prefix match: both counted
    order = _together_first(fields, q, _alike_first(projects, fields, q, ("department__name", "name")))
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, order, limit, count)

    def by_namespace(project) -> tuple[Detail, ...]:
        """Its namespace / Slurm account, when the query is one (`research--llm`): the field it matched."""
        if naming.SEPARATOR not in q or project.is_default:
            return ()
        return (Detail(_("namespace %(name)s") % {"name": project.namespace}, project.namespace),)

    for project in rows:
        group.hits.append(
            Hit(
                f"{project.department.name} / {project.name}",
                _project_url(project.department.slug, project.slug),
                (Detail(project.slug, project.slug), *by_namespace(project)),
                name=project.name,
            )
        )
    return group, _project_named(user, q) if look_exact else None


def visible_users(user):
    """The accounts `user` may find: everyone for platform admins; else themselves and the people of the
    departments they belong to (the memberships `Membership.objects.visible_to` shows them)."""
    users = get_user_model().objects.all()
    if is_admin(user):
        return users
    return users.filter(
        Q(pk=user.pk) | Q(pk__in=Membership.objects.visible_to(user).values("user_id"))
    ).distinct()


def _users(user, q: str, look_exact: bool = True, limit: int = LIMIT, count: bool = True):
    group = Group("user", _("Users"))
    users = visible_users(user).order_by("username")
    fields = ("username", "first_name", "last_name")
    texts = ("username", ("first_name", "last_name"))  # "jane smith": her full name first
    found = _matching(users, _substring(texts, q))
    rows, group.more = _bounded(users.filter(username__istartswith=q), limit, count and found is None)
    order = _together_first(texts, q, _alike_first(users, fields, q, ("username",)))
    rows, group.more, group.more_at_least = _widen(found, rows, group.more, order, limit, count)
    can_open_admin = is_admin(user) and user.is_staff and user.has_perm("auth.view_user")
    memberships = {}
    if rows and not can_open_admin:
        for membership in (
            Membership.objects.visible_to(user).filter(user__in=rows).select_related("department")
        ):
            memberships.setdefault(membership.user_id, membership.department)
    for found in rows:
        if can_open_admin:
            url = reverse("admin:auth_user_change", args=[found.pk])
        elif found.pk in memberships:
            url = reverse("scheduling:department-detail", args=[memberships[found.pk].slug])
        else:
            url = reverse("personal-tokens") if found.pk == user.pk else ""
        name = found.get_full_name()
        group.hits.append(Hit(found.get_username(), url, (Detail(name, name),) if name else ()))
    return group, None


SEARCHES = (_gpus, _trays, _racks, _jobs, _departments, _projects, _users)
# The kinds in the order their groups are shown when their best hits rank alike (by_rank): a container before
# its parts (the rack gb-r03 before its trays gb-r03-t01..., a tray before its GPUs).
SHOWN = ("rack", "tray", "gpu", "job", "department", "project", "user")


def by_rank(groups: list[Group], q: str) -> list[Group]:
    """`groups` with those whose best hit is the exact name first, then those with a name starting with `q`,
    then those that only hold it (in SHOWN's order among equals): for "r03" the rack gb-r03 before its
    trays; for "alice" the person alice before the jobs she submitted."""
    return sorted(
        groups,
        key=lambda group: (min((hit.rank(q) for hit in group.hits), default=2), SHOWN.index(group.kind)),
    )


def exact_url(user, q: str) -> str | None:
    """The URL of the one object `q` names exactly, in the order search() picks it (GPU UUID or serial, tray
    hostname or IB port GUID, rack name or cluster UUID, job id, department name or slug, the one project
    with that name or slug, the one job with that whole name), or None.

    The fast path of the search page: a query naming an object answers with its redirect after one or two
    indexed lookups, without searching every kind (see search() for the grouped results).
    """
    for lookup in EXACT_LOOKUPS:
        url = lookup(user, q)
        if url:
            return url
    return None


def _exact_gpu(user, q: str) -> str | None:
    # order_by("pk"): .first() would otherwise sort by the model's order, a join with the racks.
    gpus = Gpu.objects.visible_to(user).filter(_gpu_exact(q)).order_by("pk")
    gpu = gpus.values_list("pk", flat=True).first()
    return reverse("inventory:gpu-detail", args=[gpu]) if gpu is not None else None


def _exact_tray(user, q: str) -> str | None:
    lower = q.lower()
    trays = ComputeTray.objects.visible_to(user)
    tray = trays.filter(hostname=lower).order_by("pk").values_list("pk", flat=True).first()
    if tray is not None:
        return reverse("inventory:tray-detail", args=[tray])
    if GUID.match(lower) or GUID_PREFIX.match(lower):
        return _trays(user, q)[1]  # the GUID rules live there
    return None


def _exact_rack(user, q: str) -> str | None:
    racks = Rack.objects.visible_to(user).order_by("name")
    rack = racks.filter(name__in={q, q.lower()}).values_list("name", flat=True).first()
    if rack is None:
        try:
            rack = racks.filter(cluster_uuid=uuid.UUID(q)).values_list("name", flat=True).first()
        except ValueError:
            rack = None
    return reverse("scheduling:rack-detail", args=[rack]) if rack is not None else None


def _exact_job(user, q: str) -> str | None:
    number = q.removeprefix("#")
    if not _job_number(number):
        return None
    job = Job.objects.visible_to(user).filter(pk=int(number)).values_list("pk", flat=True).first()
    return reverse("scheduling:job-detail", args=[job]) if job is not None else None


def _exact_department(user, q: str) -> str | None:
    department = (
        Department.objects.visible_to(user)
        .filter(Q(name__iexact=q) | Q(slug__iexact=q))
        .order_by("name")
        .values_list("slug", flat=True)
        .first()
    )
    return reverse("scheduling:department-detail", args=[department]) if department else None


# exact_url()'s lookups, in search()'s order: a job's name last (it is anyone's to choose).
EXACT_LOOKUPS = (
    _exact_gpu,
    _exact_tray,
    _exact_rack,
    _exact_job,
    _exact_department,
    _project_named,
    _job_named,
)


def search(user, q: str, look_exact: bool = True) -> Results:
    """Every kind's bounded results for the cleaned query `q` (see clean()), and the exact match's URL.
    `look_exact=False` skips the lookups for an exact match (the caller knows there is none: exact_url)."""
    groups, exact = [], None
    for kind in SEARCHES:
        group, url = kind(user, q, look_exact)
        exact = exact or url
        if group.hits or group.note:  # (a note with no hits: jobs that were not searched)
            groups.append(group)
    if look_exact and exact is None:
        exact = _job_named(user, q)  # a job's name last: it is anyone's to choose
    return Results(query=q, groups=by_rank(groups, q), exact=exact)


# ---------------------------------------------------------------------------------------------- the page


def search_page(request):
    """`/search/?q=`: the results grouped by kind, a 302 to the object on an exact match, the page with a
    hint when the query is empty, and 400 (in words) when it is too long."""
    raw = request.GET.getlist("q")
    try:
        q = clean(raw[-1] if raw else "")
    except QueryTooLong as error:
        return render(request, "portal/search.html", {"q": "", "error": str(error)}, status=400)
    if not q:
        return render(request, "portal/search.html", {"q": ""})
    if request.GET.get("all") != "1":
        url = exact_url(request.user, q)
        if url:
            return redirect(url)
        results = search(request.user, q, look_exact=False)  # none to find: exact_url looked
    else:
        results = search(request.user, q)
    if results.exact and request.GET.get("all") != "1":
        return redirect(results.exact)
    short = not any(len(word) >= MIN_SUBSTRING for word in q.split())
    return render(
        request,
        "portal/search.html",
        {"q": q, "results": results, "limit": LIMIT, "short": short, "min_substring": MIN_SUBSTRING},
    )


def suggestions(user, q: str) -> list[Group]:
    """The header box's typeahead: each kind's first SUGGEST_LIMIT results for the cleaned query `q`, in
    search()'s ranks, with nothing counted and only the hits that have a page (a person one may not open
    is left out)."""
    groups = []
    for kind in SEARCHES:
        group, _exact = kind(user, q, True, SUGGEST_LIMIT, False)
        group.hits = [hit for hit in group.hits if hit.url]
        group.more, group.note = 0, ""
        if group.hits:
            groups.append(group)
    return by_rank(groups, q)


@require_safe
def suggest(request):
    """`/search/suggest/?q=`: the list under the header box as one types (an HTML fragment that
    static/portal/search.js places; it never writes). An empty query: an empty list; a query over MAX_QUERY
    characters: 400 with the sentence why."""
    raw = request.GET.getlist("q")
    try:
        q = clean(raw[-1] if raw else "")
    except QueryTooLong as error:
        return HttpResponse(str(error), status=400, content_type="text/plain; charset=utf-8")
    groups = suggestions(request.user, q) if q else []
    return render(request, "portal/_search_suggest.html", {"q": q, "groups": groups})
