"""The OpenAPI document tells the truth: every error code, nullable fields, JSON-only
bodies, `work` per backend with examples that work, and filters that refuse what they cannot read.

The document is checked here against itself and against requests made by hand; tests/test_openapi_fuzz.py
checks it against schemathesis's generated requests.
"""

from __future__ import annotations

import jsonschema
import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from core.workloads import WorkError, work_rules
from tests import factories

pytestmark = pytest.mark.slow(reason="generates the whole OpenAPI schema once for the module")

METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield f"{method.upper()} {path}", operation


def test_the_schema_is_valid_openapi(schema):
    validate_schema(schema)  # raises on an invalid document
    assert len(list(operations(schema))) >= 33


def test_every_operation_lists_the_errors_it_can_answer(schema):
    for name, operation in operations(schema):
        responses = operation["responses"]
        parameters = operation.get("parameters", [])
        expected = {"401", "429"}
        if "requestBody" in operation or any(p["in"] in ("query", "header") for p in parameters):
            expected.add("400")
        if any(p["in"] == "path" for p in parameters) or any(p["name"] == "page" for p in parameters):
            expected.add("404")
        if "requestBody" in operation:
            expected |= {"413", "415"}
        if not name.startswith("GET "):
            expected.add("403")
        assert expected <= set(responses), (name, sorted(expected - set(responses)))
        for code, response in responses.items():
            if code >= "400":
                body = response["content"]["application/json"]["schema"]
                # TelemetryError: the telemetry push's own {"detail": ...}
                known = ("Error", "ValidationError", "Throttled", "TelemetryError")
                assert body["$ref"].rsplit("/", 1)[1] in known, (name, code)
        assert "Retry-After" in responses["429"]["headers"], name


def test_specific_codes_are_documented_where_they_happen(schema):
    paths = schema["paths"]
    assert "422" in paths["/api/v1/jobs/"]["post"]["responses"]  # an Idempotency-Key reused
    assert "400" in paths["/api/v1/jobs/{id}/cancel/"]["post"]["responses"]  # the job has ended
    assert "409" in paths["/api/v1/departments/{slug}/"]["delete"]["responses"]  # it still has jobs
    assert "409" in paths["/api/v1/partition-plans/"]["post"]["responses"]
    assert "400" in paths["/api/v1/departments/{department_slug}/members/{username}/"]["delete"]["responses"]
    # Reading racks needs only a signed-in user: no 403 is promised there.
    assert "403" not in paths["/api/v1/racks/"]["get"]["responses"]


def test_nullable_and_read_only_fields_are_declared(schema):
    job = schema["components"]["schemas"]["Job"]["properties"]
    assert job["submitted_by"]["nullable"] is True
    assert job["submitted_by"]["readOnly"] is True
    assert job["exit_code"]["nullable"] is True


def test_request_bodies_are_json_only(schema):
    for name, operation in operations(schema):
        if "requestBody" not in operation:
            continue
        expected = {"text/plain"} if name == "POST /api/v1/telemetry/dcgm/" else {"application/json"}
        assert set(operation["requestBody"]["content"]) == expected, name


