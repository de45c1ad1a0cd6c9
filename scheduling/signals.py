"""Pass triggers: every change the scheduler's decisions depend on asks for a pass
(scheduling.services.pass_requests.request_pass: on commit, coalesced per transaction).

Watched, in the layers below: a department's guarantee, limit, weight or priority; a tray's state (drained,
down, up again), partition or fabric problems; a GPU's health, tray, fabric state, reported clique or MIG
mode; NVLink partitions and dedications appearing, changing or going; a rack's re-carving policy
(core.changes.watch: saves compared with the stored row, deletes, bulk changes). Discovery saves trays on
every report, mostly unchanged: those ask nothing.
"""

from __future__ import annotations

from django.utils import translation

from core.changes import ADDED, BULK, CHANGED, Change, watch
from inventory.models import ComputeTray, Gpu, NVLinkPartition, RecarvePolicy
from scheduling.services.pass_requests import request_pass
from tenancy.models import DedicatedPartition, Department

# Model -> the fields a scheduling decision reads.
WATCHED: dict[type, tuple[str, ...]] = {
    Department: ("guaranteed_gpus", "limit_gpus", "over_quota_weight", "priority"),
    ComputeTray: ("state", "partition", "fabric_problems"),
    Gpu: ("health", "tray", "fabric_state", "reported_clique_id", "mig_mode"),
    NVLinkPartition: ("rack", "clique_id", "name"),
    DedicatedPartition: ("partition", "department"),
    # Carving that follows demand: a rack whose re-carving is turned on may serve a gang waiting now.
    RecarvePolicy: ("enabled", "smallest_trays", "max_per_hour"),
}


def _ask_for_a_pass(change: Change) -> None:
    with translation.override("en"):  # a stored reason is English, whoever's request made the change
        singular, plural = str(change.model._meta.verbose_name), str(change.model._meta.verbose_name_plural)
    if change.action == BULK:
        fields = ", ".join(sorted(change.fields))
        request_pass(f"{change.count} {plural}: {fields}")
        return
    label = f"{singular} {change.instance}"
    if change.action == CHANGED:
        request_pass(f"{label}: {', '.join(change.fields)}")
    else:
        request_pass(f"{label} {'added' if change.action == ADDED else 'deleted'}")


def connect() -> None:
    watch("pass", WATCHED, _ask_for_a_pass)
