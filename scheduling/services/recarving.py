"""Carving that follows demand, the pass's side: after the pass decided, propose re-carves for the in-quota
multi-tray gangs it left waiting, on the racks whose admin turned re-carving on.

The pass proposes, integrations applies. The engine (scheduling.engine.recarve.propose) picks the moves on
the cluster as the pass left it; each proposal is sent by task name (core.enqueue, on commit: the way a
started job goes to dispatch) to integrations.tasks.recarve_rack, which makes and applies the scheduler's
partition plan through the wizard's path, checking everything again under the rack's lock
(integrations.plans.recarve). Nothing is written here: a proposal is not a row, since every pass makes it
again from what it sees; one lost with the broker, or refused, is simply proposed again by a later pass
while the gang still waits.

What the engine needs to count (the hourly bound) is the scheduler's partition plans, which are inventory's
rows (PartitionPlan, origin "scheduler"): inventory.recarving.pass_view reads the enabled policies (one query,
only when an in-quota gang waits) and, when there are some, those plans (one more). So this layer never reads
integrations' models, and a pass with nothing to re-carve pays nothing.
A rack with a plan in flight is left out (one plan at a time per rack), and so is a gang a scheduler plan of
the last hour was made for (it waits for that partition, not for a second one).
"""

from __future__ import annotations

from datetime import datetime

from core.enqueue import enqueue
from core.task_names import RECARVE_RACK
from inventory import recarving
from scheduling.engine.cluster import Cluster
from scheduling.engine.recarve import Recarve, RecarvePolicy, propose, waiting_gangs
from scheduling.engine.scheduler import PassResult, PendingJob


def as_message(proposal: Recarve) -> dict:
    """A proposal as the task takes it (JSON)."""
    return {
        "rack": proposal.rack,
        "removed": list(proposal.removed),
        "created": [
            {"name": p.name, "hostnames": list(p.hostnames), "owner": p.owner} for p in proposal.created
        ],
        "job_id": proposal.job_id,
        "gpus": proposal.gpus,
        "reason": proposal.reason,
    }


def propose_recarves(
    cluster: Cluster, result: PassResult, pending: list[PendingJob], now: datetime
) -> list[Recarve]:
    """The pass's re-carves (sent to integrations when the pass commits). `cluster`: as the pass left it;
    `pending`: the engine's pending jobs the pass was given. No query when no rack has re-carving on."""
    gangs = waiting_gangs(result, pending)
    if not gangs:
        return []
    view = recarving.pass_view(now)
    gangs = [job for job in gangs if job.id not in view.served]
    if not view.policies or not gangs:
        return []
    policies = {
        name: RecarvePolicy(smallest_trays=p.smallest_trays, max_per_hour=p.max_per_hour)
        for name, p in view.policies.items()
    }
    proposals = propose(cluster, gangs, policies, recent=view.recent, now=now.timestamp())
    for proposal in proposals:
        enqueue(RECARVE_RACK, as_message(proposal))
    return proposals
