#!/usr/bin/env python3
"""rackplane-agent: the node agent. Reports a compute tray's GPUs, its new XID lines and its active checks to
the Rackplane portal (POST /api/v1/discovery/reports/).

One file, Python 3.9 or newer, standard library only: copy it to a node and run it; nothing to install (DGX
OS and the usual GPU node images ship python3). `rackplane_agent.py --help` lists the options; agent/README.md
says how to install it as a systemd service or a Kubernetes DaemonSet.

Every interval (60 s by default, jittered so a fleet's agents do not report in the same second) it

* runs `nvidia-smi -q -x` and sends its raw XML (the portal reads the GPUs, the NVLink fabric state and health
  bits, the NVML recovery action and the MIG mode out of it);
* when a GPU is in MIG mode (current or pending), also runs `nvidia-smi mig -lgip`, `mig -lgipp`, `mig -lgi`
  and `nvidia-smi -L` and sends what they print as "mig" ({"lgip", "lgipp", "lgi", "list"}, 256 KiB each; a
  command that fails or hangs is left out);
* reads the kernel log lines written since the last report (journald through `journalctl -k -o json
  --after-cursor`, /dev/kmsg by sequence number, or a plain file by offset), keeps the `NVRM: Xid` ones and
  sends each once, in order, as "xids" (at most 256 per report; the rest follow in the next reports);
* when an active check is configured (`--check-command`, e.g. `dcgmi diag -r 2`), runs it every
  `--check-interval` in the background and sends its exit status and output as "checks";
* posts one report with its agent token (`Authorization: Bearer rpa_...`, read from a file).

Unchanged listings cost a hash: the portal answers every full report with its `report_sha256`. When the next
listing has the same digest (the parts of `nvidia-smi -q -x` the portal reads and the "mig" outputs: see
`listing_digest`; never temperatures, clocks or utilization), the same agent version and interval, and no
XID or check result waits, the agent posts only `{"host", "report_sha256", "agent"}`. The portal answers 200
`unchanged` (a heartbeat) or 409 `full_report_needed`, and then the agent posts the full report at once. A
portal that does not know `report_sha256` (400 naming it) gets full reports from then on. `--no-hash-only`
always sends the full report.

Where it stopped reading the kernel log, and the XIDs and check results not yet accepted by the portal, are
kept in a state file (written atomically before and after each post): a restart neither repeats nor loses an
XID line, and a report that could not be posted hands its XIDs to the next one (at most --max-pending-xids;
beyond that the oldest are dropped and counted in the log).

When the portal is down or answers 429 or 5xx the agent backs off (exponential with jitter, at least what a
Retry-After header asks, capped by --max-backoff); any other refusal (401, 403, 400...) is logged with the
portal's message and not retried in a loop. SIGTERM or SIGINT ends it cleanly after the current step.

Exit status with --once: 0 when the report was posted (or printed, with --dry-run), 1 when it was not, 2 for
a wrong option or an unusable token file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime

VERSION = "0.1.0"
REPORT_PATH = "/api/v1/discovery/reports/"
STATE_VERSION = 1

# The report contract (the portal refuses more).
MAX_XIDS_PER_REPORT = 256
MAX_XID_TEXT = 512
MAX_CHECK_OUTPUT = 64 * 1024
MAX_CHECK_NAME = 128
# What the agent keeps while the portal does not take it.
DEFAULT_MAX_PENDING_XIDS = 4096
MAX_PENDING_CHECKS = 16
# Bytes of check results per report (the portal takes bodies up to 4 MiB); the rest go in the next reports.
CHECKS_BUDGET = 2 * 1024 * 1024
# A Retry-After is honoured up to an hour: a longer one is a misconfigured proxy, not a plan.
RETRY_AFTER_LIMIT = 3600
# The keys this agent adds to the discovery report; an older portal refuses them as unknown fields.
NEWER_KEYS = ("xids", "checks", "agent", "mig")
# What the agent runs when a GPU is in MIG mode (now or after its next reset): the report's "mig" key, and
# what the portal lacks when it fails. Each output is sent as printed, up to 256 KiB.
MIG_COMMANDS = (
    ("lgip", ("mig", "-lgip"), "GPU instance profiles"),
    ("lgipp", ("mig", "-lgipp"), "GPU instance placements"),
    ("lgi", ("mig", "-lgi"), "GPU instances"),
    ("list", ("-L",), "MIG device UUIDs"),
)
MAX_MIG_OUTPUT = 256 * 1024
# `nvidia-smi mig -lgi` on a GPU in MIG mode without instances exits non-zero, saying so: that is its state.
NO_INSTANCES = re.compile(r"No (?:GPU|compute) instances? found", re.IGNORECASE)
KMSG = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
FILE_READ_LIMIT = 8 * 1024 * 1024  # of a plain kernel log file per cycle; the rest is read next time
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# --- logging: one line per event on stderr ------------------------------------------------------------------


def log(level: str, message: str) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = " ".join(str(message).split("\n"))
    sys.stderr.write(f"{stamp} rackplane-agent {level}: {text}\n")
    sys.stderr.flush()


def info(message: str) -> None:
    log("INFO", message)


def warn(message: str) -> None:
    log("WARNING", message)


def error(message: str) -> None:
    log("ERROR", message)


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def clean(text: str) -> str:
    """Text the portal takes: valid UTF-8 (no lone surrogates: a command line may hold them) without NUL
    characters (a kernel line or a check's output may)."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


def head_utf8(text: str, limit: int) -> str:
    """The start of `text`, at most `limit` bytes of UTF-8 (a character cut in two is left out)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")


def tail_utf8(text: str, limit: int) -> str:
    """The end of `text`, at most `limit` bytes of UTF-8 (a character cut in two is left out)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[-limit:].decode("utf-8", "ignore")


class ConfigError(Exception):
    """Something an admin must fix on the node (a token file, an option); the message says what."""


# --- XID lines ----------------------------------------------------------------------------------------------

# `NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, GPU has fallen off the bus.` Older drivers print the
# address without `PCI:`; some add the function (`.0`); NVLink5 XIDs may carry a sub-code (`149.3`).
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?:(?P<domain>[0-9A-Fa-f]{1,8}):(?P<bus>[0-9A-Fa-f]{1,2}):"
    r"(?P<device>[0-9A-Fa-f]{1,2})(?:\.(?P<function>[0-7]))?|[^)]*)\):\s*(?P<xid>\d+)(?:\.\d+)?"
)
PID = re.compile(r"\bpid=(\d+)")


def pci_key(domain: str, bus: str, device: str, function: str | None = None) -> str:
    """The form nvidia-smi prints (`00000008:01:00.0`), from any of the kernel's or nvidia-smi's forms."""
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function or 0)}"


