"""The running jobs in standing order, kept between the looks of a pass and between passes.

Each department's running jobs sorted by `RunningJob.standing_key` (scheduling.engine.scheduler, Standing):
the order whose longest prefix within the department's in-quota share is in quota. At 10,000 racks a pass
stood 47,700 running jobs twice, each time sorting them all again (~45 ms a look on this machine) though a
pass changes a few hundred: the jobs that started, ended, were preempted or changed standing.

A `StandingOrder` is never changed once made: `updated(running)` gives one holding exactly the jobs of
`running` (itself when they are the very objects it holds), made from this one by taking out the jobs that
are gone or changed (another object: the pass keeps the RunningJob of an unchanged row,
scheduling.pass_inputs.engine_running_jobs) and putting in the changed and new ones where their keys go
(bisect), in copies of the touched departments' lists only. Whatever order it starts from (none, another
pass's, one of other jobs altogether) the result is the same sorted lists:
tests/scheduling/test_engine_standing_kept.py. Pure Python, no Django.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping
from itertools import compress
from operator import attrgetter, is_not
from typing import Any

STANDING_KEY = attrgetter("standing_key")  # a RunningJob's place in its department's order
# When more than this share of the jobs changed, sorting them all is as quick as moving them one by one.
RESORT_SHARE = 0.25


class StandingOrder:
    """Per department, its running jobs sorted by standing (`lists`: department -> (keys, jobs), parallel),
    and every job as sorted (`jobs`: id -> RunningJob)."""

    __slots__ = ("jobs", "lists")

    def __init__(self, jobs: dict[int, Any], lists: dict[str, tuple[list[tuple], list[Any]]]):
        self.jobs = jobs
        self.lists = lists

    @classmethod
    def of(cls, running: Mapping[int, Any]) -> StandingOrder:
        """The order of `running` (id -> RunningJob), sorted whole."""
        by_department: dict[str, list[Any]] = {}
        for job in sorted(running.values(), key=STANDING_KEY):  # department first: each one's together
            group = by_department.get(job.department)
            if group is None:
                by_department[job.department] = [job]
            else:
                group.append(job)
        lists = {name: (list(map(STANDING_KEY, jobs)), jobs) for name, jobs in by_department.items()}
        return cls(dict(running), lists)

    def updated(self, running: Mapping[int, Any], moved: Collection[int] | None = None) -> StandingOrder:
        """The order of `running`, made from this one (module docstring). `moved`: the ids of every job of
        `running` that is not the very object sorted here, and of every job sorted here and gone from it
        (it may name others): only those are looked at (a pass's later looks: scheduling.engine.scheduler
        notes each job it starts, preempts or restands); None: every job is compared."""
        before = self.jobs
        if moved is None:
            # The jobs that are not the very object sorted before (new ones too), found in C.
            changed = list(
                compress(running.values(), map(is_not, map(before.get, running), running.values()))
            )
            if not changed and len(running) == len(before):  # every job the very one sorted, none gone
                return self
            gone = [before[job_id] for job_id in before.keys() - running.keys()]
        else:
            changed = [running[j] for j in moved if j in running and running[j] is not before.get(j)]
            gone = [before[j] for j in moved if j in before and j not in running]
            if not changed and not gone:
                return self
        if len(gone) + len(changed) > RESORT_SHARE * max(len(running), 1):
            return StandingOrder.of(running)
        taken_out = gone + [before[job.id] for job in changed if job.id in before]
        lists = dict(self.lists)  # the untouched departments' lists are shared, never changed
        copied: set[str] = set()
        for job in (*taken_out, *changed):
            name = job.department
            if name not in copied:
                keys, jobs = lists.get(name, ((), ()))
                lists[name] = (list(keys), list(jobs))
                copied.add(name)
        for job in taken_out:
            keys, jobs = lists[job.department]
            at = bisect_left(keys, job.standing_key)
            if at == len(keys) or jobs[at] is not job:  # never expected: sort whole rather than guess
                return StandingOrder.of(running)
            del keys[at]
            del jobs[at]
        for job in changed:
            keys, jobs = lists[job.department]
            at = bisect_left(keys, job.standing_key)
            keys.insert(at, job.standing_key)
            jobs.insert(at, job)
        for name in copied:
            if not lists[name][1]:
                del lists[name]
        return StandingOrder(dict(running), lists)

    def __eq__(self, other: object) -> bool:  # the same jobs in the same order (two passes' results compare)
        if not isinstance(other, StandingOrder):
            return NotImplemented
        return self.jobs == other.jobs and self.lists == other.lists

    __hash__ = None  # type: ignore[assignment]

    def in_order(self) -> list[Any]:
        """Every job, department by department (by name), each in standing order."""
        return [job for name in sorted(self.lists) for job in self.lists[name][1]]
