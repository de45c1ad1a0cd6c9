"""POST /api/v1/jobs/ takes exactly what its OpenAPI document says: no unknown field (nor unknown `work`
key) is dropped silently, integers are JSON integers, and a Kubernetes environment name is one the API server
takes. Each refusal is a 400 naming the field, and makes no job."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from scheduling.choices import Topology
from scheduling.models import Job
from tests.factories import make_department

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def post(api_as, member_a):
    def post(**fields):
        body = {"department": "research", "name": "train-llm", "gpus": 8, "work": {"script": SCRIPT}}
        body.update(fields)
        return api_as(member_a).post("/api/v1/jobs/", body, format="json")

    return post


def refused(response) -> dict:
    assert response.status_code == 400, response.json()
    assert Job.objects.count() == 0
    return response.json()


def test_a_misspelt_field_is_refused_with_the_closest_one(post):
    assert refused(post(toplogy="rack")) == {"toplogy": ['Unknown field: did you mean "topology"?']}
    # Spelt right, the same request is a job with what it asked for (not the default topology).
    response = post(topology="rack")
    assert response.status_code == 201
    assert response.json()["topology"] == Topology.RACK


def test_an_unknown_field_with_nothing_close_lists_the_fields_the_request_takes(post):
    assert refused(post(color="blue")) == {
        "color": [
            "Unknown field: this request takes department, project, name, gpus, mig_profile, mig_slices, "
            "mig_memory_gb, topology, fallback_topology, fallback_after_minutes, priority_class, backend, "
            "time_limit_minutes, work."
        ]
    }


def test_unknown_fields_are_reported_with_the_other_field_errors(post):
    errors = refused(post(gpus=0, priorty_class="train"))
    assert errors["priorty_class"] == ['Unknown field: did you mean "priority_class"?']
    assert errors["gpus"] == ["Ensure this value is greater than or equal to 1."]


@pytest.mark.slow(reason="10 cases, each a full request through the stack")
@pytest.mark.parametrize("field", ["gpus", "time_limit_minutes"])
@pytest.mark.parametrize("value", ["8", 8.0, True, None, [8]])
def test_an_integer_field_takes_only_a_json_integer(post, field, value):
    errors = refused(post(**{field: value}))
    expected = (
        "This field may not be null." if value is None else 'Must be a JSON integer (4, not "4" nor 4.0).'
    )
    assert errors == {field: [expected]}


def test_json_integers_are_taken(post):
    response = post(gpus=8, time_limit_minutes=90)
    assert response.status_code == 201, response.json()
    assert (response.json()["gpus"], response.json()["time_limit_minutes"]) == (8, 90)


def test_an_unknown_work_key_is_refused_naming_it(post):
    errors = refused(post(work={"script": SCRIPT, "scrpt": SCRIPT}))
    assert errors == {
        "work": ['unknown keys for a Slurm job: "scrpt" (did you mean "script"?); it takes "script"']
    }


def test_a_kubernetes_env_name_the_api_server_refuses_is_a_400(post):
    work = {"image": IMAGE, "env": {"NCCL_DEBUG": "INFO", "1 bad=": "v"}}
    errors = refused(post(backend="kubernetes", work=work))
    assert list(errors) == ["work"]
    assert errors["work"][0].startswith('"env": not an environment variable name Kubernetes takes: "1 bad="')
    work["env"] = {"NCCL_DEBUG": "INFO", "my.env-name": "v"}
    response = post(backend="kubernetes", work=work)
    assert response.status_code == 201, response.json()
    assert response.json()["work"]["env"] == {"NCCL_DEBUG": "INFO", "my.env-name": "v"}


def test_the_document_says_the_job_request_takes_no_other_field():
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    for variant in ("SlurmJobSubmit", "KubernetesJobSubmit"):
        assert components[variant]["additionalProperties"] is False
        assert set(components[variant]["properties"]) == {
            "department",
            "project",
            "name",
            "gpus",
            "mig_profile",
            "mig_slices",
            "mig_memory_gb",
            "topology",
            "fallback_topology",
            "fallback_after_minutes",
            "priority_class",
            "backend",
            "time_limit_minutes",
            "work",
        }
        assert components[variant]["properties"]["gpus"]["type"] == "integer"
