"""Fixtures shared by the whole suite: the demo inventory, the shared personas, a render directory per test.

The personas (docs/developer/testing.md) are fixtures over tests/factories.py:

    platform_admin  staff account "platform-admin": sees and changes everything
    lead_a          "lead-a", lead of department_a        member_a  "member-a", member of department_a
    lead_b          "lead-b", lead of department_b        member_b  "member-b", member of department_b
    outsider        "outsider": an account with no membership
    node_agent      "node-agent", made by `manage.py discovery_agent_token --fleet` (a fleet token)

department_a is Alpha and department_b is Beta, both without a guarantee (so they need no inventory). A
module that needs them otherwise overrides the fixture (`def department_a(demo_inventory): return
make_department("Research", guaranteed_gpus=96)`); the people attached to it follow.
"""

import fcntl
import hashlib
import itertools
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from core.access import Role
from tests import factories

# The real identity providers' fixtures (scripts/idp-testbed.sh): oidc_provider, oidc_settings,
# ldap_directory, ldap_settings, for tests/identity and the sign-in browser tests.
# The real Prometheus scraping test DCGM exporters (tests/tenancy/prometheus_server.py): prometheus.
# A clone prepared as `make run` prepares it, and `make run`'s stack serving from a copy of it (one per
# session): prepared_clone, embedded_stack.
pytest_plugins = [
    "tests.identity_testbed",
    "tests.tenancy.prometheus_server",
    "tests.fresh_clone",
    "tests.embedded_stack",
    # Each worker's tests on a timeline, summed per worker and group at the end (RACKPLANE_TEST_TIMELINE).
    "tests.timeline",
    # An empty database of the test's own for migration tests, instead of migrating the suite's back.
    "tests.scratch_database",
    # pytest's own fixture for running pytest on made-up test files (tests/test_suite_machinery.py).
    "pytester",
]


# --- the test database: migrated once, reused while the migrations are the same -----------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]


def migrations_fingerprint() -> str:
    """What the migrated schema depends on: every migration file's path and bytes, and Django's version."""
    import django

    digest = hashlib.sha256(django.get_version().encode())
    for path in sorted(REPO_ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def pytest_configure(config):
    """SQLite (`make test-fast`, a developer's runs): the migrated test database is kept as a pristine file
    named by the migrations' fingerprint (var/test-db/), and each session starts from a copy of it instead of
    running every migration again (as NetBox's test runner does); a change to any migration names a new file,
    migrated from scratch once. Each session starts from the pristine copy, so nothing a previous run
    committed (or flushed, as transactional tests do) can leak in. A worker's file is held by one session at
    a time (a lock); a second session running at once gets a database in memory, as before. `--create-db`
    migrates from nothing.

    PostgreSQL (`make test`): the first xdist worker to get the lock migrates its test database and copies it
    into a template named by the fingerprint; every other worker's database is a copy of that template
    (`CREATE DATABASE ... TEMPLATE`, a fraction of a second) instead of migrating again (about 9 s each).
    Each session drops its own database first, so nothing from a previous session is kept.
    """
    from django.conf import settings

    if not settings.configured or config.getoption("create_db", default=False):
        return
    database = settings.DATABASES["default"]
    if "postgresql" in database["ENGINE"]:
        config.option.reuse_db = True  # the database is made fresh below; keep it from being made again
        config.stash[_PG_TEMPLATE] = f"test_template_{migrations_fingerprint()}"
        return
    if "sqlite" not in database["ENGINE"]:
        return
    fingerprint = migrations_fingerprint()
    folder = REPO_ROOT / "var" / "test-db"
    folder.mkdir(parents=True, exist_ok=True)
    _remove_unused(folder, keep=fingerprint)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    held = _try_lock(folder / f"{fingerprint}-{worker}.lock")
    if held is None:
        # Said outright: with no test name pytest-django names an xdist worker's database after the
        # settings' NAME (`test_<path>_gw0`) unless the ENGINE is exactly Django's SQLite one (ours is
        # django-prometheus's), a file that cannot be opened.
        database.setdefault("TEST", {})["NAME"] = ":memory:"
        return
    # pytest-django appends the xdist worker (`_gw0`) to this name: one file per worker.
    database.setdefault("TEST", {})["NAME"] = str(folder / f"{fingerprint}.sqlite3")
    config.option.reuse_db = True
    config.stash[_PRISTINE] = (folder / f"{fingerprint}.pristine", held)


def _remove_unused(folder: Path, keep: str) -> None:
    """The files of other fingerprints (`<fingerprint>.sqlite3_gw0`, `.pristine`, `-gw0.lock`), unless a
    session still holds one of their locks."""
    by_fingerprint: dict[str, list[Path]] = {}
    for path in folder.iterdir():
        by_fingerprint.setdefault(path.name.split(".")[0].split("-")[0], []).append(path)
    for fingerprint, paths in by_fingerprint.items():
        if fingerprint == keep:
            continue
        locks = [_try_lock(path) for path in paths if path.suffix == ".lock"]
        if all(locks):
            for path in paths:
                path.unlink(missing_ok=True)
        for lock in filter(None, locks):
            lock.close()


def _try_lock(path: Path):
    """The open, exclusively locked file, or None when another process holds it."""
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


_PRISTINE = pytest.StashKey[tuple]()
_PG_TEMPLATE = pytest.StashKey[str]()
_PG_MAKER = pytest.StashKey[object]()  # the lock a worker holds while it migrates the template's source


def _pg_prepare(config) -> None:
    """This worker's PostgreSQL test database: dropped, then a copy of the migrated template when one exists;
    when none does yet, the lock stays held (`_PG_MAKER`) until `django_db_setup` has migrated this
    worker's database and made the template from it."""
    from django.db import connection

    template = config.stash[_PG_TEMPLATE]
    name = connection.creation._get_test_db_name()
    lock_folder = Path(os.environ.get("RACKPLANE_RUNTIME_DIR") or REPO_ROOT / "var" / "test-db")
    lock_folder.mkdir(parents=True, exist_ok=True)
    lock = (lock_folder / f"{template}.lock").open("a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    quote = connection.ops.quote_name
    with connection._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template])
        if cursor.fetchone() is None:
            # Templates of other migrations (a developer's own server), then this worker makes the template.
            cursor.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'test\\_template\\_%%' AND datname <> %s",
                [template],
            )
            for (stale,) in cursor.fetchall():
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(stale)}")
            config.stash[_PG_MAKER] = lock
            return
        cursor.execute(f"CREATE DATABASE {quote(name)} TEMPLATE {quote(template)}")
    lock.close()


