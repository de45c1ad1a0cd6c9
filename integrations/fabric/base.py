"""The fabric-manager interface: NVLink partitions of one NVLink domain (rack), desired vs. live.

Pure Python (no Django, no HTTP). The plan apply service hands an adapter the partitions the inventory intends
for one rack (`FabricPartition`: name, partition ID = clique ID, GPU UUIDs, domain = the rack's cluster UUID);
the adapter reads back what the fabric runs, computes a `FabricDiff` and applies it step by step.

Rules of the fabric, as NVIDIA documents them for NMX-M / NMX-C (see nmx.py for the sources):

* a GPU belongs to exactly one partition, and a partition stays within one NVLink domain;
* partition IDs are 1..32766; 32766 is the default partition, which covers the GPUs carved partitions do not;
* partition names are unique in a domain and cannot be changed (NMX-M: "the partition name cannot be
  modified"), so partitions are matched by **name**, except the default partition, matched by its ID
  (the fabric calls it "Default Partition", the inventory may call it "default");
* NMX-M assigns the PartitionID of a new partition itself (its create body is only Name and Members). The
  apply result therefore reports the IDs the fabric holds (`FabricResult.assigned_ids`, `renumbered`), and
  the caller makes the inventory's clique IDs follow them.

The safe order (why `FabricDiff.steps` looks the way it does): because a GPU may never be in two partitions,
every GPU leaves its old partition before it joins its new one. Steps run in four phases:

  1. delete   partitions that are no longer wanted (never the default partition),
  2. shrink   partitions that lose GPUs (PUT with only the GPUs that stay),
  3. create   new partitions,
  4. grow     partitions that gain GPUs (PUT with the full new member list).

A partition that both loses and gains GPUs gets a shrink step and a grow step. Between phases 2 and 3 the
moving GPUs belong to no partition (the fabric allows that; it is what a partition delete does); an apply that
stops there leaves them unassigned until it is retried. Re-running apply is always safe: it reads the fabric
back and only does what is still missing.

When the desired set has no default partition but the fabric has one, the default partition keeps (or gets)
every GPU of the domain that no desired partition claims; when that is nothing it stays on the fabric,
empty, and `read_back` does not report it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from core.errors import ExternalError
from core.sentences import gettext_noop, plural, say
from integrations import words
from inventory.planning import GPUS, ONE_GPU

DEFAULT_PARTITION_ID = 32766
MIN_PARTITION_ID = 1
MAX_PARTITION_ID = 32766
MAX_NAME_LENGTH = 255  # NMX-C: "Values up to 255 ASCII characters"


class PartitionHealth:
    """Partition health values of NMX-M (`Partition.Health`)."""

    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    DEGRADED_BANDWIDTH = "DEGRADED_BANDWIDTH"
    UNHEALTHY = "UNHEALTHY"
    NEW = "NEW"
    UNKNOWN = "UNKNOWN"

    ALL = (HEALTHY, DEGRADED, DEGRADED_BANDWIDTH, UNHEALTHY, NEW, UNKNOWN)


ProgressCallback = Callable[[int, int, str], None]
"""progress(step, total, message): `step` steps of `total` are done. Called once before the first request,
after each completed step, once more when a step fails (step = the steps done), and once with (0, 0, ...)
when there is nothing to do. The messages are the same for every adapter."""


def normalize_domain(domain) -> str:
    """Cluster UUIDs compare as canonical lower-case UUID text; anything else as its stripped text."""
    text = str(domain).strip()
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return text


# --- errors --------------------------------------------------------------------------------------------


class FabricError(ExternalError):
    """A change to the fabric failed. `what_to_do` says what an operator (or the retrying task) should do.

    `result` (when set) is the partial `FabricResult`: the steps done, the step that failed and the steps not
    attempted, so the caller can show them; `partition` names the partition of the failed step.
    """

    transient = False
    advice_in_text = True  # core.errors.RackplaneError formats "What to do:" (and the details added later)

    def __init__(
        self,
        message: str,
        what_to_do: str = "",
        details: Sequence[str] = (),
        *,
        partition: str | None = None,
        operation_id: str | None = None,
        status: int | None = None,
        result: FabricResult | None = None,
    ):
        super().__init__(message, what_to_do, details)
        self.partition = partition
        self.operation_id = operation_id
        self.status = status
        self.result = result

    def with_result(self, result: FabricResult) -> FabricError:
        self.result = result
        return self


class FabricUnavailable(FabricError):
    """The fabric manager did not answer (connection refused, timeout, 5xx) or an operation did not finish
    in time. Transient: retry later (apply reads back first, so a retry only does what is missing)."""

    transient = True


class FabricRejected(FabricError):
    """The fabric manager refused a request (4xx) or an operation ended failed/cancelled. Permanent: fix the
    plan; carries the fabric manager's words."""


