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
   ceil(N / 2) MIG GPUs each (layout 8+8+2). The rest of each rack keeps one layout Slurm 24.11's
   topology/block accepts on every rack alike (one 17-tray block, or two 8-tray blocks): a MIG tray is never
   part of a block (every MIG profile has P2P No), and racks carved differently would not be.

Properties (tests/scheduling/test_engine_mig_sizing.py): 0 MIG GPUs without sub-GPU demand, never more than
the fleet's MIG trays hold, never fewer as demand grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GPUS_PER_TRAY = 4
MAX_MIG_TRAYS = 2  # per rack: more would leave no layout Slurm 24.11's blocks accept on 16 gang trays
# The rack layout for each number of MIG trays (trays per partition, the MIG trays last).
LAYOUT_FOR_MIG_TRAYS = {0: "2x9", 1: "17+1", 2: "8+8+2"}
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

    @property
    def per_rack(self) -> int:
        return self.trays_per_rack * self.gpus_per_tray


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


def size_mig(
    sub_gpu_hours: float, all_gpu_hours: float, racks: int, headroom: float = DEFAULT_HEADROOM
) -> MigSizing:
    """The rule on one history window: MIG GPUs for `racks` NVL72 racks and the per-rack layout."""
    if racks < 1:
        raise ValueError("at least one rack")
    share = sub_gpu_share(sub_gpu_hours, all_gpu_hours)
    wanted = mig_gpus(share, racks * 18 * GPUS_PER_TRAY, headroom)
    per_rack = min(MAX_MIG_TRAYS * GPUS_PER_TRAY, -(-wanted // racks))
    trays = -(-per_rack // GPUS_PER_TRAY) if per_rack else 0
    per_tray = -(-per_rack // trays) if trays else GPUS_PER_TRAY
    return MigSizing(share, wanted, trays, per_tray, LAYOUT_FOR_MIG_TRAYS[trays])
