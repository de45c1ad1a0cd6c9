"""API tokens (DRF authtoken) that expire and that their owner rotates.

A token is good for RACKPLANE_TOKEN_TTL_DAYS after it was made (`Token.created`); after that the API answers
401 saying so. Its owner replaces it (POST /api/v1/tokens/rotate/ with the current token, or the "API token"
page when signed in; both in portal.account): the old key stops working at once and the new one is shown
once. Platform admins revoke tokens in the Django admin. Node agents' tokens are inventory's, not these.
"""

import datetime
import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from core.models import AuditAction, AuditEvent

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


@transaction.atomic
def rotate(user, source: str) -> Token:
    """Replace `user`'s token (or make their first): the old key stops working now. Recorded in the audit
    log (by the user's id; a key is never written down) and logged."""
    previous = Token.objects.select_for_update().filter(user=user).first()
    if previous is not None:
        previous.delete()
    token = Token.objects.create(user=user)
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
