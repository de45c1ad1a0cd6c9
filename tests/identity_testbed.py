"""Fixtures for the real identity providers of scripts/idp-testbed.sh: an OpenID Provider (oidc-provider on
Node.js) and an LDAP directory (OpenLDAP slapd). `make test` starts them and exports RACKPLANE_IDP_*; without
it these tests fail and say how to run them (never skipped).

Test modules import the fixtures they use from here (tests/identity/conftest.py, tests/e2e/test_sign_in.py).
Each test leaves the providers as it found them: the provider's accounts file and the directory's groups and
people are put back after it.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urljoin, urlparse

import pytest
import requests

HOW_TO_RUN = (
    "the identity testbed is not running: RACKPLANE_IDP_TESTBED is not set. Run these tests through `make "
    "test` (or `bash scripts/test.sh tests/identity`), which starts scripts/idp-testbed.sh and exports its "
    "environment, or start it yourself: `bash scripts/idp-testbed.sh start /tmp/idp && source /tmp/idp/env`."
)
REPO_ROOT = Path(__file__).resolve().parent.parent
GROUP_PREFIX = "rackplane-"
PLACEHOLDER_MEMBER = "cn=nobody"  # groupOfNames needs a member: an empty group holds only this one


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(HOW_TO_RUN, pytrace=False)
    return value


# --- OpenID Provider ---------------------------------------------------------------------------------------


@dataclass
class OpenIDProvider:
    """The testbed's OpenID Provider and the JSON file of its clients and accounts (re-read at every use)."""

    directory: Path
    issuer: str
    discovery_url: str
    client_id: str
    client_secret: str
    config_path: Path

    def read(self) -> dict:
        return json.loads(self.config_path.read_text())

    def write(self, config: dict) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(config, indent=2))
        tmp.replace(self.config_path)  # the provider never reads half a file

    def set_account(
        self, username: str, password: str, groups: list[str], *, sub: str | None = None, **claims
    ):
        config = self.read()
        account = config["accounts"].get(username, {})
        account.update(
            claims, password=password, groups=list(groups), sub=sub or account.get("sub") or username
        )
        config["accounts"][username] = account
        self.write(config)

    def set_groups(self, username: str, groups: list[str]) -> None:
        config = self.read()
        config["accounts"][username]["groups"] = list(groups)
        self.write(config)

    def allow_redirect(self, uri: str) -> None:
        """Register a callback URL (a live server's) with Rackplane's client."""
        config = self.read()
        client = next(c for c in config["clients"] if c["client_id"] == self.client_id)
        if uri not in client["redirect_uris"]:
            client["redirect_uris"].append(uri)
        self.write(config)

    def restart(self) -> None:
        """Restart the provider through the testbed script (same port, keys and accounts; sessions lost)."""
        subprocess.run(
            ["bash", str(REPO_ROOT / "scripts/idp-testbed.sh"), "restart-oidc", str(self.directory)],
            check=True,
            capture_output=True,
            text=True,
        )

    def endpoints(self) -> dict:
        return requests.get(self.discovery_url, timeout=10).json()

    def follow_sign_in(self, url: str, username: str, password: str, redirect_uri: str) -> str:
        """Open the provider's authorization URL `url` as a browser would (without one), sign in on its login
        page and follow its redirects until it sends the browser to `redirect_uri`: returns that URL (with
        the code and state), not followed."""
        session = requests.Session()
        response = session.get(url, allow_redirects=False, timeout=10)
        for _ in range(10):
            assert response.status_code in (302, 303), (response.status_code, response.text[:500])
            location = urljoin(self.issuer, response.headers["Location"])
            if location.startswith(redirect_uri):
                return location
            response = session.get(location, allow_redirects=False, timeout=10)
            if response.status_code == 200 and 'name="password"' in response.text:
                action = re.search(r'action="([^"]+)"', response.text).group(1)
                response = session.post(
                    urljoin(self.issuer, action),
                    data={"username": username, "password": password},
                    allow_redirects=False,
                    timeout=10,
                )
                assert response.status_code != 401, f"the provider refused {username}'s password"
        raise AssertionError("the sign-in at the provider did not come back to the client")

    def sign_in(self, username: str, password: str, redirect_uri: str):
        """The authorization code flow with PKCE through the provider's real login page: (code, verifier)."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": redirect_uri,
            "scope": "openid email profile groups",
            "state": secrets.token_urlsafe(16),
            "nonce": secrets.token_urlsafe(16),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        url = requests.Request("GET", self.endpoints()["authorization_endpoint"], params=params).prepare().url
        back = self.follow_sign_in(url, username, password, redirect_uri)
        query = dict(parse_qsl(urlparse(back).query))
        assert "code" in query, query
        return query["code"], verifier

    def access_token(self, username: str, password: str, redirect_uri: str) -> str:
        """An access token of the provider for `username`, as a machine client gets one (code flow, PKCE)."""
        self.allow_redirect(redirect_uri)
        code, verifier = self.sign_in(username, password, redirect_uri)
        response = requests.post(
            self.endpoints()["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": verifier,
            },
            auth=(self.client_id, self.client_secret),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return response.json()["access_token"]


@pytest.fixture(scope="session")
def oidc_testbed() -> OpenIDProvider:
    return OpenIDProvider(
        directory=Path(_env("RACKPLANE_IDP_TESTBED")),
        issuer=_env("RACKPLANE_IDP_OIDC_ISSUER"),
        discovery_url=_env("RACKPLANE_IDP_OIDC_DISCOVERY_URL"),
        client_id=_env("RACKPLANE_IDP_OIDC_CLIENT_ID"),
        client_secret=_env("RACKPLANE_IDP_OIDC_CLIENT_SECRET"),
        config_path=Path(_env("RACKPLANE_IDP_OIDC_CONFIG")),
    )


@pytest.fixture
def oidc_provider(oidc_testbed):
    """The OpenID Provider, its accounts file put back after the test."""
    saved = copy.deepcopy(oidc_testbed.read())
    yield oidc_testbed
    oidc_testbed.write(saved)


@pytest.fixture
def oidc_settings(settings, oidc_provider):
    """Rackplane signing in through the testbed's provider (discovery), groups prefixed `rackplane-`."""
    from tenancy.auth import forget_discovery

    settings.OIDC_RP_CLIENT_ID = oidc_provider.client_id
    settings.OIDC_RP_CLIENT_SECRET = oidc_provider.client_secret
    settings.OIDC_OP_DISCOVERY_URL = oidc_provider.discovery_url
    settings.OIDC_PROVIDER_NAME = "Test IdP"
    settings.OIDC_GROUPS_PREFIX = GROUP_PREFIX
    forget_discovery()
    yield settings
    forget_discovery()


