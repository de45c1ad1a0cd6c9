"""A real Prometheus (Debian's `prometheus` package) scraping DCGM-format exporters the tests control.

The `prometheus` fixture (session-scoped, registered in tests/conftest.py) starts, in a temporary directory:

* four small exporters (Python HTTP servers on free ports), each a tray serving ``/metrics`` in the text
  format dcgm-exporter serves; a test sets what each GPU reports (`Exporter.serve`) and a GPU left out of
  the page gets a staleness marker at the next scrape, as when a GPU drops off a real exporter. Trays 0-2
  use dcgm-exporter's labels (``UUID``, ``gpu``, ``Hostname``), job ``dcgm``; tray 3 is an old build with
  lower-case ``uuid``/``hostname``, job ``dcgm-lower``, for the label-mapping tests.
* the real ``prometheus`` binary with a generated config scraping them every second and evaluating the
  recording rules Rackplane ships (deploy/prometheus/rackplane-rules.yml) every second, its query API
  behind HTTP basic authentication (``--web.config.file``, a bcrypt hash of PASSWORD), on a free port.

Tests wait for the samples they set (`Prometheus.wait_for`), never for a fixed time; a test that needs the
past (a GPU low for the last minute) writes it through Prometheus's remote-write receiver
(`Prometheus.history`) instead of waiting for it. Without the binary the
tests fail saying how to install it (scripts/system-deps.sh installs it for `make test`).
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

USERNAME = "rackplane"
PASSWORD = "rackplane-test"
# bcrypt of PASSWORD (cost 4: a test fixture, checked on every query), as Prometheus's web config wants it.
PASSWORD_HASH = "$2b$04$yaOrf8ZPO0JtrM1Nj58I8OVjeZcMyxGiXRm0EJWnNnlrCq52cIyjC"
SCRAPE_INTERVAL_SECONDS = 1
RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rackplane-rules.yml"
HOW_TO_INSTALL = (
    "the prometheus binary is not installed: `apt-get install -y --no-install-recommends prometheus` "
    "(scripts/system-deps.sh does it for `make test`)"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Exporter:
    """One tray's DCGM exporter: serves what `serve` last set."""

    hostname: str
    lower_case_labels: bool = False
    gpus: dict[str, float] = field(default_factory=dict)  # UUID -> utilization %
    with_utilization: bool = True
    server: ThreadingHTTPServer | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def serve(self, gpus: dict[str, float], with_utilization: bool = True) -> None:
        with self.lock:
            self.gpus = dict(gpus)
            self.with_utilization = with_utilization

    def labels(self, index: int, gpu_uuid: str) -> dict[str, str]:
        """One GPU's DCGM_FI_DEV_GPU_UTIL labels as the page shows them (a scrape adds job and instance)."""
        uuid, host = ("uuid", "hostname") if self.lower_case_labels else ("UUID", "Hostname")
        return {
            "gpu": str(index),
            uuid: gpu_uuid,
            "device": f"nvidia{index}",
            "modelName": "NVIDIA GB200",
            host: self.hostname,
            "DCGM_FI_DRIVER_VERSION": "580.82.07",
        }

    def page(self) -> str:
        uuid, host = ("uuid", "hostname") if self.lower_case_labels else ("UUID", "Hostname")
        with self.lock:
            gpus, with_utilization = dict(self.gpus), self.with_utilization
        lines = []
        if with_utilization:
            lines += [
                "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            ]
            for index, (gpu_uuid, value) in enumerate(gpus.items()):
                labels = ",".join(f'{k}="{v}"' for k, v in self.labels(index, gpu_uuid).items())
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value:g}")
        lines += [
            "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).",
            "# TYPE DCGM_FI_DEV_SM_CLOCK gauge",
        ]
        for index, gpu_uuid in enumerate(gpus):
            lines.append(
                f'DCGM_FI_DEV_SM_CLOCK{{gpu="{index}",{uuid}="{gpu_uuid}",{host}="{self.hostname}"}} 1980'
            )
        return "\n".join(lines) + "\n"

    def start(self) -> None:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = exporter.page().encode()
                self.send_response(200 if self.path.startswith("/metrics") else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class _QuietServer(ThreadingHTTPServer):
    """An exporter's server that says nothing when Prometheus hangs up mid-answer (a scrape that timed out):
    socketserver prints the traceback to the process's stderr, where a later test of the same worker that
    reads its own stderr found it (ci135: a command's one-line error read as three lines)."""

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            return
        super().handle_error(request, client_address)


@dataclass
class Prometheus:
    """The running server: its URL, credentials, the exporters it scrapes, and queries for the tests."""

    url: str
    exporters: list[Exporter]
    username: str = USERNAME
    password: str = PASSWORD

    def reset(self, window: str = "5s") -> None:
        """Every exporter serves an empty page (no GPU), and wait until no sample of what a test set before
        is left in the last `window`: each test starts with no data."""
        for exporter in self.exporters:
            exporter.serve({})
        self.wait_for(f"count_over_time(DCGM_FI_DEV_GPU_UTIL[{window}])", lambda result: result == [])

    def query(self, promql: str) -> list[dict]:
        """The raw instant-query result (with credentials), for the tests' own waits and checks."""
        body = urllib.parse.urlencode({"query": promql}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=body, method="POST")
        token = b64encode(f"{self.username}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())["data"]["result"]

    def history(
        self, tray: int, gpus: dict[str, float | Callable[[float], float]], seconds: float, step: float = 1.0
    ) -> float:
        """Write the past `seconds` of these GPUs' utilization (one sample every `step` seconds, up to a
        second ago; a GPU's value is a number, or a function of the sample's age in seconds) as tray `tray`'s
        exporter would have had them scraped: the same series (job, instance and labels), through
        Prometheus's remote-write receiver. A test that needs a minute of history then has it at once
        instead of waiting a minute. Call it before the exporter serves these GPUs: a series takes samples
        only in time order. Returns when the write was accepted (Unix seconds)."""
        exporter = self.exporters[tray]
        job = "dcgm-lower" if exporter.lower_case_labels else "dcgm"
        now_ms = int(time.time() * 1000)
        stamps = range(now_ms - int(seconds * 1000), now_ms - 1000, int(step * 1000))
        series = []
        for index, (gpu_uuid, value) in enumerate(gpus.items()):
            labels = {
                "__name__": "DCGM_FI_DEV_GPU_UTIL",
                "job": job,
                "instance": exporter.address,
                **exporter.labels(index, gpu_uuid),
            }
            at = value if callable(value) else (lambda age, value=value: value)
            series.append((labels, [(at((now_ms - stamp) / 1000), stamp) for stamp in stamps]))
        request = urllib.request.Request(
            f"{self.url}/api/v1/write", data=_snappy_block(_write_request(series)), method="POST"
        )
        token = b64encode(f"{self.username}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        request.add_header("Content-Encoding", "snappy")
        request.add_header("Content-Type", "application/x-protobuf")
        request.add_header("X-Prometheus-Remote-Write-Version", "0.1.0")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 204, answer.read()
        return time.time()

    def wait_for(self, promql: str, check: Callable[[list[dict]], bool], timeout: float = 30.0) -> list[dict]:
        """Query until `check(result)` holds (the scrapes have caught up); fail with the last result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if check(result):
                return result
            if time.monotonic() > deadline:
                pytest.fail(
                    f"Prometheus did not answer as expected within {timeout:.0f} s: {promql} -> {result}"
                )
            time.sleep(0.25)

    def wait_for_values(self, expected: dict[str, float], window: str = "1s", timeout: float = 30.0) -> None:
        """Until the mean over `window` of each GPU (by UUID, either label spelling) is the value set."""

        def holds(result):
            seen = {}
            for item in result:
                metric = item["metric"]
                seen[metric.get("UUID") or metric.get("uuid")] = float(item["value"][1])
            return all(uuid in seen and abs(seen[uuid] - value) < 1e-6 for uuid, value in expected.items())

        self.wait_for(f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{window}])", holds, timeout)

    def wait_gone(self, uuids: list[str], timeout: float = 30.0) -> None:
        """Until none of these GPUs has a current series (their staleness markers are in)."""
        gone = set(uuids)

        def holds(result):
            return not any(
                (item["metric"].get("UUID") or item["metric"].get("uuid")) in gone for item in result
            )

        self.wait_for("DCGM_FI_DEV_GPU_UTIL", holds, timeout)


# Remote write 1.0 by hand (no protobuf or snappy package in the venv for one test helper): the
# prometheus.WriteRequest message (prompb/remote.proto, types.proto) and the snappy block format with
# literals only (valid snappy, not compressed).


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _write_request(series: list[tuple[dict[str, str], list[tuple[float, int]]]]) -> bytes:
    """WriteRequest{timeseries: [TimeSeries{labels (by name), samples: [Sample{value, timestamp}]}]}."""
    out = b""
    for labels, samples in series:
        body = b"".join(
            _field(1, _field(1, name.encode()) + _field(2, value.encode()))
            for name, value in sorted(labels.items())
        )
        for value, stamp in samples:
            # value: field 1, fixed64 (a double); timestamp: field 2, varint (milliseconds, positive here).
            sample = bytes([1 << 3 | 1]) + struct.pack("<d", value) + _varint(2 << 3) + _varint(stamp)
            body += _field(2, sample)
        out += _field(1, body)
    return out


def _snappy_block(data: bytes) -> bytes:
    """The snappy block format: the length, then literal elements of at most 65,536 bytes."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), 65536):
        chunk = data[start : start + 65536]
        size = len(chunk) - 1
        if size < 60:
            out.append(size << 2)
        elif size < 256:
            out += bytes([60 << 2, size])
        else:
            out += bytes([61 << 2]) + size.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def _config(exporters: list[Exporter]) -> str:
    """Scrapes every second; loads the recording rules Rackplane ships (deploy/prometheus), evaluated every
    second so a test does not wait a minute for them."""

    def job(name: str, members: list[Exporter]) -> str:
        targets = ", ".join(f'"{exporter.address}"' for exporter in members)
        return f"  - job_name: {name}\n    static_configs:\n      - targets: [{targets}]\n"

    standard = [exporter for exporter in exporters if not exporter.lower_case_labels]
    lower = [exporter for exporter in exporters if exporter.lower_case_labels]
    return (
        "global:\n"
        f"  scrape_interval: {SCRAPE_INTERVAL_SECONDS}s\n"
        f"  scrape_timeout: {SCRAPE_INTERVAL_SECONDS}s\n"
        "  evaluation_interval: 1s\n"
        f"rule_files:\n  - {json.dumps(str(RULES))}\n"
        "scrape_configs:\n" + job("dcgm", standard) + job("dcgm-lower", lower)
    )


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    """A real Prometheus scraping four test exporters every second (see the module docstring)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(HOW_TO_INSTALL, pytrace=False)
    directory = tmp_path_factory.mktemp("prometheus")
    exporters = [Exporter(f"gb-r01-t0{n}") for n in range(1, 4)] + [
        Exporter("gb-r01-t04", lower_case_labels=True)
    ]
    for exporter in exporters:
        exporter.start()
    (directory / "prometheus.yml").write_text(_config(exporters))
    # exporter-toolkit protects every path, /-/ready included: the readiness probe sends the credentials.
    (directory / "web.yml").write_text(f'basic_auth_users:\n  {USERNAME}: "{PASSWORD_HASH}"\n')
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = directory / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={directory / 'prometheus.yml'}",
                f"--web.config.file={directory / 'web.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                # Prometheus.history: a test writes the past it needs instead of waiting for it.
                "--web.enable-remote-write-receiver",
                "--log.level=warn",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=directory,
        )
    try:
        _ready_with_auth(url, process, log)
        yield Prometheus(url=url, exporters=exporters)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for exporter in exporters:
            exporter.stop()


def _ready_with_auth(url: str, process: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    token = b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"prometheus exited with {process.returncode}: {log.read_text()[-2000:]}", pytrace=False
            )
        request = urllib.request.Request(f"{url}/-/ready", headers={"Authorization": f"Basic {token}"})
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(
        f"prometheus did not become ready in {timeout:.0f} s: {log.read_text()[-2000:]}", pytrace=False
    )


def admin_form(**overrides) -> dict:
    """The Django admin's metrics-source form, filled for a Prometheus nobody listens on (a free port)."""
    return {
        "kind": "prometheus",
        "url": f"http://127.0.0.1:{free_port()}",
        "bearer_token": "",
        "username": "",
        "password": "",
        "ca_file": "",
        "timeout_seconds": "2",
        "window_seconds": "300",
        "metric": "DCGM_FI_DEV_GPU_UTIL",
        "uuid_label": "UUID",
        "gpu_label": "gpu",
        "hostname_label": "Hostname",
        "selector": "",
    } | overrides
