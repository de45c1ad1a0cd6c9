"""Taking a compute tray out of service, and back, on every scheduler that runs work on it.

One entry point for the health side (inventory.health's `tray_health_changed`) and the operators' actions:

    apply_tray_state("gb-r01-t07", "drain", "rackplane: XID 79 (...) on GPU-... at ...", owner="rules")
    apply_tray_state("gb-r01-t07", "up", owner="alice")
    schedule_maintenance("gb-r01-t07", 12, start, end, "rackplane: maintenance: fan swap")
    end_maintenance("gb-r01-t07", 12)

Each goes through every enabled configuration target whose kind registered a tray drainer
(`Kind.drainer` in integrations.registry: Slurm and Kubernetes) and returns one `TrayOutcome` per target,
in words. A target that fails does not stop the others: its outcome carries the error and whether it is
transient (retry later: the controller or API server did not answer) or permanent (a person must act).

Ownership is the rule everywhere: Rackplane's drains carry the owner prefix `rackplane:` (Slurm reasons,
Kubernetes annotations and condition), Rackplane never overwrites a drain another owner made (an admin's,
Slurm's own, another tool's cordon) and only ever undoes its own. What another owner set is read back and
reported (`action == "not_ours"`), never changed.

Dry run (`dry_run=True`, or a Kubernetes target configured for dry runs): nothing changes. Kubernetes
writes are sent with `dryRun=All` (the API server validates them and changes nothing); on Slurm nothing is
run at all, and the outcome lists the exact commands a real run would run (a real run reads the node first,
so it may then find another owner's drain and leave it).

This module imports no kind: the kinds' drainers import `TrayOutcome` and the helpers from here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from core.errors import with_advice
from integrations.interfaces import FAILED, TrayOutcome

logger = logging.getLogger(__name__)

REASON_PREFIX = "rackplane: "  # the owner prefix of every drain Rackplane makes (as inventory.health's)
OWNER = "rackplane"
REASON_LIMIT = 255

# The tray states of inventory.choices.TrayState that keep a tray out of service on the schedulers.
IN_SERVICE = "up"
OUT_OF_SERVICE = ("drain", "down", "maintenance", "needs_service")

# What an outcome says happened (TrayOutcome.action).
DRAINED = "drained"  # no job runs there (any more)
DRAINING = "draining"  # drained, jobs still running: no new work lands there
ALREADY_DRAINED = "already_drained"  # Rackplane's drain was in place already
REASON_UPDATED = "reason_updated"  # Rackplane's drain was in place; its reason now says the newest cause
RESUMED = "resumed"
NOT_DRAINED = "not_drained"  # resume: nothing of Rackplane's to undo
NOT_OURS = "not_ours"  # another owner's drain or cordon: left as it is, reported
NOT_REGISTERED = "not_registered"  # the scheduler does not know this tray (not every tray is in every one)
RESERVED = "reserved"
RESERVATION_REMOVED = "reservation_removed"
NOT_SUPPORTED = "not_supported"
# FAILED ("failed") is defined beside TrayOutcome, whose `ok` reads it (integrations.interfaces).
WOULD_DRAIN = "would_drain"
WOULD_RESUME = "would_resume"
WOULD_RESERVE = "would_reserve"
WOULD_REMOVE_RESERVATION = "would_remove_reservation"


def with_prefix(reason: str) -> str:
    """`reason` as one line that starts with Rackplane's owner prefix, at most REASON_LIMIT characters."""
    text = " ".join((reason or "").split())
    if not text.startswith(REASON_PREFIX.strip()):
        text = REASON_PREFIX + (text or "drained")
    return text[:REASON_LIMIT]


def is_ours(reason: str | None) -> bool:
    """Whether a drain reason is Rackplane's (its owner prefix), as Slinky and NVSentinel tell theirs."""
    return bool(reason) and reason.startswith(REASON_PREFIX.strip())


def fault_class(desired: str, reason: str) -> str:
    """A short class for a taint value: xid-79, needs-service, maintenance, fabric, check or fault."""
    if desired == "maintenance" or "maintenance" in reason.lower():
        return "maintenance"
    if desired == "needs_service" or "needs service" in reason.lower():
        return "needs-service"
    match = re.search(r"\bXID (\d+)", reason, re.IGNORECASE)
    if match:
        return f"xid-{match.group(1)}"
    lowered = reason.lower()
    if "fabric" in lowered or "nvlink" in lowered:
        return "fabric"
    if "check" in lowered:
        return "check"
    return "fault"


def failed(target: str, kind: str, host: str, error: BaseException, what: str) -> TrayOutcome:
    """An outcome for a target that raised: its message and whether trying again later can help."""
    transient = bool(getattr(error, "transient", False))
    text = str(error)
    advice = "retry later" if transient else "fix the cause and try again"
    return TrayOutcome(
        target=target,
        kind=kind,
        host=host,
        action=FAILED,
        message=with_advice(f"could not {what}: {text}", advice),
        error=text,
        transient=transient,
    )


