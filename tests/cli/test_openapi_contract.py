"""What `rp` takes from the API (rpcli/spec.py) is what the OpenAPI document says: each operation with its
method, each filter, header and enum; a submission `rp` builds has exactly the fields the API takes; every
field rpcli/commands.py reads of an answer is in the document. An API change that would break `rp` fails
here, naming what moved."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from drf_spectacular.generators import SchemaGenerator

from rpcli import commands, spec
from rpcli.main import build_parser

# The answers rp reads: a job, its detail and events, a list page, a quota, a department, a project, logs.
READ_SCHEMAS = (
    "Job",
    "JobDetail",
    "JobEvent",
    "PaginatedJobList",
    "Quota",
    "Department",
    "Project",
    "JobLogs",
)

pytestmark = pytest.mark.slow(reason="generates the whole OpenAPI schema once for the module")


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def properties(schema: dict, name: str) -> dict:
    return resolve(schema, {"$ref": f"#/components/schemas/{name}"})["properties"]


def enum(schema: dict, node: dict) -> set:
    node = resolve(schema, node)
    for key in ("allOf", "oneOf"):
        for part in node.get(key, ()):
            values = enum(schema, part)
            if values:
                return values
    return set(node.get("enum", ())) - {None, ""}


def operation(schema: dict, name: str) -> dict:
    method, path = spec.OPERATIONS[name]
    assert path in schema["paths"], f"{name}: {path} is not in the document"
    assert method.lower() in schema["paths"][path], f"{name}: {path} takes no {method}"
    return schema["paths"][path][method.lower()]


def test_every_operation_rp_calls_is_in_the_document(schema):
    for name in spec.OPERATIONS:
        operation(schema, name)


def test_rp_ls_filters_and_pages_are_the_job_lists(schema):
    parameters = {p["name"] for p in operation(schema, "jobs_list")["parameters"] if p["in"] == "query"}
    assert set(spec.JOB_FILTERS) <= parameters, set(spec.JOB_FILTERS) - parameters
    page_size = next(p for p in operation(schema, "jobs_list")["parameters"] if p["name"] == "page_size")
    assert page_size["schema"]["maximum"] >= spec.PAGE_SIZE
    state = next(p for p in operation(schema, "jobs_list")["parameters"] if p["name"] == "state")
    assert set(state["schema"]["items"]["enum"]) == set(spec.JOB_STATES)


def test_rp_submit_sends_the_submission_schema_and_its_idempotency_key(schema, tmp_path):
    create = operation(schema, "jobs_create")
    headers = {p["name"] for p in create["parameters"] if p["in"] == "header"}
    assert spec.IDEMPOTENCY_HEADER in headers
    variants = resolve(schema, create["requestBody"]["content"]["application/json"]["schema"])["oneOf"]
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n")
    every_option = [
        "submit", str(script), "--gpus", "8", "-d", "research", "-p", "vision", "-n", "x",
        "--backend", "slurm", "--topology", "rack", "--fallback-topology", "any", "--fallback-after", "30",
        "--priority-class", "build", "--time-limit", "90",
    ]  # fmt: skip
    body = commands.submission_body(build_parser().parse_args(every_option))
    # Whole GPUs, or MIG slices by profile or by memory: between them, every field of the schema.
    at = every_option.index("--gpus")
    before, after = every_option[:at], every_option[at + 2 :]
    slices = [*before, "--mig-profile", "1g.23gb", "--mig-slices", "2", *after]
    by_memory = [*before, "--mig-memory-gb", "23", *after]
    bodies = [commands.submission_body(build_parser().parse_args(o)) for o in (slices, by_memory)]
    assert "gpus" not in bodies[0] and bodies[0]["mig_slices"] == 2 and bodies[1]["mig_memory_gb"] == 23
    sent = set(body).union(*bodies)
    for variant in variants:
        fields = resolve(schema, variant)["properties"]
        assert sent == set(fields), sent ^ set(fields)
        assert enum(schema, fields["topology"]) == set(spec.TOPOLOGIES)
        assert enum(schema, fields["priority_class"]) == set(spec.PRIORITY_CLASSES)
    backends = set().union(*(enum(schema, resolve(schema, v)["properties"]["backend"]) for v in variants))
    assert backends == set(spec.BACKENDS)


def read_fields() -> set[str]:
    """Every name rpcli/commands.py reads of an answer: `x.get("name")` and `x["name"]`."""
    tree = ast.parse(Path(commands.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            names.add(node.slice.value)
    return names


def fields_of(schema: dict, name: str) -> set[str]:
    """The properties of a schema and of the objects (and lists of objects) it holds."""
    found: set[str] = set()
    todo = [resolve(schema, {"$ref": f"#/components/schemas/{name}"})]
    while todo:
        node = resolve(schema, todo.pop())
        for value in node.get("properties", {}).values():
            todo.append(value)
        found |= set(node.get("properties", {}))
        if "items" in node:
            todo.append(node["items"])
        todo.extend(node.get("allOf", ()))
    return found


def test_every_field_rp_reads_is_in_the_answers_it_reads(schema):
    known = set().union(*(fields_of(schema, name) for name in READ_SCHEMAS))
    read = read_fields()
    assert {"state", "pending_reason", "placement", "guaranteed", "fair_share", "parts", "truncated"} <= read
    assert read <= known, sorted(read - known)
    job = properties(schema, "Job")
    assert enum(schema, job["state"]) == set(spec.JOB_STATES)
    assert set(spec.FINAL_STATES) < set(spec.JOB_STATES)
