"""The agent's pure parts, in this process: XID lines, kernel log times, Retry-After, the backoff schedule,
what counts as an older portal's refusal, and the state file."""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import signal
import sys
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework import serializers

from core.fields import KnownFieldsOnly
from inventory.discovery import health_report
from tests.agent.conftest import AGENT, SAMPLE_PCI


@pytest.fixture(scope="module")
def agent():
    spec = importlib.util.spec_from_file_location("rackplane_agent", AGENT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rackplane_agent"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["rackplane_agent"]


WHEN = datetime(2025, 10, 14, 9, 12, 41, 123456, tzinfo=UTC)
GPUS = {"00000008:01:00.0": "00000008:01:00.0", "00000000:1B:00.0": "00000000:1B:00.0"}


XID_LINES = [
    # (kernel line, XID, PCI bus id sent, pid)
    ("NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, GPU has fallen off the bus.", 79, "1B", 1234),
    ("NVRM: Xid (PCI:0008:01:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception", 13, "08", None),
    ("NVRM: Xid (0000:1b:00): 48, An uncorrectable double bit error (DBE) has been detected", 48, "1B", None),
    (
        "NVRM: Xid (PCI:0008:01:00.0): 154, GPU recovery action changed from 0x0 (None) to 0x2",
        154,
        "08",
        None,
    ),
    ("NVRM: Xid (PCI:0008:01:00): 149.3, pid=7, name=x, NETIR_LINK_EVT Fatal XC0 i0 Link 09", 149, "08", 7),
    ("[ 1234.567890] NVRM: Xid (PCI:0000:1b:00): 31, pid=2376, name=python, MMU Fault", 31, "1B", 2376),
]


@pytest.mark.parametrize(("line", "xid", "gpu", "pid"), XID_LINES)
def test_xid_lines_of_every_driver_form(agent, line, xid, gpu, pid):
    entry = agent.parse_xid(line, WHEN, GPUS)
    assert entry == {
        "time": "2025-10-14T09:12:41.123456+00:00",
        "pci_bus_id": {"1B": "00000000:1B:00.0", "08": "00000008:01:00.0"}[gpu],
        "xid": xid,
        "pid": pid,
        "text": line[line.index("NVRM:") :],
    }
    # The portal's own check of an entry takes it as it is (inventory.discovery.faults, the contract).
    health_report.validate_xid(entry, now=datetime.now(UTC))


def test_an_xid_maps_to_the_pci_bus_id_nvidia_smi_prints(agent):
    lower = {"00000008:01:00.0": "00000008:01:00.0", "00000009:01:00.0": "00000009:01:00.0"}
    assert agent.parse_xid("NVRM: Xid (PCI:0009:01:00): 79, GPU has fallen off", WHEN, lower)[
        "pci_bus_id"
    ] == ("00000009:01:00.0")
    assert SAMPLE_PCI[1] == "00000009:01:00.0"
    printed = {"00000000:1B:00.0": "0000:1b:00.0"}  # whatever form nvidia-smi used is the one sent
    assert agent.parse_xid("NVRM: Xid (PCI:0000:1b:00): 79, x", WHEN, printed)["pci_bus_id"] == "0000:1b:00.0"


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: GPU at PCI:0000:1b:00: GPU-3f6b1c2e-8a41-4f0e-9d55-1b7c0a9e2d41",
        "NVRM: Xid (PCI:0000:1b:00): 0, nothing",
        "NVRM: Xid (PCI:0000:1b:00): 1000, out of range",
        "nvidia-peermem: Xid 79 mentioned in passing",
        "",
    ],
)
def test_other_lines_are_no_xids(agent, line):
    assert agent.parse_xid(line, WHEN, GPUS) is None