def parse_xid(message: str, when: datetime, gpus_by_pci: dict[str, str]) -> dict | None:
    """The report's "xids" entry for a kernel message, or None when it is no XID line."""
    start = message.find("NVRM: Xid")
    if start < 0:
        return None
    match = XID_LINE.match(message, start)
    if match is None:
        return None
    xid = int(match.group("xid"))
    if not 1 <= xid <= 999:
        return None
    entry: dict = {"time": iso(when)}
    if match.group("domain") is not None:
        key = pci_key(
            match.group("domain"), match.group("bus"), match.group("device"), match.group("function")
        )
        entry["pci_bus_id"] = gpus_by_pci.get(key, key)
    pid = PID.search(message, match.end())
    text = clean(message[start:]).strip()[:MAX_XID_TEXT]
    entry.update(xid=xid, pid=int(pid.group(1)) if pid else None, text=text)
    return entry


# --- nvidia-smi ---------------------------------------------------------------------------------------------


def in_mig_mode(xml: str | None) -> bool:
    """Whether a GPU of a `nvidia-smi -q -x` listing is in MIG mode, or will be after its next reset."""
    try:
        root = ET.fromstring(xml) if xml is not None else None
    except ET.ParseError:
        return False
    if root is None:
        return False
    return any(
        (gpu.findtext(path) or "").strip().lower() == "enabled"
        for gpu in root.findall("gpu")
        for path in ("mig_mode/current_mig", "mig_mode/pending_mig")
    )


class NvidiaSmi:
    def __init__(self, path: str, timeout: float):
        self.path, self.timeout = path, timeout
        self._mig_told: set = set()  # (command, failure kind) already logged: once each

    def _call(self, *arguments: str) -> subprocess.CompletedProcess:
        """nvidia-smi with `arguments`, in a process group of its own. When it does not answer within the
        timeout the whole group is killed and subprocess.TimeoutExpired raised; OSError when it cannot
        start."""
        process = subprocess.Popen(
            [self.path, *arguments],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            try:
                process.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # stuck in the driver (uninterruptible): left behind
                warn(f"{self.path} (pid {process.pid}) does not even die: it is stuck in the driver.")
            raise
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def run(self) -> tuple[str | None, dict[str, str]]:
        """(the raw `nvidia-smi -q -x` XML, None when there was none; {PCI key: pci_bus_id as printed})."""
        try:
            done = self._call("-q", "-x")
        except FileNotFoundError:
            error(
                f"nvidia-smi was not found at {self.path!r}: install the NVIDIA driver or pass --nvidia-smi."
            )
            return None, {}
        except OSError as failure:
            error(f"cannot run {self.path}: {failure}. This report carries no GPU listing.")
            return None, {}
        except subprocess.TimeoutExpired:
            error(
                f"{self.path} -q -x did not answer within {self.timeout:g} s (a GPU may have fallen off the "
                "bus): this report carries no GPU listing."
            )
            return None, {}
        text = done.stdout.decode("utf-8", "replace")
        try:
            root = ET.fromstring(text)
        except ET.ParseError:
            root = None
        if root is None or root.tag != "nvidia_smi_log":
            said = (done.stderr or done.stdout).decode("utf-8", "replace").strip()[:300]
            error(
                f"{self.path} -q -x failed (exit status {done.returncode}): {said or 'no output'}. "
                "This report carries no GPU listing."
            )
            return None, {}
        if done.returncode != 0:
            warn(
                f"{self.path} -q -x exited with status {done.returncode} but printed a GPU listing; "
                "sending it."
            )
        gpus_by_pci = {}
        for gpu in root.findall("gpu"):
            printed = (gpu.findtext("pci/pci_bus_id") or gpu.get("id") or "").strip()
            parts = re.fullmatch(r"([0-9A-Fa-f]+):([0-9A-Fa-f]+):([0-9A-Fa-f]+)(?:\.([0-7]))?", printed)
            if parts:
                gpus_by_pci[pci_key(*parts.groups())] = printed
            action = (gpu.findtext("gpu_recovery_action") or "").strip()
            if action and action.lower() not in ("none", "n/a", "not supported"):
                uuid = (gpu.findtext("uuid") or "?").strip()
                warn(f"GPU {printed} ({uuid}) reports the NVML recovery action {action!r}.")
        return text, gpus_by_pci

    def _mig_lacking(self, command: str, kind: str, message: str) -> None:
        if (command, kind) not in self._mig_told:
            self._mig_told.add((command, kind))
            warn(message)

    def mig(self, xml: str | None) -> dict[str, str] | None:
        """When a GPU of the listing is in MIG mode: what `nvidia-smi mig -lgip`, `mig -lgipp`, `mig -lgi` and
        `nvidia-smi -L` print, as the report's {"lgip", "lgipp", "lgi", "list"} without the commands that
        failed. None, and nothing run, when no GPU is in MIG mode."""
        if not in_mig_mode(xml):
            return None
        outputs: dict[str, str] = {}
        for number, (key, arguments, what) in enumerate(MIG_COMMANDS):
            shown = " ".join((self.path, *arguments))
            rest = [w for _, _, w in MIG_COMMANDS[number + 1 :]]
            skipped = f" (nor {', '.join(rest)}: not run after it)" if rest else ""
            try:
                done = self._call(*arguments)
            except FileNotFoundError:
                self._mig_lacking(
                    shown,
                    "missing",
                    f"nvidia-smi is no longer at {self.path!r}: the portal gets no {what}{skipped}.",
                )
                break
            except OSError as failure:
                self._mig_lacking(
                    shown,
                    "unrunnable",
                    f"cannot run {shown} ({failure}): the portal gets no {what}{skipped}.",
                )
                break
            except subprocess.TimeoutExpired:  # the others would hang as well: the cycle goes on without them
                self._mig_lacking(
                    shown,
                    "timeout",
                    f"{shown} did not answer within {self.timeout:g} s: the portal gets no {what}{skipped} "
                    "while it hangs.",
                )
                break
            text = clean(done.stdout.decode("utf-8", "replace"))
            if done.returncode != 0:
                said = clean(done.stderr.decode("utf-8", "replace"))
                if NO_INSTANCES.search(text) or NO_INSTANCES.search(said):
                    text = text if text.strip() else said  # a state, not a failure: sent
                else:
                    self._mig_lacking(
                        shown,
                        "failed",
                        f"{shown} failed with exit status {done.returncode} "
                        f"({(said or text).strip()[:300] or 'no output'}): the portal gets no {what} while "
                        "it fails.",
                    )
                    continue
            if len(text.encode("utf-8")) > MAX_MIG_OUTPUT:
                self._mig_lacking(
                    shown,
                    "cut",
                    f"{shown} printed more than {MAX_MIG_OUTPUT // 1024} KiB: the portal gets only the "
                    f"first {MAX_MIG_OUTPUT // 1024} KiB of its {what}.",
                )
                text = head_utf8(text, MAX_MIG_OUTPUT)
            outputs[key] = text
        return outputs


# What the portal reads of each <gpu> (inventory.discovery.nvidia_smi.parse_xml and inventory.discovery.mig):
# when none of it changed, neither did the portal's parsed report. Whole subtrees for fabric, pci and the MIG
# mode (a superset is safe: it only makes the digest change more often); of the MIG devices, what
# MIG_DEVICE_PATHS names. tests/agent/test_report_hash.py changes every other element of a real listing and
# checks the portal's parse does not move.
DIGEST_PATHS = (
    "uuid",
    "serial",
    "product_name",
    "fb_memory_usage/total",
    "pci",
    "gpu_recovery_action",
    "fabric",
    "minor_number",
    "mig_mode",
)
# What the portal reads of each <mig_device> (inventory.discovery.mig): not its memory in use, which moves
# while jobs run and would make every report of a busy MIG node a full one.
MIG_DEVICE_PATHS = (
    "index",
    "gpu_instance_id",
    "compute_instance_id",
    "device_attributes/shared/multiprocessor_count",
    "fb_memory_usage/total",
)


def _element_text(element) -> list:
    """An element's subtree as nested [tag, attributes, text, children] (whitespace trimmed)."""
    return [
        element.tag,
        sorted(element.attrib.items()),
        (element.text or "").strip(),
        [_element_text(child) for child in element],
    ]


def listing_digest(xml: str, version: str, interval: int, mig: dict | None = None) -> str | None:
    """sha256 of what the portal reads of a `nvidia-smi -q -x` listing and of the report's "mig" outputs
    (each line without its trailing whitespace), with this agent's version and interval (the portal's report
    hash covers them too); None when the XML cannot be read."""
    import hashlib

    try:
        root = ET.fromstring(xml)
    except ET.ParseError:
        return None
    gpus = []
    for gpu in root.findall("gpu"):
        parts = [gpu.get("id", "")]
        for path in DIGEST_PATHS:
            found = gpu.find(path)
            parts.append(_element_text(found) if found is not None else None)
        parts.append((gpu.findtext("mig_devices") or "").strip())  # "None" when there are none
        parts.append(
            [
                [(device.findtext(path) or "").strip() for path in MIG_DEVICE_PATHS]
                for device in gpu.findall("mig_devices/mig_device")
            ]
        )
        gpus.append(parts)
    canonical = [version, interval, (root.findtext("attached_gpus") or "").strip(), gpus]
    if mig:
        canonical.append(
            sorted([key, [line.rstrip() for line in text.splitlines()]] for key, text in mig.items())
        )
    return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()


def portal_hash(data) -> str:
    """The portal's `report_sha256` from an answer ("" when it has none or it is not a SHA-256)."""
    value = data.get("report_sha256") if isinstance(data, dict) else None
    return value if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) else ""


