"""The demo's simulated DCGM exporters: the next utilization of an allocated GPU, given its previous one.

`make run` turns on RACKPLANE_DEMO_TELEMETRY (scripts/run.sh, var/dev.env); the beat then runs
portal.tasks.simulate_demo_telemetry every minute, which reads each allocated GPU's previous sample
(portal.demo.agents.record_demo_telemetry) and records the values computed here through the direct scrape's
own path (tenancy.activity.record_samples), so the dashboards' charts go on to "now". A GPU nobody holds
(neither a whole-GPU job nor a MIG slice job) gets a low sample (IDLE_RANGE), as a real exporter reports it.

A job keeps the character the seed gave it (portal.demo.history.seed_telemetry): a GPU whose previous sample
of
this job was low stays low (0-3 %: an idle job stays idle, so it shows on the idle lists); a busy one varies
around a level of its own (55-98 %). A job with no sample yet (started after the seed) is idle with the
seed's odds, decided once per job (the same for all its GPUs, the same on every tick).

Pure: no Django, no clock; the caller passes a random.Random.
"""

from __future__ import annotations

import random

IDLE_BELOW = 5.0  # a previous sample under this: the job was left idle (TenancySettings' default threshold)
IDLE_SHARE = 0.08  # jobs left idle, as in the seed
IDLE_RANGE = (0.0, 3.0)
BUSY_LEVELS = (55.0, 98.0)  # a busy GPU's own level, as in the seed
BUSY_FLOOR = 40.0  # a busy GPU never dips to idle
REVERSION = 0.3  # share of the distance to its level a busy GPU moves each minute
NOISE = 6.0  # +- percent of noise on every busy sample


def job_is_idle(job_id: int) -> bool:
    """Whether a job with no sample yet is one left idle: the seed's odds, the same answer every time."""
    return random.Random(f"demo-idle:{job_id}").random() < IDLE_SHARE


def busy_level(job_id: int, gpu_id: int) -> float:
    """The level a busy GPU of a job varies around: fixed for that GPU in that job."""
    return random.Random(f"demo-level:{job_id}:{gpu_id}").uniform(*BUSY_LEVELS)


def next_utilization(previous: float | None, job_id: int, gpu_id: int, rng: random.Random) -> float:
    """The GPU's next sample in percent (0-100, one decimal).

    `previous`: its last sample while this job held it (None: none yet). Low stays low; busy moves a share
    of the way back to its level plus noise, never below BUSY_FLOOR.
    """
    idle = job_is_idle(job_id) if previous is None else previous < IDLE_BELOW
    if idle:
        return round(rng.uniform(*IDLE_RANGE), 1)
    level = busy_level(job_id, gpu_id)
    start = level if previous is None else min(100.0, previous)
    value = start + REVERSION * (level - start) + rng.uniform(-NOISE, NOISE)
    return round(max(BUSY_FLOOR, min(100.0, value)), 1)
