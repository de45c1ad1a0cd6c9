"""API tokens: personal tokens (named, several per user, each with its expiry) and the older single token.

**Personal tokens** (PersonalToken): a user makes, names, lists and revokes their own on the portal's API
tokens page (portal.pages.account, /account/tokens/), with an expiry of up to
RACKPLANE_PERSONAL_TOKEN_MAX_DAYS; the
key ("rpt_" + 43 URL-safe characters) is shown once, only its SHA-256 is stored. Platform admins see and
revoke anyone's there and in the Django admin. `PersonalTokenAuthentication` accepts `Authorization: Token
rpt_...` (or `Bearer rpt_...`) and refuses an unknown, revoked or expired one with a 401 that says which.

**The single token** (DRF authtoken, kept working as it was): good for RACKPLANE_TOKEN_TTL_DAYS after it
was made (`Token.created`); after that the API answers 401 saying so. Its owner replaces it (POST
/api/v1/tokens/rotate/ with the current token, or the "API token" page when signed in; both in
portal.pages.account): the old key stops working at once and the new one is shown once. Platform admins revoke
tokens in the Django admin. Node agents' tokens are inventory's, not these.

**Rotation never extends a token's life or changes its kind**. POST
/api/v1/tokens/rotate/ replaces the very token it was called with: a personal token by a personal token of
the same owner and name, expiring when the old one would have (`rotate_personal`); the single token by a
single token that expires when the old one would have (`rotate(keep_expiry=True)`). The old one is revoked in
the same transaction, its row locked (select_for_update) so two concurrent rotations of one token make one
new token, not two. A fresh single token with a full time to live is only made by a person signed in to the
portal (the API token page), never by a script holding some other credential. docs/tokens.md has the rules.

Nothing here caches a token: every request reads the row, so a revoked or rotated token is refused on the
very next request, on every replica.
"""

import datetime
import hashlib
import logging
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from core.models import AuditAction, AuditEvent, PersonalToken

logger = logging.getLogger(__name__)


def expires_at(token: Token) -> datetime.datetime:
    return token.created + datetime.timedelta(days=settings.RACKPLANE_TOKEN_TTL_DAYS)


def is_expired(token: Token) -> bool:
    return timezone.now() >= expires_at(token)


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's `Authorization: Token <key>`, refused with 401 once the token is older than its time to live."""

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if is_expired(token):
            raise exceptions.AuthenticationFailed(
                f"Token expired at {expires_at(token):%Y-%m-%d %H:%M} UTC: sign in to the portal and replace "
                "it on the API token page, or ask a platform admin for a new one."
            )
        return user, token


class NotRotatable(Exception):
    """The credential cannot be rotated (already revoked or rotated, expired): `str()` says why, for a 4xx."""


@transaction.atomic
def rotate(user, source: str, *, keep_expiry: bool = False) -> Token:
    """Replace `user`'s single token (or make their first): the old key stops working now. Recorded in the
    audit log (by the user's id; a key is never written down) and logged.

    `keep_expiry`: the new token expires when the old one would have (rotation by the token itself, over the
    API: a script never extends its own credential's life). Without it (a person signed in to the portal's
    API token page) the new token gets a full RACKPLANE_TOKEN_TTL_DAYS. NotRotatable when `keep_expiry` is
    asked and there is no working token to rotate."""
    previous = Token.objects.select_for_update().filter(user=user).first()
    if keep_expiry and (previous is None or is_expired(previous)):
        raise NotRotatable(
            "There is no working API token to rotate: sign in to the portal and make one on the API tokens "
            f"page ({TOKENS_PAGE})."
        )
    if previous is not None:
        previous.delete()
    token = Token.objects.create(user=user)
    if keep_expiry:
        # Token.created is its expiry's basis (expires_at()): the new key keeps the old one's.
        Token.objects.filter(pk=token.pk).update(created=previous.created)
        token.created = previous.created
    AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username(),
        source=source,
        action=AuditAction.UPDATE if previous else AuditAction.CREATE,
        object_type=Token._meta.label_lower,
        object_id=str(user.pk),
        object_repr=f"API token of {user.get_username()}"[:200],
        before={"created": previous.created.isoformat()} if previous else None,
        after={"created": token.created.isoformat(), "expires_at": expires_at(token).isoformat()},
    )
    logger.info("API token of %s %s", user.get_username(), "rotated" if previous else "created")
    return token


# --- personal tokens --------------------------------------------------------------------------------------

