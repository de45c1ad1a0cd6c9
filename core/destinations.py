"""Where webhooks may go, and what a subscription's scope looks like (core.notifications; the model's
clean() checks here too, so the portal's page and the Django admin refuse the same).

Endpoint URLs must be http(s), without credentials. In production (DEBUG off) an address that is, or whose
name resolves to, a loopback, private, link-local, multicast or otherwise non-public address is refused
unless RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS is on: a portal that POSTs wherever an admin (or a
stolen admin session) says is a server-side request forgery into its own network (cloud metadata at
169.254.169.254, databases, the Kubernetes API). The check runs when an endpoint is saved and again before
every attempt (a name may resolve elsewhere later). What it cannot close: a name that resolves to a public
address for the check and to a private one a moment later for the request (DNS rebinding) - run the workers
behind an egress proxy or firewall where that matters.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse

from django.conf import settings
from django.core.exceptions import ValidationError

from core.errors import Unreachable


def allow_private_targets() -> bool:
    return bool(getattr(settings, "RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS", settings.DEBUG))


def _address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "not a public address"
    return None


def _addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to; Unreachable when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise Unreachable(f"cannot resolve host {host}: {error}") from error
    return sorted({info[4][0] for info in infos})


PRIVATE_ADVICE = (
    "Rackplane does not send webhooks into its own network in production (a request forgery could reach "
    "internal services). Use the receiver's public address, or, if this receiver is meant to be internal, "
    "set RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS=1 on the portal and its workers."
)


def check_destination(url: str) -> None:
    """Refuse an address webhooks must not go to: ValidationError saying why; Unreachable when its host does
    not resolve (now: it may later)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValidationError("Use an http:// or https:// address.", code="scheme")
    if not parts.hostname:
        raise ValidationError("The address has no host name.", code="host")
    if parts.username is not None or parts.password is not None:
        raise ValidationError(
            "Put no user name or password in the address: Rackplane signs each request with the webhook's "
            "secret instead.",
            code="credentials",
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ValidationError("The address's port is not a number from 1 to 65535.", code="port") from None
    if allow_private_targets():
        return
    host = parts.hostname
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    addresses = [str(literal)] if literal is not None else _addresses(host, port)
    for text in addresses:
        problem = _address_problem(ipaddress.ip_address(text.split("%", 1)[0]))
        if problem:
            named = host if literal is not None else f"{host} resolves to {text}, which"
            raise ValidationError(f"{named} is {problem}. {PRIVATE_ADVICE}", code="private")


def check_webhook_url(url: str) -> None:
    """check_destination for a form: a host that does not resolve is an error too."""
    try:
        check_destination(url)
    except Unreachable as error:
        raise ValidationError(
            f"{str(error).capitalize()}. Check the name: it must resolve from the portal.", code="dns"
        ) from error


SCOPE_PATTERN = re.compile(r"[a-z][a-z0-9_-]*:\S+")


def check_scope(scope: str) -> None:
    """A subscription's scope is one "<kind>:<name>" string (rack:gb-r08, department:<slug>)."""
    if not SCOPE_PATTERN.fullmatch(scope):
        raise ValidationError(
            "Write the scope as kind:name without spaces: rack:<rack name>, tray:<hostname> or "
            "department:<slug> (the department's short name in its address); leave it empty for everything.",
            code="scope",
        )
