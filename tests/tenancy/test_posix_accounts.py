"""A person's POSIX identity (tenancy.PosixAccount): what is refused, what a sign-in through LDAP or OpenID
Connect does to it (tenancy.identity.sync_posix), that an administrator's mapping stays, and that every
change is audited. The real providers filling it in: tests/identity/test_posix_identity.py."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st

from core.models import AuditEvent
from core.posix import RESERVED_NAMES, PosixIdentity
from tenancy.choices import PosixSource
from tenancy.identity import posix_identity_from, sync_posix
from tenancy.models import PosixAccount
from tenancy.models.accounts import posix_identity_of
from tests.factories import give_posix_account, make_user

pytestmark = pytest.mark.django_db

ADA = PosixIdentity(name="ada", uid=20001, gid=20001, groups=(20100,))


def account(user, **fields) -> PosixAccount:
    values = {"user": user, "name": "ada", "uid": 20001, "gid": 20001, "groups": [], **fields}
    return PosixAccount(**values)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"uid": 0}, "uid", "root"),
        ({"gid": 65534}, "gid", "nobody"),
        ({"uid": 2**31}, "uid", "must be from 1"),
        ({"name": "Ada"}, "name", "POSIX user name"),
        ({"name": "-rf"}, "name", "POSIX user name"),
        ({"name": "a" * 33}, "name", "POSIX user name"),
        ({"name": "root"}, "name", "system account"),  # Slurm takes the uid of the NAME from the node
        ({"name": "slurm"}, "name", "system account"),
        ({"groups": [20100, 0]}, "groups", "root"),
        ({"groups": "20100"}, "groups", "list"),
    ],
)
def test_clean_refuses_what_no_job_may_run_as(fields, field, words):
    person = make_user("someone", posix=False)
    with pytest.raises(ValidationError) as refused:
        account(person, **fields).full_clean()
    assert words in " ".join(refused.value.message_dict[field])


def test_a_uid_or_login_name_belongs_to_one_person_only():
    first, second = make_user("first", posix=False), make_user("second", posix=False)
    account(first).save()
    with pytest.raises(ValidationError) as refused:
        account(second, name="other").full_clean()
    assert "uid 20001 belongs to another person" in refused.value.message_dict["uid"]
    with pytest.raises(ValidationError) as refused:
        account(second, uid=20002).full_clean()
    assert "belongs to another person" in refused.value.message_dict["name"][0]
    # The database holds the same rules for code that skips clean().
    for fields in ({"name": "other"}, {"uid": 20002}):
        with pytest.raises(IntegrityError), transaction.atomic():
            account(second, **fields).save()


@pytest.mark.parametrize("fields", [{"uid": 0}, {"gid": 65534}])
def test_the_database_refuses_root_and_nobody(fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        account(make_user("someone", posix=False), **fields).save()


def test_clean_keeps_the_groups_sorted_without_the_primary_one():
    row = account(make_user("someone", posix=False), groups=[20200, 20001, 20100, 20200])
    row.full_clean()
    assert row.groups == [20100, 20200]
    assert row.identity() == PosixIdentity("ada", 20001, 20001, (20100, 20200))


def test_a_sign_in_makes_refreshes_and_removes_the_providers_identity_and_audits_it():
    person = make_user("ada", posix=False)
    assert posix_identity_of(person) is None
    assert sync_posix(person, ADA, "ldap") == "made"
    assert posix_identity_of(person) == ADA
    assert PosixAccount.objects.get(user=person).source == PosixSource.LDAP
    assert sync_posix(person, ADA, "ldap") == "unchanged"
    moved = PosixIdentity(name="ada", uid=20011, gid=20001, groups=())
    assert sync_posix(person, moved, "ldap") == "refreshed"
    assert posix_identity_of(person) == moved
    assert sync_posix(person, None, "ldap") == "removed"  # the directory no longer gives one
    assert posix_identity_of(person) is None
    events = AuditEvent.objects.filter(object_type="tenancy.posixaccount", source="ldap", actor=person)
    assert [e.action for e in events.order_by("pk")] == ["create", "update", "delete"]
    assert events.order_by("pk")[1].after == {"uid": 20011, "groups": []}


def test_an_administrators_mapping_is_never_overwritten_by_a_provider():
    person = make_user("ada", posix=False)
    give_posix_account(person, name="ada", uid=40001, gid=40001)
    assert sync_posix(person, ADA, "oidc") == "kept (set by an administrator)"
    assert sync_posix(person, None, "ldap").startswith("kept")
    assert posix_identity_of(person) == PosixIdentity("ada", 40001, 40001)


def test_a_provider_cannot_give_one_person_anothers_uid():
    make_user("grace", posix=False)
    give_posix_account(make_user("owner", posix=False), name="owner", uid=20001, gid=20001)
    person = make_user("ada", posix=False)
    outcome = sync_posix(person, ADA, "oidc")
    assert outcome.startswith("refused: uid 20001") and "owner" in outcome
    assert posix_identity_of(person) is None


def test_provider_values_are_read_as_numbers_or_ignored():
    assert posix_identity_from("ada", "20001", 20001, ["20100", 20001]) == ADA
    assert posix_identity_from(None, None, None) is None
    assert posix_identity_from("ada", "20001", None) is None  # half an identity is none
    assert posix_identity_from("ada", "0", "20001") is None  # root: never
    assert posix_identity_from("Not A Name", 20001, 20001) is None
    assert posix_identity_from("ada", 20001, 20001, ["x", 20100]) == ADA  # a bad group is dropped


names = st.from_regex(r"[a-z_][a-z0-9_.-]{0,31}", fullmatch=True).filter(lambda n: n not in RESERVED_NAMES)
ids = st.integers(1, 2**31 - 1).filter(lambda n: n != 65534)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@given(name=names, uid=ids, gid=ids, groups=st.lists(ids, max_size=6))
def test_any_valid_identity_reads_back_the_same_from_text_attributes(name, uid, gid, groups):
    identity = posix_identity_from(name, str(uid), str(gid), [str(g) for g in groups])
    assert identity == PosixIdentity(name, uid, gid, tuple(sorted(set(groups) - {gid})))


def test_the_django_admin_saves_an_administrators_mapping(client):
    admin = make_user("root-admin", staff=True)
    admin.is_superuser = True
    admin.save()
    person = make_user("ada", posix=False)
    client.force_login(admin)
    response = client.post(
        "/admin/tenancy/posixaccount/add/",
        {"user": person.pk, "name": "ada", "uid": 20001, "gid": 20001, "groups": "20100, 20200"},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    row = PosixAccount.objects.get(user=person)
    assert (row.source, row.groups) == (PosixSource.ADMIN, [20100, 20200])
    response = client.post(
        "/admin/tenancy/posixaccount/add/",
        {"user": make_user("bob", posix=False).pk, "name": "bob", "uid": 20001, "gid": 20001, "groups": ""},
    )
    assert response.status_code == 200 and "uid 20001 belongs to another person" in response.content.decode()
    made = AuditEvent.objects.filter(object_type="tenancy.posixaccount", action="create", actor=admin)
    assert [(e.source, e.object_repr) for e in made] == [("admin", "ada (20001:20001)")]


@pytest.mark.parametrize("name", ["root", "nobody", "slurm", "munge", "daemon"])
def test_a_system_accounts_name_is_never_an_identity(name):
    """Slurm runs a job as the uid the node's user database gives the NAME: a provider saying a person is
    `root` (with any uid) would run their jobs as root."""
    with pytest.raises(ValueError, match="system account"):
        PosixIdentity(name, 20001, 20001)
    assert posix_identity_from(name, 20001, 20001) is None
    person = make_user("someone", posix=False)
    assert sync_posix(person, posix_identity_from(name, 20001, 20001), "oidc") == "none"


def test_an_inactive_account_has_no_identity():
    """An inactive account is nobody: its queued jobs are refused at dispatch, never run as it."""
    person = make_user("leaver")
    assert posix_identity_of(person) is not None
    person.is_active = False
    person.save()
    assert posix_identity_of(person) is None