def test_page_size_and_page_bounds_are_documented(schema):
    parameters = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/gpus/"]["get"]["parameters"]}
    assert parameters["page"] == {"type": "integer", "minimum": 1}
    assert parameters["page_size"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    racks = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/racks/"]["get"]["parameters"]}
    assert racks["has_problems"]["type"] == "boolean"


def test_the_gpu_list_documents_its_cursor_and_a_count_only_by_page_number(schema):
    """core.pagination.CursorOrPagePagination: `cursor` beside `page`; `count` is there on numbered pages."""
    parameters = {p["name"]: p["schema"] for p in schema["paths"]["/api/v1/gpus/"]["get"]["parameters"]}
    assert parameters["cursor"] == {"type": "string"}
    assert parameters["page"] == {"type": "integer", "minimum": 1}
    page = schema["components"]["schemas"]["PaginatedGpuList"]
    assert page["required"] == ["results"]
    assert "page" in page["properties"]["count"]["description"]
    # The other lists keep their page numbers and their count.
    assert schema["components"]["schemas"]["PaginatedRackList"]["required"] == ["count", "results"]
    racks = {p["name"] for p in schema["paths"]["/api/v1/racks/"]["get"]["parameters"]}
    assert "cursor" not in racks


# ---- work: one schema per backend ------------------------------------------------------------------------


def test_job_requests_are_one_schema_per_backend(schema):
    components = schema["components"]["schemas"]
    variants = [ref["$ref"].rsplit("/", 1)[1] for ref in components["JobSubmit"]["oneOf"]]
    rules = work_rules()
    assert {rule.backend for rule in rules} == {"slurm", "kubernetes"}
    assert variants == [f"{rule.backend.title()}JobSubmit" for rule in rules]
    for rule, variant in zip(rules, variants, strict=True):
        properties = components[variant]["properties"]
        assert properties["work"] == rule.schema
        backend = properties["backend"]
        enum = components[backend["allOf"][0]["$ref"].rsplit("/", 1)[1]]["enum"] if "allOf" in backend else []
        assert enum == [rule.backend]
    # Slurm is the default backend: its requests may leave `backend` out, the others name it.
    assert "backend" not in components["SlurmJobSubmit"]["required"]
    assert "backend" in components["KubernetesJobSubmit"]["required"]


WORKS = [
    ("slurm", {"script": "#!/bin/bash\nhostname\n"}, True),
    ("slurm", {"script": "hostname"}, False),
    ("slurm", {"script": "#!/bin/sh\n\x00"}, False),
    ("slurm", {"script": "#!/bin/sh", "image": "x"}, False),
    ("slurm", {}, False),
    ("kubernetes", {"image": "busybox", "command": ["true"], "env": {"A": 1, "B": True, "C": "c"}}, True),
    ("kubernetes", {"image": "busybox", "args": None, "env": None}, True),
    ("kubernetes", {"image": "busy box"}, False),
    ("kubernetes", {"image": "busybox\x1c"}, False),
    ("kubernetes", {"image": "busybox", "args": ["a\x00"]}, False),
    ("kubernetes", {"image": "busybox", "args": "a"}, False),
    ("kubernetes", {"image": "busybox", "env": {"A": ["x"]}}, False),
    ("kubernetes", {"image": "busybox", "script": "#!"}, False),
]


@pytest.mark.parametrize(("backend", "work", "valid"), WORKS)
def test_each_work_schema_says_what_its_rule_does(backend, work, valid):
    rule = next(rule for rule in work_rules() if rule.backend == backend)
    schema_ok = jsonschema.Draft4Validator(_json_schema(rule.schema)).is_valid(work)
    try:
        rule.validate(work)
        rule_ok = True
    except WorkError:
        rule_ok = False
    assert (schema_ok, rule_ok) == (valid, valid)


def _json_schema(schema):
    """OpenAPI 3.0's `nullable` as plain JSON Schema."""
    if isinstance(schema, dict):
        out = {key: _json_schema(value) for key, value in schema.items() if key != "nullable"}
        if schema.get("nullable"):
            return {"anyOf": [out, {"type": "null"}]}
        return out
    if isinstance(schema, list):
        return [_json_schema(item) for item in schema]
    return schema


@pytest.fixture
def department_a(demo_inventory):
    # The examples submit to the demo's `research` department.
    return factories.make_department("Research", guaranteed_gpus=8)


def test_the_job_examples_work_as_copied(schema, api_as, member_a):
    examples = schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]["application/json"][
        "examples"
    ]
    assert len(examples) == len(work_rules())
    for name, example in examples.items():
        response = api_as(member_a).post("/api/v1/jobs/", example["value"], format="json")
        assert response.status_code == 201, (name, response.json())
        assert response.json()["backend"] == example["value"]["backend"]


