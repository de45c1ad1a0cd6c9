"""The production stack as deployed: gunicorn serving portal.wsgi with DEBUG off, a random SECRET_KEY and
explicit hosts. Unknown URLs are 404 (never 500) for everyone, every response carries the security headers,
RACKPLANE_TLS=1 adds HSTS and Secure cookies, the settings refuse wildcard hosts and weak keys, and
`manage.py check --deploy` is clean in the documented production configuration (docs/deployment/settings.md).

Settings are read once per process, so each case starts its own Python (or gunicorn) with a controlled
environment.
"""

import contextlib
import http.client
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.fresh_clone import copy_database

pytestmark = pytest.mark.slow(reason="subprocesses: gunicorn, fresh Pythons")

REPO_ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).parent / "gunicorn"
# What the settings read, and what the test session set: none of it may leak into these processes.
SETTINGS_VARIABLES = {
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "STATIC_ROOT",
    "RACKPLANE_TLS",
    "RACKPLANE_TLS_PROXY",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "DJANGO_ALLOW_ASYNC_UNSAFE",  # set by tests/e2e/conftest.py; never in production (check --deploy says so)
}
MEMBER = ("night-operator", "a-long-operator-password-7")
ADMIN = ("platform-root", "a-long-admin-password-9")
UNKNOWN = ["/nonexistent/", "/api/v1/nope/", "/static/nope.css"]


def production_env(database: Path, **variables) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_VARIABLES}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL=f"sqlite:///{database}",
    )
    env.update(variables)
    return env


def run(args: list[str], env: dict, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def database(tmp_path_factory, prepared_clone_template) -> Path:
    """A migrated SQLite database (the demo's, tests/fresh_clone.py) with a member and a platform admin."""
    database = copy_database(prepared_clone_template, tmp_path_factory.mktemp("production"))
    env = production_env(database)
    users = run(
        [
            sys.executable,
            "manage.py",
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model; User = get_user_model(); "
            f"User.objects.create_user({MEMBER[0]!r}, password={MEMBER[1]!r}); "
            f"User.objects.create_superuser({ADMIN[0]!r}, password={ADMIN[1]!r})",
        ],
        env,
    )
    assert users.returncode == 0, users.stderr
    return database


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Portal:
    """A gunicorn serving portal.wsgi on 127.0.0.1; `request` speaks plain HTTP to it."""

    def __init__(self, port: int):
        self.port = port

    def request(self, method: str, path: str, headers: dict | None = None, body: str | None = None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            response.text = response.read().decode()
            return response
        finally:
            connection.close()

    def sign_in(self, username: str, password: str, headers: dict | None = None) -> dict:
        """POST /login/ with the form's CSRF token, as a browser does; the cookies it set."""
        headers = dict(headers or {})
        form = self.request("GET", "/login/", headers)
        assert form.status == 200, form.text
        cookies = cookies_of(form)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        scheme = "https" if headers.get("X-Forwarded-Proto") == "https" else "http"
        signed_in = self.request(
            "POST",
            "/login/",
            {
                **headers,
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={cookies['csrftoken'].value}",
                "Origin": f"{scheme}://127.0.0.1:{self.port}",
            },
            urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token}),
        )
        assert signed_in.status == 302, signed_in.text
        cookies.update(cookies_of(signed_in))
        assert "sessionid" in cookies
        return cookies


def cookies_of(response) -> SimpleCookie:
    cookies = SimpleCookie()
    for header in response.headers.get_all("Set-Cookie") or []:
        cookies.load(header)
    return cookies


def cookie_header(cookies: SimpleCookie) -> dict:
    return {"Cookie": "; ".join(f"{name}={morsel.value}" for name, morsel in cookies.items())}


