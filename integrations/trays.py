"""Every scheduler agrees with a tray's state: when a compute tray leaves service (drain, down, maintenance,
needs service: by the health rules, an admin or an operator action) or returns to it, each enabled target
that runs work on trays (Slurm: DRAIN/RESUME with Rackplane's reason; Kubernetes: cordon, taint and a node
condition) is told, through integrations.drain.apply_tray_state.

`sync_tray(tray_id)` reads the tray as it is now (not as it was when the change was made: two quick changes
end in the last one), applies it to every target, and stores what each target answered on the tray
(`scheduler_state`, shown on the tray page) and in the log. Outcomes that failed transiently (a
controller or API server that did not answer) make it return a retry delay: the task sends itself again.
Another owner's drain is never touched (the drain module's rule): the outcome says whose it is.

integrations.signals asks for a sync after every commit that changes a tray's state or reason: a tray saved
alone (the health rules, an operator), or trays changed together (a partition plan drains its trays and
returns them with one recorded update: core.audit.bulk_changed names each), one sync per tray.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from core.audit import current_actor
from core.retry import backoff
from integrations.drain import FAILED, apply_tray_state
from inventory.choices import TrayState
from inventory.models import ComputeTray

logger = logging.getLogger(__name__)

# The tray's fields kept in step with the schedulers.
SYNCED_FIELDS = ("state", "state_reason")
# Outcome fields kept on the tray (the commands sent stay in the log).
KEPT = ("target", "kind", "action", "message", "state", "reason", "owner", "error", "transient", "dry_run")


def owner_name() -> str:
    """Who is asking, as the schedulers record it beside the drain: the signed-in user, else the rules."""
    actor = current_actor()
    return getattr(actor, "username", "") or "rackplane"


def sync_tray(tray_id: int, *, owner: str = "rackplane", attempt: int = 1) -> dict:
    """Make every scheduler agree with the tray's current state; see the module doc. Returns {"outcomes":
    [...], "retry_in": seconds or None}."""
    tray = ComputeTray.objects.filter(pk=tray_id).only("pk", "hostname", "state", "state_reason").first()
    if tray is None:
        return {"outcomes": [], "retry_in": None}
    desired = TrayState.UP.value if tray.state == TrayState.UP else str(tray.state)
    outcomes = apply_tray_state(tray.hostname, desired, tray.state_reason, owner=owner)
    kept = [{key: getattr(outcome, key) for key in KEPT} for outcome in outcomes]
    with transaction.atomic():
        # Written only if the tray still is in the state just applied: a newer change has its own sync.
        ComputeTray.objects.filter(pk=tray.pk, state=tray.state, state_reason=tray.state_reason).update(
            scheduler_state=kept, scheduler_state_at=timezone.now()
        )
    for outcome in outcomes:
        level = logging.WARNING if outcome.action == FAILED else logging.INFO
        logger.log(level, "tray %s (%s): %s", tray.hostname, desired, outcome)
    retry = any(o.action == FAILED and o.transient for o in outcomes)
    return {"outcomes": kept, "retry_in": backoff(attempt) if retry else None}
