"""One HTTP client for outside systems (slurmrestd, NMX-M, DCGM exporters): timeouts, TLS, size limits and
error mapping in one place.

Any answer with a status comes back as a `Response` (callers decide what a 404 or a 409 means for them);
a request that gets no answer (refused, reset, timed out, DNS, cut mid-body) raises `Unreachable`, the
transient error of `core.errors`, with the address and reason in words.
"""

from __future__ import annotations

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

from core.errors import Unreachable

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


@dataclass
class Response:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    charset: str = "utf-8"

    @property
    def text(self) -> str:
        return self.body.decode(self.charset or "utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; None when empty; ValueError when it is not JSON."""
        text = self.text
        return json.loads(text) if text.strip() else None

    def json_or_text(self) -> Any:
        try:
            return self.json()
        except ValueError:
            return self.text

    @property
    def transient_failure(self) -> bool:
        """5xx, 408 and 429: the server is failing or busy, not refusing."""
        return self.status >= 500 or self.status in (408, 429)


def _reason(error: BaseException, address: str, timeout: float) -> str:
    reason = getattr(error, "reason", None) or error
    if isinstance(reason, ConnectionRefusedError):
        return f"connection refused by {address}"
    if isinstance(reason, TimeoutError | socket.timeout):
        return f"no answer from {address} within {timeout:g} seconds"
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve {urllib.parse.urlsplit('//' + address).hostname or address}"
    return f"cannot reach {address}: {reason}"


class HttpClient:
    """Requests to one base URL with fixed headers, timeout, TLS settings and body-size limit."""

    def __init__(
        self,
        base_url: str = "",
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        ca_file: str = "",
        insecure: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        name: str = "",
    ):
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.name = name or urllib.parse.urlsplit(self.base_url).netloc or "the server"
        handlers: list[urllib.request.BaseHandler] = []
        if self.base_url.startswith("https://") and (ca_file or insecure):
            context = ssl.create_default_context(cafile=ca_file or None)
            if insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def request(
        self, method: str, path: str = "", body: Any = None, *, headers: Mapping[str, str] | None = None
    ) -> Response:
        """Send one request (`body` is sent as JSON unless it is bytes); Unreachable when nothing answers."""
        url = self.base_url + path
        address = urllib.parse.urlsplit(url).netloc or url
        all_headers = {**self.headers, **(headers or {})}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as answer:
                raw = answer.read(self.max_bytes + 1)
                return self._response(answer.status, answer.headers, raw, address)
        except urllib.error.HTTPError as error:
            try:
                raw = error.read(self.max_bytes + 1) if error.fp else b""
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                error.close()
            return self._response(error.code, error.headers or {}, raw, address)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            raise Unreachable(f"{method} {path or '/'}: {_reason(error, address, self.timeout)}") from error

    def _response(self, status: int, headers, raw: bytes, address: str) -> Response:
        if len(raw) > self.max_bytes:
            raise Unreachable(
                f"the answer from {address} is larger than {self.max_bytes // (1024 * 1024)} MiB",
                "check the URL: this is not the service it should be",
                transient=False,
            )
        charset = headers.get_content_charset() if hasattr(headers, "get_content_charset") else None
        return Response(status=status, headers=headers, body=raw, charset=charset or "utf-8")