@contextlib.contextmanager
def gunicorn(database: Path, tmp_path: Path, **variables):
    port = free_port()
    log = tmp_path / f"gunicorn-{port}.log"
    env = production_env(database, **variables)
    with log.open("w") as output:
        server = subprocess.Popen(
            [str(GUNICORN), "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        portal = Portal(port)
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"gunicorn exited:\n{log.read_text()}"
            try:
                portal.request("GET", "/login/")
                break
            except OSError:
                assert time.monotonic() < deadline, f"gunicorn did not answer:\n{log.read_text()}"
                time.sleep(0.2)
        yield portal
        # A 500 anywhere above would be logged with its traceback.
        assert "Internal Server Error" not in log.read_text(), log.read_text()
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def portal(database, tmp_path_factory):
    with gunicorn(database, tmp_path_factory.mktemp("gunicorn")) as portal:
        yield portal


@pytest.fixture(scope="module")
def tls_portal(database, tmp_path_factory):
    """Behind a TLS-terminating proxy: RACKPLANE_TLS=1 and the proxy's X-Forwarded-Proto trusted."""
    with gunicorn(
        database, tmp_path_factory.mktemp("gunicorn-tls"), RACKPLANE_TLS="1", RACKPLANE_TLS_PROXY="1"
    ) as portal:
        yield portal


def assert_security_headers(response):
    policy = response.getheader("Content-Security-Policy") or ""
    assert "default-src 'self'" in policy and "script-src 'self'" in policy, policy
    assert "unsafe-inline" not in policy.split("style-src-attr")[0], policy  # none for scripts or <style>
    assert "frame-ancestors 'none'" in policy
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    assert response.getheader("Referrer-Policy") == "same-origin"
    assert response.getheader("X-Frame-Options") == "DENY"


@pytest.mark.parametrize("url", UNKNOWN)
def test_unknown_urls_are_404_for_an_anonymous_visitor(portal, url):
    response = portal.request("GET", url)
    assert response.status == 404, response.text
    assert_security_headers(response)


@pytest.mark.parametrize("account", [MEMBER, ADMIN], ids=["member", "admin"])
def test_unknown_urls_are_404_when_signed_in(portal, account):
    cookies = portal.sign_in(*account)
    for url in [*UNKNOWN, "/inventory/racks/no-such-rack/"]:
        response = portal.request("GET", url, cookie_header(cookies))
        assert response.status == 404, (url, response.text)
        assert_security_headers(response)
        if url.startswith("/api/"):
            assert response.getheader("Content-Type") == "application/json"
        else:
            assert "<h1>Not found</h1>" in response.text
    # The session is real: a known page opens.
    assert portal.request("GET", "/inventory/racks/", cookie_header(cookies)).status == 200


def test_pages_carry_the_security_headers_and_no_https_ones_without_tls(portal):
    response = portal.request("GET", "/login/")
    assert response.status == 200
    assert_security_headers(response)
    assert response.getheader("Strict-Transport-Security") is None
    assert "secure" not in response.getheader("Set-Cookie").lower()


def test_tls_redirects_plain_http_to_https(tls_portal):
    response = tls_portal.request("GET", "/login/")
    assert response.status == 301
    assert response.getheader("Location") == f"https://127.0.0.1:{tls_portal.port}/login/"


def test_tls_sends_hsts_and_secure_cookies(tls_portal):
    https = {"X-Forwarded-Proto": "https"}
    response = tls_portal.request("GET", "/login/", https)
    assert response.status == 200
    assert_security_headers(response)
    assert response.getheader("Strict-Transport-Security") == "max-age=31536000; includeSubDomains"
    assert cookies_of(response)["csrftoken"]["secure"]

    cookies = tls_portal.sign_in(*MEMBER, headers=https)
    session = cookies["sessionid"]
    assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"
    response = tls_portal.request("GET", "/nonexistent/", {**https, **cookie_header(cookies)})
    assert response.status == 404
    assert response.getheader("Strict-Transport-Security")


# --- the settings refuse what a security review would not accept --------------------------------------------


def start_django(tmp_path, **variables) -> subprocess.CompletedProcess:
    env = production_env(tmp_path / "settings.sqlite3", **variables)
    return run([sys.executable, "-c", "import django; django.setup()"], env, timeout=60)


@pytest.mark.parametrize("hosts", ["*", " ", "rackplane.example.com,*", "*.example.com", " , "])
def test_production_refuses_wildcard_or_blank_allowed_hosts(tmp_path, hosts):
    result = start_django(tmp_path, ALLOWED_HOSTS=hosts)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "ALLOWED_HOSTS contains a wildcard" in result.stderr or "ALLOWED_HOSTS is empty" in result.stderr


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        pytest.param("a" * 32, "fewer than 50", id="a-times-32"),
        pytest.param("a" * 64, "only 1 different characters", id="a-times-64"),
        pytest.param("a" * 45 + "bcdefghijk", "bits of entropy per character", id="low-entropy"),
        pytest.param("0123456789abcdef" * 4, "repeats a run of 8 characters", id="repeated"),
        pytest.param(secrets.token_urlsafe(20), "fewer than 50", id="short"),
        pytest.param("django-insecure-" + secrets.token_urlsafe(50), "development key", id="django-insecure"),
    ],
)
def test_production_refuses_a_weak_secret_key(tmp_path, key, reason):
    result = start_django(tmp_path, SECRET_KEY=key)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY" in result.stderr and reason in result.stderr
    assert key not in result.stderr  # the key itself is never printed


@pytest.mark.parametrize("key", [secrets.token_urlsafe(50), secrets.token_hex(32)], ids=["urlsafe", "hex"])
def test_production_accepts_a_random_key_and_exact_hosts(tmp_path, key):
    result = start_django(tmp_path, SECRET_KEY=key, ALLOWED_HOSTS="rackplane.example.com, portal.example.com")
    assert result.returncode == 0, result.stderr


def deploy_check(database, **variables) -> subprocess.CompletedProcess:
    # A migrated database, as in production: drf-spectacular's deploy check generates the API schema.
    env = production_env(database, ALLOWED_HOSTS="rackplane.example.com", **variables)
    return run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)


def test_check_deploy_is_clean_in_the_documented_production_configuration(database):
    result = deploy_check(database, RACKPLANE_TLS="1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_fails_without_tls(database):
    result = deploy_check(database)
    assert result.returncode != 0
    for check in ["security.W004", "security.W008", "security.W012", "security.W016"]:
        assert check in result.stderr, result.stderr
