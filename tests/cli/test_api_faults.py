"""Answers the real portal cannot be made to give on demand (a redirect elsewhere, a body cut or too large,
broken JSON, a proxy's HTML 502, a `next` link to another host): rp's HTTP layer (rpcli/api.py) against a
stand-in transport (httpx.MockTransport), each a clear RpError with its exit code, never a traceback. Every
answer the portal does give is tested against the live server (test_rp_live.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from rpcli import api as api_module
from rpcli.api import Api, api_message, printable
from rpcli.config import Config
from rpcli.errors import Exit, RpError

URL = "https://portal.example.org"
TOKEN = "rpt_" + "a" * 43


def serving(handler, seen: list | None = None) -> Api:
    def record(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return handler(request)

    return Api(Config(URL, TOKEN), transport=httpx.MockTransport(record))


def refused(client: Api, path: str = "/api/v1/jobs/1/") -> RpError:
    with pytest.raises(RpError) as caught:
        client.get(path)
    return caught.value


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch):
    monkeypatch.setattr(api_module.time, "sleep", lambda seconds: None)


def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else():
    seen: list[httpx.Request] = []
    client = serving(lambda r: httpx.Response(302, headers={"Location": "https://evil.example.org/"}), seen)
    error = refused(client)
    assert error.code == Exit.SERVER and "redirect to https://evil.example.org/" in error.message
    assert [r.url.host for r in seen] == ["portal.example.org"]


def test_html_from_a_proxy_is_a_server_error_in_words():
    client = serving(
        lambda r: httpx.Response(502, text="<html>Bad Gateway</html>", headers={"Content-Type": "text/html"})
    )
    error = refused(client)
    assert error.code == Exit.SERVER and "server error 502" in error.message


@pytest.mark.parametrize("body", [b"{", b"[" * 100_000 + b"]" * 100_000, b'{"id": 1'])
def test_broken_json_is_a_server_error(body):
    client = serving(
        lambda r: httpx.Response(200, content=body, headers={"Content-Type": "application/json"})
    )
    error = refused(client)
    assert error.code == Exit.SERVER and "broken JSON" in error.message


def test_an_answer_too_large_is_not_read_to_its_end(monkeypatch):
    monkeypatch.setattr(api_module, "MAX_RESPONSE", 1000)
    client = serving(
        lambda r: httpx.Response(
            200, content=b"[" + b"1," * 5000 + b"1]", headers={"Content-Type": "application/json"}
        )
    )
    error = refused(client)
    assert error.code == Exit.SERVER and "stopped reading" in error.message


def test_a_gateway_error_is_retried_then_answered():
    answers = iter([httpx.Response(503, json={"detail": "starting"}), httpx.Response(200, json={"id": 1})])
    seen: list[httpx.Request] = []
    assert serving(lambda r: next(answers), seen).get("/api/v1/jobs/1/") == {"id": 1}
    assert len(seen) == 2


def test_a_submission_is_retried_with_the_same_idempotency_key():
    answers = iter([httpx.Response(504, json={"detail": "timeout"}), httpx.Response(201, json={"id": 7})])
    seen: list[httpx.Request] = []
    client = serving(lambda r: next(answers), seen)
    assert client.post("/api/v1/jobs/", {"name": "x"}, headers={"Idempotency-Key": "k-1"}, retry=True) == {
        "id": 7
    }
    assert [r.headers["Idempotency-Key"] for r in seen] == ["k-1", "k-1"]


def test_no_answer_at_all_is_a_server_error_after_three_tries():
    seen: list[httpx.Request] = []

    def down(request):
        raise httpx.ConnectError("connection refused", request=request)

    error = refused(serving(down, seen))
    assert error.code == Exit.SERVER and "could not reach https://portal.example.org" in error.message
    assert len(seen) == 3


def test_a_cancel_is_not_sent_twice():
    seen: list[httpx.Request] = []
    client = serving(lambda r: httpx.Response(503, json={"detail": "busy"}), seen)
    with pytest.raises(RpError):
        client.post("/api/v1/jobs/1/cancel/")
    assert len(seen) == 1


def test_the_next_page_is_asked_of_the_portal_whatever_host_the_link_names():
    seen: list[httpx.Request] = []

    def pages(request):
        if request.url.params.get("page") == "2":
            return httpx.Response(200, json={"count": 2, "next": None, "results": [{"id": 2}]})
        return httpx.Response(
            200,
            json={"count": 2, "next": "http://evil.example.org/api/v1/jobs/?page=2", "results": [{"id": 1}]},
        )

    assert [j["id"] for j in serving(pages, seen).pages("/api/v1/jobs/")] == [1, 2]
    assert {(r.url.scheme, r.url.host) for r in seen} == {("https", "portal.example.org")}
    assert all(r.headers["Authorization"] == f"Token {TOKEN}" for r in seen)


def test_a_page_that_is_not_a_page_is_a_server_error():
    client = serving(lambda r: httpx.Response(200, json=["not", "a", "page"]))
    with pytest.raises(RpError) as caught:
        list(client.pages("/api/v1/jobs/"))
    assert caught.value.code == Exit.SERVER


def test_a_servers_message_cannot_drive_the_terminal():
    client = serving(lambda r: httpx.Response(400, json={"name": ["bad \x1b[2J\x1b]0;owned\x07 name"]}))
    error = refused(client)
    assert error.code == Exit.REFUSED
    assert "\x1b" not in error.message and "\x07" not in error.message
    assert "name: bad \\x1b[2J" in error.message


def test_the_apis_error_bodies_in_one_line():
    assert api_message({"detail": "Not found."}) == "Not found."
    assert api_message({"work": {"script": ["needs #!"]}, "gpus": ["too many", "odd"]}) == (
        "work: script: needs #!; gpus: too many odd"
    )
    assert api_message({"non_field_errors": ["fallback needs a topology"]}) == "fallback needs a topology"
    assert printable("x" * 3000).endswith("...") and len(printable("x" * 3000)) == api_module.MAX_MESSAGE + 3


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, Exit.AUTH),
        (403, Exit.AUTH),
        (404, Exit.NOT_FOUND),
        (409, Exit.REFUSED),
        (429, Exit.REFUSED),
        (500, Exit.SERVER),
    ],
)
def test_each_status_has_its_exit_code(status, code):
    client = serving(lambda r: httpx.Response(status, json={"detail": "said the API", "retry_after": 3}))
    error = refused(client)
    assert error.code == code
    if status != 404:
        assert "said the API" in error.message
    assert json.dumps(error.message)  # plain text
