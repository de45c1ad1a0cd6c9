"""SlurmJobBackend against the real Slurm 24.11 testbed: slurmrestd with JWT, 18 fake trays.

Jobs are submitted as the testbed's unprivileged user (RACKPLANE_SLURM_JOB_USER) with tokens minted from
slurmctld's jwt_key (RACKPLANE_SLURM_JWT_KEY). Every test cancels what it started and leaves the testbed
idle and on its baseline configuration (fixture `slurm_baseline`).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.posix import PosixIdentity
from integrations.jobs import (
    FINISHED_BACKEND_STATES,
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.slurm.jobs import SlurmJobBackend, backend_from_settings
from integrations.slurm.rest import IMEX_NETWORK, mint_token, submit_payload

pytestmark = pytest.mark.integration

PARTITION = "batch"  # the testbed's baseline partition (all trays)
_ids = iter(range(random.randrange(10_000, 90_000) * 10, 10**9))  # fresh Rackplane job ids per run


def job_user() -> str:
    return os.environ.get("RACKPLANE_SLURM_JOB_USER", "rackplane")


def job_identity() -> PosixIdentity:
    """The testbed's `rackplane` user as a POSIX identity (the backend's own user: no impersonation)."""
    passwd = os.path.join(os.environ["RACKPLANE_SLURM_TESTBED"], "root", "etc", "passwd")
    with open(passwd) as handle:
        fields = next(line.split(":") for line in handle if line.startswith(f"{job_user()}:"))
    return PosixIdentity(job_user(), int(fields[2]), int(fields[3]))


def make_backend(**kwargs) -> SlurmJobBackend:
    kwargs.setdefault("jwt_key_file", os.environ["RACKPLANE_SLURM_JWT_KEY"])
    kwargs.setdefault("timeout", 30)
    return SlurmJobBackend(os.environ["RACKPLANE_SLURMRESTD_URL"], job_user(), **kwargs)


def job(hostnames, script="#!/bin/bash\nsleep 1\n", **changes) -> DispatchRequest:
    values = dict(
        job_id=next(_ids),
        name="integration",
        department="vision",
        priority_class="train",
        hostnames=tuple(hostnames),
        gpus_per_tray=4,
        time_limit_minutes=5,
        work={"script": script},
        service_tier=PARTITION,
        run_as=job_identity(),
    )
    values.update(changes)
    return DispatchRequest(**values)


@pytest.fixture
def slurm(slurm_testbed, slurm_baseline):
    """A backend, and every job it submits is cancelled and finished at the end of the test."""
    backend = make_backend()
    started: list[str] = []
    original = backend.submit

    def submit(request):
        backend_id = original(request)
        started.append(backend_id)
        return backend_id

    backend.submit = submit
    yield backend
    if started:
        for backend_id in set(started):
            backend.cancel(backend_id)
        wait_for(backend, started, (*FINISHED_BACKEND_STATES, BackendJobState.UNKNOWN))


def wait_for(backend, ids, states, timeout=45.0):
    """Poll until every id is in one of `states`; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = backend.status(list(ids))
        if all(answer[i].state in states for i in ids):
            return answer
        assert time.monotonic() < deadline, f"not {[str(s) for s in states]} in {timeout}s: {answer}"
        time.sleep(0.3)


