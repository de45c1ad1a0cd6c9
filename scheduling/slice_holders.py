"""Who holds which MIG slice: the rack view, the tray and GPU pages' slice tables and the dashboards.

A slice is a MIG device as its node reported it (inventory.models.MigDevice); it is held while a starting or
running slice job has it (SliceAllocation, by MIG UUID, deleted when the job ends), otherwise idle. A job the
viewer may not see is shown as another department's, without name, link or person (the rack view's rule for
whole GPUs, scheduling.usage.holder_annotations). Every function makes a fixed number of queries.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Exists, OuterRef
from django.db.models.functions import Lower

from inventory.choices import TrayState
from inventory.mig_layouts import WHOLE_GPU_LAYOUTS
from inventory.models import MigDevice
from scheduling.models import Job, SliceAllocation


@dataclass(frozen=True)
class Slice:
    """One MIG device and the job holding it (job_id None and `hidden` False: idle)."""

    gpu_id: int
    gpu_index: int | None
    tray: str
    uuid: str
    profile: str
    start: int
    size: int
    job_id: int | None = None
    job_name: str = ""
    department: str = ""
    submitter: str = ""
    hidden: bool = False  # held by a job the viewer may not see

    @property
    def held(self) -> bool:
        return self.job_id is not None or self.hidden

    @property
    def end(self) -> int:
        return self.start + self.size - 1


@dataclass
class SliceHolder:
    """A job holding slices of one tray: what it holds there (a job the viewer may not see: job_id None)."""

    job_id: int | None
    name: str
    department: str
    submitter: str
    slices: list[Slice] = field(default_factory=list)

    @property
    def summary(self) -> str:
        counts = Counter(s.profile for s in self.slices)
        return ", ".join(f"{count} x {profile}" for profile, count in sorted(counts.items()))

    @property
    def gpus(self) -> str:
        return ", ".join(
            str(i) for i in sorted({s.gpu_index for s in self.slices if s.gpu_index is not None})
        )


def slices_of(user, gpu_ids: Iterable[int]) -> list[Slice]:
    """The MIG devices of these GPUs, each with the job holding it as `user` may see it (two queries)."""
    ids = list(gpu_ids)
    if not ids:
        return []
    devices = (
        MigDevice.objects.visible_to(user)
        .filter(gpu_id__in=ids)
        .order_by("gpu__tray__slot", "gpu__index", "placement_start", "gpu_instance_id")
        .values_list(
            "gpu_id",
            "gpu__index",
            "gpu__tray__hostname",
            "uuid",
            "profile",
            "placement_start",
            "placement_size",
        )
    )
    visible = Job.objects.visible_to(user).filter(pk=OuterRef("job_id"))
    holders = {
        uuid: rest
        for uuid, *rest in SliceAllocation.objects.filter(gpu_id__in=ids)
        .annotate(key=Lower("mig_uuid"), shown=Exists(visible))
        .values_list(
            "key", "job_id", "job__name", "job__department__name", "job__submitted_by__username", "shown"
        )
    }
    out = []
    for gpu_id, index, tray, uuid, profile, start, size in devices:
        common = (gpu_id, index, tray or "", uuid, profile, start, size)
        held = holders.get(uuid.lower())
        if held is None:
            out.append(Slice(*common))
        elif held[4]:
            job_id, name, department, submitter, _shown = held
            out.append(
                Slice(*common, job_id=job_id, job_name=name, department=department, submitter=submitter or "")
            )
        else:
            out.append(Slice(*common, hidden=True))
    return out


def by_gpu(slices: Iterable[Slice]) -> dict[int, list[Slice]]:
    out: dict[int, list[Slice]] = defaultdict(list)
    for item in slices:
        out[item.gpu_id].append(item)
    return dict(out)


def holders(slices: Iterable[Slice]) -> list[SliceHolder]:
    """The jobs holding these slices, in the order met; the ones the viewer may not see as one row."""
    found: dict[int | None, SliceHolder] = {}
    for item in slices:
        if not item.held:
            continue
        holder = found.get(item.job_id)
        if holder is None:
            holder = found[item.job_id] = SliceHolder(
                item.job_id, item.job_name, item.department, item.submitter
            )
        holder.slices.append(item)
    return list(found.values())


def idle_summary(slices: Iterable[Slice]) -> str:
    """ "3 x 1g.23gb, 1 x 2g.47gb": the idle slices by profile ("" when none)."""
    counts = Counter(s.profile for s in slices if not s.held)
    return ", ".join(f"{count} x {profile}" for profile, count in sorted(counts.items()))


@dataclass(frozen=True)
class IdleSlices:
    """The dashboards' idle slices: MIG devices no job holds on trays in service whose layout offers their
    profile (the ones a slice job may be given: slice placement, scheduling.services.slices, knows no
    dedication, so every department's slice jobs may take any of them). What each department holds is its
    Position's `slices` (scheduling.usage)."""

    idle: int
    by_profile: tuple[tuple[str, int], ...]
    offered: int  # every such device, held or idle

    @property
    def summary(self) -> str:
        return ", ".join(f"{count} x {profile}" for profile, count in self.by_profile)


def idle_slices() -> IdleSlices:
    """One query whatever the fleet's size."""
    taken = SliceAllocation.objects.annotate(key=Lower("mig_uuid")).filter(key=Lower(OuterRef("uuid")))
    in_service = (
        MigDevice.objects.filter(gpu__tray__state=TrayState.UP)
        .exclude(gpu__tray__mig_layout__in=WHOLE_GPU_LAYOUTS)
        .annotate(held=Exists(taken))
        .values_list("profile", "held", "gpu__tray__mig_layout_devices")
    )
    offered = [(profile, held) for profile, held, layout in in_service if profile in (layout or {})]
    idle = Counter(profile for profile, held in offered if not held)
    return IdleSlices(sum(idle.values()), tuple(sorted(idle.items())), len(offered))