KEY_PREFIX = "rpt_"
VISIBLE_CHARS = 8  # of the random part, kept as PersonalToken.prefix
SCHEMES = (b"token", b"bearer")
# Node agents' tokens (inventory.agent_tokens.SECRET_PREFIX; core does not import inventory): refused here.
AGENT_KEY_PREFIX = "rpa_"
AGENT_TOKEN_ELSEWHERE = (
    "An agent token may only send node reports and telemetry (the node agent's endpoints): use a personal "
    "API token for the rest of the API (make one on the portal's API tokens page, /account/tokens/)."
)


class AgentTokenElsewhere(exceptions.PermissionDenied):
    """403: a node agent's token (valid or not: it is not looked up here) outside the node agent's endpoints.
    Counted like a refused authentication against the client address's anonymous rate (core.api)."""

    default_detail = AGENT_TOKEN_ELSEWHERE


# last_used_at is for people ("is this token still in use?"): a minute is precise enough, and it spares a
# write on every request of a busy script.
LAST_USED_RESOLUTION = datetime.timedelta(minutes=1)
TOKENS_PAGE = "/account/tokens/"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def max_lifetime_days() -> int:
    return settings.RACKPLANE_PERSONAL_TOKEN_MAX_DAYS


def issue(user, name: str, expires_at: datetime.datetime) -> tuple[PersonalToken, str]:
    """A new personal token of `user`, and its key (not stored: show it once). Recorded in the audit log
    (core.audit: without the key or its hash).

    ValidationError naming the field when the name is empty or one of the user's active tokens has it
    (case-insensitive: the list and the audit log tell tokens apart by name), or the expiry is not in the
    future or further than RACKPLANE_PERSONAL_TOKEN_MAX_DAYS from now."""
    name = (name or "").strip()
    now = timezone.now()
    errors = {}
    if not name:
        errors["name"] = gettext("Name the token after what will use it (a script, a machine).")
    elif (
        PersonalToken.objects.filter(
            user=user, name__iexact=name, revoked_at__isnull=True, expires_at__gt=now
        )
        .only("pk")
        .exists()
    ):
        errors["name"] = gettext(
            "You already have an active token named %(name)s: choose another name, or revoke that one first."
        ) % {"name": repr(name)}
    if expires_at <= now:
        errors["expires_at"] = gettext("The expiry must be in the future.")
    elif expires_at > now + datetime.timedelta(days=max_lifetime_days()):
        errors["expires_at"] = gettext(
            "A token may live at most %(days)s days: choose an earlier expiry."
        ) % {"days": max_lifetime_days()}
    if errors:
        raise ValidationError(errors)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token = PersonalToken(
        user=user,
        name=name,
        prefix=key[: len(KEY_PREFIX) + VISIBLE_CHARS],
        key_hash=hash_key(key),
        expires_at=expires_at,
    )
    token.full_clean()
    token.save()
    logger.info("personal API token %s… (%s) of %s made", token.prefix, token.name, user.get_username())
    return token, key


