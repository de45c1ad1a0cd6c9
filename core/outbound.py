"""The one guard for every request the portal and its workers make to an address someone typed (SSRF).

Webhooks, configuration targets (slurmrestd, the Kubernetes API server, NMX-M), the metrics source's
Prometheus and the DCGM exporters all go out through `core.http.HttpClient` (the Kubernetes client through
`urllib3_pool_classes`), and those open every TCP connection through `connect()` below: the host is resolved
ONCE, every address it resolves to is vetted, and the socket is connected to a vetted address (TLS still
names the host, for SNI and the certificate check; the Host header is the URL's). So a name that resolves to
a public address for a check and to an internal one a moment later (DNS rebinding) reaches nothing: there
is no second lookup. A redirect is a new connection, vetted like the first.

What is refused (`address_problem`):
* never allowed, whatever the allowance: the unspecified address and 0.0.0.0/8, link-local addresses
  (169.254.0.0/16 and fe80::/10: cloud metadata services answer there), known metadata addresses outside
  those (100.100.100.200, fd00:ec2::254), multicast, broadcast and reserved (240.0.0.0/4, ::/8) ranges,
  deprecated IPv4-compatible IPv6 (::a.b.c.d);
* refused unless the object allows private addresses (`allow_private`): loopback, RFC 1918 private,
  shared address space 100.64.0.0/10, benchmarking, documentation and other special-purpose ranges,
  unique-local fc00::/7 and site-local fec0::/10, and anything else Python's `ipaddress` says is not global;
* an IPv6 address that carries an IPv4 address is judged by that IPv4 address too: IPv4-mapped
  (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), NAT64 (64:ff9b::/96; the local-use 64:ff9b:1::/48
  is not global at all), 6to4 (2002:AABB:CCDD::/48), Teredo (2001:0::/32: the client is the bit-inverted
  last 32 bits) and ISATAP interface identifiers (::0:5efe:a.b.c.d, ::200:5efe:a.b.c.d under any prefix).

A per-object allowance covers that object's own host and port only (`Guard.origin`): a redirect to another
host, or a second host reached some other way, is vetted without it.

Host names written as numbers (0x7f.1, 2130706433, 0177.0.0.1, 127.1: inet_aton's forms, read differently by
different libraries) are refused when saved (`url_problem`): write four decimal numbers. At connect time
they are resolved like any name and vetted as what they resolve to.

Pure Python, no Django: core.destinations turns these refusals into form errors and reads the settings.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import ExternalError, Unreachable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The key under which a configuration target's allowance travels with its settings to the kinds' clients
# (integrations.models.ConfigTarget.cleaned_settings).
ALLOW_PRIVATE_SETTING = "allow_private_address"


class OutboundRefused(ExternalError):
    """A request the guard will not send: asking again gets the same answer (not transient)."""

    transient = False


# --- what an address is ----------------------------------------------------------------------------------

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# (network, what it is, allowed with the private allowance), first match wins.
_IPV4_RANGES: list[tuple[ipaddress.IPv4Network, str, bool]] = [
    (_V4("0.0.0.0/8"), "an unspecified address (0.0.0.0/8, 'this host')", False),
    (_V4("127.0.0.0/8"), "a loopback address", True),
    (_V4("169.254.0.0/16"), "a link-local address (where cloud metadata services answer)", False),
    (_V4("100.100.100.200/32"), "a cloud metadata address", False),
    (_V4("224.0.0.0/4"), "a multicast address", False),
    (_V4("255.255.255.255/32"), "the broadcast address", False),
    (_V4("240.0.0.0/4"), "a reserved address", False),
    (_V4("10.0.0.0/8"), "a private address", True),
    (_V4("172.16.0.0/12"), "a private address", True),
    (_V4("192.168.0.0/16"), "a private address", True),
    (_V4("100.64.0.0/10"), "a shared address (carrier-grade NAT, 100.64.0.0/10)", True),
    (_V4("198.18.0.0/15"), "a benchmarking address", True),
    (_V4("192.0.2.0/24"), "a documentation address", True),
    (_V4("198.51.100.0/24"), "a documentation address", True),
    (_V4("203.0.113.0/24"), "a documentation address", True),
    (_V4("192.0.0.0/24"), "a special-purpose address (192.0.0.0/24)", True),
    (_V4("192.88.99.0/24"), "a deprecated 6to4 relay address", True),
]

# what is None: the address is judged by the IPv4 address it carries, and only by that.
_IPV6_RANGES: list[tuple[ipaddress.IPv6Network, str | None, bool]] = [
    (_V6("::ffff:0:0/96"), None, True),  # IPv4-mapped
    (_V6("::ffff:0:0:0/96"), None, True),  # IPv4-translated
    (_V6("64:ff9b::/96"), None, True),  # NAT64, well-known prefix
    (_V6("::/128"), "an unspecified address", False),
    (_V6("::1/128"), "a loopback address", True),
    (_V6("::/96"), "a deprecated IPv4-compatible address (::a.b.c.d)", False),
    (_V6("fe80::/10"), "a link-local address (where cloud metadata services answer)", False),
    (_V6("fd00:ec2::254/128"), "a cloud metadata address", False),
    (_V6("ff00::/8"), "a multicast address", False),
    (_V6("64:ff9b:1::/48"), "a local-use NAT64 address (64:ff9b:1::/48)", True),
    (_V6("fec0::/10"), "a site-local address (fec0::/10)", True),
    (_V6("fc00::/7"), "a unique-local (private) address", True),
    (_V6("2001:db8::/32"), "a documentation address", True),
    (_V6("2001:2::/48"), "a benchmarking address", True),
    (_V6("100::/64"), "a discard-only address", True),
    (_V6("::/8"), "a reserved address", False),
]

_ISATAP_IDS = {0x00005EFE, 0x01005EFE, 0x02005EFE, 0x03005EFE}  # 0:5efe, 200:5efe (u/l and i/g bits)


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, each with the name of the form: [] for a plain one."""
    value = int(address)
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        found.append(("IPv4-mapped", address.ipv4_mapped))
    elif value >> 32 == 0xFFFF0000:  # ::ffff:0:a.b.c.d
        found.append(("IPv4-translated", low32))
    elif value >> 32 == 0 and value > 1:  # ::a.b.c.d
        found.append(("IPv4-compatible", low32))
    if address in _V6("64:ff9b::/96"):
        found.append(("NAT64", low32))
    if address in _V6("64:ff9b:1::/48"):
        found.append(("local-use NAT64", low32))  # its /96 form; other prefix lengths are refused anyway
    if address.sixtofour is not None:
        found.append(("6to4", address.sixtofour))
    if address.teredo is not None:
        server, client = address.teredo
        found.append(("Teredo client", client))
        found.append(("Teredo server", server))
    if (value >> 32) & 0xFFFFFFFF in _ISATAP_IDS:
        found.append(("ISATAP", low32))
    return found


