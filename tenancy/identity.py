"""Sign-in through an identity provider: which account it is, and the roles its groups give (GroupRoleRule).

Both doors (OpenID Connect and LDAP, tenancy.auth) end here with the provider's stable identifier for the
person and their groups:

* `account_for` finds the account linked to that identifier (ExternalIdentity), or makes one at the first
  sign-in. It never takes over an account that exists already under the same username: a platform admin
  links the two by hand (Django admin, External identities), so an identity provider cannot hand a local
  account, a platform admin's say, to whoever it calls by that name.
* `sync_roles` applies the rules to the groups that start with the configured prefix (identity providers
  send dozens of groups; only Rackplane's matter): the roles they give are added or changed, and roles this
  provider gave earlier whose group is gone are removed. Roles granted by hand (or by the other provider)
  are left alone, whatever the groups say. Every change goes through tenancy.services and is audited
  (core.audit) with the provider as its source and the person signing in as the actor.
* `sync_posix` keeps the person's POSIX identity (tenancy.PosixAccount: the Unix user their jobs run as) as
  the provider says at each sign-in (LDAP uidNumber/gidNumber/uid and posixGroup memberships, OpenID Connect
  claims): made, refreshed, or removed when the provider no longer gives one. An identity an administrator
  set is never overwritten by a provider, and a uid or login name that is another person's is refused
  (logged; the person keeps no identity from it). Audited like the roles.
* A rule naming a project gives the project's role (ProjectMembership, its `origin` the provider, as a
  department Membership's) and at least membership of its department (a project's people are its
  department's). Project roles are re-synced like department roles: those this provider gave whose group
  is gone are removed, those granted by hand stay.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy

from core.access import Role
from core.audit import audit_context
from core.models import AuditAction, AuditEvent
from core.posix import PosixIdentity
from tenancy.choices import GrantedRole, PosixSource, ProjectRole, RoleOrigin
from tenancy.i18n import english
from tenancy.models import ExternalIdentity, GroupRoleRule, Membership, PosixAccount, ProjectMembership
from tenancy.services import remove_membership, set_membership

logger = logging.getLogger(__name__)

USERNAME = re.compile(r"^[\w.@+-]{1,150}$")
RANK = {Role.MEMBER: 1, Role.LEAD: 2}  # the highest role a person's groups give in a department wins
SIGN_IN_RESOLUTION = datetime.timedelta(minutes=1)


class SignInRefused(Exception):
    """The identity provider vouched for the person, but Rackplane does not let them in; the message says
    why and what to do, in words for the person signing in.

    `message` is a translatable text (gettext_lazy) with %(name)s placeholders filled from `params`: str()
    reads it in the language of the request, `english` for the logs."""

    def __init__(self, message, **params):
        super().__init__(message, params)
        self.message, self.params = message, params

    def __str__(self) -> str:
        return str(self.message) % {name: str(value) for name, value in self.params.items()}

    @property
    def english(self) -> str:
        return english(self)


def groups_in_scope(groups: Iterable, prefix: str) -> list[str]:
    """The group names that start with `prefix` (all of them when it is empty), sorted, without repeats.
    Anything that is not a string (a malformed claim) is ignored."""
    return sorted({group for group in groups if isinstance(group, str) and group.startswith(prefix)})


@transaction.atomic
def account_for(
    provider: str,
    subject: str,
    username: str,
    *,
    email: str = "",
    first_name: str = "",
    last_name: str = "",
    create: bool = True,
):
    """The account the provider's user `subject` signs in as: the linked one (its e-mail and names updated
    from the provider), or at the first sign-in a new one named `username` (no password: it signs in
    through the provider only). SignInRefused when the username is unusable or taken by an account that is
    not linked, or when `create` is off and none is linked."""
    User = get_user_model()
    link = ExternalIdentity.objects.select_related("user").filter(provider=provider, subject=subject).first()
    label = provider_label(provider)
    named = provider_name(provider)
    if link is not None:
        user = link.user
        profile = {"email": email, "first_name": first_name, "last_name": last_name}
        changed = [name for name, value in profile.items() if value and getattr(user, name) != value]
        for name in changed:
            setattr(user, name, profile[name])
        if changed:
            user.save(update_fields=changed)
        return user
    if not create:
        raise SignInRefused(
            gettext_lazy(
                "Your %(provider)s account has no Rackplane account, and this portal does not make them at "
                "first sign-in: ask a platform admin to make one and link it to your identity."
            ),
            provider=named,
        )
    if not USERNAME.match(username or ""):
        raise SignInRefused(
            gettext_lazy(
                "Your %(provider)s account's user name %(username)s cannot be a Rackplane user name "
                "(letters, digits and @ . + - _ only, at most 150): ask a platform admin to make an account "
                "and link it."
            ),
            provider=named,
            username=repr(username),
        )
    if User.objects.filter(username__iexact=username).exists():
        logger.warning(
            "%s sign-in of %r refused: an account named %r exists and is not linked to it; link them in the "
            "Django admin (External identities) if they are the same person",
            label,
            subject,
            username,
        )
        raise SignInRefused(
            gettext_lazy(
                "A Rackplane account named %(username)s already exists and is not linked to your "
                "%(provider)s identity: ask a platform admin to link them (Django admin, External "
                "identities)."
            ),
            provider=named,
            username=repr(username),
        )
    user = User.objects.create_user(
        username, email=email or "", password=None, first_name=first_name or "", last_name=last_name or ""
    )
    with audit_context(provider, actor=user):
        ExternalIdentity.objects.create(provider=provider, subject=subject, user=user)
    logger.info("%s sign-in: made account %s for %s", label, username, subject)
    return user


def _role_words(label) -> str:
    """A role as the logs and SyncResult name it ("lead"): English, whatever the request's language."""
    return english(label).lower()


