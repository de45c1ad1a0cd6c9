"""The agent reading the real kernel log: /dev/kmsg by sequence number, and the journal through journalctl
after a cursor (a real systemd-journald, started for the test in a private mount namespace so the machine's
own /run and /var/log are left alone).

Test lines are written into the kernel's ring buffer through /dev/kmsg (root only), with XID 13 (an
application fault, which nothing acts on) and a marker unique to the test. A GPU node's real kernel log is
never written to: on a machine with the NVIDIA driver loaded these tests skip, saying why.

Each run is a new agent process posting to a closed port (the portal is not what is tested here): what it
read is in its state file, as pending XIDs, so "read once, in order, nothing lost across restarts" shows as
the state after each run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.agent.conftest import fake_nvidia_smi, read_state, run_agent

pytestmark = pytest.mark.slow(
    reason="agent processes and a journald: `make test` runs them, test-fast does not"
)

KMSG = Path("/dev/kmsg")
JOURNALD = next(
    (p for p in ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald") if os.path.exists(p)),
    None,
)


@pytest.fixture
def kernel():
    """Write test XID lines into the real kernel log; each test's lines carry its own marker."""
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("the NVIDIA driver is loaded: test XID lines would go into a GPU node's real kernel log")
    if not os.access(KMSG, os.W_OK):
        pytest.fail("writing test lines into the kernel log (/dev/kmsg) needs root: run the tests as root")
    marker = uuid.uuid4().hex[:12]

    def write(note: str) -> str:
        text = f"NVRM: Xid (PCI:0008:01:00): 13, pid=1, name=rackplane-agent-test, test {marker} {note}"
        with KMSG.open("w") as handle:
            handle.write(f"<4>{text}\n")
        return text

    write.marker = marker
    return write


def pending(state_file: Path, marker: str) -> list[dict]:
    return [x for x in read_state(state_file)["pending_xids"] if marker in x["text"]]


def agent_args(tmp_path: Path, closed_port: str, *source: str) -> list[str]:
    token = tmp_path / "token"
    token.write_text("rpa_not-used-the-portal-is-down\n")
    token.chmod(0o600)
    nvidia_smi = fake_nvidia_smi(tmp_path, "<?xml version='1.0'?><nvidia_smi_log></nvidia_smi_log>")
    return [
        "--portal", closed_port,
        "--host", "gb-r01-t01",
        "--token-file", str(token),
        "--nvidia-smi", str(nvidia_smi),
        "--state-file", str(tmp_path / "state.json"),
        "--once",
        *source,
    ]  # fmt: skip


