"""Static files by range: one byte is a range like any other (portal/web/static_files.py, over WhiteNoise)."""

import functools
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.http import HttpResponse
from django.test import RequestFactory
from hypothesis import given, settings
from hypothesis import strategies as st
from whitenoise.middleware import WhiteNoiseMiddleware

from portal.web.static_files import StaticFilesMiddleware

URL = "/static/portal/search.js"
CONTENT = Path(finders.find("portal/search.js")).read_bytes()
SIZE = len(CONTENT)


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-0", 0, 0),  # the probe browsers and players send
        ("bytes=5-5", 5, 5),
        ("bytes=-1", SIZE - 1, SIZE - 1),  # the last byte
        (f"bytes={SIZE - 1}-", SIZE - 1, SIZE - 1),
        (f"bytes={SIZE - 1}-{SIZE + 50}", SIZE - 1, SIZE - 1),  # an end past the file: up to its last byte
        ("bytes=0-1", 0, 1),  # two bytes and more: WhiteNoise's own answer, unchanged
        ("bytes=10-", 10, SIZE - 1),
        ("bytes=-20", SIZE - 20, SIZE - 1),
    ],
)
def test_a_range_answers_206_with_its_bytes(client, header, start, end):
    response = client.get(URL, HTTP_RANGE=header)
    assert response.status_code == 206, header
    assert response["Content-Range"] == f"bytes {start}-{end}/{SIZE}"
    assert response["Content-Length"] == str(end - start + 1)
    assert response["Content-Type"].startswith("text/javascript")
    assert body(response) == CONTENT[start : end + 1]
    head = client.head(URL, HTTP_RANGE=header)
    assert (head.status_code, head["Content-Length"], body(head)) == (206, str(end - start + 1), b"")


@pytest.mark.parametrize("header", [f"bytes={SIZE}-{SIZE}", f"bytes={SIZE + 5}-{SIZE + 5}", f"bytes={SIZE}-"])
def test_a_range_past_the_end_is_refused(client, header):
    response = client.get(URL, HTTP_RANGE=header)
    assert response.status_code == 416
    assert response["Content-Range"] == f"bytes */{SIZE}"


@pytest.mark.parametrize("header", ["items=0-0", "bytes=a-b", "bytes=0-0,5-5", "bytes=0"])
def test_a_range_it_cannot_read_gets_the_whole_file(client, header):
    response = client.get(URL, HTTP_RANGE=header)
    assert (response.status_code, body(response)) == (200, CONTENT)


def serve(middleware, header: str):
    return middleware(RequestFactory().get(URL, HTTP_RANGE=header))


@functools.cache
def ours() -> StaticFilesMiddleware:
    return StaticFilesMiddleware(lambda request: HttpResponse(status=404))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_range_inside_the_file_answers_its_bytes(data):
    start = data.draw(st.integers(0, SIZE - 1), label="start")
    end = data.draw(st.integers(start, min(SIZE - 1, start + 64)), label="end")
    response = serve(ours(), f"bytes={start}-{end}")
    assert response.status_code == 206
    assert body(response) == CONTENT[start : end + 1]


def test_whitenoise_itself_still_refuses_one_byte():
    """When this fails, WhiteNoise answers one-byte ranges itself (evansd/whitenoise#711 fixed): remove
    portal/web/static_files.py and put `whitenoise.middleware.WhiteNoiseMiddleware` back in MIDDLEWARE."""
    plain = WhiteNoiseMiddleware(lambda request: HttpResponse(status=404))
    assert serve(plain, "bytes=0-1").status_code == 206
    assert serve(plain, "bytes=0-0").status_code == 416
