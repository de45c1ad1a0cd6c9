"""slurmctld's own copy of slurmdbd's accounting (`scontrol show assoc_mgr`), read and waited for.

slurmdbd sends slurmctld every change of a QOS or an association by itself, a moment after it is written.
Rackplane waits for it after writing (integrations.slurm.adapter) for two reasons: a job sent at once would
otherwise be judged against the old limits, and, measured with Slurm 24.11.5, a reconfigure while slurmdbd
was still sending an update left the new slurmctld hanging in its registration with slurmdbd, and the old
one waiting for it, for good. So the wait covers removals too: an association deleted in slurmdbd is waited
for until slurmctld no longer holds it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from integrations.slurm.target import SlurmUnavailable


class _Scontrol(Protocol):
    def scontrol_run(self, *args: str): ...


_ASSOCIATION = re.compile(r"^ClusterName=\S+ Account=(\S+) UserName=([^\s(]*)", re.M)
_QOS_GPUS = re.compile(r"^QOS=([^\s(]+)\(\d+\)\n(?:[ \t].*\n)*?[ \t]+GrpTRES=\S*?gres/gpu=(N|\d+)\(", re.M)


def differences(
    target: _Scontrol,
    qos: dict[str, int | None],
    associations: set[tuple[str, str]],
    removed: Iterable[tuple[str, str]] = (),
) -> list[str]:
    """What slurmctld does not hold yet of these QOS GPU limits and (account, user) associations ("" user: the
    account's own), and which `removed` associations it still holds; [] when it agrees with slurmdbd."""
    done = target.scontrol_run("show", "assoc_mgr", "flags=assoc,qos")
    if done.returncode != 0:
        raise SlurmUnavailable(f"cannot read slurmctld's associations: {done.output}", "retry later")
    held = {(m.group(1), m.group(2)) for m in _ASSOCIATION.finditer(done.stdout)}
    limits = {
        m.group(1): None if m.group(2) == "N" else int(m.group(2)) for m in _QOS_GPUS.finditer(done.stdout)
    }
    missing = [f"association {a or '?'}/{u or '(account)'}" for a, u in sorted(associations - held)]
    missing += [
        f"QOS {name} GrpTRES gres/gpu" for name, limit in sorted(qos.items()) if limits.get(name, -1) != limit
    ]
    missing += [f"no association {a}/{u}" for a, u in sorted(set(removed) & held)]
    return missing


def wait(
    target: _Scontrol,
    qos: dict[str, int | None],
    associations: set[tuple[str, str]],
    removed: Iterable[tuple[str, str]] = (),
    timeout: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Wait until slurmctld holds what was written to slurmdbd (`differences`); what still differs after
    `timeout` seconds."""
    removed = tuple(removed)
    deadline = time.monotonic() + timeout
    while (missing := differences(target, qos, associations, removed)) and time.monotonic() < deadline:
        sleep(0.3)
    return missing
