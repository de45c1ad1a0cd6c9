"""What a Kubernetes apply takes and reports: the state Rackplane pushes to one cluster (`KubernetesState`),
what an apply would do (`Diff`, its lines for the dry run and the push log) and what it did (`ApplyResult`).
KubernetesTarget (target.py) computes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils.translation import gettext_noop

from core.fabric import Fabric
from integrations.kubernetes.fields import FieldChange
from integrations.kubernetes.render import InventoryState
from integrations.kubernetes.tenants import DEFAULT_COHORT, DEFAULT_FLAVOR
from tenancy.renderers import TenantSpec

FORCE_CONFLICTS_LABEL = gettext_noop(
    "Take over fields other tools set"
)  # the target setting `force_conflicts`


@dataclass(frozen=True)
class KubernetesState:
    """Everything Rackplane pushes to one cluster."""

    inventory: InventoryState
    tenants: tuple[TenantSpec, ...] = ()
    nfs_server: str = ""
    cohort: str = DEFAULT_COHORT
    flavor: str = DEFAULT_FLAVOR
    # The compute fabric above the racks (issue 33): Topograph fabric tier labels and Kueue Topology levels.
    fabric: Fabric = field(default_factory=Fabric)

    def __post_init__(self):
        object.__setattr__(self, "tenants", tuple(self.tenants))


@dataclass
class Diff:
    """What an apply would do: objects created, changed (field by field), deleted; nodes skipped; fields
    another field manager owns (`conflicts`: ref -> [(field path, manager)]); objects already being deleted
    (`deleting`, not deleted again) and desired objects that wait for a deletion to finish (`waiting`:
    ref -> why)."""

    create: list[str] = field(default_factory=list)
    change: dict[str, list[FieldChange]] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)
    conflicts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    deleting: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    force_conflicts: bool = False

    @property
    def empty(self) -> bool:
        return not (self.create or self.change or self.delete or self.waiting)

    def lines(self) -> list[str]:
        out = [f"+ {ref}" for ref in self.create]
        for ref, changes in self.change.items():
            out.append(f"~ {ref}")
            out += [f"    {c}" for c in changes]
        out += [f"- {ref}" for ref in self.delete]
        for ref, conflicts in self.conflicts.items():
            outcome = (
                "the push takes it over (the target may take over fields other tools set)"
                if self.force_conflicts
                else f'the push fails on it unless the target may take it over ("{FORCE_CONFLICTS_LABEL}")'
            )
            out += [
                f'! {ref}: {path} is set by "{manager}" to another value: {outcome}'
                for path, manager in conflicts
            ]
        out += [f"! {ref}: {why}" for ref, why in self.waiting.items()]
        out += [f"  {ref}: being deleted already (not deleted again)" for ref in self.deleting]
        out += [
            f"! Node {name}: not registered in the cluster, labels not applied" for name in self.missing_nodes
        ]
        return out


@dataclass
class ApplyResult:
    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deleting: list[str] = field(default_factory=list)  # already being deleted: not deleted again
    waiting: dict[str, str] = field(default_factory=dict)  # desired, but waits for a deletion (ref -> why)
    taken_over: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # ref -> [(path, manager)]
    log: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    def counts(self) -> str:
        """`2 created, 36 updated, 0 deleted, 3 unchanged` (`would have ...` in a dry run)."""
        text = (
            f"{len(self.created)} created, {len(self.updated)} updated, {len(self.deleted)} deleted, "
            f"{len(self.unchanged)} unchanged"
        )
        return f"would have {text}" if self.dry_run else text
