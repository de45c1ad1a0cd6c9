"""A Kubernetes job's work: environment variable names are the ones the API server takes (its IsEnvVarName),
refused at submission rather than rendered into a Job the server would refuse."""

from __future__ import annotations

import jsonschema
import pytest

from core.workloads import WorkError
from integrations.kubernetes.job_objects import render_job_objects
from integrations.kubernetes.work import SCHEMA, validate_work
from tests.integrations.kubernetes.test_jobs import pod_spec, request

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"

# IsEnvVarName's own examples first ("my.env-name", "MY_ENV.NAME", "MyEnvName1").
VALID_NAMES = ["my.env-name", "MY_ENV.NAME", "MyEnvName1", "NCCL_DEBUG", "_x", "-x", ".x", "a..b", "x1"]
INVALID_NAMES = ["1 bad=", "1A", "", "A B", "A=B", ".", "..", "..x", "A\n", "Ä", "A\x00", "$HOME"]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_a_kubernetes_env_name_is_taken(name):
    assert validate_work({"image": IMAGE, "env": {name: "v"}})["env"] == {name: "v"}


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_a_name_the_api_server_refuses_is_refused_naming_env_and_the_name(name):
    with pytest.raises(WorkError) as refused:
        validate_work({"image": IMAGE, "env": {"GOOD": "1", name: "v"}})
    message = str(refused.value)
    assert message.startswith('"env": not an environment variable name Kubernetes takes: ')
    assert f'"{name}"' in message
    assert '"GOOD"' not in message


def _names_schema() -> dict:
    """The env schema, its names' rule (the `x-propertyNames` extension) as JSON Schema's propertyNames."""
    env = dict(SCHEMA["properties"]["env"])
    env["propertyNames"] = env.pop("x-propertyNames")
    env.pop("nullable")
    return env


@pytest.mark.parametrize(
    ("name", "valid"), [(n, True) for n in VALID_NAMES] + [(n, False) for n in INVALID_NAMES]
)
def test_the_schema_states_the_same_name_rule(name, valid):
    assert jsonschema.Draft7Validator(_names_schema()).is_valid({name: "v"}) is valid


def test_dispatch_refuses_a_stored_job_with_a_bad_name_rather_than_render_it():
    good = render_job_objects(request(work={"image": IMAGE, "env": {"NCCL_DEBUG": "INFO"}}))
    assert pod_spec(good[-1])["containers"][0]["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    with pytest.raises(WorkError, match='"1 bad="'):
        render_job_objects(request(work={"image": IMAGE, "env": {"1 bad=": "v"}}))


def test_an_unknown_work_key_is_refused_with_the_closest_key():
    with pytest.raises(WorkError) as refused:
        validate_work({"image": IMAGE, "comand": ["torchrun"], "environment": {}})
    assert str(refused.value) == (
        'unknown keys for a Kubernetes job: "comand" (did you mean "command"?), "environment"; '
        'it takes "args", "command", "env", "image"'
    )
