"""Fixtures for tests against real services started by scripts/test.sh (never by hand, never skipped).

The Slurm testbed (scripts/slurm-testbed.sh) exports RACKPLANE_SLURM_TESTBED and friends; without them the
Slurm tests fail and say how to run them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from integrations.slurm import assoc_mgr
from integrations.slurm.render import ServiceTier, SlurmNode
from integrations.slurm.target import MANAGED_FILES, SlurmState, SlurmTarget
from integrations.slurm.topology import SlurmBlock

HOW_TO_RUN = (
    "the Slurm testbed is not running: RACKPLANE_SLURM_TESTBED is not set. Run the integration tests through "
    "`make test` (or `bash scripts/test.sh tests/integration`), which starts scripts/slurm-testbed.sh and "
    "exports its environment."
)


@dataclass(frozen=True)
class SlurmTestbed:
    dir: Path
    bin: Path
    scontrol: str
    conf_dir: Path
    log_dir: Path
    node_port_base: int
    script: str

    def hostnames(self) -> list[str]:
        done = subprocess.run(
            [self.scontrol, "show", "hostnames", os.environ["RACKPLANE_SLURM_NODES"]],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()

    def log_tail(self, lines: int = 40) -> str:
        """The end of slurmctld's and slurmdbd's logs, for a failure's message."""
        text = ""
        for name in ("slurmctld.log", "slurmdbd.log"):
            path = self.log_dir / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                text += f"\n--- end of {name} ---\n" + "\n".join(tail)
        return text

    def wait_idle(self, timeout: float = 60) -> None:
        """Until every node is idle again (after a reconfigure the nodes answer again a moment later, and
        slurmctld judges a job's topology only against nodes that answer)."""
        deadline = time.monotonic() + timeout
        while not _all_idle(self):
            assert time.monotonic() < deadline, "the testbed's nodes did not all come back idle"
            time.sleep(0.3)

    def cancel_all_jobs(self, timeout: float = 60) -> None:
        """Cancel every job slurmctld still holds (as root: anyone's) and wait until none is pending, running
        or completing. A controller restarted from its saved state (SIGKILL, then start) may bring back jobs
        a test had cancelled just before (measured: two came back RUNNING and failed every Slurm test
        after), and it may not take a request at once: it is asked again until the queue is empty."""
        squeue, scancel = str(self.bin / "squeue"), str(self.bin / "scancel")
        deadline = time.monotonic() + timeout
        while True:
            left = subprocess.run(
                [squeue, "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i"],
                capture_output=True,
                text=True,
                check=False,
            )
            if left.returncode == 0 and not left.stdout.split():
                return
            if left.returncode == 0:
                subprocess.run([scancel, *left.stdout.split()], capture_output=True, check=False)
            assert time.monotonic() < deadline, f"jobs still there: {left.stdout}{self.log_tail()}"
            time.sleep(1)

    def ctld_processes(self) -> list[int]:
        """The slurmctld processes running in the testbed's chroot (as the script's `ctld_pids_in_root`: a
        re-executed controller has a new pid, the pid file may lag)."""
        root = (self.dir / "root").resolve()
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if (proc / "comm").read_text().strip() == "slurmctld" and (proc / "root").resolve() == root:
                    pids.append(int(proc.name))
            except OSError:  # gone meanwhile, or not ours to read
                continue
        return pids

    def status(self) -> str:
        """What the testbed script says of its daemons (is slurmctld's process alive, does it answer)."""
        done = subprocess.run(["bash", self.script, "status", str(self.dir)], capture_output=True, text=True)
        return f"\n--- slurm-testbed.sh status ---\n{done.stdout}{done.stderr}"

    def restart_dead_controller(self) -> bool:
        """Start slurmctld again when its process is gone (the 24.11.5 crash after a reconfigure that
        registers new TRES: docs/developer/testing.md), with a warning that shows the testbed's status and the
        log's end; its state survives (jobs, nodes). False, and nothing done, when a slurmctld process is
        alive (then it is not that crash). At most _CTLD_RESTARTS times a session (`_restart`)."""
        if self.ctld_processes():
            return False
        self._restart("slurmctld's process was gone and was started again:", kill=False)
        return True

    def revive_controller(self, grace: float = 15) -> bool:
        """`restart_dead_controller`, and the other way 24.11.5 fails here: its process alive but answering
        nothing (a reconfigure's re-execution that hung after "Reconfigure signal (SIGHUP) received": every
        later request times out, CI on 42c3558). A controller that does not answer a ping for `grace`
        seconds is killed (it ignores SIGTERM then) and started again, with the same warning and limit.
        False when it answers."""
        if self.restart_dead_controller():
            return True
        target = self.target()
        deadline = time.monotonic() + grace
        while not target.ping():
            if time.monotonic() >= deadline:
                self._restart(
                    "slurmctld's process answered nothing and was killed and started again:", kill=True
                )
                return True
            time.sleep(1)
        return False

    def _restart(self, why: str, *, kill: bool) -> None:
        if _ctld_restarts[0] >= _CTLD_RESTARTS:
            pytest.fail(
                f"slurmctld failed again after {_CTLD_RESTARTS} restarts in this session"
                + self.status()
                + self.log_tail(),
                pytrace=False,
            )
        _ctld_restarts[0] += 1
        warnings.warn(why + self.status() + self.log_tail(12), stacklevel=4)
        if kill:
            self.control("kill-ctld")
        self.control("start-ctld")

    def control(self, command: str) -> None:
        """stop-ctld / start-ctld / status through the testbed script."""
        done = subprocess.run(
            ["bash", self.script, command, str(self.dir)], check=False, capture_output=True, text=True
        )
        assert done.returncode == 0, (
            f"slurm-testbed.sh {command} failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
            + self.log_tail()
        )

    def target(self, **kwargs) -> SlurmTarget:
        kwargs.setdefault("slurmctld_log", self.log_dir / "slurmctld.log")
        return SlurmTarget(self.conf_dir, self.scontrol, **kwargs)

    def state(self, layout: list[int], tiers: list[ServiceTier] | None = None) -> SlurmState:
        """One rack (gb-r01) of the testbed's nodes carved into partitions of the given sizes."""
        hosts = self.hostnames()
        assert sum(layout) == len(hosts), f"layout {layout} does not cover the {len(hosts)} testbed nodes"
        nodes = tuple(
            SlurmNode(
                hostname=h,
                gpus=4,
                cpus=4,
                memory_mb=1000,
                node_hostname="localhost",
                address="127.0.0.1",
                port=self.node_port_base + i,
            )
            for i, h in enumerate(hosts)
        )
        blocks, start = [], 0
        for number, size in enumerate(layout, 1):
            blocks.append(SlurmBlock(f"r01p{number}", "gb-r01", tuple(hosts[start : start + size])))
            start += size
        if tiers is None:
            tiers = [ServiceTier("batch", tuple(hosts), default=True)]
        return SlurmState(nodes=nodes, tiers=tuple(tiers), blocks=tuple(blocks))