def _classify_v4(address: ipaddress.IPv4Address) -> tuple[str, bool] | None:
    for network, what, liftable in _IPV4_RANGES:
        if address in network:
            return what, liftable
    if not address.is_global:
        return "not a public address", True
    return None


def _classify(address: Address) -> tuple[str, bool] | None:
    """(why it is refused, whether the private allowance lifts it), None for a public address; the most
    severe problem wins (one never allowed over one the allowance lifts)."""
    if isinstance(address, ipaddress.IPv4Address):
        return _classify_v4(address)
    address = ipaddress.IPv6Address(int(address))  # without a zone (%eth0)
    problems: list[tuple[str, bool]] = []
    for form, inner in embedded_ipv4(address):
        found = _classify_v4(inner)
        if found is not None:
            what, liftable = found
            problems.append((f"{what} (the {form} form of {inner})", liftable))
    own = None
    judged_by_ipv4 = False
    for network, what6, liftable in _IPV6_RANGES:
        if address in network:
            if what6 is None:
                judged_by_ipv4 = True
            else:
                own = (what6, liftable)
            break
    if own is None and not judged_by_ipv4 and not address.is_global:
        own = ("not a public address", True)
    if own is not None:
        problems.append(own)
    if not problems:
        return None
    return next((p for p in problems if not p[1]), problems[0])


def address_problem(address: Address | str, *, allow_private: bool = False) -> str | None:
    """Why a request must not go to `address` ("a loopback address"), None when it may."""
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    found = _classify(address)
    if found is None:
        return None
    what, liftable = found
    if liftable and allow_private:
        return None
    return what


def never_allowed(address: Address | str) -> bool:
    """Whether no allowance lets a request go to `address` (link-local, multicast, unspecified, ...)."""
    if isinstance(address, str):
        address = ipaddress.ip_address(address)
    found = _classify(address)
    return found is not None and not found[1]


# --- URLs ------------------------------------------------------------------------------------------------

# A host made only of numbers, in decimal, octal (leading 0) or hex (0x): inet_aton reads 0x7f.1, 2130706433,
# 0177.0.0.1 and 127.1 as 127.0.0.1; what ipaddress accepts (four plain decimal parts) is not among these.
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?$", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    host: str  # as in the URL, lower-case, without brackets
    port: int
    literal: Address | None  # the host when it is an IP address


def parse_url(url: str) -> Target:
    """The host and port of an http(s) URL; OutboundRefused saying what is wrong with it otherwise."""
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise OutboundRefused("use an http:// or https:// address")
    host = parts.hostname
    if not host:
        raise OutboundRefused("the address has no host name")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OutboundRefused("the address's port is not a number from 1 to 65535") from None
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
        if _NUMERIC_HOST.match(host):
            try:
                meant = f"{ipaddress.IPv4Address(socket.inet_aton(host.rstrip('.')))}"
            except OSError:
                meant = "an IP address"
            problem = address_problem(meant) if meant != "an IP address" else None
            raise OutboundRefused(
                f"{host} is {meant} written in another form (hexadecimal, octal, one number or fewer than "
                f"four parts){', ' + problem if problem else ''}: write an address as four decimal numbers "
                "(a.b.c.d)"
            ) from None
    return Target(host.lower(), port, literal)


