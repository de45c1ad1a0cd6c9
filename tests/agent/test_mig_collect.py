"""The agent's MIG collection, alone (no portal): a fake nvidia-smi answers `-q -x` with the repository's
GB200 listing where GPU 0 is in MIG mode, and `mig -lgip`, `mig -lgipp`, `mig -lgi` and `-L` with what a
GB200 tray prints. The agent runs as nodes run it (`python3 -I -S`, --dry-run: the report on stdout) or, for
the digest, the warnings and what is posted, in this process with `post` standing in for the portal."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.conftest import AGENT, HOST, SAMPLE, SAMPLE_UUIDS, agent_env, command

LGIP = """\
+-------------------------------------------------------------------------------+
| GPU instance profiles:                                                        |
| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                Free/Total   GiB              CE    JPEG  OFA  |
|===============================================================================|
|   0  MIG 1g.23gb         19     6/7        22.00      No     18     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.23gb+me      20     1/1        22.00      No     18     1     0   |
|                                                               1     1     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.47gb         15     3/4        46.50      No     18     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.47gb         14     2/3        46.50      No     34     2     0   |
|                                                               2     2     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 3g.93gb          9     1/2        92.75      No     68     3     0   |
|                                                               3     3     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 4g.93gb          5     0/1        92.75      No     68     4     0   |
|                                                               4     4     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 7g.186gb         0     0/1        184.00     No    148     7     0   |
|                                                               8     7     1   |
+-------------------------------------------------------------------------------+
"""
LGIPP = """\
GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
"""
LGI = """\
+---------------------------------------------------------+
| GPU instances:                                          |
| GPU   Name               Profile  Instance   Placement  |
|                            ID       ID       Start:Size |
|=========================================================|
|   0  MIG 1g.23gb       19        1          0:1     |
+---------------------------------------------------------+
"""
MIG_UUID = "MIG-5c1f0e4a-93b2-5d7e-8a61-2f4b9c0d7e13"
LIST = "".join(
    f"GPU {n}: NVIDIA GB200 (UUID: {uuid})\n"
    + (f"  MIG 1g.23gb     Device  0: (UUID: {MIG_UUID})\n" if n == 0 else "")
    for n, uuid in enumerate(SAMPLE_UUIDS)
)
NO_INSTANCES = "No GPU instances found: Not Found\n"
MIG_DEVICE = """<mig_devices>
			<mig_device>
				<index>0</index>
				<gpu_instance_id>1</gpu_instance_id>
				<compute_instance_id>0</compute_instance_id>
				<device_attributes>
					<shared>
						<multiprocessor_count>18</multiprocessor_count>
						<copy_engine_count>1</copy_engine_count>
						<encoder_count>0</encoder_count>
						<decoder_count>1</decoder_count>
						<ofa_count>0</ofa_count>
						<jpg_count>1</jpg_count>
					</shared>
				</device_attributes>
				<fb_memory_usage>
					<total>22784 MiB</total>
					<reserved>0 MiB</reserved>
					<used>13 MiB</used>
					<free>22771 MiB</free>
				</fb_memory_usage>
			</mig_device>
		</mig_devices>"""
PLAIN_XML = SAMPLE.read_text()  # no GPU in MIG mode
assert PLAIN_XML.count("<current_mig>Disabled</current_mig>") == len(SAMPLE_UUIDS)
MIG_XML = (
    PLAIN_XML.replace("<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>", 1)
    .replace("<pending_mig>Disabled</pending_mig>", "<pending_mig>Enabled</pending_mig>", 1)
    .replace("<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>", MIG_DEVICE, 1)
)
assert MIG_DEVICE in MIG_XML
OUTPUTS = {"lgip": LGIP, "lgipp": LGIPP, "lgi": LGI, "list": LIST}
ARGUMENTS = {"lgip": "mig -lgip", "lgipp": "mig -lgipp", "lgi": "mig -lgi", "list": "-L"}


@pytest.fixture(scope="module")
def agent():
    spec = importlib.util.spec_from_file_location("rackplane_agent_mig", AGENT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rackplane_agent_mig"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["rackplane_agent_mig"]


class FakeSmi:
    """An executable `nvidia-smi` answering each argument set with what `answer` set for it (stdout, stderr,
    exit status, or a hang), logging every invocation; anything else fails as the real one does."""

    def __init__(self, folder: Path):
        self.folder = folder / "smi"
        self.folder.mkdir()
        self.path = self.folder / "nvidia-smi"
        self.path.write_text(
            "#!/bin/sh\n"
            f"dir='{self.folder}'\n"
            'printf "%s\\n" "$*" >> "$dir/calls"\n'
            "key=$(printf '%s' \"$*\" | tr ' ' '_')\n"
            '[ -e "$dir/$key.out" ] || { echo "fake nvidia-smi: no answer for $*" >&2; exit 2; }\n'
            # A child holding stdout, in the same process group: only killing the group ends the read.
            'if [ -e "$dir/$key.hang" ]; then sleep 60 & echo $! > "$dir/$key.pid"; wait; fi\n'
            'cat "$dir/$key.out"\n'
            '[ -e "$dir/$key.err" ] && cat "$dir/$key.err" >&2\n'
            'exit "$(cat "$dir/$key.status")"\n'
        )
        self.path.chmod(0o755)

    def _file(self, arguments: str, suffix: str) -> Path:
        return self.folder / f"{arguments.replace(' ', '_')}.{suffix}"

    def answer(
        self, arguments: str, stdout: str, *, status: int = 0, stderr: str = "", hang: bool = False
    ) -> None:
        self._file(arguments, "out").write_text(stdout)
        self._file(arguments, "status").write_text(str(status))
        self._file(arguments, "err").write_text(stderr)
        if hang:
            self._file(arguments, "hang").write_text("")
        else:
            self._file(arguments, "hang").unlink(missing_ok=True)

    def mig_node(self, **outputs: str) -> None:
        self.answer("-q -x", MIG_XML)
        for key, text in {**OUTPUTS, **outputs}.items():
            self.answer(ARGUMENTS[key], text)

    def calls(self) -> list[str]:
        path = self.folder / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def hung_pid(self, arguments: str) -> int:
        return int(self._file(arguments, "pid").read_text())


@pytest.fixture
def smi(tmp_path) -> FakeSmi:
    return FakeSmi(tmp_path)


def dry_run(smi: FakeSmi, tmp_path: Path, *extra: str) -> tuple[dict, str, float]:
    """One report as the node would send it: (the body, the agent's stderr, seconds it took)."""
    started = time.monotonic()
    done = subprocess.run(
        command(
            "--dry-run",
            "--host", HOST,
            "--nvidia-smi", str(smi.path),
            "--kernel-log-source", "none",
            "--state-file", str(tmp_path / "state.json"),
            *extra,
        ),
        capture_output=True, text=True, timeout=60, env=agent_env(),
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr, took


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "rackplane-agent WARNING:" in line]


# --- the agent process ------------------------------------------------------------------------------------


def test_a_gpu_in_mig_mode_sends_the_four_outputs(smi, tmp_path):
    smi.mig_node()
    body, stderr, _ = dry_run(smi, tmp_path)
    assert body["mig"] == OUTPUTS  # each as printed, whitespace and all
    assert body["nvidia_smi"] == MIG_XML
    assert smi.calls() == ["-q -x", "mig -lgip", "mig -lgipp", "mig -lgi", "-L"]
    assert not warnings(stderr), stderr


def test_no_gpu_in_mig_mode_runs_nothing_more_and_sends_no_mig(smi, tmp_path):
    smi.mig_node()
    smi.answer("-q -x", PLAIN_XML)
    body, stderr, _ = dry_run(smi, tmp_path)
    assert "mig" not in body and body["nvidia_smi"] == PLAIN_XML
    assert smi.calls() == ["-q -x"]
    assert not warnings(stderr), stderr


def test_a_pending_mig_mode_is_collected_too(smi, tmp_path):
    """`nvidia-smi -mig 1` until the GPU is reset: current Disabled, pending Enabled."""
    smi.mig_node(lgi=NO_INSTANCES)
    smi.answer(
        "-q -x",
        PLAIN_XML.replace("<pending_mig>Disabled</pending_mig>", "<pending_mig>ENABLED</pending_mig>", 1),
    )
    body, _, _ = dry_run(smi, tmp_path)
    assert set(body["mig"]) == {"lgip", "lgipp", "lgi", "list"}


def test_no_gpu_instances_is_a_state_and_is_sent(smi, tmp_path):
    smi.mig_node()
    smi.answer("mig -lgi", NO_INSTANCES, status=6)  # what nvidia-smi exits with: NVML_ERROR_NOT_FOUND
    body, stderr, _ = dry_run(smi, tmp_path)
    assert body["mig"] == {**OUTPUTS, "lgi": NO_INSTANCES}
    assert not warnings(stderr), stderr


def test_a_failing_command_is_left_out_with_a_warning_naming_what_the_portal_lacks(smi, tmp_path):
    smi.mig_node()
    smi.answer("mig -lgipp", "", status=2, stderr="Invalid combination of input arguments.\n")
    body, stderr, _ = dry_run(smi, tmp_path)
    assert body["mig"] == {"lgip": LGIP, "lgi": LGI, "list": LIST}
    (warning,) = warnings(stderr)
    assert "mig -lgipp failed with exit status 2 (Invalid combination of input arguments.)" in warning
    assert "the portal gets no GPU instance placements" in warning


def process_gone(pid: int) -> bool:
    """Dead: gone, or a zombie nobody reaped yet (a container's init may not)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_hanging_command_is_killed_at_the_timeout_and_left_out(smi, tmp_path):
    smi.mig_node()
    smi.answer("mig -lgi", LGI, hang=True)
    body, stderr, took = dry_run(smi, tmp_path, "--nvidia-smi-timeout", "1")
    # lgi hangs for a second and is killed; -L, after it, is not run (a driver that hangs one would hang it).
    assert body["mig"] == {"lgip": LGIP, "lgipp": LGIPP}
    assert "nvidia_smi" in body
    assert took < 15, took
    assert smi.calls() == ["-q -x", "mig -lgip", "mig -lgipp", "mig -lgi"]
    (warning,) = warnings(stderr)
    assert "mig -lgi did not answer within 1 s: the portal gets no GPU instances" in warning
    assert "MIG device UUIDs" in warning
    assert process_gone(smi.hung_pid("mig -lgi"))  # the whole process group was killed, its child too


def test_a_listing_that_says_nothing_of_mig_runs_nothing_more(smi, tmp_path):
    """An older driver or a GPU without MIG: no <mig_mode> (or N/A)."""
    smi.mig_node()
    smi.answer(
        "-q -x", PLAIN_XML.replace("<current_mig>Disabled</current_mig>", "<current_mig>N/A</current_mig>")
    )
    body, _, _ = dry_run(smi, tmp_path)
    assert "mig" not in body and smi.calls() == ["-q -x"]


# --- in this process ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "pending", "expected"),
    [
        ("Enabled", "Enabled", True),
        ("Disabled", "Enabled", True),
        ("enabled", "Disabled", True),
        ("Disabled", "Disabled", False),
        ("N/A", "N/A", False),
    ],
)
def test_in_mig_mode(agent, current, pending, expected):
    xml = PLAIN_XML.replace("<current_mig>Disabled</current_mig>", f"<current_mig>{current}</current_mig>", 1)
    xml = xml.replace("<pending_mig>Disabled</pending_mig>", f"<pending_mig>{pending}</pending_mig>", 1)
    assert agent.in_mig_mode(xml) is expected


def test_nothing_readable_is_no_mig_mode(agent):
    assert not agent.in_mig_mode(None)
    assert not agent.in_mig_mode("<nvidia_smi_log><gpu>")
    assert not agent.in_mig_mode("<nvidia_smi_log/>")


def test_a_failure_is_told_once_and_a_long_output_is_cut(agent, smi, capsys):
    smi.mig_node(lgip="é" * 150_000)  # 300,000 bytes of UTF-8
    smi.answer("mig -lgipp", "Failed to get placements: Insufficient Permissions\n", status=4)
    nvidia_smi = agent.NvidiaSmi(str(smi.path), 10)
    first = nvidia_smi.mig(MIG_XML)
    second = nvidia_smi.mig(MIG_XML)
    assert first == second
    assert set(first) == {"lgip", "lgi", "list"}
    assert len(first["lgip"].encode()) <= 256 * 1024 and set(first["lgip"]) == {"é"}
    said = warnings(capsys.readouterr().err)
    assert len(said) == 2, said  # the failure and the cut, once each over two cycles
    assert "mig -lgip printed more than 256 KiB: the portal gets only the first 256 KiB" in said[0]
    assert "Insufficient Permissions" in said[1] and "the portal gets no GPU instance placements" in said[1]


def test_a_vanished_nvidia_smi_gives_no_mig_and_does_not_crash(agent, tmp_path, capsys):
    assert agent.NvidiaSmi(str(tmp_path / "gone"), 5).mig(MIG_XML) == {}
    (warning,) = warnings(capsys.readouterr().err)
    assert "the portal gets no GPU instance profiles" in warning


def test_the_digest_follows_the_mig_state(agent):
    digest = agent.listing_digest(MIG_XML, "0.1.0", 60, OUTPUTS)
    # Nothing the portal reads changed: a temperature, a MIG device's memory in use (it moves while jobs
    # run), and blanks at the ends of lines.
    assert "<gpu_temp>" in MIG_XML and "<used>13 MiB</used>" in MIG_XML
    same_xml = MIG_XML.replace("<gpu_temp>", "<gpu_temp>1", 1).replace(
        "<used>13 MiB</used>", "<used>9000 MiB</used>"
    )
    padded = {key: text.replace("\n", "   \n") for key, text in OUTPUTS.items()}
    assert agent.listing_digest(same_xml, "0.1.0", 60, dict(reversed(list(padded.items())))) == digest
    # Only the GPU instances changed.
    other = {**OUTPUTS, "lgi": LGI.replace("0:1     |", "1:1     |")}
    assert agent.listing_digest(MIG_XML, "0.1.0", 60, other) != digest
    assert agent.listing_digest(MIG_XML, "0.1.0", 60, {**OUTPUTS, "lgi": NO_INSTANCES}) != digest
    # A command that failed this time.
    assert (
        agent.listing_digest(MIG_XML, "0.1.0", 60, {k: v for k, v in OUTPUTS.items() if k != "list"})
        != digest
    )
    # Only the MIG mode changed (pending after `nvidia-smi -mig 0`), or a MIG device.
    disabling = MIG_XML.replace(
        "<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>", 1
    )
    assert agent.listing_digest(disabling, "0.1.0", 60, OUTPUTS) != digest
    grown = MIG_XML.replace("<total>22784 MiB</total>", "<total>47104 MiB</total>", 1)
    assert agent.listing_digest(grown, "0.1.0", 60, OUTPUTS) != digest


def test_the_digest_without_mig_is_the_old_call(agent):
    assert agent.listing_digest(PLAIN_XML, "0.1.0", 60) == agent.listing_digest(PLAIN_XML, "0.1.0", 60, None)
    assert agent.listing_digest(PLAIN_XML, "0.1.0", 60) == agent.listing_digest(PLAIN_XML, "0.1.0", 60, {})
    enabled = PLAIN_XML.replace(
        "<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>", 1
    )
    assert agent.listing_digest(enabled, "0.1.0", 60) != agent.listing_digest(PLAIN_XML, "0.1.0", 60)


class Portal:
    """`post` in the agent: records each body and answers like the portal (a full report gets its hash)."""

    def __init__(self, agent, older: bool = False):
        self.agent, self.older, self.bodies = agent, older, []

    def __call__(self, url, token, body, timeout, context):
        self.bodies.append(body)
        if self.older:  # knows host and nvidia_smi only (core.fields.KnownFieldsOnly's answer)
            unknown = [key for key in body if key not in ("host", "nvidia_smi")]
            if unknown:
                message = "Unknown field: this request takes dry_run, host, nvidia_smi."
                return self.agent.Answer(400, {key: [message] for key in unknown})
            return self.agent.Answer(200, {"gpus": [{}] * 4})
        if "report_sha256" in body:
            return self.agent.Answer(200, {"status": "unchanged"})
        sha = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return self.agent.Answer(200, {"gpus": [{}] * 4, "report_sha256": sha})


def node_agent(agent, smi: FakeSmi, tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("rpa_test\n")
    token.chmod(0o600)
    args = agent.parse_args(
        [
            "--portal", "http://portal.invalid",
            "--host", HOST,
            "--token-file", str(token),
            "--nvidia-smi", str(smi.path),
            "--kernel-log-source", "none",
            "--state-file", str(tmp_path / "state.json"),
            "--once",
        ],
        environ={},
    )  # fmt: skip
    return agent.Agent(args)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_changed_mig_state_forces_the_full_report(agent, smi, tmp_path, monkeypatch):
    smi.mig_node()
    portal = Portal(agent)
    monkeypatch.setattr(agent, "post", portal)
    node = node_agent(agent, smi, tmp_path)
    node.cycle()
    assert portal.bodies[-1]["mig"] == OUTPUTS
    node.cycle()  # nothing changed: the hash alone
    assert set(portal.bodies[-1]) == {"host", "report_sha256", "agent"}
    smi.answer("mig -lgi", NO_INSTANCES, status=6)  # the GPU instance was destroyed
    node.cycle()
    assert portal.bodies[-1]["mig"]["lgi"] == NO_INSTANCES
    node.cycle()
    assert "report_sha256" in portal.bodies[-1]
    smi.answer("-q -x", PLAIN_XML)  # MIG mode off: no more MIG commands, and the full report
    calls = len(smi.calls())
    node.cycle()
    assert "mig" not in portal.bodies[-1] and "nvidia_smi" in portal.bodies[-1]
    assert smi.calls()[calls:] == ["-q -x"]


def test_an_older_portal_gets_the_report_without_mig(agent, smi, tmp_path, monkeypatch):
    smi.mig_node()
    portal = Portal(agent, older=True)
    monkeypatch.setattr(agent, "post", portal)
    answer = node_agent(agent, smi, tmp_path).cycle()
    assert answer.ok
    first, second = portal.bodies
    assert first["mig"] == OUTPUTS
    assert second == {"host": HOST, "nvidia_smi": MIG_XML}
    refusal = agent.Answer(400, {"mig": ["Unknown field: this request takes host, nvidia_smi."]})
    assert agent.refuses_only_newer_keys(refusal, first)
    assert not agent.refuses_only_newer_keys(agent.Answer(400, {"mig": ["lgi: not a string"]}), first)