def test_dev_kmsg_lines_are_read_once_in_order_across_restarts(kernel, tmp_path, closed_port):
    args = agent_args(tmp_path, closed_port, "--kernel-log-source", "kmsg")
    first = kernel("first")
    before = datetime.now(UTC)

    done = run_agent(*args)
    assert done.returncode == 1 and "kernel log: /dev/kmsg" in done.stderr, done.stderr
    [xid] = pending(tmp_path / "state.json", kernel.marker)
    assert xid["text"] == first and xid["xid"] == 13 and xid["pid"] == 1
    assert xid["pci_bus_id"] == "00000008:01:00.0"
    # The record's time (microseconds since boot) as a wall-clock time: within a minute of its writing.
    assert abs((datetime.fromisoformat(xid["time"]) - before).total_seconds()) < 60, xid["time"]
    state = read_state(tmp_path / "state.json")["kernel_log"]
    assert (
        state["source"] == "kmsg"
        and state["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    )

    second, third = kernel("second"), kernel("third")
    done = run_agent(*args)
    assert done.returncode == 1, done.stderr
    assert [x["text"] for x in pending(tmp_path / "state.json", kernel.marker)] == [first, second, third]
    assert read_state(tmp_path / "state.json")["kernel_log"]["seq"] > state["seq"]


@pytest.fixture
def journald(tmp_path):
    """A real systemd-journald writing into tmp_path/journal (reading /dev/kmsg as the machine's own would).

    It runs in a new mount namespace where /run and /var/log are empty tmpfs mounts and the journal folder is
    tmp_path/journal bound in: nothing outside the namespace sees its sockets or files but that folder.
    """
    if JOURNALD is None or shutil.which("unshare") is None or shutil.which("journalctl") is None:
        pytest.fail("these tests need systemd's journald and journalctl, and util-linux's unshare")
    if os.geteuid() != 0:
        pytest.fail("starting a journald for the test (a mount namespace) needs root")
    journal = tmp_path / "journal"
    journal.mkdir()
    script = (
        "set -e\n"
        "mount -t tmpfs tmpfs /run\n"
        "mkdir -p /run/systemd/journal\n"
        "touch /run/systemd/journal/flushed\n"  # write straight to the persistent journal
        "mount -t tmpfs tmpfs /var/log\n"
        "mkdir /var/log/journal\n"
        f"mount --bind '{journal}' /var/log/journal\n"
        f"exec {JOURNALD}\n"
    )
    daemon = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while not list(journal.glob("*/system.journal")):
            assert daemon.poll() is None, daemon.stdout.read().decode()
            assert time.monotonic() < deadline, "journald did not start its journal"
            time.sleep(0.1)
        yield journal
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def wait_in_journal(journal: Path, text: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        shown = subprocess.run(
            ["journalctl", "-D", str(journal), "-k", "-o", "cat", "--no-pager"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if text.split("NVRM: ", 1)[1] in shown:
            return
        assert time.monotonic() < deadline, f"journald did not record {text!r}"
        time.sleep(0.1)


def test_journal_lines_are_read_once_in_order_after_the_saved_cursor(kernel, journald, tmp_path, closed_port):
    args = agent_args(tmp_path, closed_port, "--journal-directory", str(journald))  # auto: the journal
    first = kernel("first")
    wait_in_journal(journald, first)

    done = run_agent(*args)
    assert done.returncode == 1, done.stderr
    assert f"kernel log: the journal (journalctl -k -D {journald})" in done.stderr, done.stderr
    [xid] = pending(tmp_path / "state.json", kernel.marker)
    assert xid["text"] == first and xid["pci_bus_id"] == "00000008:01:00.0"
    cursor = read_state(tmp_path / "state.json")["kernel_log"]["cursor"]
    assert cursor.startswith("s=")

    second = kernel("second")
    wait_in_journal(journald, second)
    done = run_agent(*args)
    assert done.returncode == 1, done.stderr
    assert [x["text"] for x in pending(tmp_path / "state.json", kernel.marker)] == [first, second]
    assert read_state(tmp_path / "state.json")["kernel_log"]["cursor"] != cursor

    done = run_agent(*args)  # nothing new: nothing added
    assert [x["text"] for x in pending(tmp_path / "state.json", kernel.marker)] == [first, second]


def test_a_kernel_log_file_is_followed_through_rotation_and_truncation(tmp_path, closed_port):
    """kern.log as logrotate treats it: renamed to kern.log.1 and a new kern.log started (the lines written to
    the old file after the last read are read from kern.log.1), or truncated in place (copytruncate)."""
    log = tmp_path / "kern.log"
    args = agent_args(tmp_path, closed_port, "--kernel-log", str(log))

    def line(note: str) -> str:
        return (
            f"2025-10-14T09:12:41.000000+00:00 node kernel: NVRM: Xid (PCI:0008:01:00): 13, pid=1, {note}\n"
        )

    def sent() -> list[str]:
        return [x["text"].rsplit(", ", 1)[1] for x in read_state(tmp_path / "state.json")["pending_xids"]]

    log.write_text(line("A"))
    assert run_agent(*args).returncode == 1 and sent() == ["A"]

    with log.open("a") as handle:
        handle.write(line("B"))
    log.rename(tmp_path / "kern.log.1")
    log.write_text(line("C"))
    done = run_agent(*args)
    assert "was rotated: reading the rest of" in done.stderr, done.stderr
    assert sent() == ["A", "B", "C"]

    log.write_text(line("D"))  # truncated and written again, as long as what was read before
    done = run_agent(*args)
    assert "was truncated" in done.stderr and sent() == ["A", "B", "C", "D"], done.stderr

    (tmp_path / "kern.log.1").unlink()
    log.rename(tmp_path / "kern.log.1.gz")  # compressed at once: the rest cannot be read, the new file is
    log.write_text(line("E"))
    done = run_agent(*args)
    assert "was replaced" in done.stderr and sent() == ["A", "B", "C", "D", "E"], done.stderr
