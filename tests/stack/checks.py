"""What the stack tests check in the database after the work drained (SQL; see tests/stack/harness.py)."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta
from pathlib import Path

from tests.stack.harness import StackServices, wait_until


def drained(services: StackServices) -> bool:
    """Nothing waits: no scheduling request, no job being handed over, no push queued or running, no plan
    in flight, no message in the queue or taken by a worker."""
    rows = services.sql(
        "SELECT (SELECT count(*) FROM scheduling_schedulingrequest),"
        " (SELECT count(*) FROM scheduling_job WHERE state = 'starting'),"
        " (SELECT count(*) FROM scheduling_configpush WHERE status IN ('queued', 'running')),"
        " (SELECT count(*) FROM inventory_partitionplan WHERE status IN ('draining', 'applying'))"
    )[0]
    return not any(rows)


def wait_drained(services: StackServices, timeout: float = 90) -> None:
    quiet = 0

    def settled() -> bool:
        nonlocal quiet
        quiet = quiet + 1 if drained(services) else 0
        return quiet >= 3

    wait_until("the work drained (requests, dispatches, pushes, plans)", settled, timeout, every=0.5)


def allocation_problems(services: StackServices) -> dict[str, int]:
    """Every one must be 0: a GPU held twice, allocations of jobs not holding, holding jobs short."""
    return {
        "gpus_allocated_twice": services.sql(
            "SELECT count(*) FROM (SELECT gpu_id FROM scheduling_allocation GROUP BY gpu_id"
            " HAVING count(*) > 1) s"
        )[0][0],
        "allocations_of_jobs_not_holding": services.sql(
            "SELECT count(*) FROM scheduling_allocation a JOIN scheduling_job j ON j.id = a.job_id"
            " WHERE j.state NOT IN ('starting', 'running')"
        )[0][0],
        "holding_jobs_with_wrong_gpu_count": services.sql(
            "SELECT count(*) FROM scheduling_job j WHERE j.state IN ('starting', 'running')"
            " AND j.gpus <> (SELECT count(*) FROM scheduling_allocation a WHERE a.job_id = j.id)"
        )[0][0],
        "trays_over_four_gpus": services.sql(
            "SELECT count(*) FROM (SELECT g.tray_id FROM scheduling_allocation a JOIN inventory_gpu g"
            " ON g.id = a.gpu_id GROUP BY g.tray_id HAVING count(*) > 4) s"
        )[0][0],
    }


def dispatch_counts(services: StackServices, job_ids: list[int]) -> dict[int, int]:
    """Job id: how many times it was handed to its backend (its 'dispatched' events)."""
    if not job_ids:
        return {}
    rows = services.sql(
        "SELECT j.id, count(e.id) FROM scheduling_job j LEFT JOIN scheduling_jobevent e"
        " ON e.job_id = j.id AND e.kind = 'dispatched' WHERE j.id = ANY(%s) GROUP BY j.id",
        (job_ids,),
    )
    return dict(rows)


def rendered_job_files(render_dir: str, job_id: int) -> list[Path]:
    """The backend's copies of one job (the embedded backend writes rp-<id>.<suffix> and rp-<id>.ends)."""
    return [
        p
        for p in (Path(render_dir) / "jobs").glob(f"rp-{job_id}.*")
        if not p.name.endswith((".ends", ".tmp"))
    ]


def push_versions(push_id: int, *roots: str) -> list[Path]:
    """The versions a directory push wrote (the seeded target, and the default one the migrations make,
    which writes under RACKPLANE_RENDER_DIR)."""
    return [p for root in roots for p in (Path(root) / "versions").glob(f"*-push{push_id:06d}")]


class PassSampler(threading.Thread):
    """Samples the pass lock's record (last_pass_at, last_pass_ms) every 20 ms: the passes seen, as
    (start, end) intervals; two passes that ran at once would overlap."""

    def __init__(self, services: StackServices):
        super().__init__(daemon=True)
        self.services = services
        self.seen: dict = {}
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                for at, ms in self.services.sql(
                    "SELECT last_pass_at, last_pass_ms FROM scheduling_schedulerstate"
                    " WHERE last_pass_at IS NOT NULL"
                ):
                    self.seen[at] = ms
            except Exception:
                pass  # the database being restarted by a fault test
            time.sleep(0.02)

    def stop(self) -> list[tuple]:
        self.halt.set()
        self.join(5)
        return sorted((at, at + timedelta(milliseconds=ms)) for at, ms in self.seen.items())


def overlapping(intervals: list[tuple]) -> list[tuple]:
    return [(a, b) for a, b in itertools.pairwise(intervals) if b[0] < a[1]]