class FabricInvalid(FabricRejected):
    """The desired partitions break the fabric's rules; refused before anything was sent."""


# --- data ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FabricPartition:
    """One NVLink partition of one domain. `gpu_uuids` is kept sorted, so equality ignores order.

    `health` is what the fabric reports (read back only) and does not take part in equality.
    """

    name: str
    partition_id: int
    gpu_uuids: tuple[str, ...]
    domain: str
    health: str | None = field(default=None, compare=False)

    def __post_init__(self):
        if isinstance(self.gpu_uuids, str):
            raise TypeError("gpu_uuids is a sequence of GPU UUIDs, not one string")
        object.__setattr__(self, "gpu_uuids", tuple(sorted(set(self.gpu_uuids))))
        object.__setattr__(self, "domain", normalize_domain(self.domain))

    @property
    def is_default(self) -> bool:
        return self.partition_id == DEFAULT_PARTITION_ID


StepAction = Literal["delete", "shrink", "create", "grow"]


@dataclass(frozen=True)
class FabricStep:
    """One request to the fabric manager. `members` is the partition's GPU list after the step."""

    action: StepAction
    name: str
    partition_id: int
    members: tuple[str, ...]
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def is_default(self) -> bool:
        return self.partition_id == DEFAULT_PARTITION_ID

    def describe(self) -> str:
        """The step in a sentence of templates (STEP_WORDS): shown in the viewer's language by the wizard's
        preview, written as it is to the push's log."""
        values = {"name": self.name, "partition_id": self.partition_id, "count": len(self.members)}
        # The default partition by what it is, not by a name: each side names it its own way (the inventory
        # "default", NMX-M "Default Partition", a fabric read from node reports "clique-32766"), and the
        # preview (from the inventory) and the push's log (from the fabric) must name it alike.
        words = (DEFAULT_STEP_WORDS if self.is_default else {}).get(self.action, STEP_WORDS[self.action])
        if self.action in ("delete", "shrink"):
            return say(words, gpu_words=_gpus(len(self.removed)), **values)
        return say(words, gpu_words=_gpus(len(self.added)), **values)


# What each step asks of the fabric manager, as templates (core.sentences): the partition's name and ID are
# values, the GPUs a count ("4 GPUs", inventory.planning's templates).
STEP_WORDS: dict[str, str] = {
    "delete": gettext_noop("delete partition %(name)s (ID %(partition_id)s): %(gpu_words)s leave it"),
    "create": gettext_noop("create partition %(name)s: %(gpu_words)s"),
    "shrink": gettext_noop(
        "remove %(gpu_words)s from partition %(name)s (ID %(partition_id)s), %(count)s stay"
    ),
    "grow": gettext_noop(
        "add %(gpu_words)s to partition %(name)s (ID %(partition_id)s), %(count)s in it after"
    ),
}

# The default partition's steps (it is never created or deleted: it shrinks to empty and grows again).
DEFAULT_STEP_WORDS: dict[str, str] = {
    "shrink": gettext_noop(
        "remove %(gpu_words)s from the default partition (ID %(partition_id)s), %(count)s stay"
    ),
    "grow": gettext_noop(
        "add %(gpu_words)s to the default partition (ID %(partition_id)s), %(count)s in it after"
    ),
}


@dataclass(frozen=True)
class PartitionChange:
    """GPU-level detail of one partition that changes."""

    name: str
    partition_id: int
    before: tuple[str, ...]
    after: tuple[str, ...]

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.after) - set(self.before)))

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.before) - set(self.after)))


@dataclass
class FabricDiff:
    """What apply would do to one domain: partitions to create, update and delete, and the ordered steps."""

    domain: str
    creates: list[PartitionChange] = field(default_factory=list)
    updates: list[PartitionChange] = field(default_factory=list)
    deletes: list[PartitionChange] = field(default_factory=list)
    steps: list[FabricStep] = field(default_factory=list)
    # The complete state expected after apply (empty default partition left out).
    target: list[FabricPartition] = field(default_factory=list)
    # Partitions whose fabric ID differs from the desired one: (name, fabric ID, desired ID). The fabric
    # assigns IDs and cannot change them, so these are reported, not applied.
    id_mismatches: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.steps

    @property
    def moves(self) -> dict[str, tuple[str | None, str | None]]:
        """GPU UUID -> (partition it leaves, partition it joins); None is "no partition"."""
        left: dict[str, str] = {}
        joined: dict[str, str] = {}
        for change in self.deletes + self.updates + self.creates:
            for gpu in change.removed:
                left[gpu] = change.name
            for gpu in change.added:
                joined[gpu] = change.name
        return {gpu: (left.get(gpu), joined.get(gpu)) for gpu in sorted(set(left) | set(joined))}

    def summary(self) -> list[str]:
        return [step.describe() for step in self.steps]


