"""How many GPUs to put in MIG mode: sized from the site's own sub-GPU demand, as an operator would.

Pure Python (no Django import), used by the trace simulator (``simulate --mig-gpus auto``,
benchmarks/mig.py) and meant for the live portal ("your history's sub-GPU demand suggests N MIG GPUs").

**The rule** (docs/simulator.md, "Fractional GPUs", decided on the tuning half of the ITP traces only):

1. Read a *history window* of the site's jobs (the simulator: the first `history_s` of the replay, which it
   then does not score). Its **sub-GPU share** is the GPU-hours of the jobs that ask for a slice (or would:
   the 1-GPU jobs the conversion turns into slice requests), counted as the whole GPUs they held, over the
   GPU-hours of every job in the window. It is what any accounting (sacct, the portal's usage) gives.
2. **MIG GPUs = ceil(headroom x share x the fleet's GPUs)**: sub-GPU work gets the GPUs its GPU-hours had,
   times a headroom; MIG then runs several such jobs per GPU (all-balanced: 4 instances), which is the
   room the bursts need.
3. **Laid out per rack** (`MigSizing.per_rack`): N = ceil(MIG GPUs / racks) per rack, at most
   `MAX_MIG_TRAYS` trays x 4 GPUs; 1-4 GPUs go on one MIG tray (layout 17+1), 5-8 on two trays with
   ceil(N / 2) MIG GPUs each (layout 8+8+2). The gang partitions keep one layout on every rack alike (one
   17-tray block, or two 8-tray blocks), which Slurm 24.11's topology/block accepts for them; as the portal
   renders them a MIG tray keeps its partition's block, and the 2-tray MIG blocks beside 8-tray ones need
   Slurm 25.05+ (topology.yaml) on two racks or more.
   Or **on the fewest racks** (`concentrate`, `placement=CONCENTRATED`): every rack stays 2x9 (blocks Slurm
   24.11 takes as rendered) and the MIG trays are the last trays of the fewest racks' last partition.
   Measured in session 16 and not chosen: on the tuning half it costs the gangs more than 8+8+2 (partitions
   of 1-5 whole trays where 8+8+2 keeps 8), on the validation half far more.
4. **Guarantees** (the replay's `MigPlan.whole_work_guarantees`, chosen with this rule in session 16): the
   departments' guarantees split the whole GPUs by their whole-GPU work; slice work runs on the MIG GPUs,
   outside them. With it the tuning half meets every goal item; the validation half's multi-tray wait is
   still 8-10% higher than whole-GPU placement's (docs/simulator.md, "MIG trays on some racks only").

Properties (tests/scheduling/test_engine_mig_sizing.py): 0 MIG GPUs without sub-GPU demand, never more than
the fleet's MIG trays hold, never fewer as demand grows; on the fewest racks never more MIG GPUs than sized,
never more than a partition's trays on a rack, every rack's partitions kept whole (Slurm 24.11's blocks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPUS_PER_TRAY = 4
MAX_MIG_TRAYS = 2  # per rack: more would leave no layout Slurm 24.11's blocks accept on 16 gang trays
# The rack layout for each number of MIG trays (trays per partition, the MIG trays last).
LAYOUT_FOR_MIG_TRAYS = {0: "2x9", 1: "17+1", 2: "8+8+2"}
# Concentrated MIG (`concentrate`): every rack keeps this layout; a rack's MIG trays are the last trays of
# its last partition, at most that partition's trays.
CONCENTRATED_LAYOUT = "2x9"
MIG_PARTITION_TRAYS = 9
PER_RACK, CONCENTRATED = "per-rack", "concentrated"
PLACEMENTS = (PER_RACK, CONCENTRATED)
DEFAULT_PLACEMENT = PER_RACK
DEFAULT_HEADROOM = 1.5
DEFAULT_HISTORY_S = 14 * 86400.0


@dataclass(frozen=True)
class MigSizing:
    """What the rule says: MIG GPUs in the fleet and how each rack holds its share."""

    share: float  # sub-GPU GPU-hours over all GPU-hours in the history window
    mig_gpus: int  # the rule's number for the fleet (before rounding to trays)
    trays_per_rack: int
    gpus_per_tray: int
    layout: str
    # The concentrated placement (`concentrate`): per rack, the MIG GPUs of each of its MIG trays (its last
    # trays, inside its last NVLink partition); () when the MIG trays are laid out per rack.
    rack_trays: tuple[tuple[int, ...], ...] = ()

    @property
    def per_rack(self) -> int:
        return self.trays_per_rack * self.gpus_per_tray

    def describe(self) -> str:
        """How the MIG trays are laid out, in words (the command's and the benchmark's)."""
        if not self.rack_trays:
            return (
                f"{self.trays_per_rack} MIG tray(s) per rack with {self.gpus_per_tray} MIG GPUs each, "
                f"layout {self.layout}"
            )
        held = [
            f"rack {r + 1} {len(t)} MIG tray(s) ({sum(t)} GPUs)" for r, t in enumerate(self.rack_trays) if t
        ]
        return f"every rack {self.layout}; " + (", ".join(held) or "no MIG tray")

    def placed_gpus(self, racks: int) -> int:
        """The MIG GPUs the layout puts in MIG mode over a fleet of `racks` racks."""
        if self.rack_trays:
            return sum(sum(rack) for rack in self.rack_trays)
        return racks * self.per_rack


def sub_gpu_share(sub_gpu_hours: float, all_gpu_hours: float) -> float:
    """The share of the window's GPU-hours that sub-GPU work took (0 when the window ran nothing)."""
    if not (math.isfinite(sub_gpu_hours) and math.isfinite(all_gpu_hours)):
        raise ValueError("GPU-hours must be finite")
    if sub_gpu_hours < 0 or all_gpu_hours < 0 or sub_gpu_hours > all_gpu_hours * (1 + 1e-9):
        raise ValueError("sub-GPU GPU-hours must be between 0 and all GPU-hours")
    return min(1.0, sub_gpu_hours / all_gpu_hours) if all_gpu_hours > 0 else 0.0