def _pg_make_template(config) -> None:
    """The maker's database, just migrated, copied into the template the other workers copy."""
    from django.db import connection

    lock = config.stash[_PG_MAKER]
    del config.stash[_PG_MAKER]
    try:
        name = connection.settings_dict["NAME"]
        connection.close()  # a template must have no session on its source
        quote = connection.ops.quote_name
        with connection._nodb_cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {quote(config.stash[_PG_TEMPLATE])} TEMPLATE {quote(name)}")
    finally:
        lock.close()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(request, django_db_modify_db_settings_parallel_suffix, django_db_blocker):
    """Before pytest-django opens the test database: this worker's file is a copy of the pristine one, or
    absent (then it is created and migrated); on PostgreSQL, a copy of the template (`_pg_prepare`)."""
    from django.conf import settings

    if request.config.stash.get(_PG_TEMPLATE, None) is not None:
        with django_db_blocker.unblock():
            _pg_prepare(request.config)
        return
    if (kept := request.config.stash.get(_PRISTINE, None)) is None:
        return
    pristine, _ = kept
    working = Path(settings.DATABASES["default"]["TEST"]["NAME"])
    for leftover in working.parent.glob(f"{working.name}-*"):  # -journal, -wal, -shm
        leftover.unlink(missing_ok=True)
    if pristine.exists():
        copy = working.with_name(working.name + ".copying")
        shutil.copyfile(pristine, copy)
        copy.replace(working)
    else:
        working.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def django_db_setup(request, django_db_setup, django_db_blocker):
    """After it: the rows the data migrations made are kept (restored after every test that empties the
    tables), and a database migrated from scratch becomes the pristine file for the next sessions."""
    from django.conf import settings

    with django_db_blocker.unblock():
        if request.config.stash.get(_PG_MAKER, None) is not None:
            _pg_make_template(request.config)
        request.config.stash[_MIGRATED_ROWS] = _migrated_rows()
    kept = request.config.stash.get(_PRISTINE, None)
    if kept is not None and not kept[0].exists():
        pristine = kept[0]
        copy = pristine.with_name(f"{pristine.name}.{os.getpid()}")
        # SQLite's backup API: a consistent copy, whatever is still in the write-ahead log.
        source, target = sqlite3.connect(settings.DATABASES["default"]["NAME"]), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        copy.replace(pristine)


