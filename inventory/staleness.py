"""Nodes that stop reporting: a tray whose node has reported before but not for
HealthSettings.node_silent_after_s is "silent" (stale). Computed when read, never written: the rack view,
the tray page, the API and the scheduler compare last-seen with now (`silent_policy`, `is_silent`).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from inventory.choices import HealthKind, RuleAction
from inventory.models import ComputeTray, HealthRule, HealthSettings


@dataclass(frozen=True)
class SilentPolicy:
    """When a tray counts as silent and what the scheduler does then (the node_silent health rule)."""

    after: timedelta
    hold: bool  # an enabled node_silent rule says "hold": no new work on silent trays

    def cutoff(self, now: datetime) -> datetime:
        return now - self.after

    def is_silent(self, last_report_at: datetime | None, now: datetime) -> bool:
        return is_silent(last_report_at, now, self.after)


def silent_policy() -> SilentPolicy:
    """HealthSettings.node_silent_after_s (its default while the row does not exist) and whether an
    enabled node_silent rule holds: one query."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT node_silent_after_s FROM {HealthSettings._meta.db_table} WHERE id = 1), "
            f"EXISTS (SELECT 1 FROM {HealthRule._meta.db_table} "
            "WHERE kind = %s AND action = %s AND enabled = %s)",
            [HealthKind.NODE_SILENT.value, RuleAction.HOLD.value, True],
        )
        after, hold = cursor.fetchone()
    if after is None:
        after = HealthSettings._meta.get_field("node_silent_after_s").default
    return SilentPolicy(after=timedelta(seconds=after), hold=bool(hold))


def is_silent(last_report_at: datetime | None, now: datetime, after: timedelta) -> bool:
    """A tray whose node reported before but not within `after` (a tray that never reported has no agent
    yet: not silent)."""
    return last_report_at is not None and last_report_at < now - after


def silent_q(cutoff: datetime) -> Q:
    """ComputeTray rows that are silent at `cutoff` (= now - after)."""
    return Q(last_report_at__lt=cutoff)


def silent_tray_pks(policy: SilentPolicy, now: datetime, pks=None) -> set[int]:
    """The pks of the silent trays (one query); `pks` limits it."""
    trays = ComputeTray.objects.filter(silent_q(policy.cutoff(now)))
    if pks is not None:
        trays = trays.filter(pk__in=pks)
    return set(trays.values_list("pk", flat=True))


def mark_silent(trays, policy: SilentPolicy | None = None, now: datetime | None = None) -> int:
    """Set `silent` (bool), `silent_for` (how long since the node last reported, when silent) and
    `silent_holds` (the scheduler places no new work there) on each tray, as the rack view, the tray page
    and the scheduler judge it; returns how many are silent. One query (the policy) unless given."""
    policy = policy or silent_policy()
    now = now or timezone.now()
    count = 0
    for tray in trays:
        tray.silent = policy.is_silent(tray.last_report_at, now)
        tray.silent_for = now - tray.last_report_at if tray.silent else None
        tray.silent_holds = tray.silent and policy.hold
        count += tray.silent
    return count