# --- kernel log readers: each returns the messages since a position and the new position --------------------


class KernelLogError(Exception):
    pass


class JournalReader:
    """`journalctl -k -o json --after-cursor CURSOR`: the kernel messages of this boot after the cursor."""

    source = "journal"

    def __init__(self, journalctl: str, directory: str | None, timeout: float):
        self.journalctl, self.directory, self.timeout = journalctl, directory, timeout

    def describe(self) -> str:
        where = f" -D {self.directory}" if self.directory else ""
        return f"the journal ({self.journalctl} -k{where})"

    def _run(self, cursor: str | None) -> subprocess.CompletedProcess:
        fields = "--output-fields=MESSAGE,SYSLOG_IDENTIFIER"
        command = [self.journalctl, "-k", "-o", "json", "--no-pager", fields]
        if self.directory:
            command += ["-D", self.directory]
        if cursor:
            command += ["--after-cursor", cursor]
        try:
            return subprocess.run(
                command, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.timeout, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as failure:
            raise KernelLogError(f"{' '.join(command)}: {failure}") from failure

    def read(self, position: dict | None) -> tuple[list[tuple[datetime, str]], dict]:
        cursor = (position or {}).get("cursor") if (position or {}).get("source") == self.source else None
        done = self._run(cursor)
        if done.returncode != 0 and cursor:
            said = done.stderr.decode("utf-8", "replace").strip()[:300]
            warn(
                f"journalctl refused the saved cursor ({said}); reading this boot's kernel log from its "
                "start (XIDs already reported may be sent again)."
            )
            cursor, done = None, self._run(None)
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip()[:300]
            raise KernelLogError(f"journalctl exited with status {done.returncode}: {said}")
        messages = []
        for line in done.stdout.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            cursor = entry.get("__CURSOR") or cursor
            message = entry.get("MESSAGE")
            if isinstance(message, list):  # journald's form of a message that is not valid UTF-8
                message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode("utf-8", "replace")
            if not isinstance(message, str):
                continue
            # The driver's lines have the identifier "kernel". A record written into /dev/kmsg from user space
            # (never facility kern) is split by journald into identifier and message: put them back together.
            identifier = entry.get("SYSLOG_IDENTIFIER")
            if isinstance(identifier, str) and identifier and identifier != "kernel":
                message = f"{identifier}: {message}"
            try:
                when = from_epoch(int(entry["__REALTIME_TIMESTAMP"]) / 1e6)
            except (KeyError, ValueError, TypeError):
                when = datetime.now(timezone.utc)
            messages.append((when, message))
        return messages, {"source": self.source, "cursor": cursor}


def boot_id() -> str:
    try:
        with open(BOOT_ID) as handle:
            return handle.read().strip()
    except OSError:
        return ""


class KmsgReader:
    """/dev/kmsg: one record per read, `prio,seq,usec,flags;message`. Kept open between cycles, so each read
    returns only new records; after a restart the records up to the saved sequence number are skipped (a
    sequence number counts within one boot: the boot ID tells a reboot)."""

    source = "kmsg"

    def __init__(self, path: str = KMSG):
        self.path = path
        self.fd: int | None = None

    def describe(self) -> str:
        return self.path

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def read(self, position: dict | None) -> tuple[list[tuple[datetime, str]], dict]:
        boot = boot_id()
        last = None
        if position and position.get("source") == self.source and position.get("boot_id") == boot:
            last = position.get("seq")
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as failure:
                raise KernelLogError(
                    f"cannot open {self.path}: {failure.strerror} (reading it needs root or CAP_SYSLOG when "
                    "kernel.dmesg_restrict is 1)"
                ) from failure
        # The kernel's message clock is CLOCK_MONOTONIC's; the wall time of the boot turns it into a time.
        booted = time.time() - time.monotonic()
        messages, first = [], True
        while True:
            try:
                record = os.read(self.fd, 16384)
            except BlockingIOError:
                break
            except BrokenPipeError:  # records overwritten in the ring buffer before they were read
                warn(f"some kernel log records were overwritten in {self.path} before the agent read them.")
                continue
            if not record:
                break
            header, _, body = record.partition(b";")
            fields = header.split(b",")
            try:
                seq, usec = int(fields[1]), int(fields[2])
            except (IndexError, ValueError):
                continue
            if last is not None and seq <= last:
                continue
            if first and last is not None and seq > last + 1:
                warn(
                    f"{seq - last - 1} kernel log records were overwritten in {self.path} before the agent "
                    "read them (the ring buffer wrapped while it was not running)."
                )
            first, last = False, seq
            text = body.split(b"\n", 1)[0].decode("utf-8", "replace")
            text = re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text)
            messages.append((from_epoch(booted + usec / 1e6), text))
        return messages, {"source": self.source, "boot_id": boot, "seq": last}