def provider_label(provider: str) -> str:
    """How the logs name a provider."""
    return {RoleOrigin.OIDC: "single sign-on", RoleOrigin.LDAP: "LDAP"}.get(provider, provider)


PROVIDER_NAMES = {RoleOrigin.OIDC: gettext_lazy("single sign-on"), RoleOrigin.LDAP: gettext_lazy("LDAP")}


def provider_name(provider: str):
    """How messages name a provider to the person signing in (in their language)."""
    return PROVIDER_NAMES.get(provider, provider)


@dataclass
class SyncResult:
    """What one sign-in changed (for logs and tests)."""

    groups: list[str]
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept_by_hand: list[str] = field(default_factory=list)
    admin: str = "unchanged"  # granted, revoked, unchanged, by hand

    @property
    def changes(self) -> bool:
        return bool(self.added or self.changed or self.removed or self.admin in ("granted", "revoked"))


@transaction.atomic
def sync_roles(user, groups: Iterable, provider: str, prefix: str = "") -> SyncResult:
    """Give `user` the roles the rules give their groups (those starting with `prefix`) and take away the
    roles `provider` gave before whose group is gone. Roles from elsewhere (by hand, the other provider)
    stay. Audited with `provider` as the source and `user` as the actor."""
    User = get_user_model()
    user = User.objects.select_for_update().get(pk=user.pk)
    link = ExternalIdentity.objects.select_for_update().get(provider=provider, user=user)
    in_scope = groups_in_scope(groups, prefix)
    result = SyncResult(groups=in_scope)
    rules = list(
        GroupRoleRule.objects.filter(group__in=in_scope).select_related("department", "project__department")
    )

    wanted: dict[int, tuple] = {}  # department id -> (role, department, group)
    wanted_projects: dict[int, tuple] = {}  # project id -> (project role, project, group)
    for rule in rules:
        if rule.role == GrantedRole.PLATFORM_ADMIN:
            continue
        role = Role(rule.role)
        if rule.project_id is not None:
            if rule.project.department_id != rule.department_id:  # GroupRoleRule.clean refuses it
                logger.warning("group rule %s ignored: its project is not its department's", rule.pk)
                continue
            current = wanted_projects.get(rule.project_id)
            # A default project's people are the members in no named project: membership is its grant.
            if not rule.project.is_default and (
                current is None or RANK[Role(rule.role)] > RANK[Role(current[0])]
            ):
                wanted_projects[rule.project_id] = (ProjectRole(rule.role), rule.project, rule.group)
            role = Role.MEMBER  # the project's people are members of its department at least
        current = wanted.get(rule.department_id)
        if current is None or RANK[role] > RANK[current[0]]:
            wanted[rule.department_id] = (role, rule.department, rule.group)
    wants_admin = any(rule.role == GrantedRole.PLATFORM_ADMIN for rule in rules)

    with audit_context(provider, actor=user):
        memberships = {
            m.department_id: m for m in Membership.objects.filter(user=user).select_related("department")
        }
        for department_id, membership in memberships.items():
            if membership.origin != provider:
                continue
            if department_id not in wanted:
                remove_membership(membership, keep_a_lead=False)
                result.removed.append(
                    f"{_role_words(membership.get_role_display)} of {membership.department}"
                )
        for department_id, (role, department, group) in sorted(
            wanted.items(), key=lambda item: item[1][1].name
        ):
            membership = memberships.get(department_id)
            if membership is not None and membership.origin != provider:
                result.kept_by_hand.append(f"{_role_words(membership.get_role_display)} of {department}")
                continue
            if membership is not None and membership.role == role:
                continue
            set_membership(department, user.get_username(), role, origin=provider, keep_a_lead=False)
            described = f"{_role_words(role.label)} of {department} (group {group})"
            (result.changed if membership is not None else result.added).append(described)
        _sync_project_roles(user, wanted_projects, provider, result)
        result.admin = _sync_admin(user, link, wants_admin, provider)
        # Bearer tokens sync at every API request: the sign-in time is kept to the minute, not rewritten
        # at each request.
        now = timezone.now()
        stale = link.last_sign_in_at is None or now - link.last_sign_in_at >= SIGN_IN_RESOLUTION
        if stale or link.groups != in_scope or result.admin in ("granted", "revoked"):
            link.groups = in_scope
            link.last_sign_in_at = now
            link.save(update_fields=["groups", "last_sign_in_at", "granted_admin"])
    if result.changes:
        logger.info(
            "%s sign-in of %s: added %s; changed %s; removed %s; platform admin %s",
            provider_label(provider),
            user.get_username(),
            result.added or "nothing",
            result.changed or "nothing",
            result.removed or "nothing",
            result.admin,
        )
    return result


