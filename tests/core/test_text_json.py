"""core.parsers: a lone surrogate anywhere in a body is a 400 naming where.

Python's json module reads `"\\ud800"` into a str that UTF-8 cannot encode; it used to travel on until the
database, a log or a rendered file failed with a 500.
"""

from __future__ import annotations

import io

import pytest
from rest_framework.exceptions import ParseError

from core.parsers import JSONParser, lone_surrogate_at


def parse(body: bytes, media_type: str = "application/json"):
    return JSONParser().parse(io.BytesIO(body), media_type)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (rb'{"name": "\ud800"}', "the value at $.name"),
        (rb'{"name": "ok\uDBFFx"}', "the value at $.name"),
        (rb'{"\udc00": 1}', 'the key "\\udc00" of $'),
        (rb'{"work": {"env": {"\ud800X": "1"}}}', 'the key "\\ud800X" of $.work.env'),
        (rb'{"work": {"env": {"A": "\ud800"}}}', "the value at $.work.env.A"),
        (rb'{"work": {"command": ["python", "\ude00"]}}', "the value at $.work.command[1]"),
        (rb'[{"a b": [[{"c": "\ud800"}]]}]', 'the value at $[0]["a b"][0][0].c'),
        (rb'"\ud800"', "the value at $"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where(body, where):
    with pytest.raises(ParseError) as caught:
        parse(body)
    assert "lone surrogate" in str(caught.value.detail)
    assert where in str(caught.value.detail)


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (rb'{"name": "\ud83d\ude80 launch"}', {"name": "\U0001f680 launch"}),  # a whole pair is a character
        (rb'{"name": "\\ud800"}', {"name": "\\ud800"}),  # an escaped backslash, then the letters "ud800"
        ('{"name": "日本"}'.encode(), {"name": "日本"}),
    ],
)
def test_whole_pairs_and_ordinary_text_are_taken(body, value):
    assert parse(body) == value


def test_a_charset_that_decodes_to_a_lone_surrogate_is_refused():
    with pytest.raises(ParseError) as caught:
        parse(rb'{"a": "\ud800"}'.replace(b'"\\', b'"\\'), "application/json; charset=unicode-escape")
    assert "lone surrogate" in str(caught.value.detail)


def test_the_walk_has_no_recursion_limit():
    deep: object = "\ud800"
    for _ in range(5000):
        deep = [deep]
    assert lone_surrogate_at(deep).startswith("the value at $[0][0]")


@pytest.mark.django_db
def test_the_telemetry_text_endpoint_refuses_it_too(api_as, node_agent):
    client = api_as(node_agent)
    client.raise_request_exception = False
    response = client.post(
        "/api/v1/telemetry/dcgm/",
        rb'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-\ud800"} 1',
        content_type="text/plain; charset=unicode-escape",
    )
    assert response.status_code == 400, response.content[:300]
    assert "lone surrogate" in response.json()["detail"]