# Line prefixes of kernel log files: ISO 8601 (rsyslog's precise format, `journalctl -o short-iso`), the
# traditional syslog `Oct 14 09:12:41`, dmesg's seconds since boot `[ 1234.567890]`.
ISO_PREFIX = re.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?)(Z|[+-]\d{2}:?\d{2})?\s")
SYSLOG_PREFIX = re.compile(r"^([A-Z][a-z]{2})\s+(\d{1,2}) (\d{2}):(\d{2}):(\d{2})\s")
DMESG_PREFIX = re.compile(r"^\[\s*(\d+)\.(\d+)\]")
MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def line_time(line: str, now: datetime) -> datetime:
    """When a kernel log file's line was written, from its prefix (the reading time when it has none)."""
    match = ISO_PREFIX.match(line)
    if match:
        stamp, zone = match.group(1).replace(" ", "T"), match.group(2)
        if "." in stamp:  # Python 3.9 and 3.10 read exactly 3 or 6 digits of a fraction
            whole, fraction = stamp.split(".")
            stamp = f"{whole}.{fraction[:6].ljust(6, '0')}"
        if zone and zone != "Z" and ":" not in zone:
            zone = f"{zone[:3]}:{zone[3:]}"
        try:
            moment = datetime.fromisoformat(stamp + ("+00:00" if zone == "Z" else zone or ""))
        except ValueError:
            moment = None
        if moment is not None:
            return moment if moment.tzinfo else moment.astimezone()  # no zone: the node's local time
    match = SYSLOG_PREFIX.match(line)
    if match and match.group(1) in MONTHS:
        month, day, hour, minute, second = MONTHS[match.group(1)], *map(int, match.groups()[1:])
        local = now.astimezone()
        try:
            moment = local.replace(
                month=month, day=day, hour=hour, minute=minute, second=second, microsecond=0
            )
        except ValueError:
            moment = None
        if moment is not None:
            if moment - local > timedelta(days=1):  # syslog has no year: December's lines read in January
                moment = moment.replace(year=moment.year - 1)
            return moment
    match = DMESG_PREFIX.match(line)
    if match:
        since_boot = int(match.group(1)) + int(match.group(2)) / 10 ** len(match.group(2))
        return from_epoch(time.time() - time.monotonic() + since_boot)
    return now


class FileReader:
    """A plain kernel log file (kern.log, /var/log/messages, a `dmesg` capture), read from the saved byte
    offset. When the file was rotated (another inode at the path), the rest of the old one is read first if it
    is still beside it under another name (kern.log.1, messages-20251014: not compressed yet), then the new
    one from its start; a truncated file is read again from its start."""

    source = "file"
    COMPRESSED = (".gz", ".xz", ".zst", ".bz2", ".lz4")

    def __init__(self, path: str):
        self.path = path

    def describe(self) -> str:
        return self.path

    def _rotated(self, inode: int) -> str | None:
        """The file the old inode now has: the rotated log, where logrotate renamed it."""
        folder, name = os.path.split(os.path.abspath(self.path))
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return None
        for entry in entries:
            if (
                entry.name.startswith(name)
                and entry.name != name
                and not entry.name.endswith(self.COMPRESSED)
            ):
                try:
                    if entry.stat(follow_symlinks=False).st_ino == inode:
                        return entry.path
                except OSError:
                    continue
        return None

    @staticmethod
    def _tail(handle, offset: int) -> str:
        """The 64 bytes before `offset`, in hex: what was last read, to tell the same file from a new one."""
        start = max(0, offset - 64)
        handle.seek(start)
        return handle.read(offset - start).hex()

    def read(self, position: dict | None) -> tuple[list[tuple[datetime, str]], dict]:
        position = position if position and position.get("source") == self.source else {}
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 (closed below, after fstat and read)
        except OSError as failure:
            raise KernelLogError(f"cannot read {self.path}: {failure.strerror}") from failure
        rest = b""
        with handle:
            status = os.fstat(handle.fileno())
            offset = position.get("offset", 0) if position.get("path") == self.path else 0
            inode = position.get("inode")
            if inode not in (None, status.st_ino):
                rotated = self._rotated(inode)
                if rotated:
                    info(f"{self.path} was rotated: reading the rest of {rotated}, then the new file.")
                    with open(rotated, "rb") as old:
                        old.seek(offset)
                        rest = old.read(FILE_READ_LIMIT)  # it grows no more: its last line is complete
                    if rest and not rest.endswith(b"\n"):
                        rest += b"\n"
                else:
                    info(f"{self.path} was replaced since the last read; reading it from its start.")
                offset = 0
            elif offset and (status.st_size < offset or self._tail(handle, offset) != position.get("tail")):
                # Truncated in place (logrotate's copytruncate), even if written past the old offset since.
                info(f"{self.path} was truncated since the last read; reading it from its start.")
                offset = 0
            handle.seek(offset)
            data = handle.read(FILE_READ_LIMIT)
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
            end = offset + len(complete)
            tail = self._tail(handle, end)
        now = datetime.now(timezone.utc)
        messages = []
        for raw in (rest + complete).splitlines():
            line = raw.decode("utf-8", "replace")
            start = line.find("NVRM:")
            messages.append((line_time(line, now), line[start:] if start >= 0 else line))
        new = {
            "source": self.source,
            "path": self.path,
            "inode": status.st_ino,
            "offset": end,
            "tail": tail,
        }
        return messages, new


class NoKernelLog:
    source = "none"

    def describe(self) -> str:
        return "no kernel log"

    def read(self, position: dict | None) -> tuple[list[tuple[datetime, str]], dict]:
        return [], {"source": self.source}


def journald_running() -> bool:
    return os.path.exists("/run/systemd/journal/socket")