# --- LDAP directory ----------------------------------------------------------------------------------------


@dataclass
class LDAPDirectory:
    """The testbed's slapd, changed as its admin."""

    uri: str
    bind_dn: str
    bind_password: str
    admin_dn: str
    admin_password: str
    base: str
    users: str
    groups: str

    def connect(self):
        import ldap

        connection = ldap.initialize(self.uri)
        connection.set_option(ldap.OPT_NETWORK_TIMEOUT, 10)
        connection.simple_bind_s(self.admin_dn, self.admin_password)
        return connection

    def person_dn(self, uid: str) -> str:
        return f"uid={uid},{self.users}"

    def group_dn(self, cn: str) -> str:
        return f"cn={cn},{self.groups}"

    def snapshot(self) -> dict[str, list]:
        """Every entry under people and groups, with its attributes."""
        import ldap

        connection = self.connect()
        try:
            found = {}
            for base in (self.users, self.groups):
                for dn, attrs in connection.search_s(base, ldap.SCOPE_ONELEVEL, "(objectClass=*)"):
                    found[dn] = attrs
            return found
        finally:
            connection.unbind_s()

    def restore(self, entries: dict[str, dict]) -> None:
        """Put people and groups back as `snapshot` saw them (entries added since are deleted)."""
        import ldap
        import ldap.modlist

        connection = self.connect()
        try:
            now = {}
            for base in (self.users, self.groups):
                for dn, attrs in connection.search_s(base, ldap.SCOPE_ONELEVEL, "(objectClass=*)"):
                    now[dn] = attrs
            for dn in now.keys() - entries.keys():
                connection.delete_s(dn)
            for dn, attrs in entries.items():
                if dn not in now:
                    connection.add_s(dn, ldap.modlist.addModlist(attrs))
                elif now[dn] != attrs:
                    connection.modify_s(dn, ldap.modlist.modifyModlist(now[dn], attrs))
        finally:
            connection.unbind_s()

    def add_person(
        self, uid: str, password: str, *, given_name: str = "", surname: str = "Tester", mail: str = ""
    ):
        import ldap.modlist

        attrs = {
            "objectClass": [b"inetOrgPerson"],
            "uid": [uid.encode()],
            "cn": [f"{given_name} {surname}".strip().encode()],
            "sn": [surname.encode()],
            "userPassword": [password.encode()],
        }
        if given_name:
            attrs["givenName"] = [given_name.encode()]
        if mail:
            attrs["mail"] = [mail.encode()]
        connection = self.connect()
        try:
            connection.add_s(self.person_dn(uid), ldap.modlist.addModlist(attrs))
        finally:
            connection.unbind_s()

    def set_members(self, group: str, uids: list[str]) -> None:
        """Make `group` (a groupOfNames, made if missing) hold exactly these people."""
        import ldap
        import ldap.modlist

        members = [self.person_dn(uid).encode() for uid in uids] or [
            f"{PLACEHOLDER_MEMBER},{self.base}".encode()
        ]
        connection = self.connect()
        try:
            try:
                connection.modify_s(self.group_dn(group), [(ldap.MOD_REPLACE, "member", members)])
            except ldap.NO_SUCH_OBJECT:
                attrs = {"objectClass": [b"groupOfNames"], "cn": [group.encode()], "member": members}
                connection.add_s(self.group_dn(group), ldap.modlist.addModlist(attrs))
        finally:
            connection.unbind_s()


