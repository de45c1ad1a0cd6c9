"""Historical fair share: GPU usage decayed with a half-life, and how it ranks borrowers.

Pure arithmetic (stdlib only, no Django import): the engine (scheduling.engine.scheduler, over-quota order),
the simulator (which accrues usage in virtual time) and the portal (which sums its job history in one query,
scheduling.usage) compute the same numbers.

Semantics, as the two schedulers this follows define them:

* **Decay.** A GPU-second used `t` seconds ago counts ``0.5 ** (t / half_life)`` of one used now. Slurm's
  priority/multifactor plugin decays every association's usage so that "half of the original value [is]
  cleared at age PriorityDecayHalfLife" (slurm.conf(5); default ``7-0``, seven days, which is ours:
  `DEFAULT_HALF_LIFE_S`); KAI-Scheduler's time-aware fairness applies the same
  ``U = 0.5 ** (dt / t_half)`` to queues' historical usage (its ``usageParams.halfLifePeriod``). Slurm's
  ``PriorityUsageResetPeriod`` (a hard reset, default NONE) has no counterpart: decay alone forgets.
* **Decayed average.** A department holding ``g`` GPUs forever accrues ``g * half_life / ln 2``
  GPU-seconds of decayed usage, so ``decayed_usage * ln 2 / half_life`` is the GPUs it held on average
  over the decayed window (`average_gpus`): a figure in GPUs, comparable with its guarantee.
* **Where it counts.** Only the order in which over-quota (borrowing) work is admitted, as in KAI ("this
  does not affect in-quota allocation: deserved quota still takes precedence"): a department that held
  more than its guarantee on average lately borrows after one that held less. Guarantees, in-quota
  admission and reclaim are unchanged. `history_standing` is that figure per unit of over-quota weight
  (borrowing is shared by weight); the engine adds it to the instant standing (GPUs held minus fair
  share now), both in GPUs, and sorts borrowers by the sum, lowest first (scheduling.engine.scheduler).
"""

from __future__ import annotations

import math

__all__ = [
    "DEFAULT_HALF_LIFE_S",
    "accrue",
    "average_gpus",
    "decay",
    "history_standing",
    "interval_usage",
]

DEFAULT_HALF_LIFE_S = 7 * 86400.0  # Slurm's PriorityDecayHalfLife default (7-0)


def _check(half_life_s: float) -> None:
    if not (half_life_s > 0 and math.isfinite(half_life_s)):
        raise ValueError(f"half-life must be a positive number of seconds, got {half_life_s!r}")


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """`usage` (GPU-seconds) `elapsed_s` seconds later: halved every `half_life_s`."""
    _check(half_life_s)
    return usage * 0.5 ** (max(0.0, elapsed_s) / half_life_s)


def accrue(usage: float, gpus: float, elapsed_s: float, half_life_s: float) -> float:
    """Decayed usage after `elapsed_s` seconds more, holding `gpus` GPUs throughout: the old usage decays,
    and each new GPU-second decays from when it was used (the exact integral, so the result does not depend
    on how a stretch of time is cut into steps)."""
    _check(half_life_s)
    if elapsed_s <= 0:
        return usage
    kept = 0.5 ** (elapsed_s / half_life_s)
    return usage * kept + gpus * half_life_s / math.log(2) * (1.0 - kept)


def interval_usage(gpus: float, start: float, end: float, now: float, half_life_s: float) -> float:
    """Decayed usage at `now` of `gpus` GPUs held from `start` to `end` (seconds on one clock; `end` at most
    `now`): what `accrue` gives for that stretch, decayed to `now`. scheduling.usage sums the same formula
    over the job history in SQL."""
    _check(half_life_s)
    end = min(end, now)
    if end <= start:
        return 0.0
    scale = half_life_s / math.log(2)
    return gpus * scale * (0.5 ** ((now - end) / half_life_s) - 0.5 ** ((now - start) / half_life_s))


def average_gpus(usage: float, half_life_s: float) -> float:
    """The GPUs held on average over the decayed window (module docstring, Decayed average)."""
    _check(half_life_s)
    return usage * math.log(2) / half_life_s


def history_standing(usage: float, guaranteed: int, weight: float, half_life_s: float) -> float:
    """GPUs held on average beyond the guarantee lately, per unit of over-quota weight: negative when the
    department held less than its guarantee (it lent its share), so it borrows before the others. A weight
    of 0 never borrows: +inf."""
    if weight <= 0:
        return math.inf
    return (average_gpus(usage, half_life_s) - guaranteed) / weight
