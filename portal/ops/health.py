"""Probes and metrics: /healthz (liveness), /readyz (readiness), /metrics (Prometheus). docs/metrics.md.

`ProbeMiddleware` sits first in MIDDLEWARE and answers these three paths itself, before anything reads the
Host header: kubelets probe with the pod's IP (or no Host at all) and Prometheus scrapes pod addresses, none
of which is in ALLOWED_HOSTS, so Django's host check would turn every probe into a 400. Nothing below it runs
for them either: no HTTPS redirect (probes speak plain HTTP inside the cluster), no session, CSRF, login
redirect, sign-in lockout or request metrics. The answers never depend on the Host header, so skipping the
check opens nothing.

* /healthz: the process answers. No database, no broker: a liveness probe must never restart web pods because
  a dependency they all share is down.
* /readyz: the database answers `SELECT 1`, every migration is applied (remembered once true), and the task
  queue's broker accepts a connection when one is configured (the filesystem broker of `make run`: its folder
  is writable). 200 with each check, or 503 naming the one that failed and why. Setting
  RACKPLANE_READY_REQUIRES_BROKER=0 keeps a broker outage out of readiness (reported, not failing).
* /metrics: see core.metrics; a bearer token (RACKPLANE_METRICS_TOKEN), or, without one, loopback callers in
  development (DEBUG) only.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import tempfile
from functools import partial
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpResponse, JsonResponse

from core.metrics import CONTENT_TYPE, exposition

log = logging.getLogger(__name__)

# Seconds to wait for the broker (connect and each read) before /readyz calls it unreachable.
BROKER_TIMEOUT = 2.0

_migrations_applied: set[str] = set()  # database aliases found fully migrated (it stays true)


def _no_store(response: HttpResponse) -> HttpResponse:
    response.headers["Cache-Control"] = "no-store"
    return response


# --- /healthz -----------------------------------------------------------------------------------------------


def healthz(request) -> HttpResponse:
    return _no_store(JsonResponse({"status": "ok"}))


# --- /readyz ------------------------------------------------------------------------------------------------


class NotReady(Exception):
    """A readiness check failed; the message says why and what to do."""


def check_database(alias: str = DEFAULT_DB_ALIAS) -> str:
    connection = connections[alias]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:
        # Drop the broken connection so the next probe opens a fresh one (the database may be back).
        try:
            connection.close()
        except Exception:
            log.debug("closing the %s database connection after a failed probe", alias, exc_info=True)
        raise NotReady(f"the database ({alias}) could not be queried: {error}".strip()) from error
    return "SELECT 1 answered"


def check_migrations(alias: str = DEFAULT_DB_ALIAS) -> str:
    if alias in _migrations_applied:
        return "all applied"
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        first = plan[0][0]
        raise NotReady(
            f"{len(plan)} database migration(s) are not applied (first: {first.app_label}.{first.name}): run "
            "`manage.py migrate` (the release's migration job)."
        )
    _migrations_applied.add(alias)
    return "all applied"


def check_broker() -> str:
    url = settings.CELERY_BROKER_URL
    if not url:
        return "none configured (tasks run in the web process)"
    if url.startswith("filesystem:"):
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
        try:
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".readyz-"):
                pass
        except OSError as error:
            raise NotReady(
                f"the filesystem broker's folder {folder} is not writable ({error.strerror or error}): "
                "check that it exists and belongs to the user the portal runs as."
            ) from error
        return f"filesystem broker folder {folder} is writable"
    from kombu import Connection

    from portal.celery import app

    options = {
        **(app.conf.broker_transport_options or {}),
        "socket_connect_timeout": BROKER_TIMEOUT,
        "socket_timeout": BROKER_TIMEOUT,
    }
    connection = Connection(url, connect_timeout=BROKER_TIMEOUT, transport_options=options)
    where = connection.as_uri()  # the password masked
    try:
        connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=BROKER_TIMEOUT)
    except Exception as error:
        raise NotReady(
            f"the task queue's broker at {where} could not be reached ({error}): check that it runs and that "
            "CELERY_BROKER_URL points at it."
        ) from error
    finally:
        connection.release()
    return f"{where} accepted a connection"


def readyz(request) -> HttpResponse:
    # Every configured database answers; the default one is fully migrated; the broker is reachable.
    checks = {
        "database" if alias == DEFAULT_DB_ALIAS else f"database:{alias}": partial(check_database, alias)
        for alias in connections
    }
    checks |= {"migrations": check_migrations, "broker": check_broker}
    results: dict[str, dict[str, object]] = {}
    ready = True
    for name, check in checks.items():
        if name == "migrations" and not results["database"]["ok"]:
            results[name] = {"ok": False, "reason": "not checked: the database could not be queried"}
            continue
        try:
            results[name] = {"ok": True, "detail": check()}
        except NotReady as error:
            required = name != "broker" or settings.RACKPLANE_READY_REQUIRES_BROKER
            results[name] = {"ok": False, "reason": str(error), **({} if required else {"required": False})}
            ready = ready and not required
            log.warning("readiness: %s: %s", name, error)
    failing = [name for name, result in results.items() if not result["ok"]]
    body = {"status": "ready" if ready else "not ready", "checks": results}
    if failing:
        body["failing"] = failing
    return _no_store(JsonResponse(body, status=200 if ready else 503))


# --- /metrics -----------------------------------------------------------------------------------------------


def _loopback(request) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def metrics_refusal(request) -> HttpResponse | None:
    """Why `request` may not read /metrics (401/403 in plain text), or None when it may."""
    token = settings.RACKPLANE_METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        response = HttpResponse(
            "The metrics need the bearer token set in RACKPLANE_METRICS_TOKEN: send it as "
            "`Authorization: Bearer <token>` (Prometheus: the scrape job's authorization credentials).\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response.headers["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if settings.DEBUG and _loopback(request):
        return None
    return HttpResponse(
        "The metrics are closed: set RACKPLANE_METRICS_TOKEN to a random secret and give it to Prometheus "
        "as a bearer token (without it, only loopback callers of a development portal, DEBUG=1, may read "
        "them).\n",
        status=403,
        content_type="text/plain; charset=utf-8",
    )


def metrics(request) -> HttpResponse:
    refusal = metrics_refusal(request)
    if refusal is not None:
        return _no_store(refusal)
    from portal.ops.metrics import collector

    return _no_store(HttpResponse(exposition([collector]), content_type=CONTENT_TYPE))


# --- The middleware that answers them -----------------------------------------------------------------------

PROBES = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics}


class ProbeMiddleware:
    """Answers /healthz, /readyz and /metrics (with or without a trailing slash) before any other middleware:
    see the module docstring. GET and HEAD only."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        view = PROBES.get(request.path_info.rstrip("/") or "/")
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse("Only GET and HEAD.\n", status=405, content_type="text/plain")
            response.headers["Allow"] = "GET, HEAD"
            return response
        response = view(request)
        if request.method == "HEAD":
            response.content = b""
        return response