@dataclass
class StepOutcome:
    step: FabricStep
    operation_id: str | None = None
    status: str = "completed"
    partition_id: int | None = None  # the ID the fabric gave a created partition, when known


@dataclass
class FabricResult:
    """What apply did. On failure the raised error carries a partial result (`failed` set)."""

    domain: str
    done: list[StepOutcome] = field(default_factory=list)
    failed: FabricStep | None = None
    not_done: list[FabricStep] = field(default_factory=list)
    read_back: list[FabricPartition] = field(default_factory=list)
    assigned_ids: dict[str, int] = field(default_factory=dict)
    # name -> (desired ID, ID the fabric holds): the caller updates the inventory's clique IDs to these.
    renumbered: dict[str, tuple[int, int]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.done)

    @property
    def complete(self) -> bool:
        return self.failed is None and not self.not_done


@runtime_checkable
class FabricManager(Protocol):
    """One NVLink fabric manager (NMX-M, or the simulated default)."""

    def read_back(self, domain: str) -> list[FabricPartition]: ...

    def diff(self, domain: str, desired: Sequence[FabricPartition]) -> FabricDiff: ...

    def apply(
        self,
        domain: str,
        desired: Sequence[FabricPartition],
        *,
        progress: ProgressCallback | None = None,
    ) -> FabricResult: ...


# --- validation and planning (shared by every adapter) --------------------------------------------------


def validate_desired(domain: str, desired: Iterable[FabricPartition]) -> list[FabricPartition]:
    """Check the desired partitions of one domain; raise FabricInvalid listing every problem."""
    domain = normalize_domain(domain)
    partitions = list(desired)
    problems: list[str] = []
    for p in partitions:
        if not isinstance(p, FabricPartition):
            raise TypeError(f"expected FabricPartition, got {type(p).__name__}")
    if not domain:
        problems.append("the NVLink domain (the rack's cluster UUID) is empty")
    other = sorted({p.domain for p in partitions if p.domain != domain})
    if other:
        names = ", ".join(p.name for p in partitions if p.domain != domain)
        problems.append(
            f"partitions {names} are in domain(s) {', '.join(other)}, not {domain}: "
            "a partition stays within one NVLink domain and one apply covers one domain"
        )
    seen_names: dict[str, int] = {}
    seen_ids: dict[int, str] = {}
    owner: dict[str, str] = {}
    for p in partitions:
        if not p.name or not p.name.strip():
            problems.append(f"partition ID {p.partition_id} has no name")
        elif len(p.name) > MAX_NAME_LENGTH or not p.name.isascii():
            problems.append(
                f"partition name {p.name!r} must be ASCII of at most {MAX_NAME_LENGTH} characters"
            )
        if p.name in seen_names:
            problems.append(f"partition name {p.name!r} is used twice (names are unique in a domain)")
        seen_names[p.name] = p.partition_id
        if not isinstance(p.partition_id, int) or isinstance(p.partition_id, bool):
            problems.append(f"partition {p.name}: ID {p.partition_id!r} is not an integer")
        elif not MIN_PARTITION_ID <= p.partition_id <= MAX_PARTITION_ID:
            problems.append(
                f"partition {p.name}: ID {p.partition_id} is outside {MIN_PARTITION_ID}..{MAX_PARTITION_ID}"
            )
        elif p.partition_id in seen_ids:
            problems.append(
                f"partition ID {p.partition_id} is used by both {seen_ids[p.partition_id]} and {p.name}"
            )
        else:
            seen_ids[p.partition_id] = p.name
        for gpu in p.gpu_uuids:
            if not gpu or not str(gpu).strip():
                problems.append(f"partition {p.name} has an empty GPU UUID")
            elif gpu in owner:
                problems.append(
                    f"GPU {gpu} is in both {owner[gpu]} and {p.name} (a GPU belongs to exactly one partition)"
                )
            else:
                owner[gpu] = p.name
    if problems:
        raise FabricInvalid(
            f"the desired NVLink partitions of domain {domain} are not valid; nothing was sent",
            "fix the partition plan and apply again",
            problems,
        )
    return partitions