def test_an_xid_text_is_cut_to_512_characters_and_loses_nul_characters(agent):
    entry = agent.parse_xid("NVRM: Xid (PCI:0000:1b:00): 13, pid=1, x\x00y " + "z" * 600, WHEN, GPUS)
    assert len(entry["text"]) == 512 and "\x00" not in entry["text"] and "xy" in entry["text"]
    health_report.validate_xid(entry)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2025-10-14T09:12:41.123456+00:00 node kernel: NVRM", "2025-10-14T09:12:41.123456+00:00"),
        ("2025-10-14T11:12:41+0200 node kernel: NVRM", "2025-10-14T09:12:41+00:00"),
        ("2025-10-14T09:12:41.5Z node kernel: NVRM", "2025-10-14T09:12:41.500000+00:00"),
        ("2025-10-14 09:12:41.1234567+00:00 node kernel: NVRM", "2025-10-14T09:12:41.123456+00:00"),
    ],
)
def test_kernel_log_file_times_with_a_zone(agent, line, expected):
    assert agent.line_time(line, WHEN) == datetime.fromisoformat(expected)


def test_syslog_times_have_no_year_the_agent_supplies_it(agent):
    now = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    moment = agent.line_time("Dec 31 23:59:58 node kernel: NVRM: Xid", now)
    assert (moment.year, moment.month, moment.day, moment.second) == (2025, 12, 31, 58)  # last year's
    moment = agent.line_time("Jan  2 02:59:00 node kernel: NVRM: Xid", now)
    assert (moment.year, moment.month, moment.day) == (2026, 1, 2)


def test_lines_without_a_time_are_stamped_when_read(agent):
    assert agent.line_time("NVRM: Xid (PCI:0000:1b:00): 79", WHEN) == WHEN
    since_boot = agent.line_time("[    5.000000] NVRM: Xid", WHEN)
    assert abs(since_boot - datetime.now(UTC)) < timedelta(days=365)  # boot time + 5 s, whatever it was


