"""The slurmrestd API versions (integrations.slurm.versions) against Slurm's own OpenAPI documents, and
choosing one with a slurmrestd that serves none Rackplane knows (a stand-in: no real Slurm can be made to).

The fixture is a trimmed copy of the OpenAPI documents Slurm's data parsers v0.0.42 to v0.0.45 generate
(its `_source` says from where): what Rackplane sends and reads, per version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import with_advice
from integrations.jobs import BackendJobState, BackendUnavailable
from integrations.slurm import versions
from integrations.slurm.jobs import SlurmJobBackend, backend_from_settings
from integrations.slurm.rest import BASE_STATES, job_status, submit_payload
from tests.integrations.slurm.test_jobs import HOSTS, record, request, standin

FACTS = json.loads((Path(__file__).parent / "fixtures" / "slurmrestd_openapi_v0.0.42-45.json").read_text())[
    "versions"
]
VERSIONS = sorted(FACTS, key=versions.version_key)

# What Rackplane reads of a job record (rest.job_status, jobs.SlurmJobBackend, logs.slurm_logs).
JOB_FIELDS_READ = {
    "job_id": "integer",
    "name": "string",
    "user_name": "string",
    "user_id": "integer",
    "job_state": "[string]",
    "state_reason": "string",
    "state_description": "string",
    "nodes": "string",
    "standard_output": "string",
}
SUBMIT_TYPES = {
    "time_limit": "no_val",
    "segment_size": "no_val",
    "required_nodes": "[string]",
    "environment": "[string]",
    "minimum_nodes": "integer",
    "maximum_nodes": "integer",
}


def test_every_version_rackplane_knows_has_slurms_facts():
    assert list(versions.KNOWN) == VERSIONS == ["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]
    assert versions.known_range() == "v0.0.42-v0.0.45"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_submit_body_is_the_same_in_every_version(version):
    """Every field submit_payload fills exists in the version's job_desc_msg with the type it is sent as."""
    facts = FACTS[version]
    job = submit_payload(request(segment=len(HOSTS), imex=True))["job"]
    assert set(job) <= set(facts["job_desc_msg"])
    for field, value in job.items():
        expected = SUBMIT_TYPES.get(field, "string")
        assert facts["job_desc_msg"][field] == expected, field
        if expected == "no_val":
            assert set(value) == {"set", "infinite", "number"}
    assert "job" in facts["job_submit_req"]
    assert {"job_id", "errors", "warnings"} <= set(facts["job_submit_response"])


@pytest.mark.parametrize("version", VERSIONS)
def test_what_rackplane_reads_of_a_job_is_in_every_version(version):
    facts = FACTS[version]
    for field, kind in JOB_FIELDS_READ.items():
        assert facts["job_info"][field] == kind, field
    assert facts["exit_code"] == {"fields": ["return_code", "signal", "status"], "signal": ["id", "name"]}
    # Cancel and signal: DELETE /job/{id}?signal=SIGUSR1&flags=FULL_JOB, answered status[].error.code.
    assert "FULL_JOB" in facts["delete_job_parameters"]["flags"]
    assert "signal" in facts["delete_job_parameters"]
    assert {"code", "message", "string"} <= set(facts["delete_job_status"]["error"])
    assert "name" in facts["node"]
    assert "responding" in facts["ping"]
    for path in ("job/submit", "job/{job_id}", "jobs/", "nodes/", "ping/"):
        assert f"/slurm/{version}/{path}" in facts["paths"]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_module_says_what_slurm_says_of_its_version(version):
    dialect, facts = versions.KNOWN[version], FACTS[version]
    assert dialect.version == version and dialect.api == f"/slurm/{version}"
    # job_states is the version's enum exactly; each is a base state Rackplane maps or a flag it shows.
    assert dialect.job_states == set(facts["job_state"])
    # The output path as Slurm expanded it: stdout_expanded where the version has it, else standard_output.
    expanded = "stdout_expanded" if "stdout_expanded" in facts["job_info"] else "standard_output"
    assert dialect.expanded_output_field == expanded
    assert facts["job_info"][expanded] == "string"
    assert dialect.requeue_flags <= dialect.job_states
    assert not dialect.requeue_flags & set(BASE_STATES)
    assert versions.served_versions({"paths": dict.fromkeys(facts["paths"])}) == [version]


def test_what_changed_between_versions_is_what_the_modules_hold():
    """The read-side differences the modules hold are exactly where Slurm's documents differ."""
    assert [v for v in VERSIONS if "stdout_expanded" in FACTS[v]["job_info"]] == VERSIONS[1:]
    assert [v for v in VERSIONS if "EXPEDITING" in FACTS[v]["job_state"]] == ["v0.0.44", "v0.0.45"]
    assert [v for v in VERSIONS if "pinged" not in FACTS[v]["ping"]] == ["v0.0.45"]
    assert [v for v in VERSIONS if versions.KNOWN[v].requeue_flags] == ["v0.0.44", "v0.0.45"]
    # Nothing Rackplane sends differs: the same fields with the same types in all four.
    sent = set(submit_payload(request(segment=len(HOSTS), imex=True))["job"])
    shapes = {tuple(sorted((f, FACTS[v]["job_desc_msg"][f]) for f in sent)) for v in VERSIONS}
    assert len(shapes) == 1


def test_an_expedited_requeue_is_pending_where_the_version_has_it():
    failing = record(["NODE_FAIL", "REQUEUED", "EXPEDITING"])
    assert job_status(failing, versions.KNOWN["v0.0.44"]).state == BackendJobState.PENDING
    assert job_status(failing, versions.KNOWN["v0.0.45"]).state == BackendJobState.PENDING
    assert job_status(failing).state == BackendJobState.FAILED  # v0.0.42 never sends it


