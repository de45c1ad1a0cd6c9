"""A thin layer over the REST API (httpx): the token on every request, JSON in and out, pages followed, and
every failure turned into an RpError with the exit code scripts test (rpcli.errors) and the API's own words.

Redirects are not followed (the token goes only to the address the person logged in to; a `next` page link
to another origin is refused), answers are read up to MAX_RESPONSE bytes, and text from the server is shown
without control characters (a server cannot drive the terminal through an error message).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from importlib import metadata
from typing import Any

import httpx

from rpcli.config import Config
from rpcli.errors import Exit, RpError

MAX_RESPONSE = 64 * 1024 * 1024
MAX_MESSAGE = 2000
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_DELAYS = (0.5, 1.5)  # a retried request waits these (so three tries in all)
MAX_PAGES = 10_000  # a server whose `next` never ends is not followed forever


def version() -> str:
    try:
        return metadata.version("rackplane")
    except metadata.PackageNotFoundError:
        return "unknown"


def printable(text: str, limit: int = MAX_MESSAGE) -> str:
    """Text from the server as it may be shown on a terminal: control characters (ESC and the rest, but for
    newline and tab) as `\\xNN`, and cut at `limit` characters."""
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else f"\\x{ord(ch):02x}" for ch in str(text))
    return cleaned if len(cleaned) <= limit else cleaned[:limit] + "..."


def api_message(data: Any) -> str:
    """DRF's error bodies in one line: {"detail": ...}, {"field": ["...", ...]}, nested ones."""
    if isinstance(data, Mapping):
        if "detail" in data and set(data) <= {"detail", "code", "retry_after"}:
            return api_message(data["detail"])
        parts = []
        for key, value in data.items():
            text = api_message(value)
            parts.append(text if key in ("detail", "non_field_errors") else f"{key}: {text}")
        return "; ".join(parts)
    if isinstance(data, list):
        return " ".join(api_message(item) for item in data)
    return str(data)


def auth_scheme(token: str) -> str:
    """Personal tokens (rpt_) and the single token (40 hex characters) are `Token`; anything else is an
    identity provider's access token, sent as `Bearer` (docs/tokens.md)."""
    if token.startswith("rpt_") or (len(token) == 40 and all(c in "0123456789abcdef" for c in token)):
        return "Token"
    return "Bearer"


class NoAnswer(RpError):
    """No answer came (refused, reset, timed out): the one failure a request may be sent again after."""

    def __init__(self, message: str):
        super().__init__(Exit.SERVER, message)


