"""SimulatedFabricManager: the embedded default fabric manager (no NVLink hardware, no NMX-M).

It keeps the fabric's partitions in memory and applies changes instantly, through the same validation, the
same diff and step order, and the same progress callbacks as the NMX-M adapter, so the rest of the product
(plan wizard, apply service, progress UI, drift display) behaves the same without real hardware.

Usage by the plan apply service:

    fabric = SimulatedFabricManager(partitions_from_inventory)   # what the inventory says the rack runs
    result = fabric.apply(rack.cluster_uuid, desired, progress=report)
    # then, in the same transaction as the plan's status: set each NVLinkPartition.clique_id to
    # result.assigned_ids[partition.name] (the simulated fabric keeps the planned IDs unless one is taken,
    # like a fabric that assigns the lowest free ID; NMX-M always chooses them itself).

The caller owns the inventory: this module never touches the database (after an apply, the fabric target's
simulated nodes report the new cliques through discovery: integrations.fabric.nodes). Keep one instance per
process (or rebuild it from the inventory before each apply) - the state is not persisted.

Like the fabric: the default partition (ID 32766) is never deleted, only emptied; a created partition keeps
its planned ID when that ID is free, otherwise it gets the lowest free one; each step checks that no GPU ends
up in two partitions. `fail_next_step()` lets tests and demos make the next step fail as an operation would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from integrations.fabric.base import (
    DEFAULT_PARTITION_ID,
    MAX_PARTITION_ID,
    MIN_PARTITION_ID,
    FabricDiff,
    FabricPartition,
    FabricRejected,
    FabricResult,
    FabricStep,
    PartitionHealth,
    ProgressCallback,
    StepOutcome,
    execute_plan,
    normalize_domain,
    plan_changes,
    sort_partitions,
    validate_desired,
)


class SimulatedFabricManager:
    """In-memory fabric: {domain: {key: FabricPartition}} where key is the name (the default: its ID)."""

    def __init__(self, partitions: Iterable[FabricPartition] = ()):
        self._lock = threading.RLock()
        self._state: dict[str, dict[str, FabricPartition]] = {}
        self._fail_next: list[tuple[int, str, str]] = []  # (steps to let through, status, message)
        self._known: dict[str, set[str]] = {}  # every GPU seen per domain, also those in no partition
        self.applied_steps: list[FabricStep] = []
        partitions = list(partitions)
        for domain in {p.domain for p in partitions}:
            # What the inventory holds must itself be a valid fabric state.
            validate_desired(domain, [p for p in partitions if p.domain == domain])
        for p in partitions:
            self._state.setdefault(p.domain, {})[self._key(p)] = self._with_health(p)
            self._known.setdefault(p.domain, set()).update(p.gpu_uuids)

    # --- the FabricManager interface ------------------------------------------------------------------

    def read_back(self, domain: str) -> list[FabricPartition]:
        with self._lock:
            live = self._state.get(normalize_domain(domain), {}).values()
            return sort_partitions(p for p in live if p.gpu_uuids or not p.is_default)

    def diff(self, domain: str, desired: Sequence[FabricPartition]) -> FabricDiff:
        validate_desired(domain, desired)
        with self._lock:
            return plan_changes(domain, self._current(domain), desired, self._gpus(domain))

    def apply(
        self,
        domain: str,
        desired: Sequence[FabricPartition],
        *,
        progress: ProgressCallback | None = None,
    ) -> FabricResult:
        domain = normalize_domain(domain)
        desired = validate_desired(domain, desired)
        with self._lock:
            diff = plan_changes(domain, self._current(domain), desired, self._gpus(domain))
            return execute_plan(
                diff,
                desired,
                perform=lambda step: self._perform(domain, step),
                read_back=lambda: self.read_back(domain),
                progress=progress,
            )

    # --- test hooks ----------------------------------------------------------------------------------

    def fail_next_step(self, message: str = "simulated failure", *, status: str = "failed", after: int = 0):
        """Make the step after `after` more steps end like a failed (or cancelled) fabric operation."""
        self._fail_next.append((after, status, message))

    def domains(self) -> list[str]:
        return sorted(self._state)

    # --- internals -----------------------------------------------------------------------------------

    def _current(self, domain: str) -> list[FabricPartition]:
        # Includes an empty default partition: it stays on the fabric and can grow again.
        return list(self._state.get(normalize_domain(domain), {}).values())

    def _gpus(self, domain: str) -> set[str]:
        return self._known.get(normalize_domain(domain), set())

    def _perform(self, domain: str, step: FabricStep) -> StepOutcome:
        failure = next((f for f in self._fail_next if f[0] == 0), None)
        self._fail_next = [(max(0, n - 1), s, m) for n, s, m in self._fail_next if (n, s, m) != failure]
        if failure is not None:
            _, status, message = failure
            raise FabricRejected(
                f"the fabric manager's operation to {step.describe()} ended {status}: {message}",
                "fix the cause on the fabric and apply again",
                partition=step.name,
            )
        partitions = self._state.setdefault(domain, {})
        key = "#default" if step.is_default else step.name
        assigned = None
        if step.action == "delete":
            if step.is_default:
                raise FabricRejected("the default partition cannot be deleted", partition=step.name)
            if partitions.pop(key, None) is None:
                raise FabricRejected(f"partition {step.name} does not exist", partition=step.name)
        elif step.action == "create":
            if key in partitions:
                raise FabricRejected(f"partition {step.name} already exists", partition=step.name, status=409)
            self._check_free(partitions, step, key)
            assigned = self._free_id(partitions, step.partition_id)
            partitions[key] = self._with_health(FabricPartition(step.name, assigned, step.members, domain))
        else:
            existing = partitions.get(key)
            if existing is None:
                raise FabricRejected(f"partition {step.name} does not exist", partition=step.name, status=404)
            self._check_free(partitions, step, key)
            partitions[key] = self._with_health(
                FabricPartition(existing.name, existing.partition_id, step.members, domain)
            )
        self._known.setdefault(domain, set()).update(step.members)
        self.applied_steps.append(step)
        return StepOutcome(step=step, status="completed", partition_id=assigned)

    @staticmethod
    def _check_free(partitions: dict[str, FabricPartition], step: FabricStep, key: str) -> None:
        taken = {g: p.name for k, p in partitions.items() if k != key for g in p.gpu_uuids}
        clash = sorted(g for g in step.members if g in taken)
        if clash:
            raise FabricRejected(
                f"cannot {step.describe()}: GPUs {', '.join(clash)} belong to partition {taken[clash[0]]}",
                partition=step.name,
                status=409,
            )

    @staticmethod
    def _free_id(partitions: dict[str, FabricPartition], wanted: int) -> int:
        used = {p.partition_id for p in partitions.values()}
        if wanted not in used:
            return wanted
        for candidate in range(MIN_PARTITION_ID, MAX_PARTITION_ID):
            if candidate not in used:
                return candidate
        raise FabricRejected("no free partition ID in the domain")

    @staticmethod
    def _key(p: FabricPartition) -> str:
        return "#default" if p.partition_id == DEFAULT_PARTITION_ID else p.name

    @staticmethod
    def _with_health(p: FabricPartition) -> FabricPartition:
        health = PartitionHealth.HEALTHY if p.gpu_uuids else PartitionHealth.UNKNOWN
        return FabricPartition(p.name, p.partition_id, p.gpu_uuids, p.domain, health=health)
