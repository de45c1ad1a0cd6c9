"""Drain, resume and maintenance windows of one node in slurmctld, owned by Rackplane and read back.

What Slurm 24.11 does, measured on the testbed (scripts/slurm-testbed.sh):

* `scontrol update NodeName=<n> State=DRAIN Reason=<text>` answers nothing and exits 0; the node shows
  `IDLE+DRAIN` (drained) or `ALLOCATED+DRAIN`/`MIXED+DRAIN` (draining: its jobs run on, no new job lands).
  A drain without a reason is refused ("You must specify a reason when DOWNING or DRAINING a node"), and a
  second drain simply replaces the reason: Slurm never protects another owner's reason, so Rackplane reads
  the node first and leaves any drain (or DOWN/FAIL) whose reason does not start with `rackplane:` alone:
  an admin's, Slurm's own ("Not responding", "Kill task failed"), NHC's.
* `scontrol --json show node <n>` (data_parser v0.0.42) gives the state flags (["IDLE", "DRAIN"]), the
  reason, who set it (`reason_set_by_user`) and when; `show node -o` gives the same as one line ending in
  `Reason=<text> [<user>@<time>]`, read when the JSON plugin is missing. An unknown node answers
  "Invalid node name specified" to update and "Node x not found" (or an empty JSON list) to show.
* RESUME makes a drained node IDLE; UNDRAIN clears only the drain and keeps the base state (a node Slurm
  marked DOWN stays DOWN until its slurmd answers). Neither clears the reason text: Slurm keeps the last
  reason on an IDLE node, so a reason counts only while the node is drained, down or failed.
* `ResumeAfter=<seconds>` on the drain makes slurmctld resume the node by itself (`ResumeAfterTime`).
* Maintenance: `scontrol create reservation ReservationName=... Nodes=<n> StartTime=now+<s>
  Duration=<d-hh:mm:ss> Flags=MAINT,IGNORE_JOBS Users=root` ("Reservation created: <name>"); a second create
  of the same name is "Duplicate reservation name"; `scontrol delete ReservationName=<name>` removes it and
  answers "Requested reservation is invalid" when there is none. MAINT reservations may overlap others.
  StartTime is given relative to slurmctld's own clock (`now+<seconds>`), so its time zone never matters.
* With slurmctld down every command fails after ~9 s with "Unable to contact slurm controller (connect
  failure)": `SlurmUnavailable`, transient.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from integrations.drain import (
    ALREADY_DRAINED,
    DRAINED,
    DRAINING,
    NOT_DRAINED,
    NOT_OURS,
    REASON_UPDATED,
    RESERVATION_REMOVED,
    RESERVED,
    RESUMED,
    WOULD_DRAIN,
    WOULD_REMOVE_RESERVATION,
    WOULD_RESERVE,
    WOULD_RESUME,
    TrayOutcome,
    is_ours,
    with_prefix,
)
from integrations.slurm.target import _UNREACHABLE, SlurmRejected, SlurmTarget, SlurmUnavailable

KIND = "slurm"
RESERVATION_PREFIX = "rackplane-maint-"
# Node state flags under which the reason tells who took the node out (otherwise it is a left-over).
OUT_FLAGS = {"DRAIN", "DOWN", "FAIL"}
BUSY_FLAGS = {"ALLOCATED", "MIXED", "COMPLETING"}
_UNKNOWN_NODE = re.compile(r"invalid node name|not found", re.IGNORECASE)
_NO_RESERVATION = re.compile(r"requested reservation is invalid|not found", re.IGNORECASE)
_SET_BY = re.compile(r"\s*\[(?P<user>[^@\]]+)@(?P<at>[^\]]+)\]$")
_NAME_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class SlurmNodeUnknown(SlurmRejected):
    """slurmctld does not know the node (not in its slurm.conf)."""


@dataclass(frozen=True)
class NodeStatus:
    """One node as slurmctld shows it: state flags (base state first), reason, who set it and when."""

    name: str
    flags: tuple[str, ...]
    reason: str = ""
    reason_by: str = ""
    reason_at: str = ""
    resume_after: int = 0  # epoch seconds; 0 = none

    @property
    def state(self) -> str:
        return "+".join(self.flags)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def out(self) -> bool:
        """Out of service for a reason someone gave (drained, down or failed)."""
        return bool(OUT_FLAGS & set(self.flags))

    @property
    def busy(self) -> bool:
        return bool(BUSY_FLAGS & set(self.flags))

    @property
    def ours(self) -> bool:
        return self.out and is_ours(self.reason)

    def words(self) -> str:
        text = self.state
        if self.out and self.reason:
            who = f" by {self.reason_by}" if self.reason_by else ""
            when = f" at {self.reason_at}" if self.reason_at else ""
            text += f' (reason "{self.reason}", set{who}{when})'
        return text


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: str
    flags: tuple[str, ...]
    start: int  # epoch seconds
    end: int
    users: str = ""


def parse_node_json(text: str) -> NodeStatus | None:
    """`scontrol --json show node <n>` -> the node, None when slurmctld lists no such node."""
    data = json.loads(text)
    nodes = data.get("nodes") or []
    if not nodes:
        return None
    node = nodes[0]
    changed = (node.get("reason_changed_at") or {}).get("number") or 0
    resume_after = node.get("resume_after") or {}
    return NodeStatus(
        name=node["name"],
        flags=tuple(node.get("state") or ()),
        reason=node.get("reason") or "",
        reason_by=node.get("reason_set_by_user") or "",
        reason_at=datetime.fromtimestamp(changed, UTC).isoformat(timespec="seconds") if changed else "",
        resume_after=int(resume_after.get("number") or 0) if resume_after.get("set") else 0,
    )


def parse_node_line(text: str) -> NodeStatus | None:
    """`scontrol show node -o <n>` (one line: `Key=value` pairs, `Reason=<text> [<user>@<time>]` last)."""
    line = next((ln for ln in text.splitlines() if ln.startswith("NodeName=")), "")
    if not line:
        return None
    name = line.split()[0].split("=", 1)[1]
    state = re.search(r"(?:^|\s)State=(\S+)", line)
    reason, by, at = "", "", ""
    head, found, tail = line.partition(" Reason=")
    if found:
        reason = tail.rstrip()
        match = _SET_BY.search(reason)
        if match:
            by, at = match["user"], match["at"]
            reason = reason[: match.start()]
    resume = re.search(r"(?:^|\s)ResumeAfterTime=(\S+)", head)
    return NodeStatus(
        name=name,
        flags=tuple(state.group(1).split("+")) if state else (),
        reason=reason,
        reason_by=by,
        reason_at=at,
        resume_after=0 if not resume or resume.group(1) in ("None", "(null)") else 1,
    )


def reservation_name(host: str, window_id: int | str) -> str:
    return f"{RESERVATION_PREFIX}{host}-{_NAME_SAFE.sub('-', str(window_id))}"


def duration_text(seconds: int) -> str:
    """Seconds -> Slurm's `[days-]hours:minutes:seconds` (whole minutes, rounded up: Slurm's unit)."""
    minutes = max(1, -(-int(seconds) // 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{days}-" if days else "") + f"{hours:02d}:{minutes:02d}:00"


class SlurmDrainer:
    """Drain, resume and maintenance reservations of nodes on one Slurm controller (through scontrol).

    Built from a Slurm target's cleaned settings (`scontrol`, `config_dir`) or from a `SlurmTarget`."""

    kind = KIND

    def __init__(self, values: dict | None = None, *, slurm: SlurmTarget | None = None, name: str = ""):
        if slurm is None:
            values = values or {}
            slurm = SlurmTarget(
                values.get("config_dir") or "/etc/slurm", values.get("scontrol") or "scontrol"
            )
        self.slurm = slurm
        self.name = name

    # --- commands ---------------------------------------------------------------------------------

    def _argv(self, *args: str) -> str:
        return shlex.join([*self.slurm.scontrol, *args])

    def _run(self, *args: str, what: str):
        done = self.slurm.scontrol_run(*args)
        if done.returncode != 0 and _UNREACHABLE.search(done.output):
            raise SlurmUnavailable(
                f"cannot {what}: slurmctld did not answer ({done.output})",
                "retry later, once slurmctld runs again (check `systemctl status slurmctld` on the "
                "controller); nothing was changed",
            )
        return done

    def read_node(self, host: str) -> NodeStatus:
        """The node as slurmctld shows it; SlurmNodeUnknown when it does not know it."""
        done = self._run("--json", "show", "node", host, what=f"read node {host}")
        node = None
        if done.returncode == 0 and done.stdout.lstrip().startswith("{"):
            node = parse_node_json(done.stdout)
        else:
            # No JSON data_parser plugin on this controller: the one-line text form says the same.
            done = self._run("show", "node", "-o", host, what=f"read node {host}")
            if done.returncode == 0:
                node = parse_node_line(done.stdout)
            elif not _UNKNOWN_NODE.search(done.output):
                raise SlurmRejected(
                    f"cannot read node {host}: scontrol said {done.output!r}",
                    "check the Slurm target's scontrol and that it may talk to slurmctld",
                )
        if node is None or node.name != host:
            raise SlurmNodeUnknown(
                f"slurmctld does not know a node named {host}",
                "add the tray to the Slurm cluster (push the Slurm target's configuration) or check the "
                "tray's host name",
            )
        return node

    def read_reservation(self, name: str) -> Reservation | None:
        done = self._run("--json", "show", "reservation", name, what=f"read reservation {name}")
        if done.returncode != 0:
            if _NO_RESERVATION.search(done.output):
                return None
            raise SlurmRejected(f"cannot read reservation {name}: scontrol said {done.output!r}")
        found = [r for r in json.loads(done.stdout).get("reservations") or [] if r.get("name") == name]
        if not found:
            return None
        r = found[0]
        return Reservation(
            name=r["name"],
            nodes=r.get("node_list") or "",
            flags=tuple(r.get("flags") or ()),
            start=int((r.get("start_time") or {}).get("number") or 0),
            end=int((r.get("end_time") or {}).get("number") or 0),
            users=r.get("users") or "",
        )

    def _outcome(self, host: str, action: str, message: str, node: NodeStatus | None = None, **kw: Any):
        fields: dict[str, Any] = {
            "state": node.state if node else "",
            "reason": node.reason if node and node.out else "",
            "owner": node.reason_by if node and node.out else "",
        }
        fields.update(kw)
        return TrayOutcome(target=self.name, kind=KIND, host=host, action=action, message=message, **fields)

    # --- drain and resume -------------------------------------------------------------------------

    def drain(
        self,
        host: str,
        reason: str,
        *,
        owner: str = "",
        fault: str = "",
        dry_run: bool = False,
        resume_after_s: int | None = None,
    ) -> TrayOutcome:
        """Drain `host` with Rackplane's `reason`, unless another owner has it out already (then left)."""
        reason = with_prefix(reason)
        args = ["update", f"NodeName={host}", "State=DRAIN", f"Reason={reason}"]
        if resume_after_s is not None:
            args.append(f"ResumeAfter={int(resume_after_s)}")
        if dry_run:
            return self._outcome(
                host,
                WOULD_DRAIN,
                f"dry run: would drain {host} with the reason {reason!r} unless another owner has it out "
                "already (nothing was run on the controller)",
                dry_run=True,
                sent=[self._argv(*args)],
            )
        node = self.read_node(host)
        if node.out and not is_ours(node.reason):
            return self._outcome(
                host,
                NOT_OURS,
                f"left as it is: {host} is out for another owner's reason, which Rackplane does not "
                f"overwrite: {node.words()}",
                node,
            )
        if node.drained and node.reason == reason and resume_after_s is None:
            return self._outcome(host, ALREADY_DRAINED, f"already drained by Rackplane: {node.words()}", node)
        done = self._run(*args, what=f"drain {host}")
        if done.returncode != 0:
            self._refused(done.output, host, "drain")
        after = self.read_node(host)
        if not after.drained or after.reason != reason:
            raise SlurmRejected(
                f"slurmctld took the drain of {host} but shows {after.words()}",
                "look at slurmctld's log for why the node changed, then drain it again",
            )
        if node.ours and node.drained:
            action, said = REASON_UPDATED, f"still drained by Rackplane; the reason now says {reason!r}"
        elif after.busy:
            action, said = DRAINING, f"draining: no new job lands on {host}; its running jobs go on"
        else:
            action, said = DRAINED, f"drained: no job lands on {host}"
        return self._outcome(
            host, action, f"{said} ({after.words()})", after, changed=True, sent=[self._argv(*args)]
        )

    def resume(self, host: str, *, owner: str = "", dry_run: bool = False) -> TrayOutcome:
        """Return `host` to service if Rackplane drained it; another owner's drain is left (and reported).
        RESUME, or UNDRAIN when the node is also DOWN (that is slurmctld's to clear when slurmd answers)."""
        if dry_run:
            args = ["update", f"NodeName={host}", "State=RESUME"]
            return self._outcome(
                host,
                WOULD_RESUME,
                f"dry run: would resume {host} if Rackplane drained it (State=RESUME, or UNDRAIN when Slurm "
                "has it DOWN as well); nothing was run on the controller",
                dry_run=True,
                sent=[self._argv(*args)],
            )
        node = self.read_node(host)
        if not node.out:
            return self._outcome(host, NOT_DRAINED, f"not drained, nothing to resume: {node.state}", node)
        if not is_ours(node.reason):
            return self._outcome(
                host,
                NOT_OURS,
                f"left as it is: {host} is out for another owner's reason, which only that owner (or an "
                f"admin with scontrol) may clear: {node.words()}",
                node,
            )
        if not node.drained:
            return self._outcome(
                host,
                NOT_DRAINED,
                f"not drained by Rackplane any more: Slurm has it {node.words()}; slurmctld returns it when "
                "its slurmd answers",
                node,
            )
        state = "UNDRAIN" if "DOWN" in node.flags else "RESUME"
        args = ["update", f"NodeName={host}", f"State={state}"]
        done = self._run(*args, what=f"resume {host}")
        if done.returncode != 0:
            self._refused(done.output, host, "resume")
        after = self.read_node(host)
        if after.drained:
            raise SlurmRejected(
                f"slurmctld took the resume of {host} but still shows {after.words()}",
                "look at slurmctld's log, then resume it again",
            )
        said = (
            f"drain cleared; Slurm still has {host} DOWN and returns it when its slurmd answers"
            if "DOWN" in after.flags
            else f"back in service: {after.state}"
        )
        return self._outcome(host, RESUMED, said, after, changed=True, sent=[self._argv(*args)])

    def _refused(self, output: str, host: str, what: str) -> None:
        if _UNKNOWN_NODE.search(output):
            raise SlurmNodeUnknown(
                f"slurmctld does not know a node named {host}",
                "add the tray to the Slurm cluster or check the tray's host name",
            )
        raise SlurmRejected(
            f"slurmctld refused to {what} {host}: {output}", "see slurmctld's words above and fix the cause"
        )

    # --- maintenance windows ----------------------------------------------------------------------

    def schedule_maintenance(
        self,
        host: str,
        window_id: int | str,
        start: datetime,
        end: datetime,
        reason: str = "",
        *,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> TrayOutcome:
        """A MAINT,IGNORE_JOBS reservation of `host` from `start` to `end` (made once; moved if the window
        moved). Start and end are aware datetimes; the controller gets them relative to its clock."""
        name = reservation_name(host, window_id)
        now = now or datetime.now(UTC)
        offset = max(0, round((start - now).total_seconds()))
        length = max(60, round((end - max(start, now)).total_seconds()))
        timing = [
            f"StartTime=now+{offset}" if offset else "StartTime=now",
            f"Duration={duration_text(length)}",
        ]
        comment = f"Comment={with_prefix(reason or 'maintenance')}"
        create = [
            "create",
            "reservation",
            f"ReservationName={name}",
            f"Nodes={host}",
            *timing,
            "Flags=MAINT,IGNORE_JOBS",
            "Users=root",
            comment,
        ]
        if dry_run:
            return self._outcome(
                host,
                WOULD_RESERVE,
                f"dry run: would reserve {host} for maintenance as {name} from {start.isoformat()} to "
                f"{end.isoformat()} (nothing was run on the controller)",
                dry_run=True,
                sent=[self._argv(*create)],
            )
        existing = self.read_reservation(name)
        wanted_start = int(now.timestamp()) + offset
        wanted_end = wanted_start + -(-length // 60) * 60
        if existing is not None:
            if (
                existing.nodes == host
                and abs(existing.start - wanted_start) <= 60
                and abs(existing.end - wanted_end) <= 60
            ):
                return self._outcome(
                    host, RESERVED, f"maintenance reservation {name} is in place already", **_times(existing)
                )
            args = ["update", f"ReservationName={name}", f"Nodes={host}", *timing]
        else:
            args = create
        done = self._run(*args, what=f"reserve {host} for maintenance")
        if done.returncode != 0:
            if _UNKNOWN_NODE.search(done.output):
                raise SlurmNodeUnknown(f"slurmctld does not know a node named {host}", "check the host name")
            raise SlurmRejected(
                f"slurmctld refused the maintenance reservation {name}: {done.output}",
                "see slurmctld's words above and fix the window",
            )
        shown = self.read_reservation(name)
        if shown is None or shown.nodes != host or "MAINT" not in shown.flags:
            raise SlurmRejected(
                f"slurmctld took the reservation {name} but shows {shown}",
                "look at `scontrol show reservation` and slurmctld's log",
            )
        return self._outcome(
            host,
            RESERVED,
            f"reserved for maintenance as {name} from "
            f"{datetime.fromtimestamp(shown.start, UTC).isoformat()} to "
            f"{datetime.fromtimestamp(shown.end, UTC).isoformat()}: no new job is placed across the window",
            changed=True,
            sent=[self._argv(*args)],
            **_times(shown),
        )

    def end_maintenance(self, host: str, window_id: int | str, *, dry_run: bool = False) -> TrayOutcome:
        name = reservation_name(host, window_id)
        args = ["delete", f"ReservationName={name}"]
        if dry_run:
            return self._outcome(
                host,
                WOULD_REMOVE_RESERVATION,
                f"dry run: would remove the maintenance reservation {name} (nothing was run)",
                dry_run=True,
                sent=[self._argv(*args)],
            )
        done = self._run(*args, what=f"remove reservation {name}")
        if done.returncode != 0:
            if _NO_RESERVATION.search(done.output):
                return self._outcome(
                    host, RESERVATION_REMOVED, f"no maintenance reservation {name} (removed already)"
                )
            raise SlurmRejected(f"slurmctld refused to remove reservation {name}: {done.output}")
        if self.read_reservation(name) is not None:
            raise SlurmRejected(f"slurmctld still shows reservation {name} after removing it")
        return self._outcome(
            host,
            RESERVATION_REMOVED,
            f"maintenance reservation {name} removed",
            changed=True,
            sent=[self._argv(*args)],
        )


def _times(reservation: Reservation) -> dict[str, str]:
    start = datetime.fromtimestamp(reservation.start, UTC).isoformat()
    end = datetime.fromtimestamp(reservation.end, UTC).isoformat()
    return {"state": f"{','.join(reservation.flags)} {start} to {end}"}