def kernel_log_reader(args) -> JournalReader | KmsgReader | FileReader | NoKernelLog:
    source = args.kernel_log_source
    if args.kernel_log:
        if source not in ("auto", "file"):
            raise ConfigError(f"--kernel-log reads a file: it does not go with --kernel-log-source {source}.")
        return FileReader(args.kernel_log)
    if source == "file":
        raise ConfigError("--kernel-log-source file needs --kernel-log FILE.")
    journal = JournalReader(args.journalctl, args.journal_directory, args.kernel_log_timeout)
    if source == "journal":
        return journal
    if source == "kmsg":
        return KmsgReader()
    if source == "none":
        return NoKernelLog()
    # auto: journald when it runs here (or a journal directory was given), else /dev/kmsg, else nothing.
    if shutil.which(args.journalctl) and (args.journal_directory or journald_running()):
        return journal
    if os.access(KMSG, os.R_OK):
        return KmsgReader()
    warn(
        "no kernel log to read XIDs from (journald does not run here and /dev/kmsg is not readable): "
        "reports carry no XIDs. Pass --kernel-log-source or --kernel-log FILE."
    )
    return NoKernelLog()


# --- active checks ------------------------------------------------------------------------------------------


class CheckRunner:
    """Runs the configured check (no shell) in the background every `interval` seconds, at most one at once,
    stopping it after `timeout`; its exit status and the tail of its output become a "checks" entry."""

    def __init__(self, command: str, interval: float, timeout: float):
        self.command, self.interval, self.timeout = command, interval, timeout
        self.argv = shlex.split(command)
        self.name = clean(command)[:MAX_CHECK_NAME]
        self.process: subprocess.Popen | None = None
        self.output = None
        self.started_at = 0.0
        self.started_wall: datetime | None = None
        self._pending: dict | None = None  # the result of a check that could not even start

    def due(self, last_started: float | None, now: float) -> bool:
        return self.process is None and (last_started is None or now - last_started >= self.interval)

    def start(self) -> float:
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (outlives this call; closed in _result)
        self.started_at, self.started_wall = time.monotonic(), datetime.now(timezone.utc)
        info(f"running the check {self.name!r}")
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self.output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout stops everything it started
            )
        except OSError as failure:
            self.process = None
            self._pending = self._result(127, f"rackplane-agent: cannot run {self.command!r}: {failure}")
        return time.time()

    def _result(self, status: int, note: str = "") -> dict:
        output = b""
        if self.output is not None:
            self.output.seek(0, os.SEEK_END)
            size = self.output.tell()
            self.output.seek(max(0, size - MAX_CHECK_OUTPUT))
            output = self.output.read()
            self.output.close()
            self.output = None
        text = clean(output.decode("utf-8", "replace"))
        if note:
            text += ("\n" if text and not text.endswith("\n") else "") + note
        text = tail_utf8(text, MAX_CHECK_OUTPUT)
        seconds = round(time.monotonic() - self.started_at, 3)
        info(f"the check {self.name!r} ended with exit status {status} after {seconds:g} s")
        return {
            "name": self.name,
            "exit_status": status,
            "output": text,
            "started": iso(self.started_wall or datetime.now(timezone.utc)),
            "seconds": seconds,
        }

    def _kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # stuck in the kernel: it cannot be waited for
            warn(f"the check {self.name!r} (pid {self.process.pid}) does not die: left behind.")

    def poll(self) -> dict | None:
        """The result once the running check has ended (or was stopped at its timeout), else None."""
        if self._pending is not None:
            result, self._pending = self._pending, None
            return result
        if self.process is None:
            return None
        status = self.process.poll()
        if status is None:
            if time.monotonic() - self.started_at < self.timeout:
                return None
            self._kill()
            self.process = None
            return self._result(124, f"[rackplane-agent: the check was stopped after {self.timeout:g} s]")
        self.process = None
        return self._result(128 - status if status < 0 else status)  # killed by signal N: 128+N, as a shell

    def stop(self) -> bool:
        """Stop a running check (the agent is exiting); True when one was running."""
        running = self.process is not None
        if running:
            info(f"stopping the check {self.name!r}: the agent is exiting (it runs again after a restart)")
            self._kill()
            self.process = None
        if self.output is not None:
            self.output.close()
            self.output = None
        return running


# --- the state file -----------------------------------------------------------------------------------------


def load_state(path: str, move_aside: bool = True) -> dict:
    """The saved state; a fresh one when there is none, or it cannot be read (moved aside unless told not to:
    a dry run changes nothing)."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return {"version": STATE_VERSION}
    except (OSError, ValueError) as failure:
        aside = f"{path}.corrupt"
        moved = f"moved to {aside}, " if move_aside else ""
        warn(f"the state file {path} cannot be read ({failure}); {moved}starting afresh.")
        if move_aside:
            with contextlib.suppress(OSError):
                os.replace(path, aside)
        return {"version": STATE_VERSION}
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        warn(f"the state file {path} is not one this agent wrote; starting afresh.")
        return {"version": STATE_VERSION}
    return state


def save_state(path: str, state: dict) -> None:
    """Write the state atomically: a temporary file in the same folder, flushed to disk, then renamed."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".state-", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    try:
        folder_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(folder_fd)
    except OSError:
        pass
    finally:
        os.close(folder_fd)


# --- posting ------------------------------------------------------------------------------------------------


