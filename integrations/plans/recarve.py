"""The scheduler's re-carves, carried out: a proposal of the scheduling pass becomes a partition plan.

The pass (scheduling.services.recarving) proposes, for a rack whose RecarvePolicy is on, to replace some
wholly idle NVLink partitions by the partitions a waiting in-quota gang needs (scheduling.engine.recarve),
and sends each proposal here by task name (core.enqueue, as it sends a started job to dispatch). `apply`
turns it into a PartitionPlan through the wizard's own path (integrations.plans.service: `check` with the
Slurm block-size rule, `create_plan`, `apply_plan`, its pushes to the fabric manager, Slurm and Kubernetes,
`refresh_status`, and the nodes' reports settling the fabric), marked as the scheduler's (origin, reason,
the job it is for, no user) and audited under AuditSource.SCHEDULER.

Everything is checked again under the rack's row lock, the one `apply_plan` takes, since the pass decided on
a state that may have moved since: the policy still on, the hourly bound (the scheduler's plans of the rack in
the last hour), no other plan in flight, the job still waiting and none made for it already, every tray to
re-carve still idle and in the partitions the pass saw, owners kept (a department's dedicated trays only ever
go to a partition of that department), no partition under the policy's smallest. Anything off refuses the
whole proposal, with a log line and nothing written: never half a re-carve. A proposal refused, or lost with a
broker that was down, costs nothing more: the next pass proposes again from the state it then sees.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.audit import audit_context
from core.models import AuditSource
from integrations.plans.service import PlanConflict, Recarve, apply_plan, create_plan, rack_trays
from inventory import recarving
from inventory.choices import ACTIVE_PLAN_STATES, PlanStatus
from inventory.models import NVLinkPartition, PartitionPlan, Rack, RecarvePolicy
from inventory.planning import PlannedPartition
from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.models import DedicatedPartition

logger = logging.getLogger(__name__)


class Refused(Exception):
    """Why a proposal is not carried out (logged, never raised to the task)."""


@dataclass(frozen=True)
class Proposal:
    """A re-carve as the pass sends it (`as_message`: JSON, for the task queue)."""

    rack: str
    removed: tuple[str, ...]  # partition names, each wholly idle
    created: tuple[tuple[str, tuple[str, ...], str | None], ...]  # (name, hostnames, owner department slug)
    job_id: int
    gpus: int
    reason: str

    @classmethod
    def from_message(cls, message: dict) -> Proposal:
        return cls(
            rack=str(message["rack"]),
            removed=tuple(str(name) for name in message["removed"]),
            created=tuple(
                (str(c["name"]), tuple(str(h) for h in c["hostnames"]), c.get("owner") or None)
                for c in message["created"]
            ),
            job_id=int(message["job_id"]),
            gpus=int(message["gpus"]),
            reason=str(message["reason"])[:300],
        )


def apply(message: dict) -> PartitionPlan | None:
    """Carry out one proposal: the scheduler's plan, applying (or applied), or None when refused."""
    proposal = Proposal.from_message(message)
    with audit_context(AuditSource.SCHEDULER):
        try:
            with transaction.atomic():
                rack = Rack.objects.select_for_update().filter(name=proposal.rack).first()
                if rack is None:
                    raise Refused("no such rack")
                _not_served(proposal)
                partitions = _layout(rack, proposal, _policy(rack))
                plan = create_plan(
                    rack,
                    partitions,
                    drain=False,
                    user=None,
                    scheduler=Recarve(proposal.reason, proposal.job_id),
                )
                plan = apply_plan(plan)
        except (Refused, PlanConflict) as error:
            logger.info("re-carve of %s for job %s not made: %s", proposal.rack, proposal.job_id, error)
            return None
        except ValidationError as error:
            logger.info(
                "re-carve of %s for job %s not made: %s",
                proposal.rack,
                proposal.job_id,
                " ".join(error.messages),
            )
            return None
    logger.info(
        "re-carve of %s for job %s: plan #%s (%s)", rack.name, proposal.job_id, plan.pk, proposal.reason
    )
    return plan


