"""Global search latency (portal/pages/search.py) for `benchmarks/scale.py --only search` (in `make bench`).

Each query goes through Django's full request stack in-process (middleware, auth, the view, the template,
the ORM, the database), as the pages part measures: `GET /search/?q=...`, answered with a redirect on an
exact match or with the grouped results. Five kinds of query, each `requests` times with different values
drawn from the seeded inventory, as a platform admin (sees everything: the largest result sets) and as a
department lead (every kind narrowed by `visible_to`):

* gpu_uuid: a whole GPU UUID (exact: a redirect to the GPU);
* tray_hostname: a whole tray hostname (exact: a redirect to the tray);
* rack_partial: the start of a rack name ("gb-r012": up to ten racks and their count);
* job_name: the start of a job name;
* job_whole_name: a whole job name (a redirect when one visible job has it, else the list, those first:
  the exact name is not indexed, see portal/pages/search.py);
* project: the start of a project's name (only when the database has projects);
* user: the start of a username;
* submitter: a whole username of a person who submitted jobs (the history gives each department's lead
  half its jobs: a prolific submitter's, and the rest to its members), which finds that person's jobs too;
* job_substring: a word from the middle of job names ("pretrain", "serve-chat": thousands of matches);
* job_words: two words of one job's name in another order ("h004217 finetune");
* job_apart: words of two different jobs' names, each in many names and never together ("pretrain chat",
  "chat-pretrain"): no job's name holds them, and at scale their older jobs are not read (the page says so);
* rack_fragment: three characters from inside rack names ("r03": racks and their trays);
* location: a rack's location without its site ("hall B row 12 pos 04") and a part of it ("row 12 pos");
* rack_across: words of a rack's location and its name ("hall B gb-r012"): each word in another field;
* job_across: a word of a job's name and its submitter's username ("sweep alice", "h004217 alice"): the
  common word of a tenth of the jobs, or the rare number of one;
* serial_fragment: seven digits from inside a GPU serial;
* uuid_fragment: eight hex digits from inside a GPU UUID;
* typeahead: `GET /search/suggest/?q=` (the header box's list) with the parts above and the prefixes.

Each kind's figures: p50, p95 and max in ms, the requests, how many redirected to an object
(`exact_redirects`) and how many found nothing the viewer may see (`no_results`).

Before measuring, a year of finished jobs is added (seed_job_history: the rate the seeded fleet runs jobs at,
2.1 million at 1,000 racks), so that the job searches read a table of the size a site keeps, and the
parts measured after search see them too.

The figure the product aims at: p95 under 100 ms for every kind at 1,000 racks (SEARCH_GOAL_MS).
"""

from __future__ import annotations

import random
import statistics
import sys
import time