def test_the_expanded_output_path_moved_to_stdout_expanded_in_v0_0_43():
    """As measured on Slurm 26.05.5: v0.0.42 expands standard_output, v0.0.45 keeps the pattern there."""
    expanded = {"standard_output": "/tmp/rp-7-27.out"}
    assert versions.KNOWN["v0.0.42"].output_path(expanded) == "/tmp/rp-7-27.out"
    job = {**record(["COMPLETED"]), "standard_output": "/tmp/rp-7-%j.out"}
    job["stdout_expanded"] = "/tmp/rp-7-27.out"
    assert versions.KNOWN["v0.0.43"].output_path(job) == "/tmp/rp-7-27.out"
    assert versions.KNOWN["v0.0.45"].output_path({"stdout_expanded": None}) == ""


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.42"),  # Slurm 24.11
        (["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"], "v0.0.45"),  # 26.05
        (["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"], "v0.0.45"),  # 26.11: v0.0.46 is not known yet
        (["v0.0.100", "v0.0.43"], "v0.0.43"),
        (["v0.0.39", "v0.0.46"], None),
        ([], None),
    ],
)
def test_the_newest_version_both_know_is_chosen(served, chosen):
    dialect = versions.choose(served)
    assert (dialect.version if dialect else None) == chosen


def test_served_versions_come_from_the_paths():
    openapi = {
        "paths": {
            "/slurm/v0.0.41/jobs/": {},
            "/slurm/v0.0.40/ping/": {},
            "/slurmdb/v0.0.44/jobs/": {},  # slurmdbd's API is not the one jobs are run through
            "/openapi/v3": {},
            "/slurm/v0.0.100/jobs/": {},
        }
    }
    assert versions.served_versions(openapi) == ["v0.0.40", "v0.0.41", "v0.0.100"]
    assert versions.served_versions({}) == versions.served_versions(None) == []


def openapi_answer(*served: str, release: str = "Slurm-27.05.0") -> tuple:
    paths = {f"/slurm/{v}/{p}": {} for v in served for p in ("job/submit", "jobs/", "ping/")}
    body = json.dumps({"openapi": "3.0.3", "info": {"version": release}, "paths": paths}).encode()
    return (200, "application/json", body, 0)


def keep(chosen: list):
    return lambda version, served: chosen.append((version, served))


def test_a_slurmrestd_serving_no_known_version_says_so_and_what_to_do():
    chosen: list[tuple] = []
    with standin(openapi_answer("v0.0.46", "v0.0.47")) as (url, seen):
        backend = SlurmJobBackend(
            url, "slurm", token="t", timeout=5, on_api_version=lambda *a: chosen.append(a)
        )
        with pytest.raises(BackendUnavailable) as raised:
            backend.jobs()
    [(method, path, headers, _)] = seen
    assert (method, path, headers["x-slurm-user-token"]) == ("GET", "/openapi/v3", "t")
    text = with_advice(str(raised.value), raised.value.what_to_do)
    assert "serves v0.0.46, v0.0.47" in text and "(Slurm 27.05.0)" in text
    assert "Rackplane speaks only v0.0.42-v0.0.45" in text
    assert "What to do: run a Rackplane release that speaks one of the versions it serves" in text
    assert raised.value.transient  # the jobs wait for an administrator; none is refused for it
    assert chosen == []


def test_a_remembered_version_is_used_without_asking():
    with standin((200, "application/json", b'{"jobs": []}', 0)) as (url, seen):
        backend = backend_from_settings(
            {"rest_url": url, "rest_user": "slurm", "rest_token": "t", "api_version": "v0.0.43"}
        )
        assert backend.jobs() == []
    assert [(m, p) for m, p, _, _ in seen] == [("GET", "/slurm/v0.0.43/jobs/")]


def test_a_404_without_a_slurm_answer_chooses_again_and_resends():
    """slurmrestd upgraded under a remembered version: its router's text 404, then the OpenAPI document."""
    chosen: list[tuple] = []
    not_routed = b"Unable to find requested URL endpoint. Please query the '/openapi/v3' endpoint"
    with standin(
        (404, "text/plain", not_routed, 0),
        openapi_answer("v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"),
        (200, "application/json", b'{"jobs": [], "meta": {}}', 0),
    ) as (url, seen):
        backend = SlurmJobBackend(
            url,
            "slurm",
            token="t",
            timeout=5,
            api_version="v0.0.42",
            on_api_version=lambda *a: chosen.append(a),
        )
        assert backend.jobs() == []
    assert [p for _, p, _, _ in seen] == ["/slurm/v0.0.42/jobs/", "/openapi/v3", "/slurm/v0.0.45/jobs/"]
    assert chosen == [("v0.0.45", ["v0.0.43", "v0.0.44", "v0.0.45", "v0.0.46"])]
    assert backend.api_version == "v0.0.45"


def test_a_404_of_slurm_itself_is_an_answer_not_a_missing_version():
    """A job slurmctld forgot is a JSON 404 with error 2017: no new choice is made."""
    gone = json.dumps({"jobs": [], "errors": [{"error_number": 2017, "error": "Invalid job id specified"}]})
    with standin((404, "application/json", gone.encode(), 0)) as (url, seen):
        backend = SlurmJobBackend(url, "slurm", token="t", timeout=5, api_version="v0.0.45")
        [status] = backend.status(["12"]).values()
    assert status.state == BackendJobState.UNKNOWN
    assert [p for _, p, _, _ in seen] == ["/slurm/v0.0.45/job/12"]
