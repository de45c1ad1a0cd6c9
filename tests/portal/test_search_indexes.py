"""The search's trigram indexes (portal.pages.search_indexes, migration portal 0003): on PostgreSQL each
exists as a GIN index with gin_trgm_ops on UPPER(column), and the search's own queries can use it; a role
that cannot create pg_trgm leaves a warning and a working migration; on SQLite nothing is made."""

import importlib
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.db import connection

from benchmarks.search import seed_job_history
from inventory.models import ComputeTray, Gpu, Rack
from portal.pages import search, search_indexes
from scheduling.models import Job
from tenancy.models import Project

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="pg_trgm is PostgreSQL's")

ROOT = Path(__file__).resolve().parents[2]
MIGRATION = importlib.import_module("portal.migrations.0003_search_trigram_indexes")


def index_definitions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE ANY(%s)",
            [["%_trgm_idx", "%_prefix_idx"]],
        )
        return dict(cursor.fetchall())


@postgresql_only
def test_every_index_exists_with_the_trigram_opclass_on_upper():
    definitions = index_definitions()
    assert set(definitions) == {name for name, *_ in search_indexes.INDEXES} and len(definitions) == 12
    for name, table, column, how in search_indexes.INDEXES:
        definition = definitions[name]
        if how == search_indexes.TRIGRAM:
            assert f"ON public.{table} USING gin (upper(({column})::text) gin_trgm_ops)" in definition
        else:
            assert f"ON public.{table} USING btree (upper(({column})::text) text_pattern_ops)" in definition