class Api:
    def __init__(self, config: Config, *, transport: httpx.BaseTransport | None = None):
        self.url = config.url
        self.last_status = 0  # the status of the last answer (200 or 201 for a submission)
        self._client = httpx.Client(
            headers={
                "Authorization": f"{auth_scheme(config.token)} {config.token}",
                "Accept": "application/json",
                "User-Agent": f"rp/{version()}",
            },
            timeout=TIMEOUT,
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests ---------------------------------------------------------------------------------------

    def get(self, path: str, params: Any = None, *, not_found: str = "") -> Any:
        return self.request("GET", path, params=params, retry=True, not_found=not_found)

    def post(
        self,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        retry: bool = False,
        not_found: str = "",
    ) -> Any:
        return self.request("POST", path, body=body, headers=headers, retry=retry, not_found=not_found)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        retry: bool = False,
        not_found: str = "",
    ) -> Any:
        """The answer's JSON; RpError for anything else. `retry`: the request may be sent again when no answer
        came or the server said 502/503/504 (GETs; a submission with its Idempotency-Key)."""
        url = self.url + path  # only ever the portal's address the person logged in to
        delays = list(RETRY_DELAYS) if retry else []
        while True:
            try:
                status, content_type, data = self._send(method, url, params, body, headers)
            except NoAnswer:
                if not delays:
                    raise
                time.sleep(delays.pop(0))
                continue
            if status in RETRY_STATUSES and delays:
                time.sleep(delays.pop(0))
                continue
            self.last_status = status
            return self._answer(method, url, status, content_type, data, not_found)

    def _send(self, method, url, params, body, headers) -> tuple[int, str, bytes]:
        try:
            with self._client.stream(method, url, params=params, json=body, headers=headers) as response:
                if response.is_redirect:
                    location = response.headers.get("Location", "")
                    raise RpError(
                        Exit.SERVER,
                        f"{self.url} answered {response.status_code} with a redirect to "
                        f"{printable(location, 300)}: if the portal moved, run `rp login --url` with its new "
                        "address",
                    )
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE:
                        raise RpError(
                            Exit.SERVER,
                            f"{self.url} sent an answer over {MAX_RESPONSE // (1024 * 1024)} MiB: "
                            "stopped reading",
                        )
                    chunks.append(chunk)
                content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
                return response.status_code, content_type, b"".join(chunks)
        except httpx.TimeoutException as error:
            raise NoAnswer(f"{self.url} did not answer in time ({type(error).__name__})") from error
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
            raise RpError(Exit.USAGE, f"cannot send a request to {url}: {error}") from error
        except httpx.TransportError as error:
            reason = str(error) or type(error).__name__
            raise NoAnswer(f"could not reach {self.url}: {printable(reason, 300)}") from error

    def _answer(self, method, url, status, content_type, data, not_found) -> Any:
        where = f"{method} {urllib.parse.urlsplit(url).path}"
        payload: Any = None
        is_json = content_type == "application/json" or content_type.endswith("+json")
        if is_json:
            try:
                payload = json.loads(data) if data else None
            except (ValueError, RecursionError):
                raise RpError(
                    Exit.SERVER, f"{self.url} answered {where} ({status}) with broken JSON"
                ) from None
        elif data or status < 300:
            if status >= 500:
                raise RpError(Exit.SERVER, f"server error {status} at {self.url} ({where}): try again later")
            raise RpError(
                Exit.SERVER,
                f"{self.url} answered {where} ({status}) with {content_type or 'something'}, not the API's "
                "JSON: is it the Rackplane portal's address (the one the portal's pages are at)?",
            )
        if status < 300:
            return payload
        message = printable(api_message(payload)) if payload is not None else ""
        if status == 401:
            raise RpError(
                Exit.AUTH,
                f"the portal refused the token: {message.rstrip('.') or 'not authenticated'}. Make a new one "
                f"on {self.url}/account/tokens/ and run `rp login` again.",
            )
        if status == 403:
            raise RpError(Exit.AUTH, f"not allowed: {message or 'permission denied'}")
        if status == 404:
            raise RpError(Exit.NOT_FOUND, not_found or f"not found: {where}")
        if status == 429:
            after = payload.get("retry_after") if isinstance(payload, dict) else None
            raise RpError(
                Exit.REFUSED,
                f"too many requests: {message}" + (f" (try again in {after} s)" if after else ""),
            )
        if status < 500:
            raise RpError(Exit.REFUSED, f"the API refused it ({status}): {message or 'no reason given'}")
        raise RpError(
            Exit.SERVER, f"server error {status} at {self.url} ({where}): {message or 'try again later'}"
        )

    # --- lists --------------------------------------------------------------------------------------------

    def pages(self, path: str, params: Mapping[str, Any] | None = None, limit: int = 0) -> Iterator[dict]:
        """Every item of a paginated list (`count`, `next`, `results`), following `next` until the last page
        or `limit` items (0: all). Only the query of `next` is used, on the portal's address the person logged
        in to: the token never follows a link to another host, and a proxy that makes the portal write its
        links with another scheme or host does not break the walk."""
        query: Any = params
        seen = 0
        for _ in range(MAX_PAGES):
            page = self.get(path, query)
            if not isinstance(page, dict) or not isinstance(page.get("results"), list):
                raise RpError(
                    Exit.SERVER, f"{self.url} answered {path} with something that is not a list page"
                )
            for item in page["results"]:
                if not isinstance(item, dict):
                    raise RpError(Exit.SERVER, f"{self.url} answered {path} with a list of something else")
                yield item
                seen += 1
                if limit and seen >= limit:
                    return
            following = page.get("next")
            if not following:
                return
            if not isinstance(following, str):
                raise RpError(Exit.SERVER, f"{self.url} answered {path} with a next page that is not a link")
            query = urllib.parse.parse_qsl(urllib.parse.urlsplit(following).query, keep_blank_values=True)
        raise RpError(Exit.SERVER, f"{self.url} answered {path} with more than {MAX_PAGES} pages: stopped")
