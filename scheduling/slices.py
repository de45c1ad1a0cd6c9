"""Jobs that ask for MIG slices instead of whole GPUs: what the fleet offers and the rules of a request.

A slice job asks for `mig_slices` MIG devices of one GPU instance profile (`mig_profile`, named as the
hardware reported it: ``1g.23gb``), or for a memory size (`mig_memory_gb`), for which the smallest offered
profile with at least that memory is chosen (scheduling.engine.mig.smallest_fitting). Its slices are on one
tray (Slurm's ``--gres=gpu:<profile>:<count>`` and a pod's ``nvidia.com/mig-<profile>`` limit are per node),
never on whole GPUs, and never part of an NVLink gang: every MIG profile reports P2P "No", so a slice job's
topology is ``any``. Its `gpus` is 0.

What the fleet offers is read, never assumed:

* the **profiles** are those the GPUs in MIG mode reported (``nvidia-smi mig -lgip``/``-lgipp``, kept in
  Gpu.mig): their memory and compute slices come from the report, not from the name;
* a profile is **offered** when a tray's MIG layout (ComputeTray.mig_layout_devices, chosen by an admin)
  has it; one tray offers its count per GPU times its GPUs, the most a job may ask for.

A memory size is in GB of 10^9 bytes, as the profile names count it (``1g.23gb`` has 22.00 GiB: 23.6 GB):
23 GB is 21,935 MiB and fits a 1g.23gb.

`gpu_equivalents` is what a slice job counts for in GPUs (quotas, usage): its slices' share of a GPU's
compute slices, g/7 each (scheduling.engine.mig.gpu_equivalents).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from django.db.models import Count
from django.utils.translation import gettext as _

from core.hardware import GPUS_PER_TRAY
from inventory.choices import MigMode
from inventory.discovery.mig import GpuMig, MigReportError
from inventory.mig_layouts import COMPUTE_SLICES, MAX_INSTANCES, WHOLE_GPU_LAYOUTS, LayoutError
from inventory.mig_layouts import compute_slices as layout_compute_slices
from inventory.models import ComputeTray, Gpu
from scheduling.choices import Topology
from scheduling.engine.mig import SliceProfile, profiles_from_discovery, smallest_fitting
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES

MAX_SLICES = MAX_INSTANCES * GPUS_PER_TRAY  # one tray: at most 7 MIG devices on each of its 4 GPUs
MAX_MEMORY_GB = 1000  # more than any GPU has: a larger number is a typo, refused in words
MIB_PER_GB = 10**9 / 2**20


def memory_mib(gb: int) -> int:
    """GB (10^9 bytes, as profile names count) in MiB, rounded up."""
    return math.ceil(gb * MIB_PER_GB)


@dataclass(frozen=True)
class SliceOffer:
    """What the fleet offers slice jobs: every profile a GPU in MIG mode reported (by name), and for each
    profile a tray's layout has, the most slices of it one tray offers."""

    profiles: dict[str, SliceProfile] = field(default_factory=dict)
    per_tray: dict[str, int] = field(default_factory=dict)

    def offered(self) -> list[SliceProfile]:
        """The reported profiles some tray's layout offers, smallest first."""
        return sorted(
            (p for name, p in self.profiles.items() if name in self.per_tray),
            key=lambda p: (p.memory_mib, p.compute_slices, p.name),
        )


def _reported_profiles() -> dict[str, SliceProfile]:
    found: dict[str, SliceProfile] = {}
    for mig in Gpu.objects.filter(mig_mode=MigMode.ENABLED).exclude(mig=None).values_list("mig", flat=True):
        try:
            reported = GpuMig.from_dict(mig).profiles
        except MigReportError:
            continue
        for profile in profiles_from_discovery(reported):
            found.setdefault(profile.name, profile)
    return found


def slice_offer() -> SliceOffer:
    """The fleet's offer, in two queries (the GPUs in MIG mode are few: indexed on mig_mode)."""
    per_tray: dict[str, int] = {}
    trays = (
        ComputeTray.objects.exclude(mig_layout__in=WHOLE_GPU_LAYOUTS)
        .annotate(n=Count("gpus"))
        .values_list("mig_layout_devices", "n")
    )
    for devices, gpus in trays:
        for name, count in (devices or {}).items():
            if isinstance(count, int) and count > 0:
                per_tray[name] = max(per_tray.get(name, 0), count * gpus)
    return SliceOffer(_reported_profiles(), per_tray)


def equivalents_of(profile_name: str, slices: int, offer: SliceOffer | None = None) -> Fraction:
    """A slice job's GPU-equivalents by its profile's name (the reported compute slices; a profile no GPU
    reports any more counts by the g of its name, NVIDIA's naming contract)."""
    return Fraction(compute_slices_of(profile_name, offer), COMPUTE_SLICES) * slices