# How often one session may start a dead slurmctld again between or inside tests (the known crash: in the
# worst full runs seen, once), and how often it did.
_CTLD_RESTARTS = 3
_ctld_restarts = [0]


@pytest.fixture
def slurm_testbed(slurm_testbed_session: SlurmTestbed) -> SlurmTestbed:
    """The session's testbed, its controller alive at the start of every test: the known 24.11.5 crash
    (docs/developer/testing.md) can strike seconds after a test's last reconfigure, after that test ended, and
    would otherwise fail every later Slurm test ("slurmctld of the testbed is down before the test", CI on
    bf95b9a). A dead controller's process is started again with a warning; one alive but not answering is
    left to the test (`slurm_baseline` fails on it with the log's end)."""
    slurm_testbed_session.restart_dead_controller()
    return slurm_testbed_session


@pytest.fixture(scope="session")
def slurm_testbed_session() -> SlurmTestbed:
    if not os.environ.get("RACKPLANE_SLURM_TESTBED"):
        pytest.fail(HOW_TO_RUN, pytrace=False)
    env = os.environ
    testbed = SlurmTestbed(
        dir=Path(env["RACKPLANE_SLURM_TESTBED"]),
        bin=Path(env["RACKPLANE_SLURM_BIN"]),
        scontrol=env["RACKPLANE_SLURM_SCONTROL"],
        conf_dir=Path(env["RACKPLANE_SLURM_CONF_DIR"]),
        log_dir=Path(env["RACKPLANE_SLURM_LOG_DIR"]),
        node_port_base=int(env["RACKPLANE_SLURM_NODE_PORT_BASE"]),
        script=env["RACKPLANE_SLURM_TESTBED_SCRIPT"],
    )
    if not testbed.dir.is_dir():
        pytest.fail(
            f"RACKPLANE_SLURM_TESTBED={testbed.dir} does not exist (stale environment?). {HOW_TO_RUN}"
        )
    ensure_testbed_people()
    return testbed