_MIGRATED_ROWS = pytest.StashKey[str]()
PROJECT_APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")


def _migrated_rows() -> str:
    """The rows of Rackplane's own tables in the freshly migrated database (what its data migrations made;
    Django's own tables, which `flush` fills again itself, are left out), as JSON."""
    from django.apps import apps
    from django.core import serializers

    querysets = [
        model._base_manager.order_by("pk")
        for app in PROJECT_APPS
        for model in apps.get_app_config(app).get_models()
        if model._meta.managed and not model._meta.proxy
    ]
    return serializers.serialize("json", (row for queryset in querysets for row in queryset.iterator()))


def _restore_migrated_rows(rows: str) -> None:
    from django.core import serializers
    from django.db import connection, transaction

    with transaction.atomic(), connection.constraint_checks_disabled():
        for row in serializers.deserialize("json", rows):
            row.save()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A transactional test (transaction=True, live_server, transactional_db) empties every table when it
    ends. The rows the data migrations made (the default health rules, fault policies, the local target)
    are put back at once, so that the next test in this worker sees the database as migrated: in one process
    pytest-django runs transactional tests last, but an xdist worker takes tests in any order."""
    result = yield
    marker = item.get_closest_marker("django_db")
    transactional = (marker is not None and marker.kwargs.get("transaction", False)) or bool(
        {"transactional_db", "live_server"} & set(getattr(item, "fixturenames", ()))
    )
    rows = item.config.stash.get(_MIGRATED_ROWS, None)
    # No next test: the session's teardown has already dropped the test database and pointed the connection
    # back at the configured one (a developer's own database), which must not be written to.
    if transactional and rows and rows != "[]" and nextitem is not None:
        from pytest_django.plugin import blocking_manager_key

        with item.config.stash[blocking_manager_key].unblock():
            _restore_migrated_rows(rows)
    return result


# --- running in parallel (pytest-xdist, `--dist loadgroup`) -------------------------------------------------

# Tests that share one service run in one worker, one after another: the service starts once per session and
# tests that change it never race. The key is the fixture that gives the service.
SHARED_SERVICES = {
    "slurm_testbed": "slurm",
    "kube_testbed": "kubernetes",
    "oidc_testbed": "identity",
    "ldap_testbed": "identity",
    "prometheus": "prometheus",
    # tests/stack's PostgreSQL and Redis (its `stack` fixture starts processes on them). Keyed on `services`,
    # not on `stack`: tests of `make run`'s stack name their alias of `embedded_stack` `stack` too.
    "services": "production-stack",
    "embedded_stack": "embedded-stack",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every `slow` marker says why (`@pytest.mark.slow(reason="...")`), and each test joins the xdist group
    of what it shares with others: a service (SHARED_SERVICES), or its module when it uses a module-scoped
    fixture (set up once, not once per worker). A test sharing two of them joins both groups into one."""
    unexplained = [
        item.nodeid
        for item in items
        if (slow := item.get_closest_marker("slow")) and not slow.kwargs.get("reason")
    ]
    if unexplained:
        raise pytest.UsageError(
            'a slow marker without its reason: write @pytest.mark.slow(reason="...") in '
            + ", ".join(unexplained)
        )
    parent: dict[str, str] = {}

    def root(group: str) -> str:
        while parent.setdefault(group, group) != group:
            group = parent[group]
        return group

    shared: list[tuple[pytest.Item, list[str]]] = []
    for item in items:
        groups = [SHARED_SERVICES[name] for name in item.fixturenames if name in SHARED_SERVICES]
        definitions = getattr(item, "_fixtureinfo", None)
        for name in item.fixturenames:
            defs = definitions.name2fixturedefs.get(name) if definitions else None
            if defs and defs[-1].scope == "module":
                groups.append(item.module.__name__ if item.module else item.nodeid.split("::")[0])
        for group in groups[1:]:
            parent[root(group)] = root(groups[0])
        if groups:
            shared.append((item, groups))
    for item, groups in shared:
        item.add_marker(pytest.mark.xdist_group(root(groups[0])))
    items.sort(key=_start_order)