def mig_gpus(share: float, fleet_gpus: int, headroom: float = DEFAULT_HEADROOM) -> int:
    """ceil(headroom x share x fleet GPUs), at most the fleet's GPUs: the rule's MIG GPUs."""
    if not (0 <= share <= 1) or fleet_gpus < 0 or not (math.isfinite(headroom) and headroom > 0):
        raise ValueError("share 0-1, fleet GPUs >= 0 and a headroom > 0")
    # Rounded to 1e-9 first so that a share computed as 0.1 + 0.2 does not add a GPU.
    return min(fleet_gpus, math.ceil(round(headroom * share * fleet_gpus, 9)))


def concentrate(gpus: int, racks: int, cap: int = MIG_PARTITION_TRAYS) -> tuple[tuple[int, ...], ...]:
    """`gpus` MIG GPUs on the fewest racks: per rack (in rack order), the MIG GPUs of each of its MIG trays.

    At most `cap` MIG trays a rack (default: one NVLink partition of the 2x9 layout, its last); the trays
    needed, ceil(gpus / 4), spread evenly over the fewest racks that hold them, which are the last racks
    (a rack's share differs from another's by one tray at most); the GPUs spread evenly over those trays
    (by one GPU at most), so exactly `gpus` GPUs are in MIG mode (or every GPU of the capped trays). Every
    rack keeps its carving: the MIG trays are the last trays of the rack's last partition, which keeps its
    other trays whole; Slurm's blocks (one per partition, MIG trays included) stay those of the layout.
    """
    if racks < 1 or not 1 <= cap <= 18 or gpus < 0:
        raise ValueError("at least one rack, a cap of 1-18 MIG trays a rack and MIG GPUs >= 0")
    trays = min(-(-gpus // GPUS_PER_TRAY), racks * cap)
    gpus = min(gpus, trays * GPUS_PER_TRAY)
    placed: list[tuple[int, ...]] = [() for _ in range(racks)]
    if not trays:
        return tuple(placed)
    used = -(-trays // cap)
    each = [trays // used + (1 if i < trays % used else 0) for i in range(used)]
    per_tray = [gpus // trays + (1 if i < gpus % trays else 0) for i in range(trays)]
    start = 0
    for i, count in enumerate(each):
        placed[racks - used + i] = tuple(per_tray[start : start + count])
        start += count
    return tuple(placed)


def size_mig(
    sub_gpu_hours: float,
    all_gpu_hours: float,
    racks: int,
    headroom: float = DEFAULT_HEADROOM,
    placement: str = PER_RACK,
    cap: int = MIG_PARTITION_TRAYS,
) -> MigSizing:
    """The rule on one history window: MIG GPUs for `racks` NVL72 racks and their layout, `placement`
    `PER_RACK` (the same MIG trays on every rack, the rack layout 17+1 or 8+8+2) or `CONCENTRATED` (on the
    fewest racks, at most `cap` a rack, every rack kept 2x9: `concentrate`)."""
    if racks < 1:
        raise ValueError("at least one rack")
    if placement not in PLACEMENTS:
        raise ValueError(f"MIG placement {placement!r}? (known: {', '.join(PLACEMENTS)})")
    share = sub_gpu_share(sub_gpu_hours, all_gpu_hours)
    wanted = mig_gpus(share, racks * 18 * GPUS_PER_TRAY, headroom)
    if placement == CONCENTRATED:
        placed = concentrate(wanted, racks, cap)
        per_tray = max((n for rack in placed for n in rack), default=GPUS_PER_TRAY)
        return MigSizing(share, wanted, 0, per_tray, CONCENTRATED_LAYOUT, placed)
    per_rack = min(MAX_MIG_TRAYS * GPUS_PER_TRAY, -(-wanted // racks))
    trays = -(-per_rack // GPUS_PER_TRAY) if per_rack else 0
    per_tray = -(-per_rack // trays) if trays else GPUS_PER_TRAY
    return MigSizing(share, wanted, trays, per_tray, LAYOUT_FOR_MIG_TRAYS[trays])