def test_minted_token_is_the_one_scontrol_token_makes(slurm_testbed):
    printed = subprocess.run(
        [slurm_testbed.scontrol, "token", f"username={job_user()}", "lifespan=600"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    token = printed.split("=", 1)[1]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    with open(os.environ["RACKPLANE_SLURM_JWT_KEY"], "rb") as handle:
        key = handle.read()
    assert mint_token(key, job_user(), lifespan=600, now=claims["iat"]) == token


def test_the_submit_body_uses_fields_of_the_served_openapi_document(slurm_testbed):
    """Under the version Rackplane chooses with this slurmrestd (v0.0.42 on 24.11, v0.0.45 on 26.05)."""
    backend = make_backend()
    version = backend.api_version
    request = urllib.request.Request(
        os.environ["RACKPLANE_SLURMRESTD_URL"] + "/openapi/v3",
        headers={"X-SLURM-USER-NAME": backend.user, "X-SLURM-USER-TOKEN": backend._current_token()},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        schemas = json.load(response)["components"]["schemas"]

    def resolved(schema: dict) -> dict:
        while "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    fields = schemas[f"{version}_job_desc_msg"]["properties"]
    body = submit_payload(job(["gb-r01-t01", "gb-r01-t02"], segment=2, imex=True, clique="u.1"))
    assert set(body) <= set(schemas[f"{version}_job_submit_req"]["properties"])
    assert set(body["job"]) <= set(fields), set(body["job"]) - set(fields)
    for no_val in ("time_limit", "segment_size"):
        assert set(resolved(fields[no_val])["properties"]) == {"set", "infinite", "number"}
    assert set(body["job"]["time_limit"]) == {"set", "infinite", "number"}
    assert resolved(fields["required_nodes"])["type"] == "array"
    # What the version module says of the job record matches what this slurmrestd serves.
    job_info = schemas[f"{version}_job_info"]["properties"]
    states = resolved(resolved(job_info["job_state"])["items"])["enum"]
    assert set(states) == backend.dialect.job_states
    assert backend.dialect.expanded_output_field in job_info


def test_a_two_tray_job_runs_on_exactly_the_chosen_trays_and_completes(slurm, slurm_testbed, caplog):
    chosen = ["gb-r01-t05", "gb-r01-t12"]  # not what Slurm would pick by itself (t01, t02)
    script = "#!/bin/bash\necho nodes=$SLURM_JOB_NODELIST gpus=$SLURM_GPUS_ON_NODE job=$RACKPLANE_JOB_ID\n"
    script += "sleep 2\n"
    request = job(chosen, script, segment=2)
    with caplog.at_level(logging.WARNING, logger="integrations.slurm.jobs"):
        backend_id = slurm.submit(request)
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # no "Ignoring unknown field"

    running = wait_for(slurm, [backend_id], (BackendJobState.RUNNING, *FINISHED_BACKEND_STATES))[backend_id]
    assert running.nodes == tuple(chosen)
    done = wait_for(slurm, [backend_id], FINISHED_BACKEND_STATES)[backend_id]
    assert (done.state, done.exit_code, done.nodes) == (BackendJobState.COMPLETED, 0, tuple(chosen))
    output = slurm_testbed.dir / "root" / "tmp" / f"{request.rackplane_name}-{backend_id}.out"
    assert output.read_text().split() == [
        "nodes=gb-r01-t[05,12]",
        "gpus=4",
        f"job={request.job_id}",
    ]


def slurm_release() -> tuple[int, int]:
    """(24, 11) for the testbed's Slurm (`scontrol --version`: "slurm 24.11.5")."""
    printed = subprocess.run(
        [os.environ["RACKPLANE_SLURM_SCONTROL"], "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    major, minor = printed.split(".")[:2]
    return int(major), int(minor)


def test_a_job_across_two_nvlink_partitions_is_sent_in_segments_where_slurm_takes_them(slurm, slurm_testbed):
    """The engine placed 9 + 9 trays in two NVLink partitions (blocks r01p1 = t01-t09, r01p2 = t10-t18), with
    an IMEX channel per segment asked. Slurm 25.11 and later (API v0.0.44+) get `segment_size` 9 beside the
    trays and report the segments and the network as the job's (`scontrol show job`: SegmentSize=9,
    Network=unique-channel-per-segment; SLURM_JOB_SEGMENT_SIZE in the job). Slurm 24.11 refuses several
    segments beside a node list (2178), so there the trays alone are sent; the placement is the same. (A job
    smaller than the base block, 2 + 2 trays, Slurm 24.11 refuses across blocks whatever is sent: 2014.)"""
    hosts = slurm_testbed.hostnames()
    two = [hosts[0], hosts[1], hosts[9], hosts[10]]
    raw = submit_payload(job(two, segment=4))
    raw["job"]["segment_size"] = {"set": True, "infinite": False, "number": 2}
    if slurm_release() < (25, 5):  # measured on the baseline's one block of 18, every node idle
        with pytest.raises(BackendRejected, match="Requested topology configuration is not available"):
            slurm._checked("POST", "/job/submit", "submitting with segment 2", raw)
    target = slurm_testbed.target()
    target.apply(target.render(slurm_testbed.state([9, 9])))
    slurm_testbed.wait_idle()
    # Trays that do not split into whole segments inside the blocks: Slurm 25.11+ refuses them itself.
    if slurm.dialect.segments_with_nodelist:
        uneven = [hosts[0], hosts[1], hosts[2], hosts[9]]
        with pytest.raises(BackendRejected, match="Requested node configuration is not available"):
            slurm.submit(job(uneven, segment=2))

    script = "#!/bin/bash\necho segment=${SLURM_JOB_SEGMENT_SIZE:-none} network=${SLURM_NETWORK:-none}\n"
    request = job(hosts, script, segment=9, imex=True)
    imex = make_backend(imex=True)
    backend_id = imex.submit(request)
    try:
        done = wait_for(imex, [backend_id], FINISHED_BACKEND_STATES)[backend_id]
    finally:
        imex.cancel(backend_id)  # a no-op once it finished
    assert (done.state, done.nodes) == (BackendJobState.COMPLETED, tuple(hosts))
    shown = subprocess.run(
        [slurm_testbed.scontrol, "show", "job", backend_id], capture_output=True, text=True, check=True
    ).stdout
    output = slurm_testbed.dir / "root" / "tmp" / f"{request.rackplane_name}-{backend_id}.out"
    assert f"Network={IMEX_NETWORK}" in shown  # every release keeps the request
    if slurm.dialect.segments_with_nodelist:
        assert "SegmentSize=9" in shown, shown
        assert output.read_text().split() == ["segment=9", f"network={IMEX_NETWORK}"]
    else:
        assert "SegmentSize=" not in shown or "SegmentSize=0" in shown, shown
        assert output.read_text().split()[0] == "segment=none"


def test_a_failing_script_fails_with_its_exit_code(slurm):
    backend_id = slurm.submit(job(["gb-r01-t03"], "#!/bin/bash\necho broken >&2\nexit 3\n", gpus_per_tray=1))
    done = wait_for(slurm, [backend_id], FINISHED_BACKEND_STATES)[backend_id]
    assert (done.state, done.exit_code) == (BackendJobState.FAILED, 3)
    # Read while slurmctld still cleans up after it (26.05.5 measured), the message also says COMPLETING.
    assert done.message in ("NonZeroExitCode", "COMPLETING, NonZeroExitCode"), done.message


def test_cancel_stops_a_long_job_and_is_idempotent(slurm):
    backend_id = slurm.submit(job(["gb-r01-t04"], "#!/bin/bash\nsleep 300\n"))
    wait_for(slurm, [backend_id], (BackendJobState.RUNNING,))
    slurm.cancel(backend_id)
    done = wait_for(slurm, [backend_id], FINISHED_BACKEND_STATES)[backend_id]
    assert done.state == BackendJobState.CANCELLED
    slurm.cancel(backend_id)  # already finished: a success
    assert slurm.status([backend_id])[backend_id].state == BackendJobState.CANCELLED


def test_submitting_the_same_job_twice_adopts_the_first(slurm):
    request = job(["gb-r01-t06", "gb-r01-t07"], "#!/bin/bash\nsleep 300\n")
    first = slurm.submit(request)
    assert slurm.submit(request) == first
    assert make_backend().submit(request) == first  # another process (a retried task) adopts it too
    named = [j for j in slurm.jobs() if j.get("name") == request.rackplane_name]
    assert [str(j["job_id"]) for j in named] == [first]
    # Once it is finished, the name is free: a new run is a new Slurm job.
    slurm.cancel(first)
    wait_for(slurm, [first], FINISHED_BACKEND_STATES)
    again = slurm.submit(request)
    assert again != first


def test_unknown_ids_are_unknown_and_cancel_of_them_succeeds(slurm):
    backend_id = slurm.submit(job(["gb-r01-t08"]))
    wait_for(slurm, [backend_id], FINISHED_BACKEND_STATES)
    unknown = [str(n) for n in range(900_001, 900_026)]
    assert slurm.status(["900000"])["900000"].state == BackendJobState.UNKNOWN
    slurm.cancel("900000")
    # More than MANY_IDS ids: one GET /jobs/ answers them all, the same as one GET per id.
    many = slurm.status([backend_id, *unknown])
    assert many[backend_id] == slurm.status([backend_id])[backend_id]
    assert many[backend_id].state == BackendJobState.COMPLETED
    assert {many[i].state for i in unknown} == {BackendJobState.UNKNOWN}


def test_account_qos_and_imex_reach_slurmctld(slurm):
    """The department's account and QOS (slurmdbd holds both, and the job user's association:
    conftest.ensure_testbed_people); 24.11 stores the IMEX network request."""
    backend = make_backend(accounting=True, imex=True)
    request = job(["gb-r01-t09"], "#!/bin/bash\nsleep 300\n", imex=True)
    backend_id = backend.submit(request)
    try:
        [record] = [j for j in backend.jobs() if str(j.get("job_id")) == backend_id]
        assert (record["account"], record["qos"], record["network"]) == ("vision", "vision", IMEX_NETWORK)
        assert record["user_name"] == job_user()
        assert record["tres_per_node"] == "gres/gpu:4"
        assert record["time_limit"]["number"] == 5
        assert record["comment"] == f"Rackplane job {request.job_id}: integration"
    finally:
        backend.cancel(backend_id)
    assert (
        wait_for(backend, [backend_id], FINISHED_BACKEND_STATES)[backend_id].state
        == BackendJobState.CANCELLED
    )


def test_requests_slurm_refuses_are_rejected_with_its_words(slurm):
    wrong_partition = job(["gb-r01-t01"], service_tier="no-such-partition")
    with pytest.raises(BackendRejected, match="Invalid partition name specified"):
        slurm.submit(wrong_partition)
    # slurmrestd would silently run this one on another tray; the backend checks the trays first.
    unknown_tray = job(["gb-r01-t01", "gb-r09-t01"])
    with pytest.raises(BackendRejected, match="no node gb-r09-t01"):
        slurm.submit(unknown_tray)
    names = {j.get("name") for j in slurm.jobs()}
    assert wrong_partition.rackplane_name not in names and unknown_tray.rackplane_name not in names


def test_a_job_of_another_user_is_never_signalled(slurm, slurm_testbed):
    """slurmctld 24.11.5 hangs its job table on a DELETE of another user's job: never send one. The backend's
    own user does not even see it (PrivateData=jobs): nothing is sent. A SlurmUser backend acting for that
    user sees whose it is and refuses."""
    other = subprocess.run(
        [
            str(slurm_testbed.bin / "sbatch"),
            "--parsable",
            "-w",
            "gb-r01-t18",
            "-D",
            "/tmp",
            "--wrap",
            "sleep 300",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        slurm.cancel(other)  # invisible to rackplane: taken as gone, no DELETE sent
        acting = make_backend()
        acting.user = os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm")  # SlurmUser's tokens
        with pytest.raises(BackendRejected, match=f"belongs to root, not {job_user()}"):
            acting.cancel(other, run_as=job_identity())
        with pytest.raises(BackendRejected, match=f"belongs to root, not {job_user()}"):
            acting.signal(other, "USR1", run_as=job_identity())
        assert acting.status([other])[other].state in (BackendJobState.PENDING, BackendJobState.RUNNING)
    finally:
        subprocess.run([str(slurm_testbed.bin / "scancel"), other], check=False)


def test_a_bad_token_is_transient_not_a_rejection(slurm_testbed):
    backend = make_backend(jwt_key_file="", token="not-a-jwt")
    with pytest.raises(BackendUnavailable, match="did not accept the credentials"):
        backend.status(["1"])


def test_settings_make_a_working_backend(slurm_testbed):
    from integrations.registry import clean_settings

    values = clean_settings(
        "slurm",
        {
            "config_dir": str(slurm_testbed.conf_dir),
            "rest_url": os.environ["RACKPLANE_SLURMRESTD_URL"],
            "rest_user": job_user(),
            "jwt_key_file": os.environ["RACKPLANE_SLURM_JWT_KEY"],
        },
    )
    backend = backend_from_settings(values)
    assert backend.ping()
    assert backend.missing_nodes(slurm_testbed.hostnames()) == []


def test_controller_down_is_unavailable_then_works_again(slurm, slurm_testbed):
    running = slurm.submit(job(["gb-r01-t13"], "#!/bin/bash\nsleep 300\n"))
    wait_for(slurm, [running], (BackendJobState.RUNNING,))
    slurm_testbed.control("stop-ctld")
    try:
        assert not slurm.ping()
        calls = {
            "submit": lambda: slurm.submit(job(["gb-r01-t14"])),
            "status": lambda: slurm.status([running]),
            "cancel": lambda: slurm.cancel(running),
        }
        with ThreadPoolExecutor(len(calls)) as pool:  # each waits out slurmrestd's retries (5-10 s)
            futures = {name: pool.submit(call) for name, call in calls.items()}
        for name, future in futures.items():
            error = future.exception()
            assert isinstance(error, BackendUnavailable), (name, error)
    finally:
        slurm_testbed.control("start-ctld")
    assert slurm.ping()
    assert slurm.status([running])[running].state == BackendJobState.RUNNING
    slurm.cancel(running)
    assert wait_for(slurm, [running], FINISHED_BACKEND_STATES)[running].state == BackendJobState.CANCELLED
    after = slurm.submit(job(["gb-r01-t14"]))
    assert wait_for(slurm, [after], FINISHED_BACKEND_STATES)[after].state == BackendJobState.COMPLETED
