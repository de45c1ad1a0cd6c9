"""Where webhooks may go, and what a subscription's scope looks like (core.notifications; the model's
clean() checks here too, so the portal's page and the Django admin refuse the same). The same save-time
check serves the other objects that hold an address the portal connects to (configuration targets, the
metrics source): `check_outbound_url`.

The rules are core.outbound's, the one guard of every server-side request (docs/outbound.md): http(s)
only, no credentials in the address, and no loopback, private, link-local, unspecified, multicast or other
non-public address (nor an IPv6 form that carries one), unless private addresses are allowed for the
object (its `allow_private_address`, set by a platform admin) or, for webhooks, for the whole installation
(RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS, on in development). Link-local (cloud metadata), multicast
and unspecified addresses are refused whatever is allowed. The check runs when an object is saved and again
when each connection is made (core.http connects to the very address it vetted, so a name that resolves
elsewhere later, DNS rebinding, reaches nothing).
"""

from __future__ import annotations

import re
import urllib.parse

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext, gettext_lazy

from core import outbound
from core.errors import Unreachable


def allow_private_targets() -> bool:
    """The installation-wide allowance for webhooks (development: make run's loopback receivers)."""
    return bool(getattr(settings, "RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS", settings.DEBUG))


def webhook_allows_private(allow_private_address: bool = False) -> bool:
    """Whether a webhook may go to a private address: its own allowance, or the installation's."""
    return bool(allow_private_address) or allow_private_targets()


PRIVATE_ADVICE = (
    "Rackplane does not send requests into its own network unless told to (a request forgery could reach "
    "internal services). Use the receiver's public address, or, if this receiver is meant to be internal, "
    "a platform admin can tick “Allow a private address” for this webhook "
    "(RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS=1 allows it for every webhook, for development)."
)
TARGET_ADVICE = (
    "Rackplane does not connect into its own network unless told to (a request forgery could reach "
    "internal services). If this address is meant to be internal, tick “Allow a private address”."
)
NEVER_ADVICE = "No setting allows this address: cloud metadata and similar services answer there."


def _refusal(problem: str, advice: str) -> ValidationError:
    text = problem[0].upper() + problem[1:]
    if "link-local" in problem or "metadata" in problem or "multicast" in problem:
        advice = NEVER_ADVICE
    elif any(word in problem for word in ("unspecified", "reserved", "broadcast", "IPv4-compatible")):
        advice = "No setting allows this address."
    return ValidationError(f"{text}. {advice}", code="private")


_SYNTAX_CODES = {"use an http": "scheme", "the address has no host": "host", "the address's port": "port"}


def check_destination(url: str, *, allow_private: bool | None = None, advice: str = PRIVATE_ADVICE) -> None:
    """Refuse an address the portal must not send to: ValidationError saying why; Unreachable when its host
    does not resolve (now: it may later). `allow_private` None: the installation's webhook setting."""
    parts = urllib.parse.urlsplit(url)
    if advice is PRIVATE_ADVICE and (parts.username is not None or parts.password is not None):
        raise ValidationError(
            gettext(
                "Put no user name or password in the address: Rackplane signs each request with the "
                "webhook's secret instead."
            ),
            code="credentials",
        )
    allow = allow_private_targets() if allow_private is None else allow_private
    problem = outbound.url_problem(url, allow_private=allow)  # Unreachable: the name does not resolve
    if problem is None:
        return
    for start, code in _SYNTAX_CODES.items():
        if problem.startswith(start):
            raise ValidationError(_SYNTAX_MESSAGES[code], code=code)
    if "written in another form" in problem:
        # Refused whatever is allowed: libraries read these forms differently (inet_aton, urllib3, ...).
        raise ValidationError(problem[0].upper() + problem[1:] + ".", code="numeric-host")
    raise _refusal(problem, advice)


_SYNTAX_MESSAGES = {
    "scheme": gettext_lazy("Use an http:// or https:// address."),
    "host": gettext_lazy("The address has no host name."),
    "port": gettext_lazy("The address's port is not a number from 1 to 65535."),
}


def check_webhook_url(url: str, *, allow_private_address: bool = False) -> None:
    """check_destination for a form: a host that does not resolve is an error too."""
    try:
        check_destination(url, allow_private=webhook_allows_private(allow_private_address))
    except Unreachable as error:
        raise ValidationError(
            f"{str(error).capitalize()}. Check the name: it must resolve from the portal.", code="dns"
        ) from error


def check_outbound_url(url: str, *, allow_private_address: bool) -> None:
    """The save-time check of a configuration target's or the metrics source's address: like a webhook's,
    but a name that does not resolve from here yet is accepted (it is vetted when connected to), and the
    installation-wide webhook setting does not apply (each object has its own allowance)."""
    try:
        check_destination(url, allow_private=allow_private_address, advice=TARGET_ADVICE)
    except Unreachable:
        return


SCOPE_PATTERN = re.compile(r"[a-z][a-z0-9_-]*:\S+")


def check_scope(scope: str) -> None:
    """A subscription's scope is one "<kind>:<name>" string (rack:gb-r08, department:<slug>)."""
    if not SCOPE_PATTERN.fullmatch(scope):
        raise ValidationError(
            gettext(
                "Write the scope as kind:name without spaces: rack:<rack name>, tray:<hostname> or "
                "department:<slug> (the department's short name in its address); leave it empty for "
                "everything."
            ),
            code="scope",
        )