def url_problem(url: str, *, allow_private: bool = False, resolve_names: bool = True) -> str | None:
    """Why the guard would refuse `url` (in words, naming the host), or None.

    A literal address is judged as it is; a name by every address it resolves to now (`resolve_names`;
    a name that does not resolve raises Unreachable). The connection is vetted again when it is made.
    """
    try:
        target = parse_url(url)
    except OutboundRefused as error:
        return str(error)
    if target.literal is not None:
        problem = address_problem(target.literal, allow_private=allow_private)
        return f"{target.host} is {problem}" if problem else None
    if not resolve_names:
        return None
    for address in resolve(target.host, target.port):
        problem = address_problem(address, allow_private=allow_private)
        if problem:
            return f"{target.host} resolves to {address}, which is {problem}"
    return None


# --- connections -----------------------------------------------------------------------------------------


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (once; tests replace this to point a name elsewhere)."""
    return [info[4][0] for info in _getaddrinfo(host, port)]


def _getaddrinfo(host: str, port: int) -> list:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise Unreachable(f"cannot resolve host {host}: {error}") from error


@dataclass(frozen=True)
class Guard:
    """How one client vets its connections: `allow_private` lifts the private refusals, for `origin` (the
    object's own (host, port)) only when origin is given."""

    allow_private: bool = False
    origin: tuple[str, int] | None = None

    def allows_private_for(self, host: str, port: int) -> bool:
        if not self.allow_private:
            return False
        return self.origin is None or (host.strip("[]").lower(), port) == self.origin

    def for_url(self, url: str) -> Guard:
        """This guard with its allowance narrowed to `url`'s host and port (the object's address)."""
        parts = urllib.parse.urlsplit(url)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            port = 0
        return Guard(self.allow_private, ((parts.hostname or "").lower(), port))

    def vet(self, host: str, port: int) -> list[str]:
        """Every address `host` resolves to, each vetted: OutboundRefused naming the first refused one."""
        host = host.strip("[]")
        allow = self.allows_private_for(host, port)
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        addresses = [host] if literal is not None else resolve(host, port)
        if not addresses:
            raise Unreachable(f"cannot resolve host {host}: no addresses")
        for address in addresses:
            problem = address_problem(address.split("%", 1)[0], allow_private=allow)
            if problem:
                named = host if literal is not None else f"{host} resolves to {address}, which"
                if never_allowed(address.split("%", 1)[0]):
                    advice = "no allowance lifts this"
                elif self.allow_private:
                    advice = "the object's allowance covers its own address only, not a redirect elsewhere"
                else:
                    advice = "a platform admin can allow private addresses for this object"
                raise OutboundRefused(f"refused to connect: {named} is {problem} ({advice})")
        return addresses

    def connect(
        self,
        host: str,
        port: int,
        timeout: float | object = socket._GLOBAL_DEFAULT_TIMEOUT,  # type: ignore[attr-defined]
        source_address: tuple[str, int] | None = None,
        socket_options: Iterable[tuple[int, int, int]] | None = None,
    ) -> socket.socket:
        """socket.create_connection to a vetted address of `host` (resolved once, here)."""
        last: OSError | None = None
        for address in self.vet(host, port):
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                if timeout is not socket._GLOBAL_DEFAULT_TIMEOUT:  # type: ignore[attr-defined]
                    sock.settimeout(timeout)  # type: ignore[arg-type]
                if source_address:
                    sock.bind(source_address)
                sock.connect((address, port))
                return sock
            except OSError as error:
                last = error
                sock.close()
        assert last is not None
        raise last


# --- the Kubernetes client (urllib3) ---------------------------------------------------------------------


def urllib3_pool_classes(guard: Guard) -> dict:
    """`PoolManager.pool_classes_by_scheme` whose connections open through `guard` (integrations.kubernetes
    .client): urllib3 resolves in `_new_conn`, which these replace."""
    import urllib3.connection
    import urllib3.connectionpool
    from urllib3.exceptions import NewConnectionError

    def _new_conn(self):
        try:
            return guard.connect(self.host, self.port, self.timeout, self.source_address, self.socket_options)
        except OutboundRefused:
            raise
        except (OSError, Unreachable) as error:
            raise NewConnectionError(self, f"Failed to establish a new connection: {error}") from error

    http = type("GuardedHTTPConnection", (urllib3.connection.HTTPConnection,), {"_new_conn": _new_conn})
    https = type("GuardedHTTPSConnection", (urllib3.connection.HTTPSConnection,), {"_new_conn": _new_conn})
    return {
        "http": type("GuardedPool", (urllib3.connectionpool.HTTPConnectionPool,), {"ConnectionCls": http}),
        "https": type(
            "GuardedHTTPSPool", (urllib3.connectionpool.HTTPSConnectionPool,), {"ConnectionCls": https}
        ),
    }
