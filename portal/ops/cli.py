"""`rackplane`: the production entry point (the console script pyproject.toml installs; the image's command).

    rackplane serve  [GUNICORN ARGS...]   the web portal under gunicorn (threads, bounded timeouts)
    rackplane worker [CELERY ARGS...]     a Celery worker
    rackplane beat   [CELERY ARGS...]     the Celery beat (run exactly one: docs/deployment/helm.md)
    rackplane migrate                     wait for the database (bounded), then `migrate --check`, and
                                          `migrate --no-input` only when something is unapplied
    rackplane wait-for-db                 only the wait (an init container, a script)
    rackplane manage ARGS...              any manage.py command (createsuperuser, check --deploy, ...)

serve, worker and beat replace this process with gunicorn or celery (exec): the signals a container runtime
sends (SIGTERM on stop) reach the server itself, which finishes its requests or tasks before it exits.
Settings come from the environment (the rest of the configuration is portal.settings'):

    PORT (8000), BIND (0.0.0.0:$PORT; `serve -b ADDRESS` replaces it), WEB_CONCURRENCY (gunicorn worker
    processes, 2), GUNICORN_THREADS (threads per process, 4), GUNICORN_TIMEOUT (seconds a request may take
    before its worker is replaced, 60), GUNICORN_GRACEFUL_TIMEOUT (seconds requests in flight get after
    SIGTERM, 30), GUNICORN_KEEPALIVE (5), GUNICORN_ACCESS_LOG (0), GUNICORN_MAX_REQUESTS (a worker is replaced
    after this many requests, against slow leaks; 20000, 0 = never), GUNICORN_WORKER_TMP_DIR (heartbeat files;
    default the system temporary directory), PROMETHEUS_MULTIPROC_DIR (the folder gunicorn's workers share
    their request metrics in, emptied at start; default a new folder in the temporary directory:
    core.metrics); CELERY_CONCURRENCY (worker processes, 2), CELERY_QUEUES (comma-separated, default all),
    CELERY_MAX_TASKS_PER_CHILD (100), CELERY_BEAT_SCHEDULE_FILENAME (where the beat keeps when each entry last
    ran; default rackplane-beat-schedule in the temporary directory), LOG_LEVEL (INFO);
    RACKPLANE_DB_WAIT_TIMEOUT (seconds `migrate` and `wait-for-db` wait for the database, 60).

The command lines are built by pure functions (serve_command, worker_command, beat_command) so that the
tests can check them without starting anything.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

DJANGO_SETTINGS = "portal.settings"
MAX_REQUESTS = 20_000  # requests a gunicorn worker serves before it is replaced (GUNICORN_MAX_REQUESTS)
USAGE = __doc__.split("\n\n")[1]


class UsageError(Exception):
    """A setting or argument this command cannot use; the message says which and what to do."""


def _int(environ: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(
            f"{name}={raw!r} is not a whole number: set it to one (for example {default})."
        ) from None
    if value < minimum:
        raise UsageError(
            f"{name}={value} is below {minimum}: set it to {minimum} or more (for example {default})."
        )
    return value


def _gunicorn_has_control_socket() -> bool:
    """Whether this gunicorn opens a control socket (gunicorn 25+), by default under $HOME."""
    try:
        from gunicorn.config import KNOWN_SETTINGS
    except ImportError:  # pragma: no cover - gunicorn is a dependency
        return False
    return any(setting.name == "control_socket_disable" for setting in KNOWN_SETTINGS)


def serve_command(
    environ: Mapping[str, str], extra: Sequence[str] = (), control_socket: bool | None = None
) -> list[str]:
    """The gunicorn command line for `rackplane serve`.

    gthread workers: each process serves GUNICORN_THREADS requests at once, so a slow outside call (a push
    preview, an OIDC round trip) does not hold a whole process. The timeout replaces a worker stuck longer
    than GUNICORN_TIMEOUT; the graceful timeout is what requests in flight get after SIGTERM (keep it below
    the pod's terminationGracePeriodSeconds). Errors go to standard error, for the container runtime; requests
    are logged by the portal itself (RACKPLANE_ACCESS_LOG, with the request id), gunicorn's own access log
    only with GUNICORN_ACCESS_LOG=1.
    The control socket (gunicorn 25+) is off unless GUNICORN_CONTROL_SOCKET names a path: by default it
    lives under $HOME, which a read-only root file system does not have.
    """
    port = _int(environ, "PORT", 8000, minimum=1)
    command = ["gunicorn", "portal.wsgi:application", "--config", "python:portal.ops.gunicorn_conf"]
    # gunicorn adds every --bind it is given: an address on the command line replaces BIND/PORT's, or
    # `rackplane serve -b 127.0.0.1:8432` would listen on 0.0.0.0:8000 as well.
    if not _binds(extra):
        command += ["--bind", environ.get("BIND", "").strip() or f"0.0.0.0:{port}"]
    command += [
        "--worker-class",
        "gthread",
        "--workers",
        str(_int(environ, "WEB_CONCURRENCY", 2, minimum=1)),
        "--threads",
        str(_int(environ, "GUNICORN_THREADS", 4, minimum=1)),
        "--timeout",
        str(_int(environ, "GUNICORN_TIMEOUT", 60, minimum=1)),
        "--graceful-timeout",
        str(_int(environ, "GUNICORN_GRACEFUL_TIMEOUT", 30, minimum=1)),
        "--keep-alive",
        str(_int(environ, "GUNICORN_KEEPALIVE", 5, minimum=1)),
    ]
    # A new worker costs ~1.4 s of CPU to start (Django, every app, the URL patterns): at 1,000 requests a
    # worker that only answers node heartbeats (~2 ms each) spent about 40% of its CPU starting again.
    max_requests = _int(environ, "GUNICORN_MAX_REQUESTS", MAX_REQUESTS)
    if max_requests:
        command += [
            "--max-requests",
            str(max_requests),
            "--max-requests-jitter",
            str(max(1, max_requests // 10)),
        ]
    if tmp_dir := environ.get("GUNICORN_WORKER_TMP_DIR", "").strip():
        command += ["--worker-tmp-dir", tmp_dir]
    if control_socket is None:
        control_socket = _gunicorn_has_control_socket()
    if control_socket:
        if path := environ.get("GUNICORN_CONTROL_SOCKET", "").strip():
            command += ["--control-socket", path]
        else:
            command.append("--no-control-socket")
    command += ["--error-logfile", "-"]
    if environ.get("GUNICORN_ACCESS_LOG", "").strip().lower() in ("1", "true", "yes", "on"):
        command += ["--access-logfile", "-"]
    return command + list(extra)


def _binds(arguments: Sequence[str]) -> bool:
    """Whether gunicorn arguments name an address to listen on (-b/--bind, joined or apart)."""
    return any(
        argument in ("-b", "--bind") or argument.startswith(("--bind=", "-b")) for argument in arguments
    )


def worker_command(environ: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The Celery worker command line for `rackplane worker`.

    Tasks are acknowledged late and prefetched one at a time (portal.settings), so a worker killed in the
    middle of a task leaves it to another; a child process is replaced after CELERY_MAX_TASKS_PER_CHILD tasks.
    """
    command = [
        "celery",
        "--app",
        "portal",
        "worker",
        "--loglevel",
        environ.get("LOG_LEVEL", "").strip() or "INFO",
        "--concurrency",
        str(_int(environ, "CELERY_CONCURRENCY", 2, minimum=1)),
        "--max-tasks-per-child",
        str(_int(environ, "CELERY_MAX_TASKS_PER_CHILD", 100, minimum=1)),
    ]
    if queues := ",".join(q.strip() for q in environ.get("CELERY_QUEUES", "").split(",") if q.strip()):
        command += ["--queues", queues]
    return command + list(extra)


def beat_command(environ: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The Celery beat command line for `rackplane beat`.

    The schedule file (when each entry last ran) goes to a writable place: the temporary directory unless
    CELERY_BEAT_SCHEDULE_FILENAME names one (a volume, to keep the timing across restarts). Lost, it costs
    nothing: entries that never ran are due at once (portal.celery).
    """
    schedule = environ.get("CELERY_BEAT_SCHEDULE_FILENAME", "").strip() or os.path.join(
        environ.get("TMPDIR", "").strip() or tempfile.gettempdir(), "rackplane-beat-schedule"
    )
    command = [
        "celery",
        "--app",
        "portal",
        "beat",
        "--loglevel",
        environ.get("LOG_LEVEL", "").strip() or "INFO",
        "--schedule",
        schedule,
    ]
    return command + list(extra)


def prepare_metrics_folder(environ: dict) -> str:
    """Give gunicorn's workers an empty folder to share their request metrics in (core.metrics).

    Set before gunicorn starts, so before any worker imports prometheus_client. A folder named by
    PROMETHEUS_MULTIPROC_DIR is emptied of the previous run's files (an emptyDir outlives a container restart
    in its pod, and stale files would count a dead process's requests again).
    """
    folder = environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
    if not folder:
        folder = tempfile.mkdtemp(prefix="rackplane-metrics-")
    else:
        os.makedirs(folder, exist_ok=True)
        for name in os.listdir(folder):
            if name.endswith(".db"):
                os.unlink(os.path.join(folder, name))
    environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    return folder


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", DJANGO_SETTINGS)
    import django

    django.setup()


def wait_for_database(
    timeout: float, interval: float = 2.0, clock: Callable[[], float] = time.monotonic, out=sys.stderr
) -> None:
    """Wait until the default database answers, at most `timeout` seconds; UsageError when it never does."""
    from django.db import connections
    from django.db.utils import OperationalError

    connection = connections["default"]
    deadline = clock() + timeout
    attempt = 0
    while True:
        attempt += 1
        try:
            connection.ensure_connection()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            if attempt > 1:
                print(f"rackplane: the database answers (attempt {attempt}).", file=out, flush=True)
            return
        except OperationalError as error:
            connection.close()
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            left = deadline - clock()
            if left <= 0:
                raise UsageError(
                    f"The database did not answer within {timeout:g} seconds (last error: {reason}). Check "
                    "DATABASE_URL and that the database server is running and reachable from here, or raise "
                    "RACKPLANE_DB_WAIT_TIMEOUT."
                ) from None
            print(f"rackplane: waiting for the database ({reason}); {left:.0f} s left.", file=out, flush=True)
            time.sleep(min(interval, max(left, 0.1)))


def migrate(environ: Mapping[str, str], out=sys.stderr) -> int:
    """Wait for the database, then apply migrations only if `migrate --check` finds some unapplied."""
    _setup_django()
    from django.core.management import call_command

    wait_for_database(_int(environ, "RACKPLANE_DB_WAIT_TIMEOUT", 60, minimum=0), out=out)
    try:
        call_command("migrate", check_unapplied=True, verbosity=0)
    except SystemExit as exit_:  # `migrate --check` exits 1 when a migration is unapplied
        if exit_.code in (0, None):
            print("rackplane: the database is up to date; nothing to migrate.", file=out, flush=True)
            return 0
    else:
        print("rackplane: the database is up to date; nothing to migrate.", file=out, flush=True)
        return 0
    print("rackplane: applying migrations.", file=out, flush=True)
    call_command("migrate", interactive=False, verbosity=1)
    print("rackplane: migrations applied.", file=out, flush=True)
    return 0


def _exec(command: list[str]) -> None:
    """Replace this process with `command`, found beside this Python first (the virtualenv's bin/)."""
    beside = os.path.join(os.path.dirname(sys.executable), command[0])
    program = beside if os.access(beside, os.X_OK) else command[0]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", DJANGO_SETTINGS)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(program, command)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print("usage:\n" + USAGE, file=sys.stderr if not args else sys.stdout)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    environ = os.environ
    try:
        if name == "serve":
            command = serve_command(environ, rest)
            prepare_metrics_folder(environ)
            _exec(command)
        elif name == "worker":
            _exec(worker_command(environ, rest))
        elif name == "beat":
            _exec(beat_command(environ, rest))
        elif name == "migrate":
            if rest:
                raise UsageError(
                    "`rackplane migrate` takes no arguments: use `rackplane manage migrate ...`."
                )
            return migrate(environ)
        elif name == "wait-for-db":
            if rest:
                raise UsageError("`rackplane wait-for-db` takes no arguments.")
            _setup_django()
            wait_for_database(_int(environ, "RACKPLANE_DB_WAIT_TIMEOUT", 60, minimum=0))
            return 0
        elif name == "manage":
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", DJANGO_SETTINGS)
            from django.core.management import execute_from_command_line

            execute_from_command_line(["rackplane manage", *rest])
            return 0
        else:
            raise UsageError(
                f"unknown command {name!r}: use serve, worker, beat, migrate, wait-for-db or manage."
            )
    except UsageError as error:
        print(f"rackplane: {error}", file=sys.stderr)
        return 2
    return 0  # pragma: no cover - _exec does not return


if __name__ == "__main__":
    sys.exit(main())