def _sync_project_roles(user, wanted: dict[int, tuple], provider: str, result: SyncResult) -> None:
    """The project roles the rules give (`wanted`: project id -> (role, project, group)): added or changed
    when this provider gave them or nobody did; removed when this provider gave them and no group does any
    more; left alone when granted by hand. Runs after the department roles, so that the department
    membership a project role needs is there (a person whose department membership was removed has left
    the department's projects with it, tenancy.projects.forget_department_member)."""
    held = {
        m.project_id: m
        for m in ProjectMembership.objects.select_for_update()
        .filter(user=user)
        .select_related("project__department")
    }
    for project_id, membership in held.items():
        if membership.origin == provider and project_id not in wanted:
            membership.delete()
            result.removed.append(f"{_role_words(membership.get_role_display)} of {membership.project}")
    departments = set(Membership.objects.filter(user=user).values_list("department_id", flat=True))
    for project_id, (role, project, group) in sorted(wanted.items(), key=lambda item: str(item[1][1])):
        membership = held.get(project_id)
        if membership is not None and membership.origin != provider:
            result.kept_by_hand.append(f"{_role_words(membership.get_role_display)} of {project}")
            continue
        if membership is not None and membership.role == role:
            continue
        if project.department_id not in departments:
            # Only when the department membership is someone else's say and was not there: cannot happen
            # through the rules alone (a project rule asks for the department membership too).
            continue
        if membership is None:
            ProjectMembership.objects.create(user=user, project=project, role=role, origin=provider)
        else:
            membership.role = role
            membership.save(update_fields=["role"])
        described = f"{_role_words(role.label)} of {project} (group {group})"
        (result.changed if membership is not None else result.added).append(described)


def _sync_admin(user, link: ExternalIdentity, wants_admin: bool, provider: str) -> str:
    """Platform admin from a rule: granted when a group gives it and the account is not an admin yet;
    revoked when no group gives it any more and this provider had granted it. An admin made by hand stays
    one. A platform admin is a superuser as well as staff, so that the Django admin (where the group rules,
    departments and tokens are kept) opens everything to them, as the portal does (core.access)."""
    if wants_admin and link.granted_admin:
        return "unchanged"
    if wants_admin and (user.is_staff or user.is_superuser):
        return "by hand"
    if wants_admin:
        _set_admin(user, True, provider)
        link.granted_admin = True
        return "granted"
    if link.granted_admin:
        link.granted_admin = False
        if not user.external_identities.exclude(pk=link.pk).filter(granted_admin=True).exists():
            _set_admin(user, False, provider)
            return "revoked"
    return "unchanged"


