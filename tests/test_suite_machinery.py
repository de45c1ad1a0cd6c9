"""The suite's own machinery (tests/conftest.py): slow markers say why, tests sharing a service or a
module-scoped fixture land in one xdist group, and the kept test database is named by the migrations."""

import os
from pathlib import Path

import pytest

from tests import conftest

HOOKS = """
import pytest
from tests.conftest import pytest_collection_modifyitems  # the hook under test

@pytest.fixture(scope="session")
def slurm_testbed():
    return "slurm"

@pytest.fixture(scope="session")
def kube_testbed():
    return "kube"

@pytest.fixture(scope="module")
def clone():
    return "clone"
"""


def groups_of(items) -> dict[str, str | None]:
    return {
        item.name: (mark.args[0] if (mark := item.get_closest_marker("xdist_group")) else None)
        for item in items
    }


def test_a_slow_marker_without_its_reason_stops_the_collection(pytester):
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.slow
        def test_unexplained():
            pass
        """
    )
    result = pytester.runpytest_inprocess("--collect-only", "-p", "no:django", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a slow marker without its reason*test_unexplained*"])


def test_tests_sharing_a_service_or_a_module_fixture_share_a_group(pytester):
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(
        test_groups="""
        import pytest

        @pytest.mark.slow(reason="explained")
        def test_alone():
            pass

        def test_on_slurm(slurm_testbed):
            pass

        def test_on_kubernetes(kube_testbed):
            pass

        def test_on_both(slurm_testbed, kube_testbed):
            pass

        def test_with_the_module_clone(clone):
            pass
        """
    )
    items, _ = pytester.inline_genitems("-p", "no:django", "-p", "no:xdist")
    groups = groups_of(items)
    assert groups["test_alone"] is None
    # Slurm and Kubernetes meet in test_on_both: all three run in one worker.
    assert groups["test_on_slurm"] == groups["test_on_kubernetes"] == groups["test_on_both"] is not None
    assert groups["test_with_the_module_clone"] == "test_groups"


def test_long_tests_are_handed_out_first_and_short_ones_even_the_workers_out(pytester):
    pytester.makeconftest(HOOKS)
    pytester.makepyfile(
        test_order="""
        import pytest

        def test_short():
            pass

        def test_on_slurm(slurm_testbed):
            pass

        @pytest.mark.slow(reason="explained")
        def test_slow():
            pass

        @pytest.mark.slow(reason="a browser")
        @pytest.mark.e2e
        def test_browser():
            pass

        def test_short_too():
            pass

        @pytest.mark.slow(reason="a real server")
        @pytest.mark.integration
        def test_server():
            pass

        @pytest.fixture(scope="module")
        def own_stack():
            return "a module's own stack: a group of its own"

        @pytest.mark.slow(reason="its own stack and a browser")
        @pytest.mark.e2e
        def test_on_its_own_stack(own_stack):
            pass
        """
    )
    recorded = pytester.inline_run("--collect-only", "-p", "no:django", "-p", "no:xdist")
    items = recorded.getcall("pytest_collection_finish").session.items  # as sorted, not as collected
    # The browser and server tests (a one-test group among them), then the other slow ones, then the rest
    # (each in the order written); xdist sends the largest groups first whatever their place.
    assert [item.name for item in items] == [
        "test_browser",
        "test_server",
        "test_on_its_own_stack",
        "test_slow",
        "test_short",
        "test_on_slurm",
        "test_short_too",
    ]
    assert items[2].get_closest_marker("xdist_group").args == ("test_order",)


def test_the_database_fingerprint_follows_every_migration_file(tmp_path, monkeypatch):
    migrations = tmp_path / "app" / "migrations"
    migrations.mkdir(parents=True)
    (migrations / "0001_initial.py").write_text("operations = []\n")
    monkeypatch.setattr(conftest, "REPO_ROOT", tmp_path)
    first = conftest.migrations_fingerprint()
    assert first == conftest.migrations_fingerprint()
    (migrations / "0001_initial.py").write_text("operations = [1]\n")
    changed = conftest.migrations_fingerprint()
    (migrations / "0002_more.py").write_text("operations = []\n")
    added = conftest.migrations_fingerprint()
    assert len({first, changed, added}) == 3


def test_a_second_session_at_once_gets_each_worker_a_database_in_memory(tmp_path, monkeypatch, settings):
    """Two sessions at once (`make test-fast` beside a Slurm run): the second finds the kept database's lock
    held and runs in memory; it used to get `test_<settings NAME>_gw0`, a file that cannot be opened, and
    every database test errored."""
    from types import SimpleNamespace

    from pytest_django.fixtures import _set_suffix_to_test_databases

    (tmp_path / "app" / "migrations").mkdir(parents=True)
    (tmp_path / "app" / "migrations" / "0001_initial.py").write_text("operations = []\n")
    monkeypatch.setattr(conftest, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    folder = tmp_path / "var" / "test-db"
    folder.mkdir(parents=True)
    held = conftest._try_lock(folder / f"{conftest.migrations_fingerprint()}-gw0.lock")  # the first session
    databases = {
        "default": {"ENGINE": "django_prometheus.db.backends.sqlite3", "NAME": "/x/rackplane.sqlite3"}
    }
    settings.DATABASES = databases
    config = SimpleNamespace(getoption=lambda *a, **k: False, option=SimpleNamespace(), stash={})
    conftest.pytest_configure(config)
    _set_suffix_to_test_databases("gw0")
    assert databases["default"]["TEST"]["NAME"] == ":memory:"
    held.close()


@pytest.mark.slow(reason="starts pytest-xdist workers")
def test_a_group_runs_in_one_worker_under_loadgroup(pytester, monkeypatch):
    """What `make test` relies on, end to end: with `-n 3 --dist loadgroup` every test of a service's group
    runs in one worker (it stops being true when pytest and pytest-xdist disagree on node ids)."""
    monkeypatch.setenv("PYTHONPATH", str(conftest.REPO_ROOT))
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "portal.settings")
    pytester.makeconftest("import django\n\ndjango.setup()\n" + HOOKS)
    pytester.makepyfile(
        test_workers="""
        import os

        def record(kind):
            with open(f"{kind}.workers", "a") as seen:
                seen.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

        def test_a(slurm_testbed): record("slurm")
        def test_b(slurm_testbed): record("slurm")
        def test_c(slurm_testbed): record("slurm")
        def test_d(slurm_testbed): record("slurm")
        def test_e(): record("free")
        def test_f(): record("free")
        def test_g(): record("free")
        def test_h(): record("free")
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:django", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=8)
    workers = (pytester.path / "slurm.workers").read_text().split()
    assert len(workers) == 4 and len(set(workers)) == 1, workers


