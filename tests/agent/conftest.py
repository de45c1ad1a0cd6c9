"""The node agent (agent/rackplane_agent.py) as nodes run it: a separate python3 process with no site
packages (`-I -S`: the standard library only, nothing of this repository's virtualenv), reporting to the real
portal served by pytest-django's live server with a real agent token.

What stands in for a GPU node: a fake `nvidia-smi` (a script printing real `nvidia-smi -q -x` XML, the
sample in tests/inventory/fixtures, with the tray's own GPU UUIDs, cluster UUID and clique put in) and a
kernel log file. /dev/kmsg and journald are the real ones (tests/agent/test_kernel_logs.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "agent" / "rackplane_agent.py"
SAMPLES = REPO / "tests" / "inventory" / "fixtures" / "nvidia_smi"
SAMPLE = SAMPLES / "gb200_default_partition.xml"
# The sample's own identifiers, replaced by the tray's.
SAMPLE_UUIDS = re.findall(r"<uuid>(GPU-[^<]+)</uuid>", SAMPLE.read_text())
SAMPLE_CLUSTER = "3f7c2a91-5b1e-4d08-9c6a-2e4f8b0d1a73"
SAMPLE_PCI = re.findall(r"<pci_bus_id>([^<]+)</pci_bus_id>", SAMPLE.read_text())
# The system's python3 when there is one (what a node runs), else this one; isolated either way.
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HOST = "gb-r01-t03"


def agent_env() -> dict[str, str]:
    """The environment without proxies (the portal is on loopback), Python's variables or agent settings."""
    return {
        k: v
        for k, v in os.environ.items()
        if "proxy" not in k.lower() and not k.startswith(("PYTHON", "RACKPLANE_AGENT_"))
    }


def command(*args: str) -> list[str]:
    return [PYTHON, "-I", "-S", str(AGENT), *args]


def run_agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout, env=agent_env())


def tray_xml(tray, *, recovery_action: str = "None", health: str = "Healthy") -> str:
    """The sample `nvidia-smi -q -x` output with `tray`'s GPUs (by index), its rack's cluster UUID and its
    partition's clique ID."""
    text = SAMPLE.read_text()
    for sample_uuid, gpu in zip(SAMPLE_UUIDS, tray.gpus.order_by("index"), strict=True):
        text = text.replace(sample_uuid, gpu.uuid)
    text = text.replace(SAMPLE_CLUSTER, str(tray.rack.cluster_uuid))
    text = text.replace("<cliqueId>32766</cliqueId>", f"<cliqueId>{tray.partition.clique_id}</cliqueId>")
    text = text.replace(
        "<gpu_recovery_action>None</gpu_recovery_action>",
        f"<gpu_recovery_action>{recovery_action}</gpu_recovery_action>",
        1,
    )
    return text.replace("<summary>Healthy</summary>", f"<summary>{health}</summary>", 1)


def fake_nvidia_smi(folder: Path, xml: str, name: str = "nvidia-smi") -> Path:
    """An executable that answers `-q -x` with `xml`, as the real one does, and fails on anything else."""
    output = folder / f"{name}.xml"
    output.write_text(xml)
    script = folder / name
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2" = "-q -x" ] || { echo "fake nvidia-smi: only -q -x" >&2; exit 2; }\n'
        f"cat '{output}'\n"
    )
    script.chmod(0o755)
    return script


def xid_line(xid: int, pci: str = "0008:01:00", note: str = "", pid: int | None = 4242) -> str:
    """A kernel log line as rsyslog writes kern.log (ISO time, host, `kernel:`, the driver's message)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())
    who = f" pid={pid}, name=python," if pid is not None else " pid='<unknown>', name=<unknown>,"
    return f"{stamp} {HOST} kernel: NVRM: Xid (PCI:{pci}): {xid},{who} {note or 'test line'}\n"


def issue_token(folder: Path, *, hostname: str = "", rack=None, mode: int = 0o600) -> Path:
    """A real agent token (inventory.agent_tokens.issue, as the portal's page and the command issue it), in a
    file."""
    from inventory import agent_tokens

    _, secret = agent_tokens.issue(hostname=hostname, rack=rack, description="agent tests")
    path = folder / f"token-{hostname or rack.name}"
    path.write_text(secret + "\n")
    path.chmod(mode)
    return path


def read_state(path: Path) -> dict:
    return json.loads(path.read_text())


def lines(stderr: str, needle: str) -> list[str]:
    return [line for line in stderr.splitlines() if needle in line]


class Running:
    """The agent running in its loop: stderr collected line by line, with the time each line arrived."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen(
            command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=agent_env()
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def matching(self, needle: str) -> list[tuple[float, str]]:
        return [(at, line) for at, line in list(self.lines) if needle in line]

    def wait_for(self, needle: str, count: int = 1, timeout: float = 30) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        while len(self.matching(needle)) < count:
            assert self.process.poll() is None or len(self.matching(needle)) >= count, self.text()
            assert time.monotonic() < deadline, (
                f"no {count} lines with {needle!r} in {timeout} s:\n{self.text()}"
            )
            time.sleep(0.05)
        return self.matching(needle)

    def text(self) -> str:
        return "\n".join(line for _, line in list(self.lines))

    def terminate(self, timeout: float = 5) -> tuple[int, float]:
        """SIGTERM; (exit status, seconds it took to exit)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=timeout)
        took = time.monotonic() - started
        self._reader.join(timeout=5)
        return status, took

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def running_agents():
    started: list[Running] = []

    def start(*args: str) -> Running:
        agent = Running(*args)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.kill()


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on (bound, then closed): a portal that is down."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
