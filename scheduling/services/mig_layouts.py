"""Choosing a tray's MIG layout (an admin, from the tray page): the decision and its checks.

The layouts a tray may take are inventory.mig_options.layout_options: the catalogue of the MIG profiles its
GPUs' model reported.

`set_mig_layout` refuses, changing nothing, when the tray holds running work (the GPU Operator's MIG manager
stops every GPU client before it repartitions, and Slurm does not repartition at all: a busy tray would lose
its jobs), when the layout is not one its GPUs allow, or when another tray has a layout of that name with
other devices (a GPU model with other profiles: one label value and one mig-parted config cannot mean both).
A tray with a layout stays in its NVLink partition:
the pass never gives its GPUs whole, so no multi-tray job lands on it (every MIG profile has P2P "No"), and
the partition wizard says so. It takes the scheduler's pass lock first (SchedulerState, as
scheduling.services.passes does), so no pass places work on the tray between the check and the save. The
save is audited (core.audit) and queues a configuration push (integrations.signals: the node label,
mig-parted's ConfigMap, Slurm's GRES); from then on the tray is not given whole GPUs
(tenancy.services.schedulable_gpus_q) until it goes back to all-disabled and its GPUs report MIG off.
"""

from __future__ import annotations

from django.db import transaction

from inventory.mig_layouts import DISABLED, LayoutError, MigLayout, find
from inventory.mig_options import layout_options
from inventory.models import ComputeTray
from scheduling.models import Allocation, SchedulerState, SliceAllocation


class MigLayoutRefused(Exception):
    """The layout was not set; the message says why in an admin's words."""


def _busy(tray: ComputeTray) -> list[str]:
    """The jobs holding the tray's GPUs whole or its MIG devices (slice jobs)."""
    held = [
        *Allocation.objects.filter(gpu__tray=tray).values_list("job_id", "job__name"),
        *SliceAllocation.objects.filter(gpu__tray=tray).values_list("job_id", "job__name"),
    ]
    return sorted({f"job {job_id} ({name})" for job_id, name in held})


def set_mig_layout(tray_pk: int, name: str) -> ComputeTray:
    """Give the tray the layout `name` (a catalogue name; "all-disabled" turns MIG off), or refuse."""
    with transaction.atomic():
        SchedulerState.objects.get_or_create(pk=1)
        SchedulerState.objects.select_for_update().filter(pk=1).first()  # no pass places work meanwhile
        tray = ComputeTray.objects.select_for_update().get(pk=tray_pk)
        if name == tray.mig_layout:
            raise MigLayoutRefused(f"{tray.hostname} already has the layout {name}.")
        options = layout_options(tray)
        if name == DISABLED:
            chosen = MigLayout(name=DISABLED, devices=(), enabled=False)
        else:
            if not options.layouts:
                raise MigLayoutRefused(options.problem)
            try:
                chosen = find(name, options.profiles)
            except LayoutError as error:
                raise MigLayoutRefused(str(error)) from None
        other = (
            ComputeTray.objects.filter(mig_layout=chosen.name)
            .exclude(mig_layout_devices=chosen.as_dict())
            .values_list("hostname", "mig_layout_devices")
            .first()
        )
        if other is not None:  # one label value, one mig-parted config: the same name must mean one layout
            raise MigLayoutRefused(
                f"{other[0]} already has a layout named {chosen.name} with other devices ({other[1]}): a GPU "
                "model with other profiles needs layouts of other names."
            )
        busy = _busy(tray)
        if busy:
            raise MigLayoutRefused(
                f"{tray.hostname} runs {', '.join(busy[:5])}{' and more' if len(busy) > 5 else ''}: the MIG "
                "manager stops every GPU client before it repartitions. Drain the tray and wait for its jobs "
                "to end (or requeue them), then choose the layout."
            )
        tray.mig_layout = chosen.name
        tray.mig_layout_devices = chosen.as_dict()
        tray.save(update_fields=["mig_layout", "mig_layout_devices"])
        return tray
