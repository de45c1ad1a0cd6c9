"""Every write endpoint of the API, walked from the OpenAPI document: strict bodies.

A lone surrogate (`"\\ud800"`, a JSON escape: UTF-8 itself cannot carry one) used to be a 500 in several
fields and keys of the jobs and discovery APIs; now core.parsers.JSONParser refuses it anywhere in any body
with a 400 naming where. The walk covers whatever endpoint is added later: a new write endpoint is in this
test without anyone listing it. Each request is made as a persona allowed to make it, so the answer is the
body's, not a 403; nothing is written.
"""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from drf_spectacular.generators import SchemaGenerator

from tenancy.models import Project

pytestmark = pytest.mark.django_db

WRITE_METHODS = ("post", "put", "patch")
# Who may write to an endpoint (the first path segment after /api/v1/); everything else: a platform admin.
PERSONA_BY_PREFIX = {"jobs": "member_a", "discovery": "node_agent"}
LONE = "\\ud800"  # the six characters of the JSON escape, sent raw (json.dumps would refuse to make it)
# (name, raw JSON body, the place the answer must name)
HOSTILE_BODIES = [
    ("value", '{"name": "LONE"}'.replace("LONE", LONE), "the value at $.name"),
    ("key", '{"LONE": 1}'.replace("LONE", LONE), 'the key "\\ud800" of $'),
    ("nested value", '{"work": {"env": {"A": "xLONE"}}}'.replace("LONE", LONE), "the value at $.work.env.A"),
    (
        "nested key",
        '{"work": {"env": {"LONE": "x"}}}'.replace("LONE", LONE),
        'the key "\\ud800" of $.work.env',
    ),
    (
        "low half in a list",
        '{"layout": {"partitions": [{"name": "\\udfff"}]}}',
        "$.layout.partitions[0].name",
    ),
]


def write_operations() -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {})
            if method in WRITE_METHODS and "application/json" in body:
                found.append((method, path))
    return found


def row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.fixture
def endpoint_world(demo_inventory, department_a, platform_admin, lead_a, member_a, node_agent):
    project = Project.objects.create(department=department_a, name="Vision", slug="vision")
    return {
        "slug": department_a.slug,
        "department_slug": department_a.slug,
        "username": member_a.username,
        "id": str(project.pk),
        "name": "gb-r01",  # a rack (its re-carving policy)
    }


def concrete(path: str, world: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: world[m.group(1)], path)


def persona_for(path: str) -> str:
    first = path.removeprefix("/api/v1/").split("/", 1)[0]
    return PERSONA_BY_PREFIX.get(first, "platform_admin")