def plan(queryset) -> str:
    """EXPLAIN of the ORM's own SQL with sequential scans priced out: which index it can use."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    try:
        return queryset.order_by().explain()  # no ORDER BY: a b-tree read in order is no way round it
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = on")


@postgresql_only
def test_the_searchs_substring_and_prefix_lookups_can_use_the_indexes(demo_inventory):
    cases = [
        (Job.objects.filter(name__icontains="pretrain"), "scheduling_job_name_trgm_idx"),
        # A prefix: the b-tree made for it, or the trigram index (which serves a prefix as well; on a small
        # table their costs tie and the planner may take either).
        (
            Job.objects.filter(name__istartswith="train-pre"),
            "scheduling_job_name_prefix_idx|scheduling_job_name_trgm_idx",
        ),
        (Rack.objects.filter(location__icontains="hall b row 12"), "inventory_rack_location_trgm_idx"),
        (Rack.objects.filter(name__icontains="r03"), "inventory_rack_name_trgm_idx"),
        (ComputeTray.objects.filter(hostname__icontains="r03-t1"), "inventory_computetray_hostname_trgm_idx"),
        (Gpu.objects.filter(serial__icontains="4471"), "inventory_gpu_serial_trgm_idx"),
        (Gpu.objects.filter(uuid__icontains="9f3a-4c"), "inventory_gpu_uuid_trgm_idx"),
        # The exact serial, as the search asks for it (search._gpu_exact: the UUID or the serial).
        (Gpu.objects.filter(search._gpu_exact("1653220000001")), "inventory_gpu_serial_idx"),
        (Project.objects.filter(name__icontains="vision"), "tenancy_project_name_trgm_idx"),
    ]
    for queryset, indexes in cases:
        explained = plan(queryset)
        assert any(
            f" on {index}" in explained or f" using {index}" in explained for index in indexes.split("|")
        ), (
            indexes,
            explained,
        )


@postgresql_only
@pytest.mark.slow(reason="writes 20,000 jobs: beyond make test-fast's budget")
@pytest.mark.django_db(transaction=True)  # committed, so that VACUUM can set the table's visibility map
def test_a_query_of_two_common_words_never_together_does_not_walk_every_job(
    monkeypatch, department_a, department_b, lead_a, member_a, platform_admin
):
    """ "distill lead-a": a word of a tenth of the job names and the lead, who submitted half of department
    A's jobs, but none named so. PostgreSQL takes the two as independent and would walk the index on
    (created_at, id) through every job looking for the first 21 (1.6 s at 2 million jobs), or read an
    unordered count in the order of the b-tree on the name (4 s at 21 million); the search reads the words
    in the name only through the newest WINDOW and WIDER jobs that way and the older ones through the
    trigram index, and the lead's own jobs from the index on (submitter, created_at, id)
    (portal.pages.search.Window). Every job query it makes is one of those, as its plan says."""
    from django.db.models import Value
    from django.db.models.functions import Replace
    from django.test.utils import CaptureQueriesContext

    from portal.pages import search as search_module
    from portal.pages.search import search

    assert seed_job_history(count=20_000) == 20_000
    hers = Job.objects.filter(submitted_by=lead_a, name__contains="-distill-")
    assert hers.update(name=Replace("name", Value("-distill-"), Value("-dstl-"))) > 400
    assert Job.objects.filter(name__contains="-distill-").count() > 1000
    monkeypatch.setattr(search_module, "WIDER", 10_000)  # (50,000 in a site's history)
    assert search_module.WINDOW < search_module.WIDER < 20_000  # the history is longer than the windows
    with connection.cursor() as cursor:  # as autovacuum leaves a site's table of finished jobs
        cursor.execute("VACUUM ANALYZE scheduling_job")
    with CaptureQueriesContext(connection) as queries:
        result = search(lead_a, "distill lead-a", look_exact=False)
    assert not [g for g in result.groups if g.kind == "job"]
    walks, sorted_reads, submitter_reads, samples = [], 0, 0, 0
    for query in queries.captured_queries:
        sql = query["sql"]
        if not sql.startswith("SELECT") or 'FROM "scheduling_job"' not in sql:
            continue
        if ' AS "part_0"' in sql:  # the rarity sample (search._rarest): the newest RARITY_SAMPLE names
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql)
                sample_plan = "\n".join(row[0] for row in cursor.fetchall())
            assert f"LIMIT {search_module.RARITY_SAMPLE}" in sql and "Limit" in sample_plan, sample_plan
            samples += 1
            continue
        probe = sql.startswith(
            'SELECT "auth_user"'
        )  # (test_a_submitter_probe_is_one_index_look_in_its_order)
        if "LIKE UPPER('%distill%')" in sql and "ORDER BY" in sql and not probe:  # rank 3: read newest first
            sorted_reads += "DESC NULLS LAST" in sql  # the older jobs, not in the index's order
            by_submitter = f'"scheduling_job"."submitted_by_id" IN ({lead_a.pk})' in sql
            windowed = '"scheduling_job"."created_at" >=' in sql
            assert "DESC NULLS LAST" in sql or windowed or by_submitter, sql
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql)
            explained = "\n".join(row[0] for row in cursor.fetchall())
        if not probe and f'"scheduling_job"."submitted_by_id" IN ({lead_a.pk})' in sql:
            # Her own jobs, newest first, on their own: read from an index that starts with the submitter
            # (on (submitter, created_at, id) at scale), not gathered with the other branches and sorted.
            assert "DESC NULLS LAST" not in sql and " OR " not in sql.split(" WHERE ", 1)[1], sql
            assert re.search(r"Index Cond: \(\(?submitted_by_id = ", explained), explained
            submitter_reads += 1
        lines = explained.splitlines()
        for at, line in enumerate(lines):
            if "Index Scan Backward using scheduling_job_created_idx" in line:
                bounded = any("Index Cond: (created_at >=" in below for below in lines[at + 1 : at + 3])
                if not bounded:
                    walks.append(explained)
            if "using scheduling_job_name_idx" in line and "Filter" in "".join(lines[at + 1 : at + 3]):
                walks.append(explained)  # a count read in the name's order
    assert not walks, walks[0]
    assert sorted_reads and submitter_reads  # (at 20,000 jobs the planner would not walk them all)
    assert samples == 1  # "distill" and "lead": two parts, looked for once
    # The probes for the submitters (test_a_submitter_probe_is_one_index_look_in_its_order): one index
    # entry each, in the order the index gives, never a scan of the jobs.
    for viewer, index in (
        (lead_a, "scheduling_job_submit_dept_idx"),
        (platform_admin, "scheduling_job_submitted_idx"),
    ):
        with CaptureQueriesContext(connection) as queries:
            search_module._submitters(viewer, "distill lead-a")
        [probe] = [query["sql"] for query in queries.captured_queries if "'%distill%'" in query["sql"]]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + probe)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert (
            f"Index Only Scan Backward using {index}" in plan and "Seq Scan on scheduling_job" not in plan
        ), plan


def test_a_submitter_probe_is_one_index_look_in_its_order(department_a, department_b, lead_a, platform_admin):
    """The accounts a search's words name are kept only when they submitted a job the viewer may see
    (portal.pages.search._submitters): per account a scalar subquery for the newest such job's time, in the
    order of the index on (submitter, department, created_at) for each of a lead's departments, named as a
    value (with visible_to's subquery alone, PostgreSQL read every job of the lead's department for an account
    with none there), or of the index on (submitter, created_at, id) for an admin. Not an EXISTS, which
    PostgreSQL turns into a semi join, nor unordered: at 21 million jobs and a few submitters, both were read
    by a sequential scan of every job for an account with none (2 s; a planner's choice a table of a few rows
    does not show, so the query's own words and its plan are checked)."""
    from django.test.utils import CaptureQueriesContext

    from portal.pages.search import _submitters
    from tests.factories import make_job, make_member

    frank = make_member("frank", department_b)
    make_job(department_b, "infer-embed-1", state="completed", submitted_by=frank)
    for viewer, found_frank in ((lead_a, []), (platform_admin, [frank.pk])):
        with CaptureQueriesContext(connection) as queries:
            found = _submitters(viewer, "embed frank")
        assert found.by_word == {"embed": [], "frank": found_frank}  # not the lead's to find
        [probe] = [query["sql"] for query in queries.captured_queries if "'%frank%'" in query["sql"]]
        assert "EXISTS" not in probe and re.search(r'\(SELECT [A-Z]\d\."created_at"', probe), probe
        assert "ORDER BY 1 DESC LIMIT 1) IS NOT NULL" in probe, probe
        if viewer == lead_a:
            assert f'W0."department_id" = {department_a.pk}' in probe, probe
        # (Its plan, on a table of realistic size: the previous test.)


@postgresql_only
def test_a_role_that_cannot_create_the_extension_gets_a_warning_not_a_failed_migration(monkeypatch, capsys):
    # A real refusal by PostgreSQL (an extension it cannot create), as a role without the right would get.
    monkeypatch.setattr(search_indexes, "EXTENSION", "rackplane_no_such_extension")
    with connection.schema_editor(atomic=False) as editor:
        MIGRATION.create(None, editor)
    warning = capsys.readouterr().err
    assert "rackplane_no_such_extension extension could not be created" in warning
    assert "Search still finds every match" in warning and "manage.py search_indexes" in warning
    # The transaction is intact (the failure was in a savepoint) and nothing else was tried.
    assert Rack.objects.count() == 0
    with pytest.raises(Exception, match="could not be created"):
        call_command("search_indexes")


@postgresql_only
def test_the_command_makes_a_missing_index_again():
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX scheduling_job_name_trgm_idx")
    assert "scheduling_job_name_trgm_idx" not in index_definitions()
    made = search_indexes.create_indexes(connection, concurrently=False)  # in the test's transaction
    assert made == ["scheduling_job_name_trgm_idx"]
    assert "gin_trgm_ops" in index_definitions()["scheduling_job_name_trgm_idx"]
    assert search_indexes.create_indexes(connection, concurrently=False) == []


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded default")
def test_on_sqlite_nothing_is_made_and_the_command_says_so(capsys):
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE '%trgm%'")
        assert cursor.fetchall() == []
    call_command("search_indexes")
    assert "Nothing to do on sqlite" in capsys.readouterr().out
    # The migration's two ways do nothing here (they read only the schema editor's connection).
    editor = SimpleNamespace(connection=connection)
    MIGRATION.create(None, editor)
    MIGRATION.drop(None, editor)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE '%trgm%'")
        assert cursor.fetchone() == (0,)


def test_the_benchmarks_year_of_jobs_is_made_by_the_database(department_a, department_b, lead_a, member_a):
    """benchmarks/search.py's seed_job_history on either database: demo-like names, every department,
    finished states, submissions spread over the year, submitted by the department's people (the lead
    half: a prolific submitter), searchable like any job."""
    from datetime import timedelta

    from django.db.models import Count
    from django.utils import timezone

    from portal.pages.search import search
    from scheduling.choices import JobState
    from tests.factories import make_user

    assert seed_job_history(days=365, count=550) == 550
    jobs = Job.objects.all()
    assert jobs.count() == 550
    assert set(jobs.values_list("department_id", flat=True)) == {department_a.pk, department_b.pk}
    assert set(jobs.values_list("state", flat=True)) == {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    }
    names = set(jobs.values_list("name", flat=True))
    assert "train-pretrain-h000011" in names and "build-profile-h000010" in names and len(names) == 550
    oldest, newest = jobs.order_by("created_at").first(), jobs.order_by("created_at").last()
    now = timezone.now()
    assert now - timedelta(days=366) < oldest.created_at < now - timedelta(days=364)
    assert now - timedelta(days=2) < newest.created_at <= now
    assert all(j.created_at < j.started_at < j.finished_at for j in jobs[:20])
    submitted = dict(
        jobs.filter(department=department_a).values_list("submitted_by").annotate(n=Count("pk")).order_by()
    )
    assert set(submitted) == {lead_a.pk, member_a.pk}  # with one member, the lead half of them:
    assert abs(submitted[lead_a.pk] - submitted[member_a.pk]) <= 1 and sum(submitted.values()) == 275
    assert not jobs.filter(department=department_b, submitted_by__isnull=False).exists()  # nobody in it
    admin = make_user("bench-admin", staff=True)
    mine = next(g for g in search(admin, "lead-a").groups if g.kind == "job")
    assert len(mine.hits) + mine.more == submitted[lead_a.pk]  # the benchmark's "submitter" kind finds them
    group = next(g for g in search(admin, "pretrain").groups if g.kind == "job")
    assert group.hits[0].title.endswith("train-pretrain-h000011")  # the newest "pretrain" first
    assert len(group.hits) + group.more == 50


@postgresql_only
def test_the_benchmarks_year_of_jobs_has_the_ids_a_year_gives(department_a, lead_a):
    """Ids grow with time on a site: its running jobs are its newest. The benchmark reserves room before the
    tenants' jobs (reserve_history_ids) and puts the year below them, the newest highest; loaded above them,
    the year would give the planner a site where the running jobs are the oldest (issue 32: a merge join
    walked 21 million jobs' ids for the dashboards' idle GPUs)."""
    from benchmarks.search import reserve_history_ids
    from tests.factories import make_job

    reserve_history_ids(racks=1, count=600)
    running = make_job(department_a, "running-now", gpus=4)
    assert running.pk > 600
    assert seed_job_history(days=365, count=550) == 550
    history = Job.objects.exclude(pk=running.pk)
    assert history.count() == 550 and max(history.values_list("pk", flat=True)) < running.pk
    ids_by_age = list(history.order_by("created_at").values_list("pk", flat=True))
    assert ids_by_age == sorted(ids_by_age)  # the oldest lowest, the newest just below the running job
    assert Job.objects.create(department=department_a, name="next", gpus=1).pk > running.pk


def _superuser_connection(settings_dict):
    """A superuser's connection to the test server (services.sh: `postgres` as root, else the user who ran
    initdb), or None."""
    import getpass

    import psycopg

    for user in ("postgres", getpass.getuser()):
        try:
            connection = psycopg.connect(
                host=settings_dict["HOST"] or "127.0.0.1",
                port=settings_dict["PORT"] or 5432,
                user=user,
                dbname="postgres",
                autocommit=True,
                connect_timeout=5,
            )
        except psycopg.Error:
            continue
        if connection.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
            return connection
        connection.close()
    return None


@postgresql_only
@pytest.mark.slow(reason="migrates a new database from nothing as a restricted role, in a subprocess")
def test_a_role_without_the_right_migrates_with_a_warning_and_the_command_finishes_later():
    """A real refusal: a role that may create tables but not extensions (no CREATE on the database), as
    on a managed PostgreSQL. `migrate` succeeds, says what to run, and makes the prefix b-tree; once a
    superuser has made pg_trgm, `manage.py search_indexes` makes the rest."""
    import secrets
    import subprocess
    import sys

    import psycopg
    from django.conf import settings as django_settings

    database = django_settings.DATABASES["default"]
    admin = _superuser_connection(database)
    if admin is None:
        pytest.skip("no superuser on this PostgreSQL to make a restricted role with")
    name = f"rp_search_{secrets.token_hex(4)}"
    admin.execute(f"CREATE ROLE {name} LOGIN")
    admin.execute(f"CREATE DATABASE {name} OWNER {admin.info.user}")
    try:
        dsn = {"host": admin.info.host, "port": admin.info.port, "user": admin.info.user, "dbname": name}
        with psycopg.connect(**dsn, autocommit=True) as inside:
            inside.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {name}")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
            "DEBUG": "1",
            "DATABASE_URL": f"postgres://{name}@{admin.info.host}:{admin.info.port}/{name}",
        }

        def manage(*args):
            return subprocess.run(
                [sys.executable, "manage.py", *args],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )

        migrated = manage("migrate", "--no-input")
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        assert 'permission denied to create extension "pg_trgm"' in migrated.stderr
        assert f'`CREATE EXTENSION pg_trgm;` in the database "{name}"' in migrated.stderr
        with psycopg.connect(**dsn, autocommit=True) as inside:
            made = {
                row[0]
                for row in inside.execute(
                    "SELECT indexname FROM pg_indexes WHERE indexname LIKE 'scheduling_job_name_%'"
                )
            }
            assert made == {"scheduling_job_name_idx", "scheduling_job_name_prefix_idx"}
        refused = manage("search_indexes")
        assert refused.returncode != 0 and "could not be created" in refused.stderr
        with psycopg.connect(**dsn, autocommit=True) as inside:
            inside.execute("CREATE EXTENSION pg_trgm")
        finished = manage("search_indexes")
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert "Made inventory_rack_name_trgm_idx" in finished.stdout
        with psycopg.connect(**dsn, autocommit=True) as inside:
            count = inside.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexname LIKE '%_trgm_idx'"
            ).fetchone()
            assert count == (len(search_indexes.INDEXES) - 1,)
        assert manage("search_indexes").stdout.startswith("All 12 search indexes exist")
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"DROP ROLE IF EXISTS {name}")
        admin.close()
