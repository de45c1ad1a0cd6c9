"""The beat killed (SIGKILL) and started again on its schedule file: while it is down nothing is sent; once it
is back every periodic entry is sent within one interval, and keeps its interval; a periodic task sent while
another run of it holds its lock (core.enqueue.one_at_a_time) is skipped, never run beside it.

The beat's intervals run on a 0.1 clock (RACKPLANE_BEAT_INTERVAL_SCALE): sync-jobs every 3 s, the pass every
6 s. The test timestamps the beat's and the worker's log lines as they appear.
"""

from __future__ import annotations

import itertools
import re
import signal
import threading
import time
from pathlib import Path

import psycopg
import pytest

from core.enqueue import advisory_key

pytestmark = [
    pytest.mark.slow(reason="the production stack: gunicorn, Celery, PostgreSQL and Redis processes"),
    pytest.mark.integration,
]

# Entry: interval in seconds at the test's clock (portal.settings CELERY_BEAT_SCHEDULE x 0.1).
ENTRIES = {
    "sync-jobs": 3.0,
    "follow-partition-plans": 3.0,
    "retry-notifications": 3.0,
    "retry-stale-pushes": 6.0,
    "schedule-jobs": 6.0,
}
SLACK_S = 1.5  # the beat wakes at most every second; a busy machine adds a little
SENT = re.compile(r"Sending due task (\S+) ")


class Tail(threading.Thread):
    """Reads a growing log file every 50 ms; each new line with the time it appeared."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path
        self.lines: list[tuple[float, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        offset = 0
        while not self.halt.is_set():
            try:
                with open(self.path, errors="replace") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                    offset = handle.tell()
            except OSError:
                chunk = ""
            now = time.monotonic()
            self.lines += [(now, line) for line in chunk.splitlines()]
            time.sleep(0.05)

    def sends(self) -> list[tuple[float, str]]:
        return [(at, m.group(1)) for at, line in self.lines if (m := SENT.search(line))]


def test_beat_killed_and_restarted_skips_nothing_and_never_runs_a_task_twice_at_once(stack, services):
    worker = stack.worker("worker-1", concurrency=2)
    worker_log = Tail(worker.log_path)
    worker_log.start()
    beat = stack.beat("beat-1")
    first = Tail(beat.log_path)
    first.start()
    time.sleep(7)
    stack.kill(beat, signal.SIGKILL)
    killed = time.monotonic()

    lock = psycopg.connect(
        host="127.0.0.1", port=services.pg_port, user="rackplane", dbname="rackplane", autocommit=True
    )
    lock.execute("SELECT pg_advisory_lock(%s)", (advisory_key("task:integrations.tasks.sync_jobs"),))
    time.sleep(4)
    second_beat = stack.beat("beat-2")  # the same schedule file
    restarted = time.monotonic()
    second = Tail(second_beat.log_path)
    second.start()
    time.sleep(5)  # sync-jobs sent meanwhile while "another run" (the test) holds its lock
    lock.execute("SELECT pg_advisory_unlock_all()")
    lock.close()
    unlocked = time.monotonic()
    time.sleep(8)
    for tail in (worker_log, first, second):
        tail.halt.set()
        tail.join(5)

    # The killed beat sent nothing after it was killed.
    assert all(at <= killed + 0.2 for at, _ in first.sends())
    # Back: each entry within one interval of the restart, then at its interval.
    sends = second.sends()
    for entry, every in ENTRIES.items():
        times = [at for at, name in sends if name == entry]
        assert times, f"{entry} was never sent after the restart"
        assert times[0] - restarted <= every + SLACK_S, (entry, times[0] - restarted)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(gap <= every + SLACK_S for gap in gaps), (entry, gaps)

    # sync_jobs runs sent while its lock was held were skipped; after it was released they ran.
    results = [
        (at, "skipped" in line)
        for at, line in worker_log.lines
        if "integrations.tasks.sync_jobs[" in line and " succeeded in " in line
    ]
    held = [skipped for at, skipped in results if restarted < at < unlocked - 0.5]
    after = [skipped for at, skipped in results if at > unlocked + 0.5]
    assert held and all(held), results
    assert after and not any(after), results