def test_a_reused_idempotency_key_is_answered_as_documented(schema, api_as, member_a, department_a):
    """The 422's body is the one the document gives (schemathesis found them apart)."""
    example = next(
        iter(
            schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]["application/json"][
                "examples"
            ].values()
        )
    )["value"]
    client = api_as(member_a)
    assert client.post("/api/v1/jobs/", example, format="json", HTTP_IDEMPOTENCY_KEY="k-1").status_code == 201
    reused = client.post(
        "/api/v1/jobs/", {**example, "name": "another-job"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert reused.status_code == 422
    documented = schema["paths"]["/api/v1/jobs/"]["post"]["responses"]["422"]["content"]["application/json"]
    name = documented["schema"]["$ref"].rsplit("/", 1)[1]
    jsonschema.validate(reused.json(), schema["components"]["schemas"][name])
    assert "k-1" in reused.json()["Idempotency-Key"][0]


# ---- filters and pagination refuse what they cannot read ---------------------------------------------------


@pytest.mark.slow(reason="14 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("url", "parameter"),
    [
        ("/api/v1/racks/?has_problems=-1", "has_problems"),
        ("/api/v1/trays/?has_problems=maybe", "has_problems"),
        ("/api/v1/jobs/?over_quota=2", "over_quota"),
        ("/api/v1/departments/?has_limit=yes", "has_limit"),
        ("/api/v1/jobs/?state=nope", "state"),
        ("/api/v1/gpus/?health=nope", "health"),
        ("/api/v1/gpus/?clique_id=x", "clique_id"),
        ("/api/v1/partitions/?clique_id=0.5", "clique_id"),
        ("/api/v1/departments/?priority=1.5", "priority"),
        ("/api/v1/racks/?page_size=true", "page_size"),
        ("/api/v1/racks/?page_size=0", "page_size"),
        ("/api/v1/racks/?page_size=1001", "page_size"),
        ("/api/v1/racks/?page=0", "page"),
        ("/api/v1/racks/?page=abc", "page"),
    ],
)
def test_an_invalid_filter_or_page_value_is_a_400_naming_it(api_as, member_a, url, parameter):
    response = api_as(member_a).get(url)
    assert response.status_code == 400, response.content
    assert parameter in response.json()


@pytest.mark.parametrize(
    "url",
    ["/api/v1/racks/?has_problems=&page_size=&page=", "/api/v1/jobs/?priority_class=&over_quota=&name="],
)
def test_an_empty_filter_value_is_no_filter(api_as, member_a, url):
    # As the document says (allowEmptyValue): HTML forms send their empty fields too.
    assert api_as(member_a).get(url).status_code == 200


def test_empty_values_are_allowed_where_they_mean_no_filter(schema):
    parameters = {p["name"]: p for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert parameters["over_quota"]["allowEmptyValue"] is True
    assert "allowEmptyValue" not in parameters["state"]  # a multiple choice: an empty one is refused


def test_a_job_name_must_be_a_string(api_as, member_a):
    rule = work_rules()[0]
    body = {"department": "research", "name": 7, "gpus": 1, "backend": rule.backend, "work": rule.example}
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["name"] == ["Not a valid string."]


def test_valid_filter_and_page_values_still_work(api_as, member_a):
    client = api_as(member_a)
    for url in [
        "/api/v1/racks/?has_problems=true",
        "/api/v1/racks/?has_problems=0",
        "/api/v1/racks/?page=last",
    ]:
        assert client.get(url).status_code == 200, url
    page = client.get("/api/v1/racks/?page_size=1&page=2").json()
    assert len(page["results"]) == 1
    assert page["count"] == 3
    assert client.get("/api/v1/racks/?page=99").status_code == 404  # past the last page


def test_the_html_list_still_shows_the_page_for_a_value_it_cannot_read(client_as, member_a):
    assert client_as(member_a).get("/inventory/racks/?has_problems=-1").status_code == 200


def test_a_form_encoded_body_is_refused_with_415(api_as, member_a):
    response = api_as(member_a).post("/api/v1/jobs/", {"name": "x"}, format="multipart")
    assert response.status_code == 415
    assert "detail" in response.json()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_boolean_must_be_a_json_boolean(api_as, platform_admin, department_a):
    body = {"rack": "gb-r01", "layout": {"preset": "2x9"}, "dry_run": 1}
    response = api_as(platform_admin).post("/api/v1/partition-plans/", body, format="json")
    assert response.status_code == 400
    assert "dry_run" in response.json()
    body["dry_run"] = True
    assert api_as(platform_admin).post("/api/v1/partition-plans/", body, format="json").status_code == 200