# The departments the job and identity tests submit for without a portal behind them, and the testbed's
# people who submit there: the job user (`rackplane`) and the tenant users ada and grace. The third, eve, may
# submit nowhere (tests/integration/test_slurm_accounting.py).
TESTBED_DEPARTMENTS = ("research", "vision")
TESTBED_SUBMITTERS = ("ada", "grace")


def testbed_accounting():
    """Rackplane's accounting client for the testbed's slurmdbd (slurmrestd's /slurmdb/ endpoints, SlurmUser's
    minted tokens), the one a Slurm target's push uses."""
    from integrations.slurm.accounting import SlurmAccounting
    from integrations.slurm.jobs import SlurmJobBackend

    backend = SlurmJobBackend(
        os.environ["RACKPLANE_SLURMRESTD_URL"],
        os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm"),
        jwt_key_file=os.environ["RACKPLANE_SLURM_JWT_KEY"],
        timeout=60,
    )
    return SlurmAccounting(backend, "rackplane-testbed")


def ensure_testbed_people():
    """With AccountingStorageEnforce=associations,limits,qos Slurm runs a job only for a user with an
    association: the testbed's people may submit under the departments the tests name (each account
    allowing its own QOS, without a GPU limit), made by the same code as a push (integrations.slurm
    .accounting), so a test finds them whatever an earlier one pushed. Nothing is sent when slurmdbd already
    holds them."""
    from integrations.slurm.accounting import AccountingPlan
    from integrations.slurm.render import DepartmentQos, SlurmAccount, SlurmAssociation

    people = [os.environ.get("RACKPLANE_SLURM_JOB_USER", "rackplane"), *TESTBED_SUBMITTERS]
    plan = AccountingPlan(
        qos=tuple(DepartmentQos(d) for d in TESTBED_DEPARTMENTS),
        accounts=tuple(SlurmAccount(d, "root", None, d) for d in TESTBED_DEPARTMENTS),
        associations=tuple(SlurmAssociation(d, p) for d in TESTBED_DEPARTMENTS for p in people),
    )
    accounting = testbed_accounting()
    done = accounting.apply(plan)
    # A job sent without an account runs under its person's default account. A test's push may have moved
    # it (a person leaving the account that was their default gets another of theirs): back to the first
    # testbed department, whose QOS has no GPU limit.
    live = accounting.live_associations()
    moved = [p for p in people if not live[(TESTBED_DEPARTMENTS[0], p)].get("is_default")]
    if moved:
        users = [{"name": p, "default": {"account": TESTBED_DEPARTMENTS[0]}} for p in moved]
        accounting._call("POST", "/users/", {"users": users})
    if done.changed or moved:
        # As a push does (integrations.slurm.adapter): slurmctld holds it before anything reconfigures it.
        scontrol = os.environ["RACKPLANE_SLURM_SCONTROL"]
        lacking = assoc_mgr.wait(
            SlurmTarget(os.environ["RACKPLANE_SLURM_CONF_DIR"], scontrol),
            {q.name: q.gpu_limit for q in plan.qos},
            {(a.account, a.user) for a in plan.associations},
        )
        assert not lacking, f"slurmctld did not get the testbed's accounting from slurmdbd: {lacking}"


def tenant_people() -> dict:
    """The testbed's tenant users (RACKPLANE_SLURM_TENANT_USERS "name:uid:gid ..."; scripts/slurm-testbed.sh)
    as the POSIX identities Rackplane runs their jobs as, with the shared group RACKPLANE_SLURM_SHARED_GID."""
    from core.posix import PosixIdentity

    shared = int(os.environ.get("RACKPLANE_SLURM_SHARED_GID") or 0)
    people = {}
    for entry in os.environ.get("RACKPLANE_SLURM_TENANT_USERS", "").split():
        name, uid, gid = entry.split(":")
        people[name] = PosixIdentity(name, int(uid), int(gid), (shared,) if shared else ())
    if len(people) < 2:
        pytest.fail(
            "the Slurm testbed exports no tenant users (RACKPLANE_SLURM_TENANT_USERS): restart it with the "
            "current scripts/slurm-testbed.sh",
            pytrace=False,
        )
    return people


