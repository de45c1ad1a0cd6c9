"""Where the suite's time went: each worker's tests on a timeline, summed per worker and per xdist group.

`--durations` names the slowest tests; it cannot say why a run took as long as it did. With pytest-xdist the
wall time is the busiest worker's, and a group of tests that share a service (tests/conftest.py
SHARED_SERVICES) runs in one worker from start to end: a run is as long as its longest group plus whatever
is handed to that worker besides. This plugin writes, per worker, one line per test (its start and end, in
seconds since the epoch, its group, and the CPU time the worker and the children it waited for spent
meanwhile: a test busy far longer than its CPU time waits on a server, a browser or a clock) to a folder
the controller names, and at the end the controller prints:

    3 workers, 698 s from the start to the last test
      gw0: busy 690 s (CPU 160 s), from 4 s to 698 s: production-stack 301 s, 140 ungrouped tests 389 s
      gw1: ...
      groups (one worker each): production-stack 301 s (18), embedded-stack 254 s (11), ...
      balance: 2050 s of tests over 3 workers, 683 s each if even; largest group production-stack 301 s, ...

`make test` keeps the lines in var/test-artifacts/timeline/ (RACKPLANE_TEST_TIMELINE names another folder);
`python -m tests.timeline FOLDER` prints the summary again from them.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

_FOLDER = "rackplane_timeline"
_STARTED = pytest.StashKey[float]()


def _folder(config) -> Path | None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Path(workerinput[_FOLDER]) if workerinput.get(_FOLDER) else None
    if not (named := os.environ.get("RACKPLANE_TEST_TIMELINE")):
        return None
    return Path(named)


def pytest_configure(config):
    if getattr(config, "workerinput", None) is not None:
        return
    config.stash[_STARTED] = time.time()
    folder = _folder(config)
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.jsonl"):
        old.unlink()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The controller tells each xdist worker where to write (its environment may have been read already)."""
    folder = _folder(node.config)
    node.workerinput[_FOLDER] = str(folder) if folder is not None else ""


def _cpu_seconds() -> float:
    """This process's CPU time and that of its children it has waited for (servers a test started)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started, cpu = time.time(), _cpu_seconds()
    try:
        return (yield)
    finally:
        folder = _folder(item.config)
        if folder is not None:
            group = item.get_closest_marker("xdist_group")
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            line = {
                "test": item.nodeid,
                "group": group.args[0] if group and group.args else group.kwargs.get("name") if group else "",
                "start": started,
                "stop": time.time(),
                "cpu": round(_cpu_seconds() - cpu, 3),
            }
            with (folder / f"{worker}.jsonl").open("a") as out:
                out.write(json.dumps(line) + "\n")


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "workerinput", None) is not None or (folder := _folder(config)) is None:
        return
    lines = summary(folder, started=config.stash.get(_STARTED, None))
    if lines:
        terminalreporter.section("where the time went", sep="=")
        for line in lines:
            terminalreporter.write_line(line)


def summary(folder: Path, started: float | None = None) -> list[str]:
    """The summary's lines from the folder's `<worker>.jsonl` files (none: no lines)."""
    runs: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        with path.open() as lines:
            runs[path.stem] = [json.loads(line) for line in lines if line.strip()]
    runs = {worker: tests for worker, tests in runs.items() if tests}
    if not runs:
        return []
    zero = started if started is not None else min(t["start"] for tests in runs.values() for t in tests)
    end = max(t["stop"] for tests in runs.values() for t in tests)
    workers = f"{len(runs)} worker{'s' if len(runs) != 1 else ''}"
    out = [f"{workers}, {end - zero:.0f} s from the start to the last test"]
    groups: dict[str, list[float]] = defaultdict(list)
    for worker, tests in sorted(runs.items()):
        busy = sum(t["stop"] - t["start"] for t in tests)
        cpu = sum(t.get("cpu", 0.0) for t in tests)
        mine: dict[str, float] = defaultdict(float)
        for test in tests:
            mine[test["group"]] += test["stop"] - test["start"]
            if test["group"]:
                groups[test["group"]].append(test["stop"] - test["start"])
        ungrouped = mine.pop("", 0.0)
        parts = [f"{name} {seconds:.0f} s" for name, seconds in sorted(mine.items(), key=lambda kv: -kv[1])]
        loose = sum(1 for t in tests if not t["group"])
        parts.append(f"{loose} ungrouped tests {ungrouped:.0f} s")
        first, last = min(t["start"] for t in tests), max(t["stop"] for t in tests)
        span = f"from {first - zero:.0f} s to {last - zero:.0f} s"
        out.append(f"  {worker}: busy {busy:.0f} s (CPU {cpu:.0f} s), {span}: " + ", ".join(parts))
    ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    out.append(
        "  groups (one worker each): "
        + ", ".join(f"{name} {sum(times):.0f} s ({len(times)})" for name, times in ranked)
    )
    out.append("  " + balance(runs, ranked))
    return out


def balance(runs: dict[str, list[dict]], ranked: list[tuple[str, list[float]]]) -> str:
    """Whether the run is as long as its work or as its largest group: a group runs in one worker, so a
    group longer than the workers' even share of all the tests' time makes that worker the last one
    whatever else it is given; otherwise only less work shortens the run."""
    total = sum(t["stop"] - t["start"] for tests in runs.values() for t in tests)
    share = total / len(runs)
    workers = f"{len(runs)} worker{'s' if len(runs) != 1 else ''}"
    line = f"balance: {total:.0f} s of tests over {workers}, {share:.0f} s each if even"
    if not ranked:
        return line
    name, times = ranked[0]
    largest = sum(times)
    verdict = (
        f"longer than the even share: the run waits for {name}, split it"
        if largest > share
        else "within the even share: the run is as long as its work, not its largest group"
    )
    return f"{line}; largest group {name} {largest:.0f} s, {verdict}"


if __name__ == "__main__":
    for text in summary(Path(sys.argv[1])):
        print(text)
