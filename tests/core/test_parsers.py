"""core.parsers: no JSON body can cost the server more than its limits.

Deeply nested JSON (2,500 levels, 6 KB) used to end in a RecursionError, a 500, on every JSON endpoint.
Each hostile body goes to the real endpoints with a real token; the answer names the limit and nothing is
written.
"""

import io

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.views import APIView

from core.models import AuditEvent
from core.parsers import JSONParser, nesting_deeper_than
from inventory.models import Gpu, PartitionPlan
from scheduling.models import Job
from tenancy.api.telemetry import PlainTextParser
from tenancy.models import Department, Membership

pytestmark = pytest.mark.django_db

DEEP = "[" * 2500 + "]" * 2500  # the finding: about 6 KB
# (endpoint, the persona allowed to post to it): the parser runs once the view reads request.data.
JSON_ENDPOINTS = [
    ("/api/v1/jobs/", "member_a"),
    ("/api/v1/partition-plans/", "platform_admin"),
    ("/api/v1/departments/", "platform_admin"),
    ("/api/v1/departments/alpha/members/", "lead_a"),
    ("/api/v1/discovery/reports/", "node_agent"),
]


def rows() -> dict[str, int]:
    models = (Job, PartitionPlan, Department, Membership, Gpu, AuditEvent)
    return {model.__name__: model.objects.count() for model in models}


@pytest.fixture
def client_for(api_as, demo_inventory):
    def client(persona):
        client = api_as(persona)
        client.raise_request_exception = False  # a 500 is an answer to assert on, not an exception
        return client

    return client


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(("url", "persona"), JSON_ENDPOINTS)
def test_deeply_nested_json_is_a_400_naming_the_depth_limit_and_writes_nothing(client_for, url, persona):
    client = client_for(persona)
    before = rows()
    response = client.post(url, DEEP, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json() == {
        "detail": "the JSON body nests arrays and objects more than 64 levels deep, this API's limit"
    }
    assert rows() == before


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(("url", "persona"), JSON_ENDPOINTS)
def test_a_key_given_twice_is_a_400_naming_it_and_writes_nothing(client_for, url, persona):
    client = client_for(persona)
    before = rows()
    # The walkthrough's body: the last value used to win silently (a job "h16b" with 8 GPUs).
    body = '{"name": "h16", "host": "gb-r02-t04", "gpus": 4, "nested": {"a": 1}, "name": "h16b", "gpus": 8}'
    response = client.post(url, body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert response.json() == {
        "detail": "the JSON body gives the key 'name' twice in one object: send it once"
    }
    assert rows() == before


def test_a_key_given_twice_deep_inside_is_found_and_different_objects_may_share_keys(client_for):
    client = client_for("member_a")
    body = '{"work": {"env": {"A": "1", "A": "2"}}}'
    response = client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.json() == {"detail": "the JSON body gives the key 'A' twice in one object: send it once"}
    parsed = JSONParser().parse(io.BytesIO(b'[{"a": 1}, {"a": 2, "b": {"a": 3}}]'))
    assert parsed == [{"a": 1}, {"a": 2, "b": {"a": 3}}]


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(("url", "persona"), JSON_ENDPOINTS)
def test_a_body_over_the_size_limit_is_a_413_naming_it_and_writes_nothing(client_for, url, persona):
    client = client_for(persona)
    before = rows()
    body = '{"name": "' + "x" * JSONParser.max_body_bytes + '"}'
    response = client.post(url, body, content_type="application/json")
    assert response.status_code == 413, response.content[:300]
    assert response.json() == {"detail": "the request body is larger than 4 MiB, this API's limit"}
    assert rows() == before


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("charset", ["rot13", "hex", "base64", "no-such-charset"])
def test_a_charset_that_is_not_text_is_a_415_naming_it(client_for, charset):
    client = client_for("member_a")
    before = rows()
    response = client.post("/api/v1/jobs/", "{}", content_type=f"application/json; charset={charset}")
    assert response.status_code == 415, response.content[:300]
    assert response.json() == {
        "detail": f"charset '{charset}' is not a text encoding this API reads: send UTF-8"
    }
    assert rows() == before


def test_nesting_up_to_the_limit_reaches_the_serializer(client_for):
    """64 levels (the body's object and 63 arrays) parse; the serializer answers what is wrong."""
    body = '{"department": "alpha", "gpus": 1, "work": {}, "name": %s}' % ("[" * 63 + "1" + "]" * 63)
    response = client_for("member_a").post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["name"] == ["Not a valid string."]
    assert Job.objects.count() == 0


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = '{"script": "' + "[{" * 500 + '\\"' + "[" * 100 + '", "ok": [[1]]}'
    assert not nesting_deeper_than(text, 64)
    assert nesting_deeper_than("[" * 65 + "]" * 65, 64)
    assert not nesting_deeper_than("[" * 64 + "]" * 64, 64)
    assert nesting_deeper_than('{"a": ' * 65 + "1" + "}" * 65, 64)


def api_views():
    """Every DRF view the URLconf routes to, with its route."""

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
                if isinstance(view, type) and issubclass(view, APIView):
                    yield prefix + str(pattern.pattern), view

    return list(walk(get_resolver().url_patterns))


def test_every_api_view_parses_json_with_the_core_parser():
    """The class is closed: a view that declares its own parser_classes must keep the limits."""
    allowed = (JSONParser, FormParser, MultiPartParser, PlainTextParser)
    views = api_views()
    assert len(views) > 10
    for route, view in views:
        for parser in view.parser_classes:
            assert issubclass(parser, allowed), f"{route}: {view.__name__} parses with {parser.__name__}"
            if "json" in parser.media_type:
                assert issubclass(parser, JSONParser), f"{route}: {view.__name__} uses {parser.__name__}"