def plan_changes(
    domain: str,
    current: Sequence[FabricPartition],
    desired: Sequence[FabricPartition],
    domain_gpus: Iterable[str] = (),
) -> FabricDiff:
    """The diff and the safe step order from `current` (the fabric's partitions) to `desired`.

    `current` may include an empty default partition (the adapters pass it so that it can grow again).
    `domain_gpus`: every GPU the fabric knows in the domain, also those in no partition (e.g. left so by an
    apply that stopped halfway), so that the default partition can take them back.
    """
    domain = normalize_domain(domain)
    desired = validate_desired(domain, desired)
    current = [p for p in current if p.domain == domain]

    cur_default = next((p for p in current if p.is_default), None)
    cur_by_name = {p.name: p for p in current if not p.is_default}
    want_default = next((p for p in desired if p.is_default), None)
    want_by_name = {p.name: p for p in desired if not p.is_default}

    if want_default is None and cur_default is not None:
        # The default partition covers every GPU of the domain that no carved partition claims.
        claimed = {g for p in desired for g in p.gpu_uuids}
        universe = {g for p in current for g in p.gpu_uuids} | set(domain_gpus) | claimed
        want_default = FabricPartition(
            cur_default.name, DEFAULT_PARTITION_ID, tuple(universe - claimed), domain
        )

    diff = FabricDiff(domain=domain)
    # Pairs (current or None, desired or None), the default partition matched by ID, the others by name.
    pairs: list[tuple[FabricPartition | None, FabricPartition | None]] = []
    if cur_default is not None or want_default is not None:
        pairs.append((cur_default, want_default))
    for name in sorted(set(cur_by_name) | set(want_by_name)):
        pairs.append((cur_by_name.get(name), want_by_name.get(name)))

    shrinks, grows, creates, deletes = [], [], [], []
    for cur, want in pairs:
        if want is None:
            assert cur is not None
            change = PartitionChange(cur.name, cur.partition_id, cur.gpu_uuids, ())
            diff.deletes.append(change)
            deletes.append(FabricStep("delete", cur.name, cur.partition_id, (), removed=cur.gpu_uuids))
            continue
        if cur is None:
            change = PartitionChange(want.name, want.partition_id, (), want.gpu_uuids)
            diff.creates.append(change)
            creates.append(
                FabricStep("create", want.name, want.partition_id, want.gpu_uuids, added=want.gpu_uuids)
            )
            diff.target.append(want)
            continue
        # Existing partition: the fabric's name (cannot be changed) and ID (assigned by the fabric) stay.
        if cur.partition_id != want.partition_id:
            diff.id_mismatches.append((want.name, cur.partition_id, want.partition_id))
        kept = FabricPartition(cur.name, cur.partition_id, want.gpu_uuids, domain)
        if kept.gpu_uuids or not kept.is_default:
            diff.target.append(kept)
        if cur.gpu_uuids == want.gpu_uuids:
            continue
        change = PartitionChange(cur.name, cur.partition_id, cur.gpu_uuids, want.gpu_uuids)
        diff.updates.append(change)
        if change.removed:
            stay = tuple(sorted(set(cur.gpu_uuids) & set(want.gpu_uuids)))
            shrinks.append(FabricStep("shrink", cur.name, cur.partition_id, stay, removed=change.removed))
        if change.added:
            grows.append(FabricStep("grow", cur.name, cur.partition_id, want.gpu_uuids, added=change.added))

    # Every GPU leaves its old partition (delete, shrink) before it joins its new one (create, grow).
    diff.steps = deletes + shrinks + creates + grows
    diff.target.sort(key=_order)
    return diff


def check_step_order(current: Sequence[FabricPartition], steps: Sequence[FabricStep]) -> list[str]:
    """Replay `steps` on `current` and list every moment a GPU would be in two partitions (empty: safe)."""
    members: dict[str, set[str]] = {
        p.name if not p.is_default else "#default": set(p.gpu_uuids) for p in current
    }
    problems = []
    for number, step in enumerate(steps, start=1):
        key = "#default" if step.is_default else step.name
        if step.action == "delete":
            members.pop(key, None)
        else:
            members[key] = set(step.members)
        owners: dict[str, str] = {}
        for name, gpus in members.items():
            for gpu in gpus:
                if gpu in owners:
                    problems.append(
                        f"after step {number} ({step.describe()}): {gpu} in {owners[gpu]} and {name}"
                    )
                owners[gpu] = name
    return problems