SEARCH_GOAL_MS = 100
HISTORY_DAYS = 365
# Job ids reserved per rack before the tenants' jobs are seeded (reserve_history_ids): a year at the seeded
# fleet's rate is ~2,120 jobs per rack (history_size), so the year's ids fit below the running jobs' ones.
HISTORY_IDS_PER_RACK = 3000
KINDS = (
    "gpu_uuid",
    "tray_hostname",
    "rack_partial",
    "job_name",
    "job_whole_name",
    "project",
    "user",
    "submitter",
    "job_substring",
    "job_words",
    "job_apart",
    "rack_fragment",
    "location",
    "rack_across",
    "job_across",
    "serial_fragment",
    "uuid_fragment",
)
TYPEAHEAD = "typeahead"  # every kind's texts, through /search/suggest/
NOTHING = b"Nothing you may see matches"  # the results page's and the typeahead's words for no result


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def queries(rng: random.Random, count: int) -> dict[str, list[str]]:
    """`count` search texts per kind, drawn from the database."""
    from django.contrib.auth import get_user_model

    from inventory.models import ComputeTray, Gpu, Rack
    from scheduling.models import Job
    from tenancy.models import Project

    def sample(values: list[str]) -> list[str]:
        return [rng.choice(values) for _ in range(count)] if values else []

    gpu_ids = list(Gpu.objects.values_list("pk", flat=True))
    uuids = list(
        Gpu.objects.filter(pk__in=rng.sample(gpu_ids, min(count, len(gpu_ids)))).values_list(
            "uuid", flat=True
        )
    )
    tray_ids = list(ComputeTray.objects.values_list("pk", flat=True))
    hostnames = list(
        ComputeTray.objects.filter(pk__in=rng.sample(tray_ids, min(count, len(tray_ids)))).values_list(
            "hostname", flat=True
        )
    )
    racks = list(Rack.objects.values_list("name", "location"))
    jobs = list(Job.objects.order_by("?").values_list("name", flat=True)[:2000])
    submitted = list(
        Job.objects.filter(submitted_by__isnull=False)
        .order_by("?")
        .values_list("name", "submitted_by__username")[:2000]
    )
    users = list(get_user_model().objects.values_list("username", flat=True))
    submitters = list(
        get_user_model()
        .objects.filter(pk__in=Job.objects.values("submitted_by"))
        .values_list("username", flat=True)
    )
    projects = list(Project.objects.values_list("name", flat=True)[:2000])
    serials = list(
        Gpu.objects.filter(pk__in=rng.sample(gpu_ids, min(count, len(gpu_ids))))
        .exclude(serial="")
        .values_list("serial", flat=True)
    )

    def words(name: str) -> str:
        """Two words of a job's name, last first ("train-finetune-h004217" -> "h004217 finetune")."""
        parts = name.split("-")
        return f"{parts[-1]} {parts[-2]}" if len(parts) > 1 else name

    def location(text: str) -> str:
        """A rack's location without the site, or a part of it: "hall B row 12 pos 04", "row 12 pos"."""
        parts = text.split()[1:]
        return " ".join(parts if rng.random() < 0.5 else parts[2:5])

    def across(name: str, username: str) -> str:
        """A word of a job's name (its kind or its number) and who submitted it: "sweep alice"."""
        parts = name.split("-")
        return f"{rng.choice(parts[1:]) if len(parts) > 1 else name} {username}"

    def apart(first: str, second: str) -> str:
        """The last word before the number of each of two names, joined by a space or a dash ("pretrain chat",
        "chat-pretrain"): words of different jobs."""
        a, b = (name.split("-")[-2] if name.count("-") >= 2 else name for name in (first, second))
        return f"{a}{rng.choice(' -')}{b}"

    rack_names = [name for name, _ in racks]
    texts = {
        "gpu_uuid": sample(uuids),
        "tray_hostname": sample(hostnames),
        "rack_partial": [name[:-1] for name in sample(rack_names)],
        "job_name": [name[: max(3, len(name) // 2)] for name in sample(jobs)],
        "job_whole_name": sample(jobs),
        "project": [name[: max(2, len(name) // 2)] for name in sample(projects)],
        "user": [name[: max(2, len(name) // 2)] for name in sample(users)],
        "submitter": sample(submitters),
        "job_substring": [name.split("-")[1] for name in sample([j for j in jobs if j.count("-") >= 2])],
        "job_words": [words(name) for name in sample(jobs)],
        "job_apart": [apart(first, second) for first, second in zip(sample(jobs), sample(jobs), strict=True)],
        "rack_fragment": [name[3:6] for name in sample(rack_names)],
        "location": [location(text) for text in sample([loc for _, loc in racks if loc])],
        "rack_across": [
            " ".join([*loc.split()[1:3], name]) for name, loc in sample([r for r in racks if r[1]])
        ],
        "job_across": [across(name, username) for name, username in sample(submitted)],
        "serial_fragment": [serial[3:10] for serial in sample(serials)],
        "uuid_fragment": [uuid[13:21] for uuid in sample(uuids)],
    }
    mixed = [text for kind in KINDS for text in texts[kind] if kind not in ("gpu_uuid", "tray_hostname")]
    texts[TYPEAHEAD] = [rng.choice(mixed) for _ in range(count)] if mixed else []
    return texts


def reserve_history_ids(racks: int, count: int | None = None) -> None:
    """PostgreSQL, before the tenants' jobs are seeded: start the job ids past room for a year of finished
    jobs (`count`, else HISTORY_IDS_PER_RACK per rack), which seed_job_history then puts below the running
    jobs' ids, as a site that ran for a year has them (ids grow with time: its running jobs are its newest).
    Loaded above them instead, the year would sit where the running jobs should, and the planner's estimates
    for joins over the running jobs' ids would be those of no real site."""
    from django.db import connection

    from scheduling.models import Job

    if connection.vendor != "postgresql":
        return
    room = racks * HISTORY_IDS_PER_RACK if count is None else count
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [Job._meta.db_table, max(1, room)]
        )


def seed_job_history(days: int = HISTORY_DAYS, count: int | None = None) -> int:
    """`count` finished jobs (by default a year's: history_size) spread over the last `days`, in every
    department, named as the demo names its jobs plus a number (`train-pretrain-h000042`), submitted by the
    department's people (its lead half of them, a prolific submitter; its members the rest). The database
    makes them (one INSERT ... SELECT over a generated series); the search's trigram index on job names is
    dropped first and built again after, much faster than growing it row by row. Their ids are below every
    job's there when reserve_history_ids left room (older jobs, smaller ids), else the next ones. Returns the
    number."""
    from django.db import connection
    from django.db.models import Min

    from core.access import Role
    from portal.demo.jobs import KINDS as DEMO_KINDS
    from portal.demo.jobs import NAME_PREFIX
    from portal.pages import search_indexes
    from scheduling import pass_cache
    from scheduling.choices import JobState
    from scheduling.models import Job
    from scheduling.usage import roll_up_usage
    from tenancy.models import Department, Membership

    count = history_size(days) if count is None else count
    departments = list(Department.objects.order_by("pk").values_list("pk", flat=True))
    if not count or not departments:
        return 0
    shapes = [(cls, f"{NAME_PREFIX[cls]}-{kind}-h") for cls, kinds in DEMO_KINDS.items() for kind in kinds]
    template = Job(department_id=departments[0], name="", gpus=4)
    leads: dict[int, list[str]] = {pk: [] for pk in departments}
    members: dict[int, list[str]] = {pk: [] for pk in departments}
    for department, user, role in Membership.objects.order_by("pk").values_list("department", "user", "role"):
        (leads if role == Role.LEAD else members)[department].append(str(user))
    people = {pk: leads[pk] * max(1, len(members[pk])) + members[pk] for pk in departments}
    made = {  # column -> SQL over the series' `i`
        "department_id": _case(f"i %% {len(departments)}", [str(pk) for pk in departments]),
        "name": _case(f"i %% {len(shapes)}", [f"'{prefix}'" for _, prefix in shapes]) + " || number",
        "priority_class": _case(f"i %% {len(shapes)}", [f"'{cls}'" for cls, _ in shapes]),
        "gpus": "4 * (1 + i %% 8)",
        "submitted_by_id": _case(
            f"i %% {len(departments)}",
            [
                _case(f"(i / {len(departments)}) %% {len(people[pk])}", people[pk])
                if people[pk]
                else "CAST(NULL AS INTEGER)"
                for pk in departments
            ],
        ),
        "state": _case(
            "i %% 10", [f"'{JobState.FAILED}'", f"'{JobState.CANCELLED}'"], f"'{JobState.COMPLETED}'"
        ),
    }
    step = days * 86400 / count  # seconds between two submissions
    if connection.vendor == "postgresql":
        series = "generate_series(1, %s) AS i"
        at = "now() - make_interval(secs => i * {step} + {extra})"
        made["name"] = made["name"].replace("number", "lpad(i::text, 6, '0')")
    else:
        series = (
            "(WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s) SELECT i FROM n)"
        )
        at = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || (i * {step} + {extra}) || ' seconds')"
        made["name"] = made["name"].replace("number", "substr('00000' || i, -6, 6)")
    for column, extra in (("created_at", 600), ("placed_at", 540), ("started_at", 500), ("finished_at", 0)):
        made[column] = at.format(step=step, extra=extra)
    made["updated_at"] = made["finished_at"]
    # The newest (i = 1) just below the first job there, the oldest lowest, when that leaves room.
    room = (Job.objects.aggregate(first=Min("pk"))["first"] or 1) - 1
    below = connection.vendor == "postgresql" and room >= count
    if below:
        made["id"] = f"{room + 1} - i"
    columns, values, params = [], [], []
    for field in Job._meta.concrete_fields:
        if field.primary_key and not below:
            continue
        columns.append(field.column)
        if field.attname in made:
            values.append(made[field.attname])
        else:
            values.append("%s")
            params.append(field.get_db_prep_save(getattr(template, field.attname), connection))
    params.append(count)
    trigram = connection.vendor == "postgresql" and search_indexes.has_extension(connection)
    with connection.cursor() as cursor:
        if trigram:
            cursor.execute("DROP INDEX IF EXISTS scheduling_job_name_trgm_idx")
        table = Job._meta.db_table
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {series}", params
        )
    if trigram:
        if connection.in_atomic_block:  # (a test's transaction) the new rows' deferred key checks first,
            with connection.cursor() as cursor:  # or PostgreSQL refuses the index: "pending trigger events"
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        search_indexes.create_indexes(connection, concurrently=not connection.in_atomic_block)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")  # the planner's figures for the new size
        # The pass's job log (scheduling.pass_cache) now names every loaded job: a site's passes prune it as
        # jobs come (past JOB_PRUNE_AT rows), this benchmark's passes roll back and never would. Pruned as
        # the next committed pass prunes it, then rewritten (outside a transaction only): a site whose year
        # came a job at a time never held more than JOB_PRUNE_AT rows there, where a plain VACUUM would leave
        # the load's 900 MB of empty pages (the horizon row written after the delete sits on the last one,
        # so they are never truncated), and every pass's check of the log would read them all (~300 ms).
        pass_cache.prune_job_log()
        if not connection.in_atomic_block:
            with connection.cursor() as cursor:
                cursor.execute(f"VACUUM (FULL, ANALYZE) {pass_cache.JOB_LOG}")
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {pass_cache.JOB_LOG}")
            (left,) = cursor.fetchone()
        if left > pass_cache.JOB_PRUNE_AT:  # a transaction older than the load was still open
            print(
                f"[search] the pass's job log still names {left:,} jobs after the prune (a transaction older "
                "than the load was open): the pass figures will read them at every warm pass; run "
                "scheduling.pass_cache.prune_job_log() and VACUUM FULL the log once it has ended",
                file=sys.stderr,
            )
    # The beat's next five-minute round rolls the finished jobs' decayed usage up (the fair-share history
    # the lead dashboard and the pass read; scheduling.usage.roll_up_usage): done here for the pages after.
    roll_up_usage()
    return count


def _case(over: str, values: list[str], otherwise: str | None = None) -> str:
    """SQL: the value for each remainder of `over` (`otherwise` for those past the list)."""
    whens = " ".join(f"WHEN {n} THEN {value}" for n, value in enumerate(values))
    return f"(CASE {over} {whens} ELSE {otherwise or values[0]} END)"


def history_size(days: int) -> int:
    """How many jobs the seeded fleet runs in `days`: each running job's GPUs take a new job each time its
    time limit runs out (a lower bound: many jobs end sooner)."""
    from scheduling.choices import JobState
    from scheduling.models import Job

    limits = Job.objects.filter(state=JobState.RUNNING).values_list("time_limit_minutes", flat=True)
    return round(sum(1440 / max(1, limit) for limit in limits) * days)


def _time(client, texts: list[str], path: str = "/search/") -> dict:
    client.get(path, {"q": texts[0]})  # warm the template and the connection once
    samples = []
    exact = nothing = 0
    for text in texts:
        started = time.perf_counter()
        response = client.get(path, {"q": text})
        samples.append((time.perf_counter() - started) * 1000)
        if response.status_code not in (200, 302):
            raise SystemExit(f"GET {path}?q={text} answered {response.status_code}")
        exact += response.status_code == 302
        nothing += response.status_code == 200 and NOTHING in response.content
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(_percentile(samples, 0.95), 2),
        "max_ms": round(max(samples), 2),
        "requests": len(samples),
        "exact_redirects": exact,
        "no_results": nothing,
    }


def add_job_history(count: int | None = None) -> dict:
    """`count` finished jobs added (default: a year's at the fleet's rate); what the figures say of them."""
    from scheduling.models import Job

    added = seed_job_history(count=count)
    return {"days": HISTORY_DAYS, "jobs_added": added, "jobs": Job.objects.count()}


def measure_search(
    rng: random.Random, requests: int = 60, history_jobs: int | None = None, history: dict | None = None
) -> dict:
    """Search latency per kind of query, as an admin and as a lead; `p95_ms`: the worst kind's p95.
    `history`: the finished jobs added before (add_job_history), else `history_jobs` are added first
    (default: a year's at the fleet's rate)."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from core.access import Role
    from tenancy.models import Membership

    if history is None:
        history = add_job_history(history_jobs)
    texts = queries(rng, requests)
    admin, _ = get_user_model().objects.get_or_create(
        username="bench-search-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    lead = Membership.objects.filter(role=Role.LEAD).select_related("user").order_by("pk").first()
    viewers = {"admin": admin, **({"lead": lead.user} if lead else {})}
    figures: dict = {}
    for label, user in viewers.items():
        client = Client()
        client.force_login(user)
        figures[label] = {kind: _time(client, texts[kind]) for kind in KINDS if texts[kind]}
        if texts[TYPEAHEAD]:
            figures[label][TYPEAHEAD] = _time(client, texts[TYPEAHEAD], "/search/suggest/")
    worst = max(kind["p95_ms"] for viewer in figures.values() for kind in viewer.values())
    figures["p95_ms"] = worst
    figures["job_history"] = history
    figures["goal_ms"] = SEARCH_GOAL_MS
    return figures