def test_the_timeline_says_where_each_workers_time_went(pytester, tmp_path, monkeypatch):
    """tests/timeline.py: each test's start and end go to the worker's file, and the run ends with each
    worker's busy time split by group and each group's total."""
    folder = tmp_path / "timeline"
    monkeypatch.setenv("RACKPLANE_TEST_TIMELINE", str(folder))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # when this suite runs under xdist
    pytester.makeconftest(HOOKS + "\npytest_plugins = ['tests.timeline']\n")
    pytester.makepyfile(
        test_time="""
        import time

        def test_on_slurm(slurm_testbed):
            time.sleep(0.2)

        def test_alone():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:django", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*where the time went*",
            "1 worker, * s from the start to the last test",
            # Seconds, rounded: a loaded machine makes the 0.2 s test read 1 s (CI on 344a6da).
            "  main: busy * s (CPU * s), from * s to * s: slurm * s, 1 ungrouped tests * s",
            "  groups (one worker each): slurm * s (1)",
            "  balance: * s of tests over 1 worker, * s each if even; largest group slurm * s, *",
        ]
    )
    lines = (folder / "main.jsonl").read_text().splitlines()
    assert [line.split('"test": ')[1].split(",")[0] for line in lines] == [
        '"test_time.py::test_on_slurm"',
        '"test_time.py::test_alone"',
    ]


def test_the_timeline_summary_adds_up_each_worker_and_group(tmp_path):
    from tests.timeline import summary

    (tmp_path / "gw0.jsonl").write_text(
        '{"test": "a", "group": "slurm", "start": 100, "stop": 130, "cpu": 2.5}\n'
        '{"test": "b", "group": "", "start": 130, "stop": 140, "cpu": 9}\n'
    )
    (tmp_path / "gw1.jsonl").write_text(
        '{"test": "c", "group": "slurm", "start": 101, "stop": 111}\n'
        '{"test": "d", "group": "kubernetes", "start": 111, "stop": 171}\n'
    )
    assert summary(tmp_path, started=95) == [
        "2 workers, 76 s from the start to the last test",
        "  gw0: busy 40 s (CPU 12 s), from 5 s to 45 s: slurm 30 s, 1 ungrouped tests 10 s",
        "  gw1: busy 70 s (CPU 0 s), from 6 s to 76 s: kubernetes 60 s, slurm 10 s, 0 ungrouped tests 0 s",
        "  groups (one worker each): kubernetes 60 s (1), slurm 40 s (2)",
        "  balance: 110 s of tests over 2 workers, 55 s each if even; largest group kubernetes 60 s, longer "
        "than the even share: the run waits for kubernetes, split it",
    ]
    # Spread out: the largest group fits a worker's even share, so only less work shortens the run.
    (tmp_path / "gw1.jsonl").write_text(
        '{"test": "c", "group": "slurm", "start": 101, "stop": 111}\n'
        '{"test": "d", "group": "kubernetes", "start": 111, "stop": 141}\n'
        '{"test": "e", "group": "", "start": 141, "stop": 171}\n'
    )
    assert summary(tmp_path, started=95)[-1] == (
        "  balance: 110 s of tests over 2 workers, 55 s each if even; largest group slurm 40 s, within the "
        "even share: the run is as long as its work, not its largest group"
    )
    (tmp_path / "none").mkdir()
    assert summary(tmp_path / "none") == []


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_syntax_tree_is_asked_again_when_cpython_miscounts_its_recursion(monkeypatch):
    """tests.python_source.parse: CPython 3.11's per-interpreter AST recursion counter (python/cpython#106905)
    is asked again; any other SystemError, and a mismatch every time, still fail."""
    import ast

    from tests import python_source

    real, calls = ast.parse, []

    def flaky(text, *args, **kwargs):
        calls.append(text)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=141, after=33)")
        return real(text, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", flaky)
    assert isinstance(python_source.parse("x = 1").body[0], ast.Assign) and len(calls) == 2

    def always(text, *args, **kwargs):
        raise SystemError("AST constructor recursion depth mismatch (before=2, after=1)")

    monkeypatch.setattr(ast, "parse", always)
    with pytest.raises(SystemError, match="mismatch"):
        python_source.parse("x = 1")

    def other(text, *args, **kwargs):
        calls.append(text)
        raise SystemError("something else")

    calls.clear()
    monkeypatch.setattr(ast, "parse", other)
    with pytest.raises(SystemError, match="something else"):
        python_source.parse("x = 1")
    assert len(calls) == 1


@pytest.mark.django_db(transaction=True)
def test_a_scratch_database_is_empty_and_the_test_database_comes_back_untouched(tmp_path):
    """tests/scratch_database.py: inside the block the default connection is on an empty database (a
    migration test migrates it from nothing); after it, on the test database again with its rows, and on
    PostgreSQL the scratch database is dropped."""
    from django.db import connection

    from inventory.models import Rack
    from tests.scratch_database import on_scratch_database

    Rack.objects.create(name="scratch-r01")
    test_database, tables = connection.settings_dict["NAME"], set(connection.introspection.table_names())
    with on_scratch_database(tmp_path) as name:
        assert connection.settings_dict["NAME"] == name != test_database
        assert connection.introspection.table_names() == []
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE scratch_only (id integer)")
        assert connection.introspection.table_names() == ["scratch_only"]
    assert connection.settings_dict["NAME"] == test_database
    assert set(connection.introspection.table_names()) == tables
    assert Rack.objects.filter(name="scratch-r01").exists()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            assert cursor.fetchone() is None


def test_the_tests_are_collected_before_the_workers_only_when_their_bytecode_is_stale(tmp_path):
    """scripts/lib.sh's compile_tests asks scripts/stale_test_bytecode.py how many test modules lack the
    assert-rewritten bytecode pytest keeps; a module edited after its bytecode counts, as does one never
    compiled, and a module that is not a test (pytest does not rewrite it) does not."""
    import runpy
    import time

    stale = runpy.run_path(str(Path(conftest.__file__).parent.parent / "scripts" / "stale_test_bytecode.py"))
    (tmp_path / "pkg").mkdir()
    test = tmp_path / "pkg" / "test_one.py"
    test.write_text("def test_it():\n    assert True\n")
    (tmp_path / "pkg" / "helpers.py").write_text("X = 1\n")
    (tmp_path / "conftest.py").write_text("")
    assert stale["stale"](tmp_path) == 2  # the test module and the conftest: never compiled

    for source in (test, tmp_path / "conftest.py"):
        cache = source.parent / "__pycache__"
        cache.mkdir(exist_ok=True)
        (cache / f"{source.stem}.{stale['TAG']}.pyc").write_bytes(b"")
    assert stale["stale"](tmp_path) == 0

    later = time.time() + 5
    os.utime(test, (later, later))  # edited after its bytecode was written
    assert stale["stale"](tmp_path) == 1