def _start_order(item) -> int:
    """Long tests first, short ones last (a stable sort: otherwise in the order collected). xdist hands a
    worker its next unit of work as it runs dry (a group is one unit, sent first when it holds more tests),
    so the many short tests at the end even the workers out instead of one worker starting a minute-long
    benchmark or browser test while the others finish. A group of one test (a module-scoped fixture) is
    ordered as its test: it is handed out among the single tests, and a one-test group left in collection
    order once started a 77 s browser test 80 s before the end of the run."""
    if not item.get_closest_marker("slow"):
        return 2
    return 0 if item.get_closest_marker("e2e") or item.get_closest_marker("integration") else 1


@pytest.fixture(autouse=True, scope="session")
def _fast_test_settings():
    """Two costs that are there for production, paid again by every test otherwise:
    - a fast hasher for the passwords tests set (PBKDF2's cost is for attackers); PBKDF2 stays listed so
      any hash it made still checks;
    - WhiteNoise looks a static file up when it is asked for (as with DEBUG on) instead of listing every
      static file whenever a test client starts its middleware."""
    from django.conf import settings

    if settings.configured:
        settings.PASSWORD_HASHERS = [
            "django.contrib.auth.hashers.MD5PasswordHasher",
            "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        ]
        settings.WHITENOISE_AUTOREFRESH = True


@pytest.fixture(autouse=True)
def _fresh_request_counts():
    """API throttle counts live in the cache and outlast a test's database: each test starts at zero, as if
    the suite's thousands of requests were not all from one client within a minute."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language (English): a request in Japanese leaves Japanese active in the
    thread after it (LocaleMiddleware activates the request's language and nothing deactivates it), which
    would turn the next test's messages Japanese on the same worker."""
    from django.utils import translation

    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def _search_reads_in_time(monkeypatch):
    """The search's time limit on reading older jobs (portal.pages.search.OLDER_READ_MS, 120 ms) is for
    millions of rows; a test's few take a millisecond, but on a busy CI machine (4 workers on 2 cores, the
    testbeds beside them) a stalled backend could reach it and drop a hit. Tests of the limit set it
    themselves (tests/portal/test_search_rare_part.py)."""
    from portal.pages import search

    monkeypatch.setattr(search, "OLDER_READ_MS", 30_000)


@pytest.fixture(scope="module")
def module_rows(django_db_setup, django_db_blocker, tmp_path_factory):
    """`module_rows(make)`: rows `make()` writes once for a whole module and every test of it reads, in a
    transaction rolled back when the module ends; each test's own transaction is a savepoint inside it, so
    what a test writes is gone for the next one and the module's rows stay. For read-only tests over costly
    set-up (a seeded demo: ~2 s of CPU each time), not for transactional ones (a flush would end it). The
    module's tests run in one worker (a module-scoped fixture groups them). `make` runs with its own render
    and var directories, as a test's set-up would."""
    from django.db import transaction
    from django.test import override_settings

    opened = []

    def make(build):
        if opened:
            raise RuntimeError("module_rows makes one set of rows per module")
        scratch = tmp_path_factory.mktemp("module-rows")
        with django_db_blocker.unblock():
            block = transaction.atomic()
            block.__enter__()
            opened.append(block)
            with override_settings(VAR_DIR=scratch, RACKPLANE_RENDER_DIR=scratch / "rendered"):
                return build()

    try:
        yield make
    finally:
        if opened:
            with django_db_blocker.unblock():
                transaction.set_rollback(True)
                opened[0].__exit__(None, None, None)


# seed_datacenter(racks=3)'s rows, per database vendor, kept by each test process after its first seed into
# an empty inventory (demo_inventory, below).
_DEMO_MODELS = ("inventory.Rack", "inventory.NVLinkPartition", "inventory.ComputeTray", "inventory.Gpu")
_demo_rows: dict[str, dict] = {}


@pytest.fixture
def demo_inventory(db):
    """Three seeded racks: gb-r01 (default partition, one drained tray), gb-r02 (carved 2x9), gb-r03.

    About 1,300 tests ask for it. The first seed in a process runs seed_datacenter; later ones into an empty
    inventory write the same rows again with multi-row INSERTs (the same primary keys, every time column
    moved forward by the time since): 3 ms on SQLite where seed_datacenter's ~280 ORM objects take 14 (on
    PostgreSQL 25 ms either way: the server's own work). tests/test_demo_inventory.py holds the two equal."""
    from django.db import connection

    from inventory.demo import seed_datacenter

    models = _demo_models()
    kept = _demo_rows.get(connection.vendor)
    empty = not any(model.objects.exists() for model in models)
    if kept is not None and empty:
        return _insert_demo_rows(kept)
    result = seed_datacenter(racks=3)
    if empty and kept is None:
        _demo_rows[connection.vendor] = _keep_demo_rows(models, result)
    return result


def _demo_models():
    from django.apps import apps

    return [apps.get_model(label) for label in _DEMO_MODELS]


def _keep_demo_rows(models, result) -> dict:
    """Each table's columns and rows as the database takes them (time columns left as datetimes)."""
    from django.db import connection
    from django.db import models as django_models
    from django.utils import timezone

    tables = []
    for model in models:
        fields = model._meta.concrete_fields
        times = [i for i, f in enumerate(fields) if isinstance(f, django_models.DateTimeField)]
        rows = []
        for values in model.objects.order_by("pk").values_list(*(f.attname for f in fields)):
            rows.append(
                [
                    value if i in times else field.get_db_prep_save(value, connection)
                    for i, (field, value) in enumerate(zip(fields, values, strict=True))
                ]
            )
        tables.append((model._meta.db_table, fields, times, rows))
    return {"at": timezone.now(), "tables": tables, "result": result}


def _insert_demo_rows(kept: dict):
    from django.db import connection
    from django.utils import timezone

    shift = timezone.now() - kept["at"]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table, fields, times, rows in kept["tables"]:
            columns = ", ".join(quote(f.column) for f in fields)
            marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
            batch = max(1, connection.ops.bulk_batch_size(fields, rows))  # the database's parameter limit
            for start in range(0, len(rows), batch):
                values = []
                for row in rows[start : start + batch]:
                    row = list(row)
                    for i in times:
                        if row[i] is not None:
                            row[i] = fields[i].get_db_prep_save(row[i] + shift, connection)
                    values.extend(row)
                count = min(batch, len(rows) - start)
                cursor.execute(
                    f"INSERT INTO {quote(table)} ({columns}) VALUES {', '.join([marks] * count)}", values
                )
    return kept["result"]


# --- accounts that predate the personas (a superuser for the Django admin, a user without a department) ---


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "admin@example.com", "admin-password-1")


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("operator", "operator@example.com", "operator-password-1")


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def user_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def admin_client_logged_in(client, admin_user):
    client.force_login(admin_user)
    return client


