"""A slice job refused by Slurm as "Requested node configuration is not available" (2014) in the seconds
after a reconfigure: slurmctld knows a node's typed GRES (its MIG devices) again only once the node's slurmd
re-registers, and every push reconfigures. The job was failed at once; now dispatch retries it while the node
line slurmctld runs holds the profile (BackendNotReady, about a minute: `attempts_allowed`), and fails it
with Slurm's words when the refusal does not clear, or at once when the node line lacks the profile.

The window itself cannot be made to happen on the real testbed on demand (it answered within 0.3 s of a
reconfigure on a quiet machine; it was seen under load in CI), so slurmrestd is a stand-in here answering what
the real one answers (the error body, `GET /node/{name}`'s `gres`); the real slurmctld's 2014 for a node
without the profile: tests/integration/test_slurm_mig.py (`..._fails_naming_its_node_line`).
"""

from __future__ import annotations

import http.server
import json
import threading
from contextlib import contextmanager

import pytest

from core.posix import PosixIdentity
from integrations import dispatch
from integrations.jobs import BackendNotReady, BackendRejected, DispatchRequest
from integrations.models import ConfigTarget
from integrations.slurm.jobs import SlurmJobBackend, gres_count
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Job, JobEvent
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_member, mig_tray
from tests.integrations.slurm.test_jobs import request

TRAY = "gb-r03-t02"
MIG_GRES = "gpu:1g.23gb:8(S:0),gpu:2g.47gb:4(S:0),gpu:3g.93gb:4(S:0)"
REFUSED = {
    "jobs": [],
    "errors": [
        {
            "error_number": 2014,
            "error": "Requested node configuration is not available",
            "source": "slurm_submit_batch_job()",
            "description": "Batch job submission failed",
        }
    ],
    "warnings": [],
}