@pytest.fixture(scope="session")
def ldap_testbed() -> LDAPDirectory:
    return LDAPDirectory(
        uri=_env("RACKPLANE_IDP_LDAP_URI"),
        bind_dn=_env("RACKPLANE_IDP_LDAP_BIND_DN"),
        bind_password=_env("RACKPLANE_IDP_LDAP_BIND_PASSWORD"),
        admin_dn=_env("RACKPLANE_IDP_LDAP_ADMIN_DN"),
        admin_password=_env("RACKPLANE_IDP_LDAP_ADMIN_PASSWORD"),
        base=_env("RACKPLANE_IDP_LDAP_BASE"),
        users=_env("RACKPLANE_IDP_LDAP_USERS"),
        groups=_env("RACKPLANE_IDP_LDAP_GROUPS"),
    )


@pytest.fixture
def ldap_directory(ldap_testbed):
    """The LDAP directory, its people and groups put back after the test."""
    saved = ldap_testbed.snapshot()
    yield ldap_testbed
    ldap_testbed.restore(saved)


@pytest.fixture
def ldap_settings(settings, ldap_directory):
    """Rackplane's login form checking passwords against the testbed's directory, as docs/operators/sign-in.md
    configures it (portal.settings builds the same objects from AUTH_LDAP_* variables)."""
    import ldap
    from django_auth_ldap.config import GroupOfNamesType, LDAPSearch

    settings.AUTH_LDAP_SERVER_URI = ldap_directory.uri
    settings.AUTH_LDAP_BIND_DN = ldap_directory.bind_dn
    settings.AUTH_LDAP_BIND_PASSWORD = ldap_directory.bind_password
    settings.AUTH_LDAP_USER_SEARCH = LDAPSearch(ldap_directory.users, ldap.SCOPE_SUBTREE, "(uid=%(user)s)")
    settings.AUTH_LDAP_GROUP_SEARCH = LDAPSearch(
        ldap_directory.groups, ldap.SCOPE_SUBTREE, "(objectClass=groupOfNames)"
    )
    settings.AUTH_LDAP_GROUP_TYPE = GroupOfNamesType(name_attr="cn")
    settings.AUTH_LDAP_GROUPS_PREFIX = GROUP_PREFIX
    settings.AUTH_LDAP_CONNECTION_OPTIONS = {ldap.OPT_NETWORK_TIMEOUT: 10}
    return settings
