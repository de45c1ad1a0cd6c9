"""/healthz, /readyz and /metrics (portal.ops.health): probes with a pod IP as Host in production mode, the
readiness checks against real failures (a closed port, an unapplied migration, an unwritable broker folder),
and who may read the metrics."""

import os
import socket

import pytest
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

from portal.ops import health

POD_IP = "10.42.3.17"  # what a kubelet sends as Host (the pod's address), never in ALLOWED_HOSTS


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def production(settings):
    """Production mode as deployed: DEBUG off, one exact host name, HTTPS redirect on."""
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["rackplane.example.org"]
    settings.SECURE_SSL_REDIRECT = True
    return settings


@pytest.fixture(autouse=True)
def _forget_migrations_answer():
    health._migrations_applied.clear()
    yield
    health._migrations_applied.clear()


# --- /healthz ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_healthz_answers_a_pod_ip_host_in_production_without_any_query(
    production, client, django_assert_num_queries
):
    # The same Host on a page is refused: the host check is really on.
    assert client.get("/login/", HTTP_HOST=POD_IP, secure=True).status_code == 400
    with django_assert_num_queries(0):
        response = client.get("/healthz", HTTP_HOST=POD_IP)
    assert response.status_code == 200  # not 400 (host), not 301 (HTTPS), not 302 (login)
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert "sessionid" not in response.cookies and "csrftoken" not in response.cookies


def test_probes_answer_without_a_host_header_and_with_a_port(production, client):
    # No Host header at all: Django falls back on SERVER_NAME, the address the server listens on.
    response = client.generic("GET", "/healthz", SERVER_NAME=POD_IP, HTTP_HOST="")
    assert response.status_code == 200
    assert client.get("/healthz/", HTTP_HOST=f"{POD_IP}:8000").status_code == 200
    assert client.head("/healthz", HTTP_HOST=POD_IP).status_code == 200


def test_probes_take_only_get_and_head(production, client):
    response = client.post("/healthz", HTTP_HOST=POD_IP)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


# --- /readyz ----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_readyz_names_each_check_when_ready(production, client):
    production.CELERY_BROKER_URL = ""
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready"
    assert {"database", "migrations", "broker"} <= set(body["checks"])
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["broker"]["detail"].startswith("none configured")


@pytest.mark.django_db
def test_readyz_fails_on_a_broker_at_a_closed_port_naming_it(production, client):
    port = closed_port()
    production.CELERY_BROKER_URL = f"redis://:s3cret@127.0.0.1:{port}/0"
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["broker"]
    reason = body["checks"]["broker"]["reason"]
    assert f"127.0.0.1:{port}" in reason and "could not be reached" in reason
    assert "s3cret" not in reason  # the password is masked
    assert body["checks"]["database"]["ok"] and body["checks"]["migrations"]["ok"]


@pytest.mark.django_db
def test_readyz_can_leave_the_broker_out_of_readiness(production, client):
    production.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    production.RACKPLANE_READY_REQUIRES_BROKER = False
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 200
    broker = response.json()["checks"]["broker"]
    assert broker["ok"] is False and broker["required"] is False


@pytest.mark.django_db
def test_readyz_on_the_filesystem_broker_checks_its_folder(production, client, tmp_path):
    production.CELERY_BROKER_URL = "filesystem://"
    production.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path)}
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 200
    assert "writable" in response.json()["checks"]["broker"]["detail"]
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone

    not_a_folder = tmp_path / "queue"
    not_a_folder.write_text("")
    production.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(not_a_folder)}
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 503
    assert str(not_a_folder) in response.json()["checks"]["broker"]["reason"]


@pytest.mark.integration
@pytest.mark.django_db
def test_readyz_with_the_real_redis_broker(production, client):
    url = os.environ.get("CELERY_TEST_BROKER_URL")
    if not url:
        pytest.skip("no Redis: CELERY_TEST_BROKER_URL is set by scripts/services.sh (make test)")
    production.CELERY_BROKER_URL = url
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 200, response.content
    assert "accepted a connection" in response.json()["checks"]["broker"]["detail"]


@pytest.fixture
def database_at_a_closed_port(settings):
    """A second database alias whose PostgreSQL server is not there (a real connection attempt, refused)."""
    alias = "replica"
    connections.settings[alias] = {
        **connections.settings["default"],
        "ENGINE": "django_prometheus.db.backends.postgresql",
        "NAME": "rackplane",
        "USER": "rackplane",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": str(closed_port()),
        "OPTIONS": {"connect_timeout": 2},
        "TEST": {},
    }
    yield alias
    connections[alias].close()
    del connections[alias]
    del connections.settings[alias]


@pytest.mark.django_db
def test_readyz_fails_when_a_database_cannot_be_reached(production, client, database_at_a_closed_port):
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == [f"database:{database_at_a_closed_port}"]
    reason = body["checks"][f"database:{database_at_a_closed_port}"]["reason"]
    assert "could not be queried" in reason
    assert body["checks"]["database"]["ok"]  # the default one still answers


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_readyz_fails_while_a_migration_is_not_applied(production, client):
    production.CELERY_BROKER_URL = ""
    recorder = MigrationRecorder(connections["default"])
    last = recorder.migration_qs.filter(app="scheduling").order_by("-id").first()
    last.delete()  # as before `migrate` ran on a new release (rolled back with the test)
    response = client.get("/readyz", HTTP_HOST=POD_IP)
    assert response.status_code == 503
    reason = response.json()["checks"]["migrations"]["reason"]
    assert f"scheduling.{last.name}" in reason and "manage.py migrate" in reason

    recorder.record_applied(last.app, last.name)
    assert client.get("/readyz", HTTP_HOST=POD_IP).status_code == 200
    assert "default" in health._migrations_applied  # remembered: not checked again in this process


# --- /metrics access --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_need_the_bearer_token_when_one_is_set(production, client):
    production.RACKPLANE_METRICS_TOKEN = "metrics-token-0123456789"
    response = client.get("/metrics", HTTP_HOST=POD_IP)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    wrong = client.get("/metrics", HTTP_HOST=POD_IP, HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    ok = client.get("/metrics", HTTP_HOST=POD_IP, HTTP_AUTHORIZATION="Bearer metrics-token-0123456789")
    assert ok.status_code == 200
    assert ok["Content-Type"].startswith("text/plain; version=")
    assert b"rackplane_gpus" in ok.content


@pytest.mark.django_db
def test_metrics_without_a_token_are_closed_in_production_even_from_loopback(production, client):
    production.RACKPLANE_METRICS_TOKEN = ""
    response = client.get("/metrics", HTTP_HOST=POD_IP, REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 403
    assert b"RACKPLANE_METRICS_TOKEN" in response.content


@pytest.mark.django_db
def test_metrics_without_a_token_are_open_to_loopback_in_development(settings, client):
    settings.DEBUG = True
    settings.RACKPLANE_METRICS_TOKEN = ""
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.0.0.5").status_code == 403


def test_settings_route_the_probes_before_everything_else(settings):
    assert settings.MIDDLEWARE[0] == "portal.ops.health.ProbeMiddleware"