class _SlurmRestd(http.server.BaseHTTPRequestHandler):
    """slurmrestd v0.0.42 as the dispatch of one job meets it: no job of that name yet, the tray known, every
    submission refused with 2014 until `taken` is set, the tray's node showing `gres`."""

    gres: str
    taken: threading.Event
    submissions: list
    down: list  # [n]: the next n requests are answered 503, as a proxy before a controller that is down

    def _send(self, status: int, body: dict) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        if self.down[0] > 0:
            self.down[0] -= 1
            self._send(503, {"errors": [{"error_number": 1, "error": "Unable to contact slurm controller"}]})
        elif self.path == "/slurm/v0.0.42/jobs/":
            self._send(200, {"jobs": [], "errors": [], "warnings": []})
        elif self.path in ("/slurm/v0.0.42/nodes/", f"/slurm/v0.0.42/node/{TRAY}"):
            self._send(200, {"nodes": [{"name": TRAY, "gres": self.gres}], "errors": [], "warnings": []})
        else:
            self._send(404, {"errors": [{"error_number": 9005, "error": f"no {self.path}"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.submissions.append(self.path)
        if self.taken.is_set():
            self._send(200, {"job_id": 4242, "errors": [], "warnings": []})
        else:
            self._send(500, REFUSED)

    def log_message(self, *args):
        pass


@contextmanager
def slurmrestd(gres: str):
    fields = {"gres": gres, "taken": threading.Event(), "submissions": [], "down": [0]}
    handler = type("Handler", (_SlurmRestd,), fields)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def slice_request(**changes) -> DispatchRequest:
    fields = {
        "hostnames": (TRAY,),
        "gpus_per_tray": 0,
        "segment": None,
        "clique": "",
        "run_as": PosixIdentity("ada", 20001, 20001, ()),
        "mig_profile": "1g.23gb",
        "mig_slices": 2,
    }
    return request(**{**fields, **changes})


def minting_backend(url: str, directory) -> SlurmJobBackend:
    """A backend that acts as each job's person (SlurmUser's key mints their tokens), as a live target's."""
    key = directory / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)
    return SlurmJobBackend(url, "slurm", jwt_key_file=str(key), api_version="v0.0.42")


@pytest.mark.parametrize(
    ("gres", "profile", "count"),
    [
        (MIG_GRES, "1g.23gb", 8),
        (MIG_GRES, "3g.93gb", 4),
        (MIG_GRES, "1g.47gb", 0),  # a profile the layout does not use
        ("gpu:4", "1g.23gb", 0),  # whole GPUs, untyped
        ("gpu:1g.23gb:2,gpu:1g.23gb:3", "1g.23gb", 5),  # one type on two lines
        ("gpu:a100:1g.23gb:8", "1g.23gb", 0),  # not name:type:count
        ("gpu:1g.23gb:x", "1g.23gb", 0),
        ("(null)", "1g.23gb", 0),
        ("", "1g.23gb", 0),
        ("nic:1g.23gb:8", "1g.23gb", 0),  # another GRES of the same type name
    ],
)
def test_gres_count_reads_a_nodes_gres_as_slurmctld_shows_it(gres, profile, count):
    assert gres_count(gres, profile) == count


def test_a_refusal_while_the_node_line_holds_the_profile_is_not_ready_not_rejected(tmp_path):
    with slurmrestd(MIG_GRES) as (url, _):
        backend = minting_backend(url, tmp_path)
        with pytest.raises(BackendNotReady) as raised:
            backend.submit(slice_request())
    words = str(raised.value)
    assert raised.value.error_numbers == {2014}
    assert "Requested node configuration is not available" in words
    assert "the node line holds gpu:1g.23gb, but slurmctld cannot give it yet" in words


@pytest.mark.parametrize(
    ("gres", "changes"),
    [
        ("gpu:4", {}),  # the push with the tray's MIG layout has not reached Slurm
        (MIG_GRES, {"mig_profile": "3g.93gb", "mig_slices": 5}),  # more than the node line holds
    ],
)
def test_a_refusal_the_node_line_explains_is_rejected_naming_it(gres, changes, tmp_path):
    with slurmrestd(gres) as (url, _):
        backend = minting_backend(url, tmp_path)
        with pytest.raises(BackendRejected) as raised:
            backend.submit(slice_request(**changes))
    assert not isinstance(raised.value, BackendNotReady)
    profile = changes.get("mig_profile", "1g.23gb")
    assert f"Slurm's node line for {TRAY} ({gres}) holds fewer than" in str(raised.value)
    assert f"gpu:{profile}; push the Slurm configuration with the tray's MIG layout first" in str(
        raised.value
    )


def test_a_whole_gpu_job_refused_the_same_way_is_rejected_at_once(tmp_path):
    with slurmrestd(MIG_GRES) as (url, _):
        backend = minting_backend(url, tmp_path)
        with pytest.raises(BackendRejected) as raised:
            backend.submit(slice_request(gpus_per_tray=4, mig_profile="", mig_slices=0))
    assert not isinstance(raised.value, BackendNotReady)
    assert raised.value.error_numbers == {2014}


# --- through dispatch ------------------------------------------------------------------------------------


@pytest.fixture
def slice_job(demo_inventory, tmp_path, api_as, django_capture_on_commit_callbacks):
    """A STARTING 1g.23gb x 2 job of Research on the MIG tray, its live backend a Slurm target whose
    slurmrestd is `slurmrestd`'s (the first dispatch is sent when the test says)."""
    department = make_department("Research", guaranteed_gpus=96)
    member = make_member("member-a", department)
    mig_tray(TRAY)
    ConfigTarget.objects.filter(kind="directory").update(enabled=False)
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(b"k" * 32)

    def make(url: str) -> Job:
        ConfigTarget.objects.create(
            name="cluster",
            kind="slurm",
            settings={
                "config_dir": str(tmp_path),
                "rest_url": url,
                "rest_user": "slurm",
                "jwt_key_file": str(key),
            },
            api_version="v0.0.42",  # as a target that chose it remembers it: no /openapi/v3 asked
        )
        body = {
            "department": "research",
            "name": "serve",
            "backend": "slurm",
            "mig_profile": "1g.23gb",
            "mig_slices": 2,
            "work": {"script": "#!/bin/bash\nsleep 1\n"},
        }
        with django_capture_on_commit_callbacks(execute=False):  # placed, not yet dispatched
            response = api_as(member).post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        job = Job.objects.get(pk=response.json()["id"])
        with django_capture_on_commit_callbacks(execute=False):
            run_pass()
        job.refresh_from_db()
        assert job.state == JobState.STARTING and job.placement == [TRAY], job.pending_reason
        return job

    return make


@pytest.mark.django_db
def test_dispatch_retries_a_not_ready_slice_job_and_submits_it_once_slurm_takes_it(slice_job):
    with slurmrestd(MIG_GRES) as (url, handler):
        job = slice_job(url)
        assert dispatch.dispatch(job.pk) == "retry"
        job.refresh_from_db()
        assert job.state == JobState.STARTING and job.dispatch_attempts == 1
        assert job.backend_message.startswith("Slurm (cluster) cannot take it yet: ")
        assert "attempt 1 of 6, next in 2 s (the job keeps its GPUs)" in job.backend_message
        assert JobEvent.objects.filter(job=job, kind=JobEventKind.DISPATCH_RETRY).count() == 1
        handler.taken.set()  # the node's slurmd registered its MIG devices again
        assert dispatch.dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    assert (job.state, job.backend_id, job.backend_message) == (JobState.RUNNING, "4242", "")
    assert len(handler.submissions) == 2


@pytest.mark.django_db
def test_dispatch_fails_a_slice_job_whose_refusal_does_not_clear_with_slurms_words(slice_job):
    with slurmrestd(MIG_GRES) as (url, handler):
        job = slice_job(url)
        outcomes = [dispatch.dispatch(job.pk) for _ in range(BackendNotReady.attempts_allowed)]
    assert outcomes == ["retry"] * (BackendNotReady.attempts_allowed - 1) + ["rejected"]
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "Requested node configuration is not available" in job.backend_message
    assert f"(still after {BackendNotReady.attempts_allowed} attempts)" in job.backend_message
    assert len(handler.submissions) == BackendNotReady.attempts_allowed


@pytest.mark.django_db
def test_dispatch_fails_a_slice_job_at_once_when_the_node_line_lacks_its_profile(slice_job):
    with slurmrestd("gpu:4") as (url, handler):
        job = slice_job(url)
        assert dispatch.dispatch(job.pk) == "rejected"
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "push the Slurm configuration with the tray's MIG layout first" in job.backend_message
    assert len(handler.submissions) == 1


@pytest.mark.django_db
def test_a_spell_of_not_ready_after_the_controller_was_down_gets_its_own_attempts(slice_job):
    """slurmctld back from an outage is when every node registers again: the attempts spent while it was
    unreachable do not count against the "not yet" that follows."""
    allowed = BackendNotReady.attempts_allowed
    with slurmrestd(MIG_GRES) as (url, handler):
        job = slice_job(url)
        handler.down[0] = allowed + 2
        assert [dispatch.dispatch(job.pk) for _ in range(allowed + 2)] == ["retry"] * (allowed + 2)
        job.refresh_from_db()
        assert job.dispatch_attempts == allowed + 2 and " unreachable: " in job.backend_message
        assert [dispatch.dispatch(job.pk) for _ in range(allowed - 1)] == ["retry"] * (allowed - 1)
        job.refresh_from_db()
        assert job.state == JobState.STARTING
        assert f"attempt {allowed - 1} of {allowed}" in job.backend_message, job.backend_message
        handler.taken.set()
        assert dispatch.dispatch(job.pk) == "submitted"
    assert len(handler.submissions) == allowed