def revoke(token: PersonalToken, by=None) -> PersonalToken:
    """Revoke `token` from now on (one already revoked keeps its first revocation). Audited (core.audit)."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.revoked_by = by
        token.save(update_fields=["revoked_at", "revoked_by"])
        logger.info("personal API token %s… of %s revoked", token.prefix, token.user.get_username())
    return token


def _token_words(token: PersonalToken) -> dict[str, str]:
    """What the token's sentences name (times in UTC, as the API's clients read them)."""
    return {
        "prefix": token.prefix,
        "name": token.name,
        "revoked": f"{token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "",
        "expires": f"{token.expires_at:%Y-%m-%d %H:%M}",
        "successor": token.rotated_to.prefix if token.rotated_to_id else "",
        "page": TOKENS_PAGE,
    }


@transaction.atomic
def rotate_personal(token: PersonalToken, by=None) -> tuple[PersonalToken, str]:
    """Replace a personal token by a new one of the same kind: the same owner and name, expiring when the old
    one would have (never later); the old one is revoked in the same transaction. Returns the new token and
    its key (show it once). Both changes are audited (core.audit: a revocation and a creation).

    The old row is locked first (select_for_update): of two rotations of one token at once, the second waits,
    then finds it revoked and gets NotRotatable; only one new token is ever made. NotRotatable too for a
    token revoked or expired before."""
    locked = PersonalToken.objects.select_for_update().select_related("user").get(pk=token.pk)
    values = _token_words(locked)
    if locked.revoked_at is not None and locked.rotated_to_id is not None:
        raise NotRotatable(
            gettext(
                "API token %(prefix)s… (%(name)s) was rotated at %(revoked)s UTC, to %(successor)s…: rotate "
                "that one, or make a new one on the portal's API tokens page (%(page)s)."
            )
            % values
        )
    if locked.revoked_at is not None:
        raise NotRotatable(
            gettext(
                "API token %(prefix)s… (%(name)s) was revoked at %(revoked)s UTC: make a new one on the "
                "portal's API tokens page (%(page)s)."
            )
            % values
        )
    if timezone.now() >= locked.expires_at:
        raise NotRotatable(
            gettext(
                "API token %(prefix)s… (%(name)s) expired: make a new one on the portal's API tokens page "
                "(%(page)s)."
            )
            % values
        )
    revoke(locked, by=by)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    new = PersonalToken(
        user=locked.user,
        name=locked.name,
        prefix=key[: len(KEY_PREFIX) + VISIBLE_CHARS],
        key_hash=hash_key(key),
        expires_at=locked.expires_at,
    )
    new.full_clean()
    new.save()
    PersonalToken.objects.filter(pk=locked.pk).update(rotated_to=new)
    logger.info(
        "personal API token %s… (%s) of %s rotated to %s…",
        locked.prefix,
        locked.name,
        locked.user.get_username(),
        new.prefix,
    )
    return new, key


def find(key: str) -> PersonalToken | None:
    """The personal token (revoked, expired or not) whose key this is, or None."""
    if not key.startswith(KEY_PREFIX):
        return None
    return PersonalToken.objects.select_related("user", "rotated_to").filter(key_hash=hash_key(key)).first()


def mark_used(token: PersonalToken) -> None:
    """Record that the token was just used, at most once per LAST_USED_RESOLUTION (one UPDATE, no read)."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    PersonalToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION), pk=token.pk
    ).update(last_used_at=now)


class PersonalTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token rpt_...` (or `Bearer rpt_...`): a personal token. Other credentials are left to
    the next authentication class. An unknown, revoked or expired personal token, or one whose owner's
    account is disabled, is a 401 saying which and what to do."""

    keyword = "Token"

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() not in SCHEMES:
            return None
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            return None
        if key.startswith(AGENT_KEY_PREFIX):
            # A node agent's token reached a view that is not a node agent's (those list
            # AgentTokenAuthentication first, which takes it before this class): a 403 that says so, not
            # "credentials were not provided" (they were) nor "invalid token" (it is valid, elsewhere).
            raise AgentTokenElsewhere()
        if not key.startswith(KEY_PREFIX):
            return None
        token = find(key)
        if token is None:
            raise exceptions.AuthenticationFailed(
                gettext(
                    "Unknown API token %(prefix)s…: check that it was copied whole, or make a new one on the "
                    "portal's API tokens page (%(page)s)."
                )
                % {"prefix": key[: len(KEY_PREFIX) + VISIBLE_CHARS], "page": TOKENS_PAGE}
            )
        values = _token_words(token)
        if token.revoked_at is not None and token.rotated_to_id is not None:
            raise exceptions.AuthenticationFailed(
                gettext(
                    "API token %(prefix)s… (%(name)s) was rotated at %(revoked)s UTC: it was replaced by "
                    "%(successor)s… (the key shown once when it was rotated); use that one, or make a new "
                    "one on the portal's API tokens page (%(page)s)."
                )
                % values
            )
        if token.revoked_at is not None:
            raise exceptions.AuthenticationFailed(
                gettext(
                    "API token %(prefix)s… (%(name)s) was revoked at %(revoked)s UTC: make a new one on the "
                    "portal's API tokens page (%(page)s)."
                )
                % values
            )
        if timezone.now() >= token.expires_at:
            raise exceptions.AuthenticationFailed(
                gettext(
                    "API token %(prefix)s… (%(name)s) expired at %(expires)s UTC: make a new one on the "
                    "portal's API tokens page (%(page)s)."
                )
                % values
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(
                gettext("API token %(prefix)s… (%(name)s) belongs to a disabled account.") % values
            )
        mark_used(token)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of personal tokens (drf-spectacular registers it by subclassing)."""

    target_class = PersonalTokenAuthentication
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                "A personal API token: `Authorization: Token rpt_...`. Make one on the portal's API tokens "
                f"page ({TOKENS_PAGE}, the username in the top bar): name it, pick its expiry, copy the key "
                "shown once. Revoke it there when it is no longer needed."
            ),
        }
