"""The real identity providers of scripts/idp-testbed.sh fill in a person's POSIX identity at sign-in: LDAP
from the entry's posixAccount attributes (uid, uidNumber, gidNumber) and the posixGroups naming them
(memberUid), OpenID Connect from its claims (posix_username, uid_number, gid_number, posix_groups). A change
in the provider shows at the next sign-in; an administrator's mapping is never overwritten."""

import pytest

from core.models import AuditEvent
from core.posix import PosixIdentity
from tenancy.choices import PosixSource
from tenancy.models import PosixAccount
from tenancy.models.accounts import posix_identity_of
from tests.factories import give_posix_account
from tests.identity.test_oidc_provider import CALLBACK, sign_in

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

LDAP_PASSWORD = "ada-ldap-password-1"  # testbed/ldap/directory.ldif
OIDC_PASSWORD = "ada-oidc-password-1"  # scripts/idp-testbed.sh's accounts
ADA = PosixIdentity("ada", 20001, 20001, (20100,))  # the same ids as the Slurm testbed's ada


def log_in(client, username, password):
    return client.post("/login/", {"username": username, "password": password})


def test_ldap_sign_in_fills_in_the_posix_identity_and_refreshes_it(client, ldap_settings, ldap_directory):
    import ldap

    assert log_in(client, "ada", LDAP_PASSWORD).status_code == 302
    account = PosixAccount.objects.select_related("user").get(user__username="ada")
    assert account.source == PosixSource.LDAP
    assert posix_identity_of(account.user) == ADA
    assert AuditEvent.objects.filter(
        object_type="tenancy.posixaccount", source="ldap", action="create"
    ).exists()

    # The directory moves ada to another uid and out of the shared group: the next sign-in follows.
    connection = ldap_directory.connect()
    try:
        connection.modify_s(ldap_directory.person_dn("ada"), [(ldap.MOD_REPLACE, "uidNumber", [b"20011"])])
        connection.modify_s(ldap_directory.group_dn("rp-shared"), [(ldap.MOD_DELETE, "memberUid", [b"ada"])])
    finally:
        connection.unbind_s()
    client.post("/logout/")
    assert log_in(client, "ada", LDAP_PASSWORD).status_code == 302
    assert posix_identity_of(account.user) == PosixIdentity("ada", 20011, 20001)

    # Not a posixAccount any more: the identity goes (jobs are then refused, never sent as someone else).
    connection = ldap_directory.connect()
    try:
        connection.modify_s(
            ldap_directory.person_dn("ada"),
            [
                (ldap.MOD_DELETE, "objectClass", [b"posixAccount"]),
                (ldap.MOD_DELETE, "uidNumber", None),
                (ldap.MOD_DELETE, "gidNumber", None),
                (ldap.MOD_DELETE, "homeDirectory", None),
                (ldap.MOD_DELETE, "loginShell", None),
            ],
        )
    finally:
        connection.unbind_s()
    client.post("/logout/")
    assert log_in(client, "ada", LDAP_PASSWORD).status_code == 302
    assert posix_identity_of(account.user) is None


def test_a_person_without_posix_attributes_gets_no_identity(client, ldap_settings, ldap_directory):
    ldap_directory.add_person("katherine", "katherine-ldap-password-1", given_name="Katherine")
    assert log_in(client, "katherine", "katherine-ldap-password-1").status_code == 302
    assert not PosixAccount.objects.filter(user__username="katherine").exists()


def test_ldap_never_overwrites_an_administrators_mapping(client, ldap_settings, django_user_model):
    assert log_in(client, "ada", LDAP_PASSWORD).status_code == 302
    user = django_user_model.objects.get(username="ada")
    PosixAccount.objects.filter(user=user).delete()
    give_posix_account(user, name="ada-admin", uid=40001, gid=40001)
    client.post("/logout/")
    assert log_in(client, "ada", LDAP_PASSWORD).status_code == 302
    assert posix_identity_of(user) == PosixIdentity("ada-admin", 40001, 40001)


def test_oidc_sign_in_fills_in_the_posix_identity_from_claims(client, oidc_settings, oidc_provider):
    oidc_provider.allow_redirect(CALLBACK)
    response = sign_in(client, oidc_provider, "ada", OIDC_PASSWORD)
    assert response.status_code == 302, response.content.decode()[:2000]
    account = PosixAccount.objects.select_related("user").get(user__username="ada")
    assert account.source == PosixSource.OIDC
    assert posix_identity_of(account.user) == ADA

    # The provider changes the claims: the next sign-in follows.
    config = oidc_provider.read()
    config["accounts"]["ada"].update(uid_number=20021, posix_groups=[20100, 20200])
    oidc_provider.write(config)
    client.post("/logout/")
    assert sign_in(client, oidc_provider, "ada", OIDC_PASSWORD).status_code == 302
    assert posix_identity_of(account.user) == PosixIdentity("ada", 20021, 20001, (20100, 20200))
    assert AuditEvent.objects.filter(
        object_type="tenancy.posixaccount", source="oidc", action="update"
    ).exists()