def compute_slices_of(profile_name: str, offer: SliceOffer | None = None) -> int:
    """A profile's compute slices (g): as the GPUs reported it, else by the name's <g>g (NVIDIA's naming
    contract; 0 for a name without one)."""
    offer = slice_offer() if offer is None else offer
    profile = offer.profiles.get(profile_name)
    if profile is not None:
        return profile.compute_slices
    try:
        return layout_compute_slices(profile_name)
    except LayoutError:
        return 0


def _names(profiles) -> str:
    return ", ".join(p.name if isinstance(p, SliceProfile) else p for p in profiles) or _("none")


def resolve(
    profile: str, slices: int, memory_gb: int | None, offer: SliceOffer | None = None
) -> tuple[str, dict[str, str]]:
    """The profile a slice request takes (`profile`, or the smallest offered one with `memory_gb`) and what
    is wrong with it, by field (empty when it can run some day)."""
    offer = slice_offer() if offer is None else offer
    if profile and memory_gb is not None:
        return profile, {
            "mig_memory_gb": _("give a MIG profile or a memory size, not both (the size chooses the profile)")
        }
    if not profile and memory_gb is None:
        return "", {"mig_profile": _("name a MIG profile (for example 1g.23gb) or a memory size in GB")}
    if memory_gb is not None:
        fitting = smallest_fitting(offer.offered(), memory_mib(memory_gb))
        if fitting is None:
            largest = max(offer.offered(), key=lambda p: p.memory_mib, default=None)
            return "", {
                "mig_memory_gb": _(
                    "no MIG profile a tray offers has %(gb)s GB (offered: %(offered)s%(largest)s): ask for "
                    "less, or for whole GPUs"
                )
                % {
                    "gb": memory_gb,
                    "offered": _names(offer.offered()),
                    "largest": "" if largest is None else f"; {largest.name} has {largest.memory_mib} MiB",
                }
            }
        profile = fitting.name
    if profile not in offer.profiles:
        return profile, {
            "mig_profile": _(
                "%(profile)s is not a MIG profile any GPU reported (reported: %(reported)s): name one as "
                "nvidia-smi mig -lgip prints it"
            )
            % {"profile": repr(profile), "reported": _names(sorted(offer.profiles))}
        }
    if profile not in offer.per_tray:
        return profile, {
            "mig_profile": _(
                "no tray's MIG layout offers %(profile)s (offered: %(offered)s): ask for one of those, or "
                "ask "
                "an admin for a layout with it"
            )
            % {"profile": profile, "offered": _names(offer.offered())}
        }
    most = offer.per_tray[profile]
    if slices > most:
        return profile, {
            "mig_slices": _(
                "%(slices)s x %(profile)s: a job's slices are on one tray, and a tray offers at most "
                "%(most)s of them"
            )
            % {"slices": slices, "profile": profile, "most": most}
        }
    return profile, {}


def check_shape(topology: str, fallback_topology: str) -> dict[str, str]:
    """A slice job is on one tray, with no NVLink between its slices (MIG profiles report P2P "No")."""
    errors: dict[str, str] = {}
    if topology and topology != Topology.ANY:
        errors["topology"] = _(
            "MIG slices have no NVLink (every MIG profile reports P2P No) and a slice job runs on one tray: "
            "its topology is any (leave it out)"
        )
    if fallback_topology:
        errors["fallback_topology"] = _("a slice job has no wider topology to fall back to: leave it out")
    return errors


def check_quota(department, priority_class: str, equivalents: Fraction) -> dict[str, str]:
    """The department's limit and, for a class that is never preempted, its guarantee, against what the
    slices count for in GPUs."""
    shown = f"{float(equivalents):.2f}".rstrip("0").rstrip(".")
    if department.limit_gpus is not None and equivalents > department.limit_gpus:
        return {
            "mig_slices": _(
                "these slices count for %(eq)s GPUs, over the department's limit of %(limit)s GPUs: they "
                "could never run"
            )
            % {"eq": shown, "limit": department.limit_gpus}
        }
    if priority_class not in PREEMPTIBLE_CLASSES and equivalents > department.guaranteed_gpus:
        return {
            "priority_class": _(
                "%(class)s jobs run only within the department's guarantee (%(guarantee)s GPUs); these "
                "slices "
                "count for %(eq)s GPUs: submit it as train, or ask for a larger guarantee"
            )
            % {"class": priority_class, "guarantee": department.guaranteed_gpus, "eq": shown}
        }
    return {}
