"""What each target runs, what Rackplane uses there, and the removals ahead that touch this site.

The versions seen are the target's facts (ConfigTarget.facts, kept by integrations.pushes.remember after a
push or Test connection): `slurm_version` and `slurm_rest` (the REST version in use), `kubernetes_version`,
`kueue_versions` and `compute_domain_versions` (the API versions the cluster serves, from API discovery),
`nmx_api` (the path NMX-M or NetQ answers under). Nothing here asks a target anything: a GET of the page
reads facts only.

Each kind of target keeps its part of the dated table in its own folder (`Kind.removals`, each entry with
its source), with the facts it shows (`Kind.version_facts`) and what Rackplane speaks to it (`Kind.uses`).
A removal *touches* a target when the target's facts show it uses what goes away; it *needs action* when
Rackplane cannot move to the successor by itself (`handled` False, or the target serves no successor
Rackplane writes); it *bites soon* when it needs action and its release is due within LEAD_DAYS, has come,
or is undated. Those are what the admin banner shows and what integrations.tasks.watch_removals notifies
once per target (integrations.removals reads the targets).

No Django here: callers pass the facts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

LEAD_DAYS = 90  # how long before a removal's release the banner and the notification come

Facts = Mapping[str, Any]


def served(facts: Facts, key: str) -> list[str]:
    value = facts.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass(frozen=True)
class Removal:
    key: str  # stable: what a notification was sent for (facts `removals_notified`)
    what: str
    deprecated_in: str
    removed_in: str
    due: date | None  # when the release that removes it is due; None: not announced
    touches: Callable[[Facts], bool]
    handled: Callable[[Facts], bool]  # Rackplane moves to the successor by itself on this target
    what_to_do: str
    source: str

    def needs_action(self, facts: Facts) -> bool:
        return self.touches(facts) and not self.handled(facts)

    def bites_by(self, facts: Facts, today: date) -> bool:
        """Needs action, and its release is due within LEAD_DAYS, has come, or is not dated (then what
        needs action is already the case on this target)."""
        if not self.needs_action(facts):
            return False
        return self.due is None or (self.due - today).days <= LEAD_DAYS


@dataclass(frozen=True)
class Touch:
    removal: Removal
    needs_action: bool
    bites: bool


def seen(shown: Sequence[tuple[str, str]], facts: Facts) -> list[tuple[str, str]]:
    """(label, value) of each version fact (`shown`: (key, label), the kind's) the target reported."""
    out = []
    for key, label in shown:
        value = facts.get(key)
        if value:
            out.append((label, ", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    return out


def touches(removals: Sequence[Removal], facts: Facts, today: date) -> list[Touch]:
    """The removals (a kind's) that touch a target with these facts, soonest-biting first."""
    found = [
        Touch(removal, removal.needs_action(facts), removal.bites_by(facts, today))
        for removal in removals
        if removal.touches(facts)
    ]
    return sorted(found, key=lambda t: (not t.bites, not t.needs_action, t.removal.due or date.max))