def test_retry_after_in_seconds_or_as_a_date(agent):
    assert agent.retry_after("59") == 59
    later = (datetime.now(UTC) + timedelta(seconds=120)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert 100 < agent.retry_after(later) <= 120
    assert agent.retry_after("soon") is None and agent.retry_after(None) is None


def args(**overrides) -> argparse.Namespace:
    values = {"interval": 60, "max_backoff": 600}
    values.update(overrides)
    return argparse.Namespace(**values)


def schedule(agent, answers, **overrides) -> list[float]:
    subject = agent.Agent.__new__(agent.Agent)  # only the scheduling: no state file, no kernel log
    subject.args, subject.failures = args(**overrides), 0
    return [subject.next_delay(answer) for answer in answers]


def test_failures_back_off_exponentially_with_jitter_capped(agent):
    random.seed(3)
    down = agent.Answer(0, message="Connection refused")
    for _ in range(50):
        delays = schedule(agent, [down] * 8)
        ceilings = [120, 240, 480, 600, 600, 600, 600, 600]  # interval 60 s doubled, capped at 600 s
        assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    ok = agent.Answer(200, {})
    after = schedule(agent, [down, down, ok, down])
    assert 54 <= after[2] <= 66 and 60 <= after[3] <= 120  # a success starts the count again


def test_retry_after_is_honoured_beyond_the_cap_up_to_an_hour(agent):
    busy = agent.Answer(429, message="Request was throttled.", retry_after=900)
    assert schedule(agent, [busy])[0] == 900
    silly = agent.Answer(503, retry_after=86400)
    assert schedule(agent, [silly])[0] == 3600
    assert 60 <= schedule(agent, [agent.Answer(503, retry_after=1)])[0] <= 120  # never sooner than backoff


def test_a_refusal_waits_the_longest_and_a_bad_report_the_interval(agent):
    assert all(540 <= d <= 600 for d in schedule(agent, [agent.Answer(403), agent.Answer(401)]))
    assert 54 <= schedule(agent, [agent.Answer(400)])[0] <= 66


class OlderReportSerializer(KnownFieldsOnly, serializers.Serializer):
    """The discovery report as a portal before the health keys took it (the real mixin refusing extras)."""

    host = serializers.CharField()
    nvidia_smi = serializers.CharField(required=False)
    dry_run = serializers.BooleanField(required=False)


def refusal(agent, body: dict):
    serializer = OlderReportSerializer(data=body)
    assert not serializer.is_valid()
    return agent.Answer(400, json.loads(json.dumps(serializer.errors)))


def test_an_older_portals_refusal_of_the_new_keys_is_told_from_a_bad_report(agent):
    body = {"host": "gb-r01-t01", "nvidia_smi": "<xml/>", "xids": [], "agent": {}}
    answer = refusal(agent, body)
    assert set(answer.data) == {"xids", "agent"}
    assert agent.refuses_only_newer_keys(answer, body)

    bad = {"host": "gb-r01-t01", "nvidia_smi": ["not", "text"], "xids": []}
    assert not agent.refuses_only_newer_keys(refusal(agent, bad), bad)
    # The portal of today refusing an entry (not the key) is a bad report, not an older portal.
    entry = agent.Answer(400, {"xids": ["xids[0]: xid 0 is out of range (1-999)"]})
    assert not agent.refuses_only_newer_keys(entry, body)


def test_the_state_file_is_replaced_whole(agent, tmp_path):
    path = tmp_path / "state" / "agent.json"
    agent.save_state(str(path), {"version": 1, "pending_xids": [{"xid": 79}]})
    agent.save_state(str(path), {"version": 1, "pending_xids": []})
    assert json.loads(path.read_text()) == {"version": 1, "pending_xids": []}
    assert [p.name for p in path.parent.iterdir()] == ["agent.json"]  # no temporary file left behind


def test_an_unreadable_state_file_is_moved_aside(agent, tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"version": 1, "pending_')
    assert agent.load_state(str(path), move_aside=False) == {"version": 1} and path.exists()
    assert agent.load_state(str(path)) == {"version": 1}
    assert not path.exists() and (tmp_path / "state.json.corrupt").read_text() == '{"version": 1, "pending_'


def test_check_output_is_cut_on_a_character_boundary(agent):
    text = "é" * 40000  # 80,000 bytes
    tail = agent.tail_utf8(text, 64 * 1024)
    assert len(tail.encode()) <= 64 * 1024 and set(tail) == {"é"}


def test_a_report_carries_at_most_256_xids_and_2_mib_of_check_results(agent):
    subject = agent.Agent.__new__(agent.Agent)
    subject.args = argparse.Namespace(host="gb-r01-t01", interval=60)
    # 64 KiB of control characters: 6 bytes each in JSON (\u0001), the largest a check result can get.
    big = {
        "name": "dcgmi diag -r 3",
        "exit_status": 0,
        "output": "\x01" * 65536,
        "started": "x",
        "seconds": 1.0,
    }
    subject.state = {
        "pending_xids": [{"time": str(n), "xid": 13, "text": "t"} for n in range(300)],
        "pending_checks": [dict(big, started=str(n)) for n in range(16)],
    }
    body = subject.report("<nvidia_smi_log/>")
    assert [x["time"] for x in body["xids"]] == [str(n) for n in range(256)]  # the oldest first
    sent = body["checks"]
    assert [c["started"] for c in sent] == ["0", "1", "2", "3", "4"]  # 5 x 384 KiB: a 6th is over 2 MiB
    assert len(json.dumps(body, ensure_ascii=False).encode()) < 4 * 1024 * 1024  # the portal's body limit


def test_a_signal_during_a_log_line_writes_nothing_from_the_handler(agent, monkeypatch):
    """SIGTERM arriving while the agent is inside sys.stderr.write: the handler writing to the same buffered
    stream raised "reentrant call" and the agent exited 1 (seen in make test). The handler now only notes
    the signal; the main flow logs it at its next step."""
    runner = agent.Agent.__new__(agent.Agent)  # the handler's state only: no options, files or reader
    runner.stopping, runner._sleeping, runner._signal_name = False, False, None
    lines: list[str] = []

    class Stderr:
        writing = False

        def write(self, text):
            assert not self.writing, "the signal handler wrote while a line was being written"
            self.writing = True
            try:
                if not lines:
                    runner.on_signal(signal.SIGTERM, None)  # the signal lands mid-write
                lines.append(text)
            finally:
                self.writing = False

        def flush(self):
            pass

    monkeypatch.setattr(agent.sys, "stderr", Stderr())
    agent.warn("the portal cannot be reached")
    assert runner.stopping and len(lines) == 1
    runner.told_signal()
    runner.told_signal()  # once
    assert len(lines) == 2 and "SIGTERM received: stopping after the current step" in lines[1]
