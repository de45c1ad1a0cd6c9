"""One HTTP client for outside systems (slurmrestd, NMX-M, DCGM exporters): timeouts, TLS, credentials, size
limits and error mapping in one place.

Any answer with a status comes back as a `Response` (callers decide what a 404 or a 409 means for them;
`transient_failure` says whether the status is worth retrying). A request that gets no answer (refused,
reset, timed out, DNS, cut mid-body) raises `Unreachable`, the transient error of `core.errors`, whose
message names the address and the reason in words; callers put it into their own system's error. An answer
that cannot be used (larger than `max_bytes`, a TLS certificate that is not trusted) raises a non-transient
`ExternalError`: asking again gets the same.

Every connection is opened through the outbound guard (core.outbound): the host is resolved once, each of
its addresses vetted, and the socket connected to a vetted one; a redirect is a new connection, vetted the
same way. `allow_private` lifts the refusal of private and loopback addresses for the client's own address
(its base URL's host and port, or each request's, without a base URL) and nowhere else: a redirect to
another host is vetted without it. Through a proxy from the environment the proxy is connected to (the
operator chose it) and the destination's name is vetted before the request. A refused connection raises
`OutboundRefused`, a permanent `ExternalError`.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import ExternalError, Unreachable
from core.outbound import Guard

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
READ_CHUNK = 256 * 1024
MIB = 1024 * 1024


@dataclass
class Response:
    status: int
    reason: str = ""  # the status line's phrase ("Not Found")
    headers: Mapping[str, str] = field(default_factory=dict)  # case-insensitive when from a server
    body: bytes = b""
    charset: str = "utf-8"

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.body.decode(self.charset or "utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; None when empty; ValueError when it is not JSON."""
        text = self.text
        return json.loads(text) if text.strip() else None

    def json_or_text(self) -> Any:
        """The body as JSON, or as text when it is not JSON (a proxy's HTML error page)."""
        try:
            return self.json()
        except ValueError:
            return self.text

    @property
    def transient_failure(self) -> bool:
        """5xx, 408 and 429: the server is failing or busy, not refusing."""
        return self.status >= 500 or self.status in (408, 429)