def read_token(path: str, warned: set) -> str:
    try:
        status = os.stat(path)
        with open(path, encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as failure:
        raise ConfigError(
            f"cannot read the agent token file {path}: {failure.strerror}. Put the token the portal issued "
            "(`manage.py discovery_agent_token --host HOST`) there, mode 0600."
        ) from failure
    if not token:
        raise ConfigError(f"the agent token file {path} is empty.")
    if status.st_mode & 0o077 and path not in warned:
        warned.add(path)
        warn(
            f"the agent token file {path} is readable by others (mode {status.st_mode & 0o777:04o}): "
            f"run `chmod 600 {path}`."
        )
    return token


class Answer:
    """What came of one POST: `status` 0 when the portal could not be reached."""

    def __init__(self, status: int, data=None, message: str = "", retry_after: float | None = None):
        self.status, self.data, self.message, self.retry_after = status, data, message, retry_after

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def transient(self) -> bool:
        return self.status == 0 or self.status == 429 or self.status >= 500


def retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return max(0.0, (moment - datetime.now(timezone.utc)).total_seconds())


def portal_message(data, raw: str) -> str:
    """One line out of the portal's error body: DRF's {"detail": ...} or {"field": ["message", ...]}."""
    if isinstance(data, dict):
        if isinstance(data.get("detail"), str):
            return data["detail"]
        parts = []
        for key, value in data.items():
            value = value if isinstance(value, list) else [value]
            parts.append(f"{key}: {'; '.join(str(v) for v in value)}")
        return " | ".join(parts)[:1000]
    return " ".join(raw.split())[:300]


def post(url: str, token: str, body: dict, timeout: float, context: ssl.SSLContext | None) -> Answer:
    request = urllib.request.Request(
        url,
        data=json.dumps(body, ensure_ascii=False).encode("utf-8", "replace"),
        method="POST",
        headers={
            # Agent tokens (rpa_...) as inventory/api/auth.py documents them; a fleet token is an API token.
            "Authorization": f"{'Bearer' if token.startswith('rpa_') else 'Token'} {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"rackplane-agent/{VERSION}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            raw = response.read(1024 * 1024).decode("utf-8", "replace")
            status = response.status
            header = response.headers.get("Retry-After")
    except urllib.error.HTTPError as refusal:
        raw = refusal.read(64 * 1024).decode("utf-8", "replace")
        status, header = refusal.code, refusal.headers.get("Retry-After")
    except (urllib.error.URLError, OSError) as failure:
        reason = getattr(failure, "reason", failure)
        return Answer(0, message=str(reason))
    try:
        data = json.loads(raw) if raw.strip() else None
    except ValueError:
        data = None
    return Answer(status, data, portal_message(data, raw), retry_after(header))


def unknown_field(complaint) -> bool:
    return "unknown field" in str(complaint).lower()


def refuses_only_newer_keys(answer: Answer, sent: dict) -> bool:
    """A 400 from a portal older than this agent: each complaint is that a key this agent added is unknown."""
    if answer.status != 400 or not isinstance(answer.data, dict) or not answer.data:
        return False
    return all(key in NEWER_KEYS and key in sent and unknown_field(answer.data[key]) for key in answer.data)


def xid_key(xid: dict) -> tuple:
    return (xid["time"], xid["xid"], xid.get("pci_bus_id"), xid.get("pid"), xid["text"])


# --- the agent ----------------------------------------------------------------------------------------------


class Wake(Exception):
    """Raised by the signal handler to cut a sleep short."""


class Agent:
    def __init__(self, args):
        self.args = args
        self.url = args.portal.rstrip("/") + REPORT_PATH if args.portal else None
        self.context = ssl.create_default_context(cafile=args.ca_file) if args.ca_file else None
        self.nvidia_smi = NvidiaSmi(args.nvidia_smi, args.nvidia_smi_timeout)
        self.reader = kernel_log_reader(args)
        self.check = (
            CheckRunner(args.check_command, args.check_interval, args.check_timeout)
            if args.check_command
            else None
        )
        self.state = load_state(args.state_file, move_aside=not args.dry_run)
        self.state.setdefault("pending_xids", [])
        self.state.setdefault("pending_checks", [])
        self.state.setdefault("dropped_xids", 0)
        self.failures = 0
        self.stopping = False
        self._signal_name: str | None = None  # set by on_signal, logged by told_signal
        self._sleeping = False
        self._warned_token: set = set()
        self._older_portal_told = False
        self._hash_only_refused = False  # the portal does not know report_sha256: full reports only

    # signals ----------------------------------------------------------------------------------------------

    def on_signal(self, signum, frame) -> None:
        # No I/O here: the signal may arrive while the main flow is inside sys.stderr.write, and writing to
        # the same buffered stream from the handler raises "reentrant call" (the agent would exit 1). The
        # main flow says it (told_signal) at its next step.
        if not self.stopping:
            self._signal_name = signal.Signals(signum).name
        self.stopping = True
        if self._sleeping:
            raise Wake()

    def told_signal(self) -> None:
        """Log the signal that asked the agent to stop, once, from the main flow."""
        name, self._signal_name = self._signal_name, None
        if name:
            info(f"{name} received: stopping after the current step")

    def sleep(self, seconds: float) -> None:
        self.told_signal()
        if self.stopping or seconds <= 0:
            return
        try:
            try:
                self._sleeping = True
                time.sleep(seconds)
            finally:
                self._sleeping = False
        except Wake:
            pass
        self.told_signal()

    # one cycle --------------------------------------------------------------------------------------------

    def save(self) -> None:
        if not self.args.dry_run:
            save_state(self.args.state_file, self.state)

    def keep_xids(self, xids: list) -> None:
        pending = self.state["pending_xids"]
        # The portal refuses the same entry twice. Identical lines logged within the resolution of the log's
        # clock (a second in kern.log) are each sent, a microsecond apart.
        seen = {xid_key(x) for x in pending}
        for xid in xids:
            while xid_key(xid) in seen:
                xid["time"] = iso(datetime.fromisoformat(xid["time"]) + timedelta(microseconds=1))
            seen.add(xid_key(xid))
            pending.append(xid)
        over = len(pending) - self.args.max_pending_xids
        if over > 0:
            del pending[:over]
            self.state["dropped_xids"] += over
            warn(
                f"{over} XIDs were dropped, the oldest first: more than {self.args.max_pending_xids} waited "
                f"for the portal ({self.state['dropped_xids']} dropped since this state file was made)."
            )

    def collect_xids(self, gpus_by_pci: dict[str, str]) -> None:
        try:
            messages, position = self.reader.read(self.state.get("kernel_log"))
        except KernelLogError as failure:
            error(f"cannot read the kernel log: {failure}. This report carries no new XIDs.")
            return
        xids = [x for x in (parse_xid(m, when, gpus_by_pci) for when, m in messages) if x is not None]
        for xid in xids:
            info(f"XID {xid['xid']} on {xid.get('pci_bus_id', 'an unnamed GPU')}: {xid['text'][:200]}")
        self.keep_xids(xids)
        self.state["kernel_log"] = position

    def collect_check(self) -> None:
        if self.check is None:
            return
        result = self.check.poll()
        if result is None and self.check.due(self.state.get("last_check_started"), time.time()):
            self.state["last_check_started"] = self.check.start()
            if self.args.once or self.args.dry_run:  # one report: it waits for the check
                while result is None and not self.stopping:
                    result = self.check.poll()
                    if result is None:
                        self.sleep(0.1)
            else:
                result = self.check.poll()
        if result is not None:
            checks = self.state["pending_checks"]
            checks.append(result)
            if len(checks) > MAX_PENDING_CHECKS:
                dropped = len(checks) - MAX_PENDING_CHECKS
                del checks[:dropped]
                warn(f"{dropped} check results were dropped, the oldest first: the portal did not take them.")

    def report(self, xml: str | None, with_newer_keys: bool = True, mig: dict | None = None) -> dict:
        body: dict = {"host": self.args.host}
        if xml is not None:
            body["nvidia_smi"] = xml
        if with_newer_keys:
            if xml is not None and mig:
                body["mig"] = mig
            if self.state["pending_xids"]:
                body["xids"] = self.state["pending_xids"][:MAX_XIDS_PER_REPORT]
            checks, size = [], 0
            for check in self.state["pending_checks"]:  # oldest first, within the report's size budget
                size += len(json.dumps(check, ensure_ascii=False).encode())
                if checks and size > CHECKS_BUDGET:
                    break
                checks.append(check)
            if checks:
                body["checks"] = checks
            body["agent"] = {"version": VERSION, "interval_s": self.args.interval}
        return body

    def cycle(self) -> Answer | None:
        """Collect, post, remember. The answer (None when there was nothing to post, or with --dry-run)."""
        token = None if self.args.dry_run else read_token(self.args.token_file, self._warned_token)
        xml, gpus_by_pci = self.nvidia_smi.run()
        mig = self.nvidia_smi.mig(xml)  # None (and nothing run) unless a GPU is in MIG mode
        self.collect_xids(gpus_by_pci)
        self.collect_check()
        self.save()  # what was read is kept before posting: a crash now loses nothing
        body = self.report(xml, mig=mig)
        if self.args.dry_run:
            sys.stdout.write(json.dumps(body, indent=2) + "\n")
            sys.stdout.flush()
            return None
        if xml is None and not self.state["pending_xids"] and not self.state["pending_checks"]:
            warn("nothing to report this time (no GPU listing, no XID, no check result).")
            return None
        digest = (
            listing_digest(xml, VERSION, self.args.interval, mig)
            if xml is not None and self.hashing()
            else None
        )
        known = self.state.get("report") or {}
        if (
            digest is not None
            and digest == known.get("digest")
            and known.get("sha256")
            and "xids" not in body
            and "checks" not in body
        ):
            answer = self.post_hash(token, known["sha256"], body)
            if answer is not None:
                return answer
        answer = post(self.url, token, body, self.args.http_timeout, self.context)
        self.remember(answer, digest if "xids" not in body and "checks" not in body else None)
        if refuses_only_newer_keys(answer, body):
            if not self._older_portal_told:
                self._older_portal_told = True
                warn(
                    f"the portal does not take {', '.join(sorted(answer.data))} yet ({answer.message}): "
                    "upgrade it. Posting the GPU listing without them; XIDs and check results are kept "
                    "for a portal that takes them."
                )
            if xml is None:
                return answer
            answer = post(
                self.url, token, self.report(xml, with_newer_keys=False), self.args.http_timeout, self.context
            )
            self.tell(answer, body, sent_newer=False)
            return answer
        self.tell(answer, body, sent_newer=True)
        return answer

    def hashing(self) -> bool:
        return not self.args.no_hash_only and not self._hash_only_refused

    def remember(self, answer: Answer, digest: str | None) -> None:
        """Keep the digest of the listing the portal just reconciled with the hash it answered (both or
        neither): the next unchanged listing is sent as that hash."""
        sha256 = portal_hash(answer.data) if answer.ok else ""
        if digest is not None and sha256:
            self.state["report"] = {"digest": digest, "sha256": sha256}
        elif answer.ok or answer.status in (400, 409):
            self.state.pop("report", None)
        self.save()

    def post_hash(self, token: str, sha256: str, body: dict) -> Answer | None:
        """Post the hash alone; the answer when the portal took it (or could not be reached), None when
        the full report must follow (409, or a portal that does not know report_sha256)."""
        short = {"host": body["host"], "report_sha256": sha256}
        if "agent" in body:
            short["agent"] = body["agent"]
        answer = post(self.url, token, short, self.args.http_timeout, self.context)
        if answer.ok:
            info(f"posted the report hash for {self.args.host}: {answer.status}, unchanged")
            return answer
        if answer.status == 409:
            info(f"the portal asked for the full report of {self.args.host}: posting it")
            self.state.pop("report", None)
            return None
        if answer.status == 400 and isinstance(answer.data, dict) and "report_sha256" in answer.data:
            if unknown_field(answer.data["report_sha256"]):
                self._hash_only_refused = True
                warn("the portal does not take report hashes (report_sha256) yet: sending full reports.")
            self.state.pop("report", None)
            return None
        if answer.status == 0 or answer.transient:
            self.tell(answer, short, sent_newer=False)
            return answer
        self.state.pop("report", None)  # any other refusal: the full report says why
        return None

    def tell(self, answer: Answer, body: dict, sent_newer: bool) -> None:
        """Log the answer and drop from the state what the portal took (or refused for good)."""
        xids, checks = body.get("xids", []), body.get("checks", [])
        if answer.ok:
            if sent_newer:
                del self.state["pending_xids"][: len(xids)]
                del self.state["pending_checks"][: len(checks)]
            self.save()
            data = answer.data if isinstance(answer.data, dict) else {}
            gpus = len(data.get("gpus") or [])
            problems = "; ".join(str(p) for p in data.get("problems") or []) or "none"
            sent = f"{len(xids)} XIDs, {len(checks)} check results" if sent_newer else "no XIDs"
            waiting = len(self.state["pending_xids"])
            health = data.get("health") if isinstance(data.get("health"), dict) else {}
            judged = ""
            if health:
                actions = "; ".join(str(a) for a in health.get("actions") or []) or "none"
                judged = (
                    f"; health: {health.get('new_events', 0)} new events, {health.get('repeated_events', 0)} "
                    f"repeated, {health.get('unmapped_xids', 0)} XIDs on no known GPU, actions: {actions}"
                )
            info(
                f"posted the report for {self.args.host}: {answer.status}, {gpus} GPUs, {sent}"
                f"{f', {waiting} XIDs waiting' if waiting else ''}; problems: {problems}{judged}"
            )
            return
        if answer.status == 0:
            warn(f"the portal at {self.url} cannot be reached: {answer.message}.")
            return
        if answer.transient:
            warn(f"the portal answered {answer.status}: {answer.message or 'no message'}.")
            return
        error(f"the portal refused the report for {self.args.host} with {answer.status}: {answer.message}.")
        if answer.status == 400 and isinstance(answer.data, dict):
            # Entries the portal refuses would block every later report: drop them, saying so (unless the
            # portal only does not know the key yet: they are kept for one that does).
            for key in ("xids", "checks"):
                if key in answer.data and body.get(key) and not unknown_field(answer.data[key]):
                    del self.state[f"pending_{key}"][: len(body[key])]
                    error(f"{len(body[key])} {key} entries the portal refused were dropped.")
            self.save()

    # scheduling -------------------------------------------------------------------------------------------

    def next_delay(self, answer: Answer | None) -> float:
        interval, cap = self.args.interval, max(self.args.max_backoff, self.args.interval)
        if answer is None or answer.ok or answer.status == 400:
            self.failures = 0
            return interval * random.uniform(0.9, 1.1)
        if answer.transient:
            self.failures += 1
            ceiling = min(cap, interval * 2**self.failures)
            delay = random.uniform(ceiling / 2, ceiling)
            if answer.retry_after is not None:
                delay = max(delay, min(answer.retry_after, RETRY_AFTER_LIMIT))
            why = f" (Retry-After: {answer.retry_after:g} s)" if answer.retry_after is not None else ""
            info(f"next try in {delay:.1f} s{why}, after {self.failures} failed attempts in a row")
            return delay
        # 401, 403, 404, ...: the same report would be refused again; an admin has to act.
        self.failures = 0
        delay = cap * random.uniform(0.9, 1.0)
        info(f"next try in {delay:.0f} s, once the refusal above is dealt with")
        return delay

    def run(self) -> int:
        info(
            f"rackplane-agent {VERSION} reporting for {self.args.host} to "
            f"{self.url or 'nobody (--dry-run)'} every {self.args.interval} s; kernel log: "
            f"{self.reader.describe()}; state: {self.args.state_file}"
        )
        if not (self.args.once or self.args.dry_run):
            splay = self.args.interval if self.args.splay is None else self.args.splay
            self.sleep(random.uniform(0, max(0.0, splay)))
        status = EXIT_OK
        while not self.stopping:
            try:
                answer = self.cycle()
            except ConfigError as failure:
                error(str(failure))
                if self.args.once or self.args.dry_run:
                    return EXIT_USAGE
                answer = Answer(401, message=str(failure))
            except OSError as failure:  # the state file's disk, mostly: say so and try again later
                error(f"this cycle failed: {failure}")
                answer = Answer(0, message=str(failure))
            if self.args.once or self.args.dry_run:
                status = EXIT_OK if answer is None or answer.ok else EXIT_FAILED
                if answer is None and self.args.once and not self.args.dry_run:
                    status = EXIT_FAILED
                break
            self.sleep(self.next_delay(answer))
        if self.check is not None and self.check.stop():
            self.state["last_check_started"] = None  # cut short: due again at the next start
            self.save()
        if isinstance(self.reader, KmsgReader):
            self.reader.close()
        self.told_signal()
        info("stopped")
        return status


# --- command line -------------------------------------------------------------------------------------------


def positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not above 0")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rackplane-agent",
        description="Report this node's GPUs, XIDs and active checks to the Rackplane portal.",
        epilog=f"Every option can also be set in the environment: {ENV_PREFIX}PORTAL for --portal, "
        f"{ENV_PREFIX}CHECK_COMMAND for --check-command, {ENV_PREFIX}ONCE=1 for --once...; the command "
        "line wins.",
    )
    p.add_argument("--portal", help="the portal's URL, e.g. https://rackplane.example.com")
    p.add_argument(
        "--token-file",
        default="/etc/rackplane/agent.token",
        help="file holding the agent token (mode 0600; never on the command line) [%(default)s]",
    )
    p.add_argument(
        "--host",
        default=socket.gethostname(),
        help="the tray's hostname as the portal knows it [%(default)s]",
    )
    p.add_argument("--interval", type=positive(int), default=60, help="seconds between reports [%(default)s]")
    p.add_argument(
        "--splay",
        type=float,
        default=None,
        help="seconds of random delay before the first report, so a fleet does not report at once "
        "[the interval]",
    )
    p.add_argument(
        "--max-backoff",
        type=positive(float),
        default=600,
        help="longest wait after failures, in seconds [%(default)s]",
    )
    p.add_argument(
        "--http-timeout", type=positive(float), default=30, help="seconds per request [%(default)s]"
    )
    p.add_argument("--ca-file", help="CA bundle to check the portal's certificate with [the system's]")
    p.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to run [%(default)s]")
    p.add_argument(
        "--nvidia-smi-timeout",
        type=positive(float),
        default=60,
        help="seconds nvidia-smi may take [%(default)s]",
    )
    p.add_argument(
        "--kernel-log-source",
        choices=["auto", "journal", "kmsg", "file", "none"],
        default="auto",
        help="where to read XID lines: auto = journald if it runs here, else /dev/kmsg [%(default)s]",
    )
    p.add_argument(
        "--kernel-log", metavar="FILE", help="read a plain kernel log file instead (kern.log, dmesg)"
    )
    p.add_argument("--journalctl", default="journalctl", help="journalctl to run [%(default)s]")
    p.add_argument("--journal-directory", help="read the journal files in this folder (journalctl -D)")
    p.add_argument("--kernel-log-timeout", type=positive(float), default=60, help=argparse.SUPPRESS)
    p.add_argument(
        "--state-file",
        default="/var/lib/rackplane-agent/state.json",
        help="where the agent remembers what it read and what the portal has not taken yet [%(default)s]",
    )
    p.add_argument(
        "--max-pending-xids",
        type=positive(int),
        default=DEFAULT_MAX_PENDING_XIDS,
        help="XIDs kept while the portal does not take them; the oldest go first [%(default)s]",
    )
    p.add_argument("--check-command", help='active check to run, e.g. "dcgmi diag -r 2" (no shell)')
    p.add_argument(
        "--check-interval", type=positive(float), default=3600, help="seconds between checks [%(default)s]"
    )
    p.add_argument(
        "--check-timeout", type=positive(float), default=900, help="seconds a check may take [%(default)s]"
    )
    p.add_argument(
        "--no-hash-only",
        action="store_true",
        help="always post the full report (by default an unchanged listing is posted as its hash alone)",
    )
    p.add_argument("--once", action="store_true", help="post one report and exit (cron, tests)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the report as JSON, post nothing, change no state"
    )
    p.add_argument("--version", action="version", version=f"rackplane-agent {VERSION}")
    return p


ENV_PREFIX = "RACKPLANE_AGENT_"
TRUE = ("1", "true", "yes", "on")


def env_name(action: argparse.Action) -> str:
    return ENV_PREFIX + action.option_strings[-1].lstrip("-").upper().replace("-", "_")


def environment_defaults(p: argparse.ArgumentParser, environ) -> None:
    """Every option may come from the environment: --check-command from RACKPLANE_AGENT_CHECK_COMMAND, --once
    from RACKPLANE_AGENT_ONCE=1 (a systemd EnvironmentFile, a DaemonSet's env). The command line wins. The
    token itself never: only the path of its file (--token-file)."""
    for action in p._actions:
        if not action.option_strings or action.dest in ("help", "version"):
            continue
        value = environ.get(env_name(action))
        if value is None or value == "":
            continue
        if isinstance(action, argparse._StoreTrueAction):
            action.default = value.strip().lower() in TRUE
            continue
        try:
            action.default = action.type(value) if action.type else value
        except (argparse.ArgumentTypeError, ValueError) as failure:
            p.error(f"{env_name(action)}={value!r}: {failure}")
        if action.choices is not None and action.default not in action.choices:
            p.error(f"{env_name(action)}={value!r} is not one of {', '.join(map(str, action.choices))}")


def parse_args(argv: list[str] | None = None, environ=None) -> argparse.Namespace:
    p = parser()
    environment_defaults(p, os.environ if environ is None else environ)
    args = p.parse_args(argv)
    if not args.dry_run and not args.portal:
        p.error("--portal is required (or --dry-run to print the report)")
    if args.portal and not re.match(r"^https?://", args.portal):
        p.error(f"--portal {args.portal!r} is not an http:// or https:// URL")
    if args.check_command is not None and not shlex.split(args.check_command):
        p.error("--check-command is empty")
    args.host = args.host.strip()
    if not args.host:
        p.error("--host is empty")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        agent = Agent(args)
    except ConfigError as failure:
        error(str(failure))
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, agent.on_signal)
    signal.signal(signal.SIGINT, agent.on_signal)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