# --- the entry points ---------------------------------------------------------------------------------


def _drainers(targets: Iterable[Any] | None):
    """(target, kind name, drainer) for every enabled target whose kind registered a drainer."""
    from integrations import registry
    from integrations.models import ConfigTarget

    kinds = registry.drainer_kinds()
    chosen = (
        list(targets)
        if targets is not None
        else list(ConfigTarget.objects.filter(enabled=True, kind__in=kinds).order_by("name"))
    )
    for target in chosen:
        if target.kind not in kinds:
            continue
        factory = registry.drainer(target.kind)
        try:
            yield target, factory(target.cleaned_settings()), None
        except Exception as error:  # a target whose settings no longer validate: reported, not raised
            yield target, None, error


def apply_tray_state(
    tray_hostname: str,
    desired: str,
    reason: str = "",
    owner: str = OWNER,
    *,
    fault: str = "",
    dry_run: bool = False,
    resume_after_s: int | None = None,
    targets: Iterable[Any] | None = None,
) -> list[TrayOutcome]:
    """Make every scheduler agree with the tray's state: `desired` "up" resumes what Rackplane drained;
    "drain", "down", "maintenance" or "needs_service" drain it with `reason` (given the owner prefix if it
    lacks it). `owner` says who asked (a user name, or "rules"): recorded beside the drain where the
    scheduler can hold it. `fault` is the class in the Kubernetes taint's value (default: from the reason,
    e.g. xid-79). `resume_after_s`: Slurm resumes the node by itself after that many seconds (ResumeAfter).
    `targets`: only these ConfigTargets (default: every enabled one whose kind drains trays)."""
    if desired != IN_SERVICE and desired not in OUT_OF_SERVICE:
        raise ValueError(f"unknown tray state {desired!r} (known: {IN_SERVICE}, {', '.join(OUT_OF_SERVICE)})")
    text = with_prefix(reason) if desired != IN_SERVICE else ""
    klass = fault or fault_class(desired, text)
    outcomes = []
    for target, drainer, error in _drainers(targets):
        what = "resume the tray" if desired == IN_SERVICE else "drain the tray"
        if drainer is None:
            outcomes.append(failed(target.name, target.kind, tray_hostname, error, what))
            continue
        try:
            if desired == IN_SERVICE:
                outcome = drainer.resume(tray_hostname, owner=owner, dry_run=dry_run)
            else:
                outcome = drainer.drain(
                    tray_hostname,
                    text,
                    owner=owner,
                    fault=klass,
                    dry_run=dry_run,
                    resume_after_s=resume_after_s,
                )
        except Exception as error:  # one target's failure never stops the others
            outcome = failed(target.name, target.kind, tray_hostname, error, what)
        outcome.target = target.name
        outcomes.append(outcome)
        logger.info("tray %s -> %s: %s", tray_hostname, desired, outcome)
    return outcomes


def schedule_maintenance(
    tray_hostname: str,
    window_id: int | str,
    start: datetime,
    end: datetime,
    reason: str = "",
    *,
    dry_run: bool = False,
    targets: Iterable[Any] | None = None,
) -> list[TrayOutcome]:
    """A maintenance window for the tray on every scheduler that has such a thing (Slurm: a reservation
    `rackplane-maint-<host>-<window_id>` with Flags=MAINT,IGNORE_JOBS; running it twice changes nothing).
    Kubernetes has no reservations: its outcome says so (drain the tray when the window starts)."""
    if end <= start:
        raise ValueError("a maintenance window must end after it starts")
    text = with_prefix(reason or "maintenance")
    outcomes = []
    for target, drainer, error in _drainers(targets):
        if drainer is None:
            outcomes.append(failed(target.name, target.kind, tray_hostname, error, "reserve the tray"))
            continue
        try:
            outcome = drainer.schedule_maintenance(
                tray_hostname, window_id, start, end, text, dry_run=dry_run
            )
        except Exception as error:
            outcome = failed(target.name, target.kind, tray_hostname, error, "reserve the tray")
        outcome.target = target.name
        outcomes.append(outcome)
    return outcomes


def end_maintenance(
    tray_hostname: str,
    window_id: int | str,
    *,
    dry_run: bool = False,
    targets: Iterable[Any] | None = None,
) -> list[TrayOutcome]:
    """Remove the tray's maintenance window `window_id` wherever `schedule_maintenance` made one."""
    outcomes = []
    for target, drainer, error in _drainers(targets):
        if drainer is None:
            outcomes.append(failed(target.name, target.kind, tray_hostname, error, "end the maintenance"))
            continue
        try:
            outcome = drainer.end_maintenance(tray_hostname, window_id, dry_run=dry_run)
        except Exception as error:
            outcome = failed(target.name, target.kind, tray_hostname, error, "end the maintenance")
        outcome.target = target.name
        outcomes.append(outcome)
    return outcomes