def give_identity(user, identity) -> None:
    """Map `user` to the testbed's Unix user `identity` (as an administrator would)."""
    from tenancy.choices import PosixSource
    from tenancy.models import PosixAccount

    PosixAccount.objects.update_or_create(
        user=user,
        defaults={
            "name": identity.name,
            "uid": identity.uid,
            "gid": identity.gid,
            "groups": list(identity.groups),
            "source": PosixSource.ADMIN,
        },
    )


@pytest.fixture
def slurm_baseline(slurm_testbed):
    """Snapshot the managed files and slurmctld's state before the test; afterwards, if anything differs, put
    the files back and make slurmctld run them. A test may change slurmctld's state in memory (`scontrol
    update`: a node drained, a partition changed), which only a reconfigure undoes, so the state compared is
    what such a change shows (`_slurm_state`), not only the files; a test that left everything as it found it
    costs no reconfigure."""
    conf = slurm_testbed.conf_dir
    # A file the testbed does not have (topology.yaml) is None: removed again afterwards.
    saved = {name: _read(conf / name) for name in MANAGED_FILES}
    target = slurm_testbed.target()
    if not target.ping():  # a controller an earlier test left hung or dead (docs/developer/testing.md)
        slurm_testbed.revive_controller()
    assert target.ping(), (
        "slurmctld of the testbed is down before the test" + slurm_testbed.status() + slurm_testbed.log_tail()
    )
    ensure_testbed_people()
    topology = target.read_topology()
    state = _slurm_state(slurm_testbed)
    yield saved, topology
    if target.ping() and _unchanged(slurm_testbed, saved) and _slurm_state(slurm_testbed) == state:
        return
    if not target.ping():
        slurm_testbed.control("start-ctld")
    slurm_testbed.cancel_all_jobs()  # a job a test left behind would keep its nodes from coming back idle
    for name, text in saved.items():
        if text is None:
            (conf / name).unlink(missing_ok=True)
        else:
            (conf / name).write_text(text)
        (conf / f"{name}.rackplane-prev").unlink(missing_ok=True)
    reconfigure(slurm_testbed)
    deadline = time.monotonic() + 60
    while target.read_topology() != topology or not _all_idle(slurm_testbed):
        assert time.monotonic() < deadline, (
            "the testbed did not come back to its baseline:\n"
            + "\n".join(_slurm_state(slurm_testbed))
            + slurm_testbed.log_tail()
        )
        time.sleep(0.5)


