"""The single sign-on and LDAP settings read from the environment (portal.settings), as
docs/operators/sign-in.md gives them: off when unset, refused at start with a sentence when half set, and
the LDAP searches the variables build find the testbed directory's people and groups. Settings are read once
per process: each case starts a fresh Python."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow(reason="a fresh Python per case")

REPO_ROOT = Path(__file__).resolve().parents[2]
IDENTITY_VARIABLES = ("OIDC_", "AUTH_LDAP_")


def run_django(tmp_path, code: str, **variables):
    env = {key: value for key, value in os.environ.items() if not key.startswith(IDENTITY_VARIABLES)}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="1",
        DATABASE_URL=f"sqlite:///{tmp_path / 'settings-test.sqlite3'}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    )
    env.update(variables)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings\n" + code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_both_are_off_until_configured(tmp_path):
    done = run_django(
        tmp_path,
        "from tenancy.auth import ldap_enabled, oidc_enabled\n"
        "print(oidc_enabled(), ldap_enabled(), settings.SESSION_COOKIE_SAMESITE, settings.OIDC_USE_PKCE)",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "Lax", "True"]


def test_openid_connect_from_the_environment(tmp_path):
    done = run_django(
        tmp_path,
        "print(settings.OIDC_RP_CLIENT_ID, settings.OIDC_OP_DISCOVERY_URL, settings.OIDC_GROUPS_CLAIM,"
        " settings.OIDC_GROUPS_PREFIX, settings.OIDC_PROVIDER_NAME.replace(' ', '_'),"
        " settings.OIDC_RP_SCOPES)",
        OIDC_RP_CLIENT_ID="rackplane",
        OIDC_RP_CLIENT_SECRET="s3cret",
        OIDC_OP_DISCOVERY_URL="https://idp.example.org/.well-known/openid-configuration",
        OIDC_GROUPS_CLAIM="roles",
        OIDC_GROUPS_PREFIX="rackplane-",
        OIDC_PROVIDER_NAME="Example SSO",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "rackplane",
        "https://idp.example.org/.well-known/openid-configuration",
        "roles",
        "rackplane-",
        "Example_SSO",
        "openid",
        "email",
        "profile",
        "groups",
    ]


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        pytest.param(
            {"OIDC_RP_CLIENT_ID": "rackplane", "OIDC_OP_DISCOVERY_URL": "https://idp/x"},
            "OIDC_RP_CLIENT_SECRET is empty",
            id="no-secret",
        ),
        pytest.param(
            {
                "OIDC_RP_CLIENT_ID": "rackplane",
                "OIDC_RP_CLIENT_SECRET": "s",
                "OIDC_OP_TOKEN_ENDPOINT": "https://t",
            },
            "OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_USER_ENDPOINT, OIDC_OP_JWKS_ENDPOINT are empty",
            id="no-endpoints",
        ),
        pytest.param(
            {"AUTH_LDAP_SERVER_URI": "ldap://x", "AUTH_LDAP_GROUP_SEARCH_BASE": "ou=g"},
            "AUTH_LDAP_USER_SEARCH_BASE is empty",
            id="ldap-no-user-base",
        ),
        pytest.param(
            {
                "AUTH_LDAP_SERVER_URI": "ldap://x",
                "AUTH_LDAP_USER_SEARCH_BASE": "ou=p",
                "AUTH_LDAP_GROUP_SEARCH_BASE": "ou=g",
                "AUTH_LDAP_GROUP_TYPE": "activeDirectory",
            },
            "AUTH_LDAP_GROUP_TYPE is 'activeDirectory'",
            id="ldap-unknown-group-type",
        ),
    ],
)
def test_half_a_configuration_stops_the_portal_with_the_reason(tmp_path, variables, message):
    done = run_django(tmp_path, "print('started')", **variables)
    assert done.returncode != 0, done.stdout
    assert "ImproperlyConfigured" in done.stderr and message in done.stderr


@pytest.mark.integration
def test_the_ldap_variables_find_the_directorys_people_and_groups(tmp_path, ldap_testbed):
    """The searches portal.settings builds from AUTH_LDAP_* run against the testbed's slapd, bound as the
    service account."""
    code = (
        "import ldap\n"
        "connection = ldap.initialize(settings.AUTH_LDAP_SERVER_URI)\n"
        "connection.simple_bind_s(settings.AUTH_LDAP_BIND_DN, settings.AUTH_LDAP_BIND_PASSWORD)\n"
        "people = settings.AUTH_LDAP_USER_SEARCH.execute(connection, {'user': 'ada'})\n"
        "print('person', people[0][0])\n"
        "groups = settings.AUTH_LDAP_GROUP_SEARCH.execute(connection)\n"
        "print('groups', ' '.join(sorted(attrs['cn'][0] for _, attrs in groups)))\n"
        "print('type', type(settings.AUTH_LDAP_GROUP_TYPE).__name__, settings.AUTH_LDAP_GROUPS_PREFIX)\n"
    )
    done = run_django(
        tmp_path,
        code,
        AUTH_LDAP_SERVER_URI=ldap_testbed.uri,
        AUTH_LDAP_BIND_DN=ldap_testbed.bind_dn,
        AUTH_LDAP_BIND_PASSWORD=ldap_testbed.bind_password,
        AUTH_LDAP_USER_SEARCH_BASE=ldap_testbed.users,
        AUTH_LDAP_GROUP_SEARCH_BASE=ldap_testbed.groups,
        AUTH_LDAP_GROUPS_PREFIX="rackplane-",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"person uid=ada,{ldap_testbed.users}"
    assert {"payroll", "rackplane-admins", "rackplane-alpha-members"} <= set(lines[1].split()[1:])
    assert lines[2] == "type GroupOfNamesType rackplane-"