def _set_admin(user, value: bool, provider: str) -> None:
    before = {"is_staff": user.is_staff, "is_superuser": user.is_superuser}
    user.is_staff = user.is_superuser = value
    user.save(update_fields=["is_staff", "is_superuser"])
    # Accounts are not an audited model (core.audit): this one change of one is recorded here.
    AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username(),
        source=provider,
        action=AuditAction.UPDATE,
        object_type=user._meta.label_lower,
        object_id=str(user.pk),
        object_repr=f"platform admin role of {user.get_username()}"[:200],
        before=before,
        after={"is_staff": value, "is_superuser": value},
    )


# --- POSIX identities --------------------------------------------------------------------------------------


def _int(value) -> int | None:
    """A whole number from an LDAP attribute or a claim (a number, or digits as text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,10}\s*", value):
        return int(value)
    return None


def posix_identity_from(name, uid, gid, groups=()) -> PosixIdentity | None:
    """The identity a provider's values describe, or None when they are missing or unusable (a provider
    without POSIX attributes for this person gives none; a bad one is logged, never half-used)."""
    if name in (None, "") and uid is None and gid is None:
        return None
    uid_number, gid_number = _int(uid), _int(gid)
    if not isinstance(name, str) or uid_number is None or gid_number is None:
        logger.warning("POSIX identity ignored: name %r, uid %r, gid %r are not all given", name, uid, gid)
        return None
    if isinstance(groups, str | int):
        groups = [groups]
    numbers = {_int(g) for g in groups or []}
    if None in numbers:
        logger.warning("POSIX identity of %s: group ids that are not numbers ignored (%r)", name, groups)
        numbers.discard(None)
    try:
        return PosixIdentity(
            name=name, uid=uid_number, gid=gid_number, groups=tuple(sorted(numbers - {gid_number}))
        )
    except ValueError as error:
        logger.warning("POSIX identity %r (%r:%r) ignored: %s", name, uid, gid, error)
        return None


@transaction.atomic
def sync_posix(user, identity: PosixIdentity | None, provider: str) -> str:
    """Keep `user`'s PosixAccount as `provider` says at a sign-in; returns what happened: "made",
    "refreshed", "unchanged", "removed", "none", "kept (set by an administrator)", "kept (set by <other
    provider>)" or "refused: <why>". Audited with the provider as the source and the person as the actor."""
    account = PosixAccount.objects.select_for_update().filter(user=user).first()
    if account is not None and account.source != provider:
        # An administrator's mapping (or the other provider's) is someone else's say: left as it is.
        setter = "an administrator" if account.source == PosixSource.ADMIN else provider_label(account.source)
        return f"kept (set by {setter})"
    with audit_context(provider, actor=user):
        if identity is None:
            if account is None:
                return "none"
            account.delete()
            logger.info(
                "%s sign-in of %s: POSIX identity %s removed", provider_label(provider), user, account
            )
            return "removed"
        taken = PosixAccount.objects.exclude(user=user)
        clash = taken.filter(uid=identity.uid).first() or taken.filter(name=identity.name).first()
        if clash is not None:
            why = f"uid {identity.uid} or login name {identity.name} is already {clash.user}'s ({clash})"
            logger.warning(
                "%s sign-in of %s: POSIX identity refused: %s", provider_label(provider), user, why
            )
            if account is not None:
                account.delete()  # never keep running jobs as an identity the provider no longer gives
            return f"refused: {why}"
        values = {
            "name": identity.name,
            "uid": identity.uid,
            "gid": identity.gid,
            "groups": list(identity.groups),
        }
        if account is not None and all(getattr(account, key) == value for key, value in values.items()):
            return "unchanged"
        try:
            # Two sign-ins at once may both pass the clash check above: the unique constraints decide, and
            # the loser is refused like a clash (in a savepoint: the sign-in's transaction goes on).
            with transaction.atomic():
                if account is None:
                    PosixAccount.objects.create(user=user, source=provider, **values)
                    return "made"
                for key, value in values.items():
                    setattr(account, key, value)
                account.save()
                return "refreshed"
        except IntegrityError:
            why = f"uid {identity.uid} or login name {identity.name} was just given to someone else"
            logger.warning(
                "%s sign-in of %s: POSIX identity refused: %s", provider_label(provider), user, why
            )
            return f"refused: {why}"
