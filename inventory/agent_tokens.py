"""Agent tokens: issue, revoke and check the secrets node agents report with (the AgentToken model).

A secret is "rpa_" + 43 URL-safe characters (32 random bytes). Only its SHA-256 is stored: a random secret
of that length needs no salt or slow hash (nothing to guess), and a hash lookup finds the token without a
timing-sensitive comparison. The secret is shown once, when it is issued; a lost secret is replaced by
issuing a new token and revoking the old one: `rotate` does both in one transaction, keeping the token's
scope (its rack or host) and kind: rotation never widens what a token may report for. Nothing caches a token:
every report reads its row, so a revoked one is refused on its very next report.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from inventory.models import AgentToken, ComputeTray, Rack

SECRET_PREFIX = "rpa_"
VISIBLE_CHARS = 8  # of the random part, kept as AgentToken.prefix
# last_used_at is for people ("is this token still in use?"): a minute is precise enough, and it spares a
# write on every report of an agent that posts every few seconds.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issue(
    *, rack: Rack | None = None, hostname: str = "", description: str = "", created_by=None
) -> tuple[AgentToken, str]:
    """A new token for one rack or one host (a known tray's hostname), and its secret (not stored).

    ValidationError when the scope is not exactly one of the two, or the host is no tray of the inventory.
    """
    hostname = hostname.strip()
    if (rack is None) == (not hostname):
        raise ValidationError("Issue an agent token for one rack or for one host, not both or none.")
    if hostname and not ComputeTray.objects.filter(hostname=hostname).exists():
        raise ValidationError(f"Host {hostname!r} is not a compute tray of the inventory.")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = AgentToken(
        prefix=secret[: len(SECRET_PREFIX) + VISIBLE_CHARS],
        secret_hash=hash_secret(secret),
        rack=rack,
        hostname=hostname,
        description=description,
        created_by=created_by,
    )
    token.full_clean()
    token.save()
    return token, secret


def revoke(token: AgentToken) -> AgentToken:
    """Revoke `token` from now on (a token already revoked keeps its first revocation time)."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


@transaction.atomic
def rotate(token: AgentToken, *, created_by=None) -> tuple[AgentToken, str]:
    """Replace `token` by a new one for the same rack or host (and description), revoking it in the same
    transaction; returns the new token and its secret (show it once). Both changes are audited (core.audit).

    The old row is locked first (select_for_update): of two rotations at once the second waits, then finds it
    revoked. ValidationError for a token already revoked (its replacement, if any, is the one to rotate)."""
    locked = AgentToken.objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is not None:
        raise ValidationError(
            f"Agent token {locked.prefix}… was revoked at {locked.revoked_at:%Y-%m-%d %H:%M:%S %Z}: issue "
            "a new one instead."
        )
    revoke(locked)
    return issue(
        rack=locked.rack,
        hostname=locked.hostname,
        description=locked.description,
        created_by=created_by if created_by is not None else locked.created_by,
    )


def find(secret: str) -> AgentToken | None:
    """The token (revoked or not) whose secret this is, or None."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    return AgentToken.objects.select_related("rack").filter(secret_hash=hash_secret(secret)).first()


def mark_used(token: AgentToken) -> None:
    """Record that the token was just used, at most once per LAST_USED_RESOLUTION (one UPDATE, no read)."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    AgentToken.objects.filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION), pk=token.pk
    ).update(last_used_at=now)
    token.last_used_at = now