# --- the shared personas -----------------------------------------------------------------------------------


@pytest.fixture
def department_a(db):
    return factories.make_department("Alpha")


@pytest.fixture
def department_b(db):
    return factories.make_department("Beta")


@pytest.fixture
def platform_admin(db):
    return factories.make_user("platform-admin", staff=True)


@pytest.fixture
def lead_a(department_a):
    return factories.make_member("lead-a", department_a, Role.LEAD)


@pytest.fixture
def member_a(department_a):
    return factories.make_member("member-a", department_a)


@pytest.fixture
def lead_b(department_b):
    return factories.make_member("lead-b", department_b, Role.LEAD)


@pytest.fixture
def member_b(department_b):
    return factories.make_member("member-b", department_b)


@pytest.fixture
def outsider(db):
    return factories.make_user("outsider")


@pytest.fixture
def node_agent(db):
    return factories.make_node_agent()


@pytest.fixture
def api_as(request):
    """`api_as(lead_a)` or `api_as("lead_a")` (a persona fixture's name, for parametrized tests): an API
    client with that user's token."""

    def client_for(persona):
        return factories.token_client(_persona(request, persona))

    return client_for


@pytest.fixture
def client_as(request, client):
    """`client_as(lead_a)` or `client_as("lead_a")`: the Django test client, signed in as that user."""

    def login(persona):
        client.force_login(_persona(request, persona))
        return client

    return login


def _persona(request, persona):
    return request.getfixturevalue(persona) if isinstance(persona, str) else persona


# --- where rendered files go -------------------------------------------------------------------------------


_render_dirs = itertools.count(1)


@pytest.fixture(autouse=True)
def render_dir(settings, tmp_path_factory):
    """Rendered configs and jobs (the embedded backends) go to a fresh directory per test, never var/. It
    does not exist until something writes there. Named by a counter under the session's base directory, not
    made with `mktemp`: that scans every numbered directory made before it, and every test asks for this."""
    settings.RACKPLANE_RENDER_DIR = (
        tmp_path_factory.getbasetemp() / "render" / str(next(_render_dirs)) / "rendered"
    )
    return settings.RACKPLANE_RENDER_DIR


@pytest.fixture
def local_target(render_dir, db):
    """The embedded `local` directory target, writing into render_dir."""
    return factories.local_target()
