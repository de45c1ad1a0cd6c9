"""The Slurm job backend without a Slurm: the submit body, the state mapping, error classification, tokens
and the target settings. The real slurmrestd (tests/integration/test_slurm_jobs.py) checks the same code on
the wire; the answers quoted here are ones it gave (Slurm 24.11.5), and the tiny HTTP stand-in below is only
for what it cannot produce (a proxy's 503, a hung server, a refused connection).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from django.core.exceptions import ValidationError

from core.posix import PosixIdentity
from integrations import registry
from integrations.jobs import (
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.registry import MASK, clean_settings, mask_settings
from integrations.slurm import versions
from integrations.slurm.jobs import SlurmJobBackend, backend_from_settings
from integrations.slurm.rest import IMEX_NETWORK, classify_error, job_status, mint_token, submit_payload

HOSTS = ("gb-r01-t03", "gb-r01-t04", "gb-r01-t05", "gb-r01-t06")


def request(**changes) -> DispatchRequest:
    values = dict(
        job_id=42,
        name="llama fine-tune",
        department="vision",
        priority_class="train",
        hostnames=HOSTS,
        gpus_per_tray=4,
        time_limit_minutes=90,
        work={"script": "#!/bin/bash\nsrun hostname\n"},
        service_tier="gpu",
        segment=4,
        clique="8c1f0f6a-7d0e-4b59-a0f5-0d9c3b1f2e11.3",
    )
    values.update(changes)
    return DispatchRequest(**values)


# --- submit_payload ---------------------------------------------------------------------------------------


def test_payload_pins_the_chosen_trays_with_their_gpus():
    job = submit_payload(request())["job"]
    assert job["name"] == "rp-42"
    assert job["comment"] == "Rackplane job 42: llama fine-tune"
    assert job["script"] == "#!/bin/bash\nsrun hostname\n"
    assert job["partition"] == "gpu"
    assert job["required_nodes"] == list(HOSTS)
    assert job["minimum_nodes"] == job["maximum_nodes"] == 4
    assert job["tres_per_node"] == "gres/gpu:4"
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 90}
    assert job["current_working_directory"] == "/tmp"
    assert job["standard_output"] == "/tmp/rp-42-%j.out"
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in job["environment"]
    assert "RACKPLANE_JOB_ID=42" in job["environment"]
    assert "RACKPLANE_DEPARTMENT=vision" in job["environment"]
    assert "RACKPLANE_NVLINK_CLIQUE=8c1f0f6a-7d0e-4b59-a0f5-0d9c3b1f2e11.3" in job["environment"]
    assert json.loads(json.dumps(submit_payload(request()))) == submit_payload(request())  # plain JSON


def test_payload_for_one_tray_and_fewer_gpus():
    job = submit_payload(request(hostnames=("gb-r01-t09",), gpus_per_tray=2, segment=None, clique=""))["job"]
    assert job["required_nodes"] == ["gb-r01-t09"]
    assert job["minimum_nodes"] == job["maximum_nodes"] == 1
    assert job["tres_per_node"] == "gres/gpu:2"
    assert "segment_size" not in job
    assert not [e for e in job["environment"] if e.startswith("RACKPLANE_NVLINK_CLIQUE=")]


def test_segment_is_sent_when_the_job_is_one_segment():
    assert submit_payload(request(segment=4))["job"]["segment_size"] == {
        "set": True,
        "infinite": False,
        "number": 4,
    }
    assert "segment_size" not in submit_payload(request(segment=None))["job"]


def test_segment_smaller_than_the_job_is_left_to_the_pinned_trays():
    # Slurm 24.11 refuses --segment with --nodelist for more than one segment (error 2178, measured).
    eight = tuple(f"gb-r01-t{i:02d}" for i in range(1, 9))
    job = submit_payload(request(hostnames=eight, segment=4))["job"]
    assert "segment_size" not in job
    assert job["required_nodes"] == list(eight)
    with pytest.raises(BackendRejected, match="does not divide"):
        submit_payload(request(hostnames=eight, segment=3))


@pytest.mark.parametrize(
    ("version", "sent"), [("v0.0.42", False), ("v0.0.43", False), ("v0.0.44", True), ("v0.0.45", True)]
)
def test_several_segments_are_sent_beside_the_trays_from_slurm_25_11s_api_on(version, sent):
    # Slurm 25.11 (v0.0.44 and later) takes --segment with --nodelist for several segments; 24.11 refuses it.
    eight = tuple(f"gb-r01-t{i:02d}" for i in (1, 2, 3, 4, 10, 11, 12, 13))
    job = submit_payload(request(hostnames=eight, segment=4), dialect=versions.KNOWN[version])["job"]
    assert job.get("segment_size") == ({"set": True, "infinite": False, "number": 4} if sent else None)
    assert job["required_nodes"] == list(eight)
    with pytest.raises(BackendRejected, match="does not divide"):
        submit_payload(request(hostnames=eight, segment=3), dialect=versions.KNOWN[version])


@pytest.mark.parametrize(("account", "qos"), [(True, True), (True, False), (False, True), (False, False)])
def test_account_and_qos_follow_the_flags(account, qos):
    job = submit_payload(request(), account=account, qos=qos)["job"]
    assert job.get("account") == ("vision" if account else None)
    assert job.get("qos") == ("vision" if qos else None)


def test_imex_asks_for_a_channel_per_segment():
    assert (
        submit_payload(request(imex=True))["job"]["network"] == IMEX_NETWORK == "unique-channel-per-segment"
    )
    assert "network" not in submit_payload(request(imex=False))["job"]


def test_workdir_is_used_for_the_output_too():
    job = submit_payload(request(), workdir="/scratch/rackplane/")["job"]
    assert job["current_working_directory"] == "/scratch/rackplane/"
    assert job["standard_output"] == "/scratch/rackplane/rp-42-%j.out"
    with pytest.raises(ValueError, match="absolute"):
        submit_payload(request(), workdir="scratch")


def test_attempts_get_their_own_name():
    assert submit_payload(request(attempt=2))["job"]["name"] == "rp-42-2"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"work": {}}, "a Slurm job needs"),
        ({"work": {"script": "   "}}, "a script starting with #!"),
        ({"work": {"script": "echo hi\n"}}, "a script starting with #!"),
        ({"hostnames": ()}, "no trays"),
        ({"hostnames": ("gb-r01-t01", "gb-r01-t01"), "segment": None}, "chosen twice"),
        ({"gpus_per_tray": 5}, "gpus_per_tray"),
        ({"time_limit_minutes": 0}, "at least one minute"),
        ({"service_tier": ""}, "no Slurm partition"),
    ],
)
def test_unusable_requests_are_rejected_before_slurm_sees_them(changes, reason):
    with pytest.raises(BackendRejected, match=reason):
        submit_payload(request(**changes))


# --- state mapping ----------------------------------------------------------------------------------------


def exit_code(code=None, signal=None, name=""):
    return {
        "status": ["SIGNALED" if signal else "SUCCESS" if not code else "ERROR"],
        "return_code": {"set": code is not None, "infinite": False, "number": code or 0},
        "signal": {"id": {"set": signal is not None, "infinite": False, "number": signal or 0}, "name": name},
    }


def record(states, *, reason="None", description="", nodes="", code=None, signal=None, name=""):
    """A v0.0.42 job_info record, trimmed to the fields the mapping reads (as slurmrestd 24.11 sends them)."""
    return {
        "job_id": 7,
        "name": "rp-42",
        "user_name": "rackplane",
        "job_state": states,
        "state_reason": reason,
        "state_description": description,
        "nodes": nodes,
        "exit_code": exit_code(code, signal, name),
    }


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (["PENDING"], BackendJobState.PENDING),
        (["PENDING", "REQUEUED"], BackendJobState.PENDING),
        (["RUNNING", "CONFIGURING"], BackendJobState.PENDING),
        (["RUNNING"], BackendJobState.RUNNING),
        (["SUSPENDED"], BackendJobState.RUNNING),
        (["COMPLETED"], BackendJobState.COMPLETED),
        (["COMPLETED", "COMPLETING"], BackendJobState.COMPLETED),
        (["FAILED"], BackendJobState.FAILED),
        (["TIMEOUT"], BackendJobState.FAILED),
        (["NODE_FAIL"], BackendJobState.FAILED),
        (["OUT_OF_MEMORY"], BackendJobState.FAILED),
        (["BOOT_FAIL"], BackendJobState.FAILED),
        (["DEADLINE"], BackendJobState.FAILED),
        (["PREEMPTED"], BackendJobState.FAILED),
        (["CANCELLED"], BackendJobState.CANCELLED),
        ("RUNNING", BackendJobState.RUNNING),  # older data parsers sent a plain string
        (["STAGE_OUT"], BackendJobState.UNKNOWN),
        ([], BackendJobState.UNKNOWN),
    ],
)
def test_slurm_states_map_to_backend_states(states, expected):
    assert job_status(record(states)).state == expected


def test_status_carries_reason_nodes_and_exit_code():
    pending = job_status(
        record(
            ["PENDING"],
            reason="ReqNodeNotAvail",
            description="ReqNodeNotAvail, May be reserved for other job",
        )
    )
    assert pending.message == "ReqNodeNotAvail, May be reserved for other job"
    assert pending.exit_code is None and pending.nodes == ()
    running = job_status(record(["RUNNING"], nodes="gb-r01-t[03,07]", code=0))
    assert running.nodes == ("gb-r01-t03", "gb-r01-t07")
    assert running.exit_code is None  # only a finished job has one
    assert running.backend_id == "7"
    done = job_status(record(["COMPLETED"], nodes="gb-r01-t[03-04]", code=0))
    assert (done.exit_code, done.message, done.nodes) == (0, "", ("gb-r01-t03", "gb-r01-t04"))
    failed = job_status(record(["FAILED"], reason="NonZeroExitCode", nodes="gb-r01-t03", code=3))
    assert (failed.exit_code, failed.message) == (3, "NonZeroExitCode")
    timeout = job_status(record(["TIMEOUT"], reason="TimeLimit", nodes="gb-r01-t03", code=0, signal=15))
    assert timeout.state == BackendJobState.FAILED
    assert timeout.message == "TIMEOUT, TimeLimit, signal 15"
    cancelled = job_status(record(["CANCELLED"], reason="Priority", signal=15, name="TERM"))
    assert (cancelled.exit_code, cancelled.message) == (143, "signal TERM")
    completing = job_status(record(["COMPLETED", "COMPLETING"], nodes="gb-r01-t03", code=0))
    assert completing.message == "COMPLETING"
    assert job_status(record(["RUNNING", "CONFIGURING"])).message == "CONFIGURING"


def test_a_job_read_while_completing_keeps_every_node_it_ran_on():
    """While a job is COMPLETING, slurmctld's `nodes` lists only the nodes that have not finished ending it
    (the batch host alone, 1 tray of 18, in a failed run of tests/integration's segments test; one node's
    slurmd held with SIGSTOP on the testbed: that node alone); `job_resources.nodes.list` is the whole
    allocation."""
    allocated = {"nodes": {"count": 3, "list": "gb-r01-t[03-04],gb-r01-t10"}}
    completing = record(["COMPLETED", "COMPLETING"], nodes="gb-r01-t03", code=0)
    completing["job_resources"] = allocated
    assert job_status(completing).nodes == ("gb-r01-t03", "gb-r01-t04", "gb-r01-t10")
    done = record(["COMPLETED"], nodes="gb-r01-t[03-04],gb-r01-t10", code=0)
    done["job_resources"] = allocated
    assert job_status(done).nodes == ("gb-r01-t03", "gb-r01-t04", "gb-r01-t10")
    # No allocation (never started, or an older record): `nodes` as it is.
    running = record(["RUNNING"], nodes="gb-r01-t03") | {"job_resources": {}}
    assert job_status(running).nodes == ("gb-r01-t03",)
    assert job_status(record(["CANCELLED"]) | {"job_resources": None}).nodes == ()


# --- errors -----------------------------------------------------------------------------------------------


def slurm_errors(number, error, description="Batch job submission failed"):
    return {"errors": [{"description": description, "error_number": number, "error": error, "source": "x"}]}


@pytest.mark.parametrize(
    ("status", "body", "kind", "text"),
    [
        (200, {"job_id": 5, "errors": [], "warnings": []}, None, ""),
        (500, slurm_errors(2000, "Invalid partition name specified"), BackendRejected, "Invalid partition"),
        (500, slurm_errors(2014, "Requested node configuration is not available"), BackendRejected, "2014"),
        (
            500,
            slurm_errors(2178, "Requested topology configuration is not available"),
            BackendRejected,
            "topo",
        ),
        (
            500,
            slurm_errors(2045, "Invalid account or account/partition combination specified"),
            BackendRejected,
            "account",
        ),
        (500, slurm_errors(2066, "Invalid qos specification"), BackendRejected, "qos"),
        (500, slurm_errors(9202, "Unable to convert Data type"), BackendRejected, "convert"),
        (422, slurm_errors(9000, "Query empty or not RFC7320 compliant"), BackendRejected, "RFC7320"),
        (
            404,
            "Unable find requested URL. Please view /openapi/v3 for API reference.",
            BackendRejected,
            "404",
        ),
        (
            502,
            slurm_errors(1800, "Unable to contact slurm controller (connect failure)"),
            BackendUnavailable,
            "1800",
        ),
        (
            500,
            slurm_errors(-1, "Unspecified error", "Unable to query JobId=1"),
            BackendUnavailable,
            "Unspecified",
        ),
        (
            500,
            slurm_errors(1, "Operation not permitted", "Signal request failed"),
            BackendUnavailable,
            "permitted",
        ),
        (511, slurm_errors(1007, "Protocol authentication error"), BackendUnavailable, "credentials"),
        (500, slurm_errors(2007, "Job limit reached"), BackendUnavailable, "2007"),
        (500, slurm_errors(2027, "Slurm backup controller in standby mode"), BackendUnavailable, "standby"),
        (503, "<html>Service Unavailable</html>", BackendUnavailable, "503"),
        (503, None, BackendUnavailable, "HTTP 503"),
    ],
)
def test_answers_are_classified_by_slurm_error_number(status, body, kind, text):
    error = classify_error(status, body, "submitting rp-42")
    if kind is None:
        assert error is None
        return
    assert type(error) is kind
    assert str(error).startswith("submitting rp-42: ")
    assert text.lower() in str(error).lower()


# --- tokens -----------------------------------------------------------------------------------------------


def _segment(text: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def test_minted_token_is_what_scontrol_token_makes():
    key = b"0123456789abcdef0123456789abcdef"
    token = mint_token(key, "rackplane", lifespan=600, now=1_795_248_268)
    header, claims, signature = token.split(".")
    # `scontrol token username=root lifespan=600` on the testbed printed this header, and its claims in
    # this order: {"exp":..., "iat":..., "sun":"root"}.
    assert header == "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    assert _segment(header) == {"alg": "HS256", "typ": "JWT"}
    assert list(_segment(claims).items()) == [
        ("exp", 1_795_248_868),
        ("iat", 1_795_248_268),
        ("sun", "rackplane"),
    ]
    expected = hmac.new(key, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == expected
    assert "=" not in token
    with pytest.raises(ValueError):
        mint_token(b"", "rackplane")


def test_backend_mints_tokens_from_the_key_file_and_renews_them(tmp_path):
    key_file = tmp_path / "jwt_hs256.key"
    key_file.write_bytes(b"k" * 32)
    backend = SlurmJobBackend("http://127.0.0.1:9", "rackplane", jwt_key_file=str(key_file))
    first = backend._current_token()
    assert first == backend._current_token()  # cached while it is fresh
    assert _segment(first.split(".")[1])["sun"] == "rackplane"
    backend._token_expires = time.time() + 10  # nearly expired: a new one
    key_file.write_bytes(b"n" * 32)
    assert backend._current_token() != first
    key_file.unlink()
    backend._token_expires = 0
    with pytest.raises(BackendUnavailable, match="cannot read the JWT key file"):
        backend._current_token()


# --- HTTP, against a stand-in for what the real slurmrestd cannot answer ----------------------------------


class _StandIn(http.server.BaseHTTPRequestHandler):
    answers: list  # (status, content type, body bytes, delay seconds)
    seen: list

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        status, content_type, payload, delay = self.answers.pop(0)
        time.sleep(delay)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


@contextmanager
def standin(*answers):
    handler = type("Handler", (_StandIn,), {"answers": list(answers), "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # A short poll interval: shutdown() waits for it.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_proxy_503_is_transient_and_the_headers_are_sent():
    with standin((503, "text/html", b"<html>no upstream</html>", 0)) as (url, seen):
        backend = SlurmJobBackend(url, "rackplane", token="static-token", timeout=5, api_version="v0.0.42")
        with pytest.raises(BackendUnavailable, match="HTTP 503"):
            backend.status(["12"])
    [(method, path, headers, _)] = seen
    assert (method, path) == ("GET", "/slurm/v0.0.42/job/12")
    assert headers["x-slurm-user-name"] == "rackplane"  # header names are case-insensitive
    assert headers["x-slurm-user-token"] == "static-token"


@pytest.mark.slow(reason="waits for the client to give up")
def test_a_hung_slurmrestd_times_out():
    with standin((200, "application/json", b"{}", 3)) as (url, _):
        backend = SlurmJobBackend(url, "rackplane", token="t", timeout=0.5, api_version="v0.0.42")
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="did not answer"):
            backend.jobs()
        assert time.monotonic() - started < 2.5


def test_a_success_that_is_not_json_is_transient():
    with (
        standin((200, "text/plain", b"hello", 0)) as (url, _),
        pytest.raises(BackendUnavailable, match="without a JSON object"),
    ):
        SlurmJobBackend(url, "rackplane", token="t", timeout=5, api_version="v0.0.42").jobs()


def test_a_closed_port_is_transient():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(BackendUnavailable, match="did not answer"):
        SlurmJobBackend(f"http://127.0.0.1:{port}", "rackplane", token="t", timeout=2).cancel("5")


def test_ids_that_are_not_slurm_job_ids_need_no_call():
    # Port 9 is closed: any HTTP call would raise BackendUnavailable.
    backend = SlurmJobBackend("http://127.0.0.1:9", "rackplane", token="t", timeout=1)
    answer = backend.status(["abc", "0", "-3"])
    assert list(answer) == ["abc", "0", "-3"]
    assert {s.state for s in answer.values()} == {BackendJobState.UNKNOWN}
    backend.cancel("abc")  # nothing to stop


def test_imex_requests_need_a_target_that_runs_the_imex_switch_plugin():
    backend = SlurmJobBackend("http://127.0.0.1:9", "rackplane", token="t", imex=False, timeout=1)
    with pytest.raises(BackendRejected, match="switch/nvidia_imex"):
        backend.submit(request(imex=True, run_as=PosixIdentity("rackplane", 20005, 20005)))  # its own user


@pytest.mark.parametrize(
    ("args", "kwargs", "reason"),
    [
        (("slurmrestd:6820", "u"), {"token": "t"}, "http"),
        (("http://h:6820", ""), {"token": "t"}, "user"),
        (("http://h:6820", "u"), {}, "either"),
        (("http://h:6820", "u"), {"token": "t", "jwt_key_file": "/k"}, "either"),
    ],
)
def test_backend_arguments_are_checked(args, kwargs, reason):
    with pytest.raises(ValueError, match=reason):
        SlurmJobBackend(*args, **kwargs)


# --- settings ---------------------------------------------------------------------------------------------

SLURM = {"config_dir": "/etc/slurm"}


def test_slurm_settings_default_to_no_jobs():
    values = clean_settings("slurm", SLURM)
    assert {k: values[k] for k in ("rest_url", "rest_user", "rest_token", "jwt_key_file")} == dict.fromkeys(
        ("rest_url", "rest_user", "rest_token", "jwt_key_file"), ""
    )
    assert values["accounting"] is False and values["imex"] is False
    assert set(values) == set(registry.get("slurm").defaults())
    with pytest.raises(BackendRejected, match="does not run jobs"):
        backend_from_settings(values)
    # Settings stored without clean_settings: the job waits for an administrator instead of failing.
    with pytest.raises(BackendUnavailable, match="incomplete: give either a token or a jwt_key_file"):
        backend_from_settings({**values, "rest_url": "http://slurm:6820", "rest_user": "rp"})


def test_slurm_settings_make_a_backend():
    values = clean_settings(
        "slurm",
        {
            **SLURM,
            "rest_url": " http://127.0.0.1:6820/ ",
            "rest_user": "rackplane",
            "jwt_key_file": "/etc/slurm/jwt_hs256.key",
            "accounting": True,
            "imex": True,
        },
    )
    assert values["rest_url"] == "http://127.0.0.1:6820"
    backend = backend_from_settings(values, timeout=7)
    assert (backend.rest_url, backend.user, backend.accounting, backend.imex, backend.timeout) == (
        "http://127.0.0.1:6820",
        "rackplane",
        True,
        True,
        7,
    )
    token = clean_settings(
        "slurm", {**SLURM, "rest_url": "https://slurm:6820", "rest_user": "rp", "rest_token": "s3"}
    )
    assert backend_from_settings(token)._current_token() == "s3"


def test_the_rest_token_is_a_secret():
    values = clean_settings(
        "slurm", {**SLURM, "rest_url": "http://slurm:6820", "rest_user": "rp", "rest_token": "s3cret"}
    )
    assert mask_settings("slurm", values)["rest_token"] == MASK
    assert mask_settings("slurm", clean_settings("slurm", SLURM))["rest_token"] == ""


@pytest.mark.parametrize(
    ("raw", "key", "reason"),
    [
        ({"rest_url": "slurmrestd:6820", "rest_user": "rp", "rest_token": "t"}, "rest_url", "not an http"),
        ({"rest_url": "http://slurm:6820", "rest_token": "t"}, "rest_user", "is required with rest_url"),
        (
            {"rest_url": "http://slurm:6820", "rest_user": "rp user", "rest_token": "t"},
            "rest_user",
            "user name",
        ),
        ({"rest_url": "http://slurm:6820", "rest_user": "rp"}, "jwt_key_file", "needs a JWT"),
        (
            {"rest_url": "http://slurm:6820", "rest_user": "rp", "rest_token": "t", "jwt_key_file": "/k"},
            "rest_token",
            "not both",
        ),
        ({"jwt_key_file": "etc/jwt.key"}, "jwt_key_file", "absolute"),
        ({"accounting": "yes"}, "accounting", "true or false"),
        ({"imex": 1}, "imex", "true or false"),
        ({"rest_password": "x"}, "rest_password", "not a setting"),
    ],
)
def test_slurm_job_settings_are_validated(raw, key, reason):
    with pytest.raises(ValidationError) as caught:
        clean_settings("slurm", {**SLURM, **raw})
    messages = caught.value.message_dict
    assert key in messages, messages
    assert reason in " ".join(messages[key])