def reconfigure(testbed: SlurmTestbed, timeout: float = 60) -> None:
    """`scontrol reconfigure`, until slurmctld takes it. Since Slurm 23.11 a reconfigure re-executes the
    controller, which (with slurmdbd) reloads its accounting first: under load a second reconfigure, or one
    sent while an earlier one is still re-executing, is refused ("Unspecified error", "Slurm backup
    controller in standby mode"); the controller is then asked again once it answers a ping."""
    deadline = time.monotonic() + timeout
    revived = False
    while True:
        done = subprocess.run([testbed.scontrol, "reconfigure"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        if not revived and "timed out" in done.stderr + done.stdout:
            # Hung in an earlier reconfigure's re-execution, or dead: started again once (revive_controller).
            revived = testbed.revive_controller()
            deadline = max(deadline, time.monotonic() + timeout / 2)
            continue
        assert time.monotonic() < deadline, (
            f"scontrol reconfigure kept failing: {done.stderr.strip() or done.stdout.strip()}"
            + testbed.log_tail()
        )
        time.sleep(1)


# Node fields slurmd updates by itself: left out of the comparison. BootTime is the clock less the
# uptime at each registration, so it moves by a second between two (ci153: 23:12:05 -> 23:12:06).
_MOVING_NODE_FIELDS = re.compile(r"\b(CPULoad|FreeMem|LastBusyTime|CurrentWatts|AveWatts|BootTime)=\S*")


def _slurm_state(testbed: SlurmTestbed) -> tuple[str, ...]:
    """What a test can change in slurmctld's memory: partitions, nodes (state, reason, features, weight),
    reservations, the running topology, and any job still known to it."""

    def run(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        return f"{done.returncode}\n{done.stdout}"

    scontrol = testbed.scontrol
    return (
        run(scontrol, "-o", "show", "partitions"),
        _MOVING_NODE_FIELDS.sub("", run(scontrol, "-o", "show", "nodes")),
        run(scontrol, "-o", "show", "reservations"),
        run(scontrol, "show", "topology"),
        run(str(testbed.bin / "squeue"), "-h", "-o", "%i %T"),
    )


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _unchanged(testbed: SlurmTestbed, saved: dict[str, str | None]) -> bool:
    conf = testbed.conf_dir
    return all(_read(conf / name) == text for name, text in saved.items()) and not any(
        (conf / f"{name}.rackplane-prev").exists() for name in saved
    )


def _all_idle(testbed: SlurmTestbed) -> bool:
    done = subprocess.run(
        [str(testbed.bin / "sinfo"), "-h", "-N", "-o", "%t"], capture_output=True, text=True, check=False
    )
    states = done.stdout.split()
    return bool(states) and all(s == "idle" for s in states)


@pytest.fixture
def conf_copy(slurm_testbed, tmp_path):
    """A copy of the config directory that slurmctld does NOT read (a misconfigured target)."""
    copy = tmp_path / "etc-slurm"
    shutil.copytree(slurm_testbed.conf_dir, copy)
    return copy


# --- the demo rack gb-r01 as the testbed's nodes, and a Slurm target pointing at the testbed -----------


def carve(layout: list[int]) -> None:
    """Re-carve gb-r01 into consecutive partitions p1, p2... of the given tray counts, and let its nodes
    report their new cliques (as after the fabric manager applied them: jobs spanning trays need settled
    fabric)."""
    from inventory.models import ComputeTray, NVLinkPartition, Rack
    from tests.factories import nodes_report_their_partitions

    rack = Rack.objects.get(name="gb-r01")
    ComputeTray.objects.filter(rack=rack).update(partition=None)
    NVLinkPartition.objects.filter(rack=rack).delete()
    slot = 1
    for number, size in enumerate(layout, 1):
        partition = NVLinkPartition.objects.create(rack=rack, clique_id=number, name=f"p{number}")
        ComputeTray.objects.filter(rack=rack, slot__gte=slot, slot__lt=slot + size).update(
            partition=partition
        )
        slot += size
    nodes_report_their_partitions(rack)


def carve_and_run_jobs(target, capture_on_commit) -> None:
    """Carve gb-r01 2x9, push it to slurmctld (its partitions and blocks) and let `target` run jobs through
    slurmrestd with SlurmUser's tokens (each job submitted, read and cancelled as its person)."""
    from integrations import pushes
    from integrations.models import PushStatus
    from integrations.registry import clean_settings

    carve([9, 9])
    with capture_on_commit(execute=True):
        [push] = pushes.queue_pushes(reason="carve gb-r01 2x9")
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED, push.error
    target.settings = clean_settings(
        "slurm",
        {
            **target.settings,
            "rest_url": os.environ["RACKPLANE_SLURMRESTD_URL"],
            "rest_user": os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm"),
            "jwt_key_file": os.environ["RACKPLANE_SLURM_JWT_KEY"],
        },
    )
    target.save()


@pytest.fixture
def testbed_target(slurm_testbed, slurm_baseline, db):
    """The demo seed's first rack (its trays are the testbed's nodes) and a Slurm target for the testbed."""
    from integrations.models import ConfigTarget
    from inventory.demo import seed_datacenter
    from inventory.models import ComputeTray

    seed_datacenter(racks=1)
    hosts = list(ComputeTray.objects.order_by("slot").values_list("hostname", flat=True))
    assert hosts == slurm_testbed.hostnames(), "the demo rack's trays are the testbed's nodes"
    ConfigTarget.objects.filter(kind="directory").update(enabled=False)
    return ConfigTarget.objects.create(
        name="testbed",
        kind="slurm",
        settings={
            "config_dir": str(slurm_testbed.conf_dir),
            "scontrol": slurm_testbed.scontrol,
            "slurmctld_log": str(slurm_testbed.log_dir / "slurmctld.log"),
            # The testbed's slurmd daemons all run on this host, one port each.
            "cpus": 4,
            "memory_mb": 1000,
            "node_hostname": "localhost",
            "node_address": "127.0.0.1",
            "node_port_base": slurm_testbed.node_port_base,
        },
    )