def basic_authorization(username: str, password: str) -> str:
    """The `Authorization` header value of HTTP basic authentication."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit >= MIB and limit % MIB == 0 else f"{limit} bytes"


def _failure(error: BaseException, address: str, host: str, timeout: float) -> ExternalError:
    """The error of a request that got no usable answer, in words."""
    reason = getattr(error, "reason", None) or error
    if isinstance(reason, ExternalError):  # the guard's refusal, or a name it could not resolve
        return reason
    if isinstance(reason, ssl.SSLCertVerificationError):
        return ExternalError(
            f"the TLS certificate of {address} is not trusted: {reason.verify_message or reason}",
            "give the CA file that signed the server's certificate (for a test system: skip verification)",
        )
    if isinstance(reason, ConnectionRefusedError):
        text = f"connection refused by {address}"
    elif isinstance(reason, TimeoutError | socket.timeout):
        text = f"no answer from {address} within {timeout:g} seconds"
    elif isinstance(reason, socket.gaierror):
        text = f"cannot resolve host {host}"
    elif isinstance(reason, http.client.IncompleteRead):
        text = f"the answer from {address} was cut off after {len(reason.partial)} bytes"
    else:
        text = f"cannot reach {address}: {reason}"
    return Unreachable(text)


def _guarded(connection_class: type[http.client.HTTPConnection]):
    """An http.client connection class whose socket is opened by a Guard (see core.outbound)."""

    class Guarded(connection_class):  # type: ignore[valid-type, misc]
        def __init__(self, *args, guard: Guard, **kwargs):
            super().__init__(*args, **kwargs)
            self._create_connection = functools.partial(_guarded_connect, guard)

    Guarded.__name__ = f"Guarded{connection_class.__name__}"
    return Guarded


def _guarded_connect(guard: Guard, address, timeout=socket._GLOBAL_DEFAULT_TIMEOUT, source_address=None):  # type: ignore[attr-defined]
    host, port = address
    return guard.connect(host, port, timeout, source_address)


_GuardedHTTPConnection = _guarded(http.client.HTTPConnection)
_GuardedHTTPSConnection = _guarded(http.client.HTTPSConnection)


def _request_guard(guard: Guard, request: urllib.request.Request) -> tuple[Guard, bool]:
    """(the guard for this request's connection, whether it goes through a proxy). The allowance is for
    the origin the request carries (the client's address; kept on redirects by _RedirectHandler)."""
    narrowed = Guard(guard.allow_private, _origin_of(request))
    target = urllib.parse.urlsplit(request.full_url)
    # ProxyHandler points the request at the proxy (request.host); full_url still names the destination.
    proxied = (request.host or "").lower() != urllib.parse.unquote(target.netloc or "").lower()
    if proxied:
        port = target.port or (443 if target.scheme == "https" else 80)
        narrowed.vet(target.hostname or "", port)  # the proxy connects: vet the name before we ask it
    return narrowed, proxied


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, guard: Guard):
        super().__init__()
        self.guard = guard

    def http_open(self, req):
        guard, proxied = _request_guard(self.guard, req)
        if proxied:
            return self.do_open(http.client.HTTPConnection, req)
        return self.do_open(functools.partial(_GuardedHTTPConnection, guard=guard), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, guard: Guard, context=None):
        super().__init__(context=context)
        self.guard = guard
        self.context = context

    def https_open(self, req):
        guard, proxied = _request_guard(self.guard, req)
        connection = http.client.HTTPSConnection
        if not proxied:
            connection = functools.partial(_GuardedHTTPSConnection, guard=guard)  # type: ignore[assignment]
        return self.do_open(connection, req, context=self.context)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows redirects, each hop vetted by the guard when it connects; the hop keeps the origin the
    allowance is for, so a redirect to another host does not share it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            _set_origin(new, _origin_of(req))
        return new


# The origin a request's allowance is for, carried on the urllib Request itself (redirect hops copy it).
_ORIGIN_ATTR = "rackplane_origin"


def _set_origin(request: urllib.request.Request, origin: tuple[str, int] | None) -> None:
    setattr(request, _ORIGIN_ATTR, origin)


def _origin_of(request: urllib.request.Request) -> tuple[str, int] | None:
    return getattr(request, _ORIGIN_ATTR, None)


def _origin(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    return (parts.hostname or "").lower(), port


class HttpClient:
    """Requests to one base URL (or to full URLs, without one) with fixed headers, credentials, timeout,
    TLS settings and body-size limit.

    headers: sent with every request (Accept, User-Agent, ...); `request` adds per-request ones.
    basic_auth: (user, password) for HTTP basic authentication; bearer_token: `Authorization: Bearer`.
    ca_file: the CA bundle that signed the server's certificate; insecure: skip certificate checks.
    max_bytes: a longer answer is refused (a wrong URL streaming something else must not fill memory).
    follow_redirects: False returns a 3xx as the answer instead of following it (webhooks: a redirect could
    lead to an address the destination check refused).
    allow_private: private and loopback addresses may be connected to, at the client's own address only
    (the object's per-object allowance; core.outbound). Never: link-local/metadata, multicast, unspecified.
    """

    def __init__(
        self,
        base_url: str = "",
        *,
        headers: Mapping[str, str] | None = None,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        ca_file: str = "",
        insecure: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        follow_redirects: bool = True,
        allow_private: bool = False,
    ):
        if basic_auth and bearer_token:
            raise ValueError("give basic_auth or bearer_token, not both")
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        if basic_auth:
            self.headers["Authorization"] = basic_authorization(*basic_auth)
        elif bearer_token:
            self.headers["Authorization"] = f"Bearer {bearer_token}"
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.guard = Guard(allow_private)
        # Only HTTP(S) handlers (and the environment's proxies): the default opener would also read
        # file://, ftp:// and data: URLs.
        context = None
        if ca_file or insecure:
            context = ssl.create_default_context(cafile=ca_file or None)
            if insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        self._opener = urllib.request.OpenerDirector()
        for handler in (
            urllib.request.ProxyHandler(),
            _HTTPHandler(self.guard),
            _HTTPSHandler(self.guard, context=context),
            urllib.request.HTTPErrorProcessor(),
            urllib.request.HTTPDefaultErrorHandler(),
        ):
            self._opener.add_handler(handler)
        if follow_redirects:
            self._opener.add_handler(_RedirectHandler())

    def request(
        self, method: str, path: str = "", body: Any = None, *, headers: Mapping[str, str] | None = None
    ) -> Response:
        """Send one request to base URL + `path` (or to `path` itself, a full URL, without a base URL).

        `body` is sent as JSON unless it is bytes. Returns the answer whatever its status; raises
        Unreachable when nothing (or only part of an answer) came back, ExternalError when the answer
        cannot be used.
        """
        url = self.base_url + path if self.base_url else path
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http:// or https:// address")
        address, host = parts.netloc, parts.hostname or parts.netloc
        all_headers = {**self.headers, **(headers or {})}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        # The allowance is for the client's own address: its base URL's, else this request's.
        _set_origin(request, _origin(self.base_url or url))
        try:
            try:
                answer = self._opener.open(request, timeout=self.timeout)
            except urllib.error.HTTPError as error:
                answer = error  # any status but 2xx (after redirects): an answer like any other
            with answer:
                raw = self._read(answer, address)
                status, reason, answer_headers = answer.status, answer.reason, answer.headers
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            raise _failure(error, address, host, self.timeout) from error
        charset = answer_headers.get_content_charset() if answer_headers is not None else None
        return Response(status, reason or "", answer_headers or {}, raw, charset or "utf-8")

    def _read(self, answer, address: str) -> bytes:
        """The whole body, in chunks: refused past max_bytes, Unreachable when shorter than announced."""
        chunks: list[bytes] = []
        size = 0
        while size <= self.max_bytes:
            chunk = answer.read(min(READ_CHUNK, self.max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > self.max_bytes:
            raise ExternalError(
                f"the answer from {address} is larger than {_size(self.max_bytes)}",
                "check the URL: this is not the service it should be",
            )
        # http.client returns a body cut short of its Content-Length without complaint; `length` is what
        # is still missing (chunked bodies raise IncompleteRead instead).
        response = answer.fp if isinstance(answer, urllib.error.HTTPError) else answer
        missing = response.length if isinstance(response, http.client.HTTPResponse) else None
        if isinstance(missing, int) and missing > 0:
            raise Unreachable(f"the answer from {address} was cut off after {size} bytes ({missing} missing)")
        return b"".join(chunks)