# Collected at import time would need the database; the list is read inside the test (a schema walk is fast)
# and the test fails if it ever finds too few endpoints to mean anything.
def test_the_walk_finds_the_write_endpoints(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        operations = write_operations()
    paths = {path for _, path in operations}
    assert len(operations) >= 12, operations
    for expected in (
        "/api/v1/jobs/",
        "/api/v1/discovery/reports/",
        "/api/v1/departments/",
        "/api/v1/projects/",
    ):
        assert expected in paths


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(("case", "body", "where"), HOSTILE_BODIES, ids=[c[0] for c in HOSTILE_BODIES])
def test_a_lone_surrogate_is_a_400_naming_where_on_every_write_endpoint(
    api_as, endpoint_world, case, body, where
):
    operations = write_operations()
    assert operations
    failures = []
    for method, path in operations:
        client = api_as(persona_for(path))
        client.raise_request_exception = False  # a 500 is an answer to report, not an exception
        before = row_counts()
        response = getattr(client, method)(
            concrete(path, endpoint_world), body, content_type="application/json"
        )
        detail = response.json().get("detail", "") if response.status_code < 500 else ""
        if response.status_code != 400 or "lone surrogate" not in detail or where not in detail:
            failures.append(f"{method.upper()} {path}: {response.status_code} {response.content[:200]!r}")
        elif row_counts() != before:
            failures.append(f"{method.upper()} {path}: wrote rows")
    assert not failures, "\n".join(failures)


def test_every_request_body_schema_refuses_unknown_fields(django_db_setup, django_db_blocker):
    """additionalProperties: false on every JSON request body (KnownFieldsOnly, core.fields), nested objects
    and each per-backend job schema included."""
    with django_db_blocker.unblock():
        schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    open_objects: list[str] = []

    def visit(node, where: str, seen: set[str]):
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                if name not in seen:
                    visit(components[name], name, seen | {name})
                return
            if (
                node.get("type") == "object"
                and "properties" in node
                and not node.get("readOnly")
                and node.get("additionalProperties") is not False
            ):
                open_objects.append(where)
            for key, value in node.items():
                if key == "properties":
                    for field, sub in value.items():
                        if not (isinstance(sub, dict) and sub.get("readOnly")):
                            visit(sub, f"{where}.{field}", seen)
                elif key in ("items", "oneOf", "anyOf", "allOf"):
                    visit(value, where, seen)
        elif isinstance(node, list):
            for item in node:
                visit(item, where, seen)

    bodies = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if method in WRITE_METHODS and "application/json" in content:
                bodies += 1
                visit(content["application/json"]["schema"], f"{method.upper()} {path}", set())
    assert bodies >= 12
    assert not open_objects, f"request bodies that take unknown fields: {sorted(set(open_objects))}"


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("persona", "method", "path", "body", "unknown"),
    [
        (
            "platform_admin",
            "post",
            "/api/v1/departments/",
            {"name": "Gamma", "slug": "gamma", "colour": 1},
            "colour",
        ),
        ("platform_admin", "patch", "/api/v1/departments/{slug}/", {"nmae": "Renamed"}, "nmae"),
        (
            "lead_a",
            "post",
            "/api/v1/departments/{slug}/members/",
            {"username": "outsider", "rol": "lead"},
            "rol",
        ),
        (
            "platform_admin",
            "post",
            "/api/v1/projects/",
            {"department": "alpha", "name": "NLP", "slgu": "x"},
            "slgu",
        ),
        (
            "platform_admin",
            "post",
            "/api/v1/partition-plans/",
            {"rack": "gb-r01", "layout": {"preset": "2x9"}, "dry": True},
            "dry",
        ),
    ],
)
def test_an_unknown_field_is_a_400_naming_it_and_writes_nothing(
    api_as, endpoint_world, outsider, persona, method, path, body, unknown
):
    client = api_as(persona)
    before = row_counts()
    response = getattr(client, method)(concrete(path, endpoint_world), body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert unknown in response.json(), response.json()
    assert "Unknown field" in response.json()[unknown][0]
    assert row_counts() == before


def test_an_unknown_field_inside_a_nested_object_is_refused(api_as, endpoint_world):
    body = {"rack": "gb-r01", "layout": {"partitions": [{"name": "p1", "slots": "1-9", "colour": "red"}]}}
    response = api_as("platform_admin").post("/api/v1/partition-plans/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "colour" in str(response.json())


# ---- the finding's own requests: whole, valid bodies with one lone surrogate ------------------------------

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
MARK = "MARK-LONE-SURROGATE"  # replaced by the raw escape after json.dumps (which cannot write a lone one)


def with_lone_surrogate(body: dict) -> str:
    import json

    text = json.dumps(body)
    assert MARK in text
    return text.replace(MARK, LONE)


JOB_BODIES = [
    ("job name", {"name": MARK, "work": {"script": SCRIPT}}, "$.name"),
    ("env key", {"backend": "kubernetes", "work": {"image": IMAGE, "env": {MARK: "1"}}}, "$.work.env"),
    ("env value", {"backend": "kubernetes", "work": {"image": IMAGE, "env": {"A": MARK}}}, "$.work.env.A"),
    ("script", {"work": {"script": SCRIPT + MARK}}, "$.work.script"),
    (
        "command",
        {"backend": "kubernetes", "work": {"image": IMAGE, "command": ["python", MARK]}},
        "$.work.command[1]",
    ),
]


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(("case", "fields", "where"), JOB_BODIES, ids=[c[0] for c in JOB_BODIES])
def test_a_job_with_a_lone_surrogate_is_a_400_not_a_500(
    api_as, member_a, demo_inventory, case, fields, where
):
    from tests.factories import make_department

    make_department("Research", guaranteed_gpus=96)
    body = {"department": "research", "name": "train-llm", "gpus": 8, **fields}
    client = api_as(member_a)
    client.raise_request_exception = False
    before = row_counts()
    response = client.post("/api/v1/jobs/", with_lone_surrogate(body), content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert where in response.json()["detail"]
    assert row_counts() == before


REPORT_FIELDS = [
    ("gpu product", lambda report: report["gpus"][0].update(product=MARK), "$.gpus[0].product"),
    (
        "fabric status",
        lambda report: report["gpus"][1]["fabric"].update(status=MARK),
        "$.gpus[1].fabric.status",
    ),
    ("unknown gpu key", lambda report: report["gpus"][0].update({MARK: 1}), "of $.gpus[0]"),
    (
        "xid text",
        lambda report: report.update(xids=[{"time": "2026-01-01T00:00:00Z", "xid": 79, "text": MARK}]),
        "$.xids[0].text",
    ),
]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(("case", "change", "where"), REPORT_FIELDS, ids=[c[0] for c in REPORT_FIELDS])
def test_a_node_report_with_a_lone_surrogate_is_a_400_not_a_500(
    api_as, node_agent, demo_inventory, case, change, where
):
    from inventory.models import ComputeTray
    from tests.factories import node_report

    report = node_report(ComputeTray.objects.order_by("pk").first())
    change(report)
    client = api_as(node_agent)
    client.raise_request_exception = False
    before = row_counts()
    response = client.post(
        "/api/v1/discovery/reports/", with_lone_surrogate(report), content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert "lone surrogate" in response.json()["detail"]
    assert where in response.json()["detail"]
    assert row_counts() == before


# ---- not JSON: a query string or a form post with bytes that are not UTF-8 -------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs/?q=%ED%A0%80",
        "/api/v1/jobs/?name=%ED%A0%80",
        "/api/v1/departments/?search=%ED%A0%80%FF",
        "/api/v1/discovery/reports/?host=%ED%A0%80",
    ],
)
def test_a_query_string_that_is_not_utf8_is_never_a_500(api_as, member_a, demo_inventory, url):
    """Django decodes a query string with errors="replace": %ED%A0%80 (an encoded surrogate) arrives as
    U+FFFD, which is text. The answer is a list or a 4xx, never a 500."""
    client = api_as(member_a)
    client.raise_request_exception = False
    response = client.get(url)
    assert response.status_code < 500, response.content[:300]


def test_a_form_post_that_is_not_utf8_is_never_a_500(client_as, lead_a, department_a):
    """A form post's bytes are decoded like a query string (U+FFFD for what is not UTF-8): `%ED%A0%80` is
    three replacement characters, text the rule takes, never a lone surrogate."""
    client = client_as(lead_a)
    client.raise_request_exception = False
    response = client.post(
        f"/tenancy/departments/{department_a.slug}/projects/",
        "name=%ED%A0%80&guaranteed_gpus=0&over_quota_weight=1.00",
        content_type="application/x-www-form-urlencoded",
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code < 500, response.content[:300]
    for name in Project.objects.values_list("name", flat=True):
        name.encode("utf-8")