def compare_with_target(target: Sequence[FabricPartition], live: Sequence[FabricPartition]) -> list[str]:
    """Differences in membership between the expected state and what the fabric reads back."""

    def key(p: FabricPartition) -> str:
        return "the default partition" if p.is_default else f"partition {p.name}"

    want = {key(p): p for p in target}
    have = {key(p): p for p in live}
    problems = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            problems.append(f"{name} is missing")
        elif name not in want:
            problems.append(f"{name} is there but was not planned")
        elif want[name].gpu_uuids != have[name].gpu_uuids:
            extra = sorted(set(have[name].gpu_uuids) - set(want[name].gpu_uuids))
            missing = sorted(set(want[name].gpu_uuids) - set(have[name].gpu_uuids))
            problems.append(f"{name}: extra {extra or 'none'}, missing {missing or 'none'}")
    return problems


# --- the apply loop (shared: same progress calls and results for every adapter) -------------------------


def execute_plan(
    diff: FabricDiff,
    desired: Sequence[FabricPartition],
    perform: Callable[[FabricStep], StepOutcome],
    read_back: Callable[[], list[FabricPartition]],
    progress: ProgressCallback | None = None,
) -> FabricResult:
    """Run the steps in order, stop at the first failure, then read back and check the result.

    `perform` issues one step and waits for it (raising FabricError). On failure the error is re-raised with
    `error.result` = what was done, the failed step and the steps not attempted.
    """
    result = FabricResult(domain=diff.domain)
    total = len(diff.steps)
    report = progress or (lambda step, total, message: None)
    if not total:
        report(0, 0, f"domain {diff.domain}: the fabric already runs the planned partitions")
        result.log.append(words.FABRIC_NOTHING_TO_CHANGE)
    else:
        changes = plural(total, words.FABRIC_CHANGES_ONE, words.FABRIC_CHANGES_MANY)
        report(0, total, say(changes, domain=diff.domain, count=total))
    for number, step in enumerate(diff.steps, start=1):
        try:
            outcome = perform(step)
        except FabricError as error:
            result.failed = step
            result.not_done = list(diff.steps[number:])
            failed = say(words.FABRIC_STEP_FAILED, count=number, total=total, step=step.describe())
            result.log.append(f"{failed}: {error.message}")
            if error.partition is None:
                error.partition = step.name
            error.details.extend(_partial_notes(result))
            error.with_result(result)
            report(number - 1, total, failed)
            raise
        result.done.append(outcome)
        done = say(words.FABRIC_STEP_DONE, count=number, total=total, step=step.describe())
        result.log.append(done)
        report(number, total, done)

    try:
        result.read_back = read_back()
    except FabricError as error:
        error.details.append("every step was done; only the read-back after them failed")
        error.with_result(result)
        raise
    problems = compare_with_target(diff.target, result.read_back)
    if problems:
        raise FabricRejected(
            "the fabric manager accepted the changes but reads back something else",
            "read the fabric back and compare with the plan; another client may be changing partitions",
            problems,
        ).with_result(result)
    result.assigned_ids = {p.name: p.partition_id for p in result.read_back}
    for p in desired:
        if p.is_default:
            continue
        live = result.assigned_ids.get(p.name)
        if live is not None and live != p.partition_id:
            result.renumbered[p.name] = (p.partition_id, live)
    if result.renumbered:
        result.log.append(
            "the fabric holds other partition IDs than planned: "
            + ", ".join(f"{n} {a}->{b}" for n, (a, b) in sorted(result.renumbered.items()))
            + " (update the inventory's clique IDs)"
        )
    return result


def _partial_notes(result: FabricResult) -> list[str]:
    notes = [f"done: {o.step.describe()}" for o in result.done] or ["done: nothing"]
    if result.failed is not None:
        notes.append(f"failed: {result.failed.describe()}")
    notes += [f"not attempted: {s.describe()}" for s in result.not_done]
    if result.done:
        notes.append("apply again to finish: it reads the fabric back and only does what is missing")
    return notes


def _order(p: FabricPartition) -> tuple[int, str]:
    return (p.partition_id, p.name)


def sort_partitions(partitions: Iterable[FabricPartition]) -> list[FabricPartition]:
    return sorted(partitions, key=_order)


def _gpus(count: int) -> str:
    return ONE_GPU if count == 1 else say(GPUS, count=count)