def _policy(rack: Rack) -> RecarvePolicy:
    """The rack's policy if it still lets the scheduler re-carve now; Refused otherwise."""
    policy = RecarvePolicy.objects.filter(rack=rack).first()
    if policy is None or not policy.enabled:
        raise Refused("re-carving is off for the rack")
    done = recarving.recarves_in_window(rack, timezone.now())
    if done >= policy.max_per_hour:
        raise Refused(
            f"{done} re-carves in the last hour already, the policy's bound is {policy.max_per_hour}"
        )
    if PartitionPlan.objects.filter(rack=rack, status__in=ACTIVE_PLAN_STATES).exists():
        raise Refused("another plan is in flight on the rack")
    return policy


def _not_served(proposal: Proposal) -> None:
    """The job still waits, and gets one re-carve an hour (a second proposal for it, sent before the first
    became a plan, is refused: the gang waits for the first one's partition)."""
    if not Job.objects.filter(pk=proposal.job_id, state=JobState.PENDING).exists():
        raise Refused("the job no longer waits")
    served = recarving.scheduler_plans().filter(
        for_job_id=proposal.job_id, created_at__gte=timezone.now() - recarving.RATE_WINDOW
    )
    if served.exclude(status__in=[PlanStatus.CANCELLED, PlanStatus.FAILED]).exists():
        raise Refused("a re-carve was made for the job already")


def _layout(rack: Rack, proposal: Proposal, policy: RecarvePolicy) -> list[PlannedPartition]:
    """The rack's whole planned layout: its other partitions kept as they are (clique IDs too), the removed
    ones replaced by the created ones. Refused when the rack is not as the pass saw it."""
    trays = rack_trays(rack)
    slot_of = {tray.hostname: tray.slot for tray in trays}
    members: dict[str, set[int]] = {}
    for tray in trays:
        if tray.partition is not None:
            members.setdefault(tray.partition, set()).add(tray.slot)
    current = {p.name: p for p in NVLinkPartition.objects.filter(rack=rack)}
    owners = dict(
        DedicatedPartition.objects.filter(partition__rack=rack).values_list(
            "partition__name", "department__slug"
        )
    )
    if missing := [name for name in proposal.removed if name not in current]:
        raise Refused(f"partition {', '.join(missing)} is gone")
    removed_slots = {slot for name in proposal.removed for slot in members.get(name, ())}
    busy = [tray for tray in trays if tray.slot in removed_slots and tray.running_jobs]
    if busy:
        raise Refused(f"tray {busy[0].hostname} runs {', '.join(busy[0].running_jobs)} now")
    partition_of = {tray.slot: tray.partition for tray in trays}
    created = []
    for name, hostnames, owner in proposal.created:
        if unknown := [h for h in hostnames if h not in slot_of]:
            raise Refused(f"{', '.join(unknown)} is not a tray of the rack")
        slots = {slot_of[h] for h in hostnames}
        if not slots <= removed_slots:
            raise Refused(f"{name} would take trays of partitions not re-carved")
        if len(slots) < policy.smallest_trays:
            raise Refused(f"{name} would have {len(slots)} trays, under the policy's {policy.smallest_trays}")
        came_from = {owners.get(partition_of[slot]) for slot in slots}
        if came_from != {owner}:
            raise Refused(f"{name} would move trays across departments' dedicated partitions")
        tiers = {current[partition_of[slot]].service_tier for slot in slots}
        tier = tiers.pop() if len(tiers) == 1 and not owner else ""
        created.append(PlannedPartition(name, tuple(slots), department=owner, slurm_partition=tier))
    taken = [slot for planned in created for slot in planned.slots]
    if len(taken) != len(set(taken)) or set(taken) != removed_slots:
        raise Refused("the created partitions do not cover the re-carved trays exactly once")
    kept = [
        PlannedPartition(
            name,
            tuple(members.get(name, ())),
            department=owners.get(name),
            slurm_partition="" if owners.get(name) else partition.service_tier,
            clique_id=partition.clique_id,
        )
        for name, partition in sorted(current.items(), key=lambda item: item[1].clique_id)
        if name not in proposal.removed and members.get(name)
    ]
    return kept + created
