"""SlurmTarget: the one place that runs Slurm commands. Render, diff, apply (with rollback), read back.

What Slurm 24.11 does, measured on the testbed (scripts/slurm-testbed.sh):

* `scontrol reconfigure` makes slurmctld fork and exec a fresh copy of itself that reads every file again
  ("Relinquishing control to new slurmctld process"). Topology (topology.conf) and node/partition changes
  therefore take effect with a reconfigure; no restart is needed.
* If the new copy cannot load the files (a block smaller than the base, an unknown node in a partition,
  a bad BlockSizes...), it logs `fatal: ...`, the old process logs "Resuming operation, reconfigure failed"
  and keeps running the previous configuration, and scontrol exits 1 with only "slurm_reconfigure error:
  Unspecified error". slurmctld's reason is in its log file, which is why the target can be given it.
  The files on disk are then the rejected ones: without a rollback the next restart would fail.
* Some mistakes are not refused at all: a node name topology.conf does not know is only warned about, and
  the block is shown with the name as written. The target checks that itself before writing.
* With slurmctld down, scontrol fails with "Unable to contact slurm controller (connect failure)" (after
  about 10 s of retries for reconfigure).

So `apply` writes each file atomically (keeping `<name>.rackplane-prev`), reconfigures, reads the topology
back and compares it with what the written topology.conf means to Slurm; on any failure it puts the previous
files back and reconfigures again, then raises `SlurmUnavailable` (transient: retry later) or
`SlurmRejected` (permanent: fix the configuration; carries slurmctld's words).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from core.diffs import diff_text
from core.errors import ExternalError
from core.fabric import Fabric
from integrations.slurm.files import atomic_write
from integrations.slurm.render import (
    NVLINK_TOPOLOGY,
    DepartmentQos,
    ServiceTier,
    SlurmNode,
    parse_conf_lines,
    render_rackplane_conf,
    render_topology_conf,
    render_topology_yaml,
    sacctmgr_qos_commands,
)
from integrations.slurm.topology import (
    PlannedBlock,
    SlurmBlock,
    TopologyPlan,
    compare_topology,
    compress,
    expand,
    parse_show_topology,
    parse_topology_conf,
)
from integrations.slurm.tree import (
    FABRIC_TOPOLOGY,
    TreePlan,
    compare_tree,
    parse_show_tree,
    parse_tree,
    plan_tree,
    tree_holds,
)

RACKPLANE_CONF = "rackplane.conf"
TOPOLOGY_CONF = "topology.conf"
TOPOLOGY_YAML = "topology.yaml"
MANAGED_FILES = (RACKPLANE_CONF, TOPOLOGY_CONF, TOPOLOGY_YAML)
# The target's topology file (its `topology_format` setting): topology.conf for Slurm 24.11, topology.yaml
# for 25.05+ (several topologies: the NVLink blocks and the fabric's tree).
FORMAT_CONF = "conf"
FORMAT_YAML = "yaml"
YAML_RELEASE = (25, 5)  # topology.yaml and the partition option Topology= came with Slurm 25.05
PREV_SUFFIX = ".rackplane-prev"
LOCK_NAME = ".rackplane-apply.lock"

_UNREACHABLE = re.compile(
    r"unable to contact slurm controller|connection refused|connect failure|timed out|"
    r"zero bytes were transmitted|communication connection failure|slurmctld.*down",
    re.IGNORECASE,
)


_CLIENT_PARSE_ERROR = re.compile(
    r"Parse error in file|Unable to process configuration file|Parsing error at unrecognized key",
    re.IGNORECASE,
)


class SlurmError(ExternalError):
    """A push to Slurm failed. `what_to_do` says what an operator (or the retrying task) should do."""

    transient = False
    advice_in_text = True  # core.errors.RackplaneError formats "What to do:"

    def __init__(self, message: str, what_to_do: str = "", details: Sequence[str] = ()):
        super().__init__(message, what_to_do, details)


class SlurmUnavailable(SlurmError):
    """slurmctld did not answer (down, restarting, network). Transient: retry later; nothing was changed."""

    transient = True


class SlurmRejected(SlurmError):
    """slurmctld refused the configuration, or runs something else than what was written. Permanent."""


class SlurmConfigurationError(SlurmError):
    """The target itself is misconfigured (no scontrol, config directory missing). Permanent."""


@dataclass(frozen=True)
class SlurmState:
    """Everything Rackplane pushes to one Slurm cluster."""

    nodes: tuple[SlurmNode, ...]
    tiers: tuple[ServiceTier, ...]
    blocks: tuple[SlurmBlock, ...]
    # The compute fabric above the racks (issue 33) and each rack's node names, for the tree topology.
    fabric: Fabric = field(default_factory=Fabric)
    racks: tuple[tuple[str, tuple[str, ...]], ...] = ()


# The last tree planned, with what it was planned from: a render asks for it up to three times (the file
# checks, topology.conf's note, topology.yaml), and the next render mostly for the same fabric and racks.
_LAST_TREE: list[tuple[Fabric, tuple[tuple[str, tuple[str, ...]], ...], TreePlan | None]] = []


def forget_tree() -> None:
    _LAST_TREE.clear()


def fabric_tree(state: SlurmState) -> TreePlan | None:
    """The fabric's Slurm tree over the state's racks (None: no rack of the state is in the fabric). Pure:
    the last one is kept with its inputs and given again while they are equal (TreePlan is frozen)."""
    last = _LAST_TREE[-1] if _LAST_TREE else None
    if last is not None and last[1] == state.racks and last[0] == state.fabric:
        return last[2]
    plan = plan_tree(state.fabric, dict(state.racks))
    _LAST_TREE[:] = [(state.fabric, state.racks, plan)]
    return plan


def tree_left_out_note(plan: TreePlan) -> str:
    """What topology.conf (Slurm 24.11) says in its header when the fabric has a tree it cannot hold."""
    return (
        f"The compute fabric's tree ({plan.summary()}) is left out: Slurm 24.11 reads one topology from "
        "topology.conf, and it is the NVLink blocks, which every job Rackplane sends with --segment needs. "
        "Slurm 25.05+ takes both in topology.yaml: set this target's topology file to topology.yaml."
    )


def left_out_note(topology_conf: str) -> str:
    """The note `tree_left_out_note` wrote into a topology.conf's header, as one line ("" when none)."""
    lines = topology_conf.splitlines()[1:]
    note = []
    for line in lines:
        if not line.startswith("# "):
            break
        note.append(line[2:])
    text = " ".join(note)
    return text if text.startswith("The compute fabric's tree") else ""


def tree_tiers(tiers: Sequence[ServiceTier], plan: TreePlan | None, racks: dict[str, str]) -> set[str]:
    """The partitions placed with the fabric's tree rather than the NVLink blocks (the cluster default):
    those open to one department only (its dedicated NVLink partitions) whose nodes lie in more than one rack,
    every one of them under the tree. A department's racks together are where its multi-rack jobs run, and
    keeping such a job under one leaf group is what the tree is for; every other partition mixes everyone's
    smaller jobs, which need the NVLink blocks (a tree knows nothing of NVLink: a 4-node job could straddle
    two racks). Rackplane's own jobs are pinned to the trays its engine chose either way."""
    chosen = set()
    for tier in tiers:
        spans = {racks.get(h) for h in tier.hostnames}
        if tier.allow_qos and len(spans) > 1 and None not in spans and tree_holds(plan, tier.hostnames):
            chosen.add(tier.name)
    return chosen


def render_files(
    state: SlurmState, nodes: Sequence[SlurmNode] | None = None, topology_format: str = FORMAT_CONF
) -> dict[str, str]:
    """The managed files for this state: rackplane.conf and topology.conf (Slurm 24.11: the NVLink blocks
    alone, its header saying that the fabric's tree is left out and why) or topology.yaml (25.05+: the
    blocks as the cluster default and the fabric's tree, with `Topology=` on the partitions that use it).
    ValueError when the state cannot be expressed."""
    nodes = state.nodes if nodes is None else tuple(nodes)
    known = {n.hostname for n in nodes}
    for block in state.blocks:
        unknown = sorted(set(block.hostnames) - known)
        if unknown:
            raise ValueError(f"block {block.name} names nodes that are not defined: {compress(unknown)}")
    tree = fabric_tree(state)
    if topology_format == FORMAT_CONF:
        notes = [tree_left_out_note(tree)] if tree is not None else []
        return {
            RACKPLANE_CONF: render_rackplane_conf(nodes, state.tiers),
            TOPOLOGY_CONF: render_topology_conf(state.blocks, notes),
        }
    if topology_format != FORMAT_YAML:
        raise ValueError(f"unknown topology format {topology_format!r} (conf or yaml)")
    rack_of = {h: rack for rack, hosts in state.racks for h in hosts}
    on_tree = tree_tiers(state.tiers, tree, rack_of)
    tiers = [
        dataclasses.replace(t, topology=FABRIC_TOPOLOGY) if t.name in on_tree else t for t in state.tiers
    ]
    return {
        RACKPLANE_CONF: render_rackplane_conf(nodes, tiers),
        TOPOLOGY_YAML: render_topology_yaml(state.blocks, tree=tree),
    }


@dataclass(frozen=True)
class ExpectedTopology:
    """What slurmctld should run after a push: the default topology's blocks (`scontrol show topology`) and,
    from topology.yaml, the fabric's tree (`scontrol show topology <tree_name>`). `exact`: compare block
    sizes and aggregated blocks too (topology.conf, Slurm 24.11's rules, which parse_topology_conf knows);
    from topology.yaml only the base blocks' names and nodes are compared (blocks smaller than the base are
    25.05's own, and how it reports their size is not what the 24.11 plan says)."""

    blocks: TopologyPlan
    exact: bool = True
    tree: TreePlan | None = None
    tree_name: str = FABRIC_TOPOLOGY

    def compare(self, shown: Sequence[dict]) -> list[str]:
        if self.exact:
            return compare_topology(self.blocks, shown)
        base = dataclasses.replace(
            self.blocks, given=tuple(b for b in self.blocks.expected if not b.aggregated)
        )
        return compare_topology(base, [{**s, "size": None} for s in shown if not s["aggregated"]])


def parse_topology_yaml(text: str) -> ExpectedTopology:
    """A topology.yaml read back: its cluster-default topology (Rackplane's NVLink blocks) and its tree, if
    any. ValueError for what Slurm would refuse (no or two defaults, a bad tree) or Rackplane never writes."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"not YAML: {error}") from error
    if not isinstance(document, list) or not all(isinstance(e, dict) for e in document):
        raise ValueError("topology.yaml is a list of topologies")
    names = [e.get("topology") for e in document]
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError("every topology needs a name of its own")
    defaults = [e for e in document if e.get("cluster_default")]
    if len(defaults) != 1 or not isinstance(defaults[0].get("block"), dict):
        raise ValueError(f"Rackplane writes one cluster-default block topology ({NVLINK_TOPOLOGY})")
    block = defaults[0]["block"]
    rows = []
    for entry in block.get("blocks") or []:
        hosts = tuple(expand(str(entry.get("nodes") or "")))
        if not entry.get("block") or not hosts:
            raise ValueError(f"block {entry!r} needs a name and nodes")
        rows.append((str(entry["block"]), hosts, str(entry["block"])))
    sizes = tuple(int(v) for v in block.get("block_sizes") or ())
    if not rows or not sizes:
        raise ValueError("the block topology needs blocks and block_sizes")
    plan = TopologyPlan(
        blocks=tuple(rows),
        block_sizes=sizes,
        given=tuple(PlannedBlock(n, frozenset(h), sizes[0], partition=p) for n, h, p in rows),
    )
    trees = [e for e in document if "tree" in e]
    if len(trees) > 1:
        raise ValueError("Rackplane writes one tree topology")
    if not trees:
        return ExpectedTopology(plan, exact=False)
    return ExpectedTopology(plan, exact=False, tree=parse_tree(trees[0]), tree_name=trees[0]["topology"])


@dataclass
class ApplyResult:
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    reconfigured: bool = False
    topology: list[dict] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


@dataclass
class QosResult:
    applied: bool
    note: str = ""


@dataclass
class _Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return "\n".join(s for s in (self.stdout.strip(), self.stderr.strip()) if s)


class SlurmTarget:
    """One Slurm controller's configuration directory and its scontrol.

    config_dir: the directory slurmctld reads (where slurm.conf includes rackplane.conf and topology/block
      reads topology.conf). scontrol: a path, a command line, or an argv prefix (the testbed's wrapper in
      tests, plain `scontrol` on a controller). slurmctld_log: optional path of slurmctld's log on this
      machine, to quote its reason when it refuses a configuration. sacctmgr: defaults to the sacctmgr beside
      scontrol.
    """

    def __init__(
        self,
        config_dir: str | os.PathLike,
        scontrol: str | Sequence[str] = "scontrol",
        *,
        sacctmgr: str | Sequence[str] | None = None,
        slurmctld_log: str | os.PathLike | None = None,
        timeout: float = 60.0,
        settle_seconds: float = 10.0,
    ):
        self.config_dir = Path(config_dir)
        self.scontrol = self._argv(scontrol)
        if sacctmgr is None:
            first = self.scontrol[0]
            sacctmgr = [os.path.join(os.path.dirname(first), "sacctmgr")] if os.sep in first else ["sacctmgr"]
        self.sacctmgr = self._argv(sacctmgr)
        self.slurmctld_log = Path(slurmctld_log) if slurmctld_log else None
        self.timeout = timeout
        self.settle_seconds = settle_seconds
        self._shown: list[dict] = []

    @staticmethod
    def _argv(command: str | Sequence[str]) -> list[str]:
        if isinstance(command, str):
            argv = [command] if os.path.exists(command) else shlex.split(command)
        else:
            argv = [str(c) for c in command]
        if not argv:
            raise SlurmConfigurationError("empty command for a Slurm client")
        return argv

    # --- commands ---------------------------------------------------------------------------------

    def _run(self, prefix: list[str], *args: str, timeout: float | None = None) -> _Run:
        argv = [*prefix, *args]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError as error:
            raise SlurmConfigurationError(
                f"cannot run {shlex.join(argv)}: {error.strerror}",
                "install the Slurm client (slurm-client) or point the Slurm target at scontrol",
            ) from error
        except subprocess.TimeoutExpired as error:
            raise SlurmUnavailable(
                f"{shlex.join(argv)} did not finish within {timeout or self.timeout:.0f}s",
                "slurmctld may be overloaded or restarting; retry later",
            ) from error
        return _Run(done.returncode, done.stdout, done.stderr)

    def scontrol_run(self, *args: str, timeout: float | None = None) -> _Run:
        return self._run(self.scontrol, *args, timeout=timeout)

    def version(self) -> str:
        """slurmctld's client version, from `scontrol --version` ("slurm 24.11.1" -> "24.11.1")."""
        done = self.scontrol_run("--version", timeout=30)
        words = done.stdout.split()
        if done.returncode != 0 or len(words) < 2 or not words[1][:1].isdigit():
            raise SlurmUnavailable(
                f"`scontrol --version` did not say its version: {(done.stdout + done.stderr).strip()[:200]}",
                "check the scontrol setting of the Slurm target",
            )
        return words[1]

    def ping(self) -> bool:
        """True when the primary slurmctld answers."""
        try:
            done = self.scontrol_run("ping", timeout=30)
        except SlurmUnavailable:
            return False
        return done.returncode == 0 and "is UP" in done.stdout

    # --- render and diff --------------------------------------------------------------------------

    def render(self, state: SlurmState, topology_format: str = FORMAT_CONF) -> dict[str, str]:
        """The managed files for this state (`render_files`). ValueError when it cannot be expressed."""
        return render_files(state, topology_format=topology_format)

    def live_files(self) -> dict[str, str | None]:
        return {name: self._read(self.config_dir / name) for name in MANAGED_FILES}

    def diff(self, rendered: dict[str, str]) -> dict[str, str]:
        """Unified diffs (live -> rendered) of the files that would change; unchanged files are left out."""
        self._check_names(rendered)
        diffs = {}
        for name, text in sorted(rendered.items()):
            live = self._read(self.config_dir / name)
            if live == text:
                continue
            diffs[name] = diff_text(
                live or "", text, f"live/{name}" if live is not None else "/dev/null", f"rackplane/{name}"
            )
        return diffs

    # --- apply ------------------------------------------------------------------------------------

    def check_files(self, rendered: dict[str, str]):
        """What `apply` refuses before it asks slurmctld anything (a permanent error, not a retry): a file it
        does not manage, a configuration directory that is not there, a topology Slurm could not take.
        Returns the topology the files mean."""
        self._check_names(rendered)
        if not self.config_dir.is_dir():
            raise SlurmConfigurationError(
                f"Slurm configuration directory {self.config_dir} does not exist",
                "point the Slurm target at the directory that holds slurmctld's slurm.conf",
            )
        return self._expected_topology(rendered)

    def check_yaml_release(self) -> None:
        """topology.yaml and the partitions' `Topology=` are Slurm 25.05's: an older slurmctld would ignore
        the file and run the stale topology.conf (and refuse the unknown partition option)."""
        version = self.version()
        try:
            release = tuple(int(part) for part in version.split(".")[:2])
        except ValueError:
            return  # a version scontrol prints oddly: the read-back still checks what runs
        if release < YAML_RELEASE:
            raise SlurmRejected(
                f"topology.yaml needs Slurm 25.05 or later; this Slurm is {version}; nothing was written",
                "set the Slurm target's topology file to topology.conf (Slurm 24.11), or upgrade Slurm",
            )

    def apply(self, rendered: dict[str, str], *, check_controller_first: bool = True) -> ApplyResult:
        """Write the files, reconfigure slurmctld, confirm what it loaded; roll back on any failure."""
        expected = self.check_files(rendered)
        if TOPOLOGY_YAML in rendered:
            self.check_yaml_release()
        expected_partitions = self._expected_partitions(rendered)
        result = ApplyResult()

        with self._lock():
            if check_controller_first and not self.ping():
                raise SlurmUnavailable(
                    "slurmctld does not answer `scontrol ping`; nothing was written",
                    "retry later, once slurmctld runs again "
                    "(check `systemctl status slurmctld` on the controller)",
                )
            log_offset = self._log_size()
            previous: dict[str, str | None] = {}
            for name, text in sorted(rendered.items()):
                path = self.config_dir / name
                live = self._read(path)
                if live == text:
                    result.unchanged.append(name)
                    continue
                previous[name] = live
                if live is not None:
                    atomic_write(path.with_name(name + PREV_SUFFIX), live, like=path)
                atomic_write(path, text, like=path if live is not None else None)
                result.changed.append(name)
                result.log.append(f"wrote {path}")

            if not previous:
                # Nothing to write: still make sure the controller runs what the files say.
                problems = self._verify(expected, expected_partitions, wait=False)
                if not problems:
                    result.topology = self._shown
                    result.log.append("files unchanged and slurmctld runs them")
                    return result
                result.log.append("files unchanged but slurmctld differs: " + "; ".join(problems))

            try:
                self._reconfigure(log_offset)
                result.reconfigured = True
                problems = self._verify(expected, expected_partitions, wait=True)
                if problems:
                    raise SlurmRejected(
                        "slurmctld accepted the files but does not run the planned topology",
                        "check that the Slurm target's config directory is the one slurmctld reads, that "
                        "TopologyPlugin=topology/block and that no topology.yaml overrides topology.conf",
                        problems,
                    )
            except SlurmError as error:
                notes = self._rollback(previous, reconfigure=getattr(error, "reached_controller", True))
                raise type(error)(error.message, error.what_to_do, [*error.details, *notes]) from error
            result.topology = self._shown
            result.log.append("slurmctld reconfigured; topology read back matches the plan")
            return result

    def _reconfigure(self, log_offset: int) -> None:
        done = self.scontrol_run("reconfigure")
        if done.returncode == 0:
            return
        if _CLIENT_PARSE_ERROR.search(done.output):
            # scontrol reads slurm.conf (and so the included rackplane.conf) itself: a syntax error stops it
            # before it reaches slurmctld, which keeps running the previous configuration.
            reasons = [line for line in done.output.splitlines() if "error" in line or "fatal" in line]
            raise SlurmRejected(
                "the new configuration does not parse: "
                + next((r for r in reasons if "Parse error" in r or "unrecognized" in r), done.output),
                "fix the configuration and push again; the previous files are back in place",
                reasons,
            )
        if not self.ping():
            error = SlurmUnavailable(
                f"slurmctld is not reachable: {done.output or 'scontrol reconfigure failed'}",
                "retry later, once slurmctld runs again; the previous files are back in place, so it starts "
                "with the last good configuration",
            )
            error.reached_controller = False
            raise error
        reasons = self._controller_reasons(log_offset)
        raise SlurmRejected(
            "slurmctld refused the new configuration and keeps running the previous one"
            + (f": {reasons[-1]}" if reasons else f" ({done.output})"),
            "fix the configuration (see slurmctld's words above) and push again; the previous files are back "
            "in place",
            reasons or ["slurmctld's log is not available here; its reason is in SlurmctldLogFile"],
        )

    def _verify(self, expected, expected_partitions, *, wait: bool) -> list[str]:
        deadline = time.monotonic() + (self.settle_seconds if wait else 0)
        while True:
            problems: list[str] = []
            try:
                self._shown = self.read_topology()
                problems += expected.compare(self._shown)
                if expected.tree is not None:
                    problems += compare_tree(expected.tree, self.read_tree(expected.tree_name))
                if expected_partitions is not None:
                    problems += self._compare_partitions(expected_partitions)
            except SlurmUnavailable as error:
                problems = [str(error)]
                if time.monotonic() >= deadline:
                    raise
            if not problems or time.monotonic() >= deadline:
                return problems
            time.sleep(0.5)

    def _rollback(self, previous: dict[str, str | None], *, reconfigure: bool = True) -> list[str]:
        notes = []
        for name, text in previous.items():
            path = self.config_dir / name
            try:
                if text is None:
                    path.unlink(missing_ok=True)
                    notes.append(f"removed {name} (it did not exist before)")
                else:
                    atomic_write(path, text, like=path)
                    notes.append(f"restored the previous {name}")
            except OSError as error:
                notes.append(
                    f"could NOT restore {name}: {error} (the previous text is in {name}{PREV_SUFFIX})"
                )
        if not previous:
            return notes
        if not reconfigure:
            notes.append(
                "slurmctld never received the new files (it was not reachable), so it runs, or will start "
                "with, the restored ones"
            )
            return notes
        try:
            done = self.scontrol_run("reconfigure")
        except SlurmError as error:
            notes.append(f"reconfigure after the rollback failed: {error.message}")
            return notes
        if done.returncode == 0:
            notes.append("slurmctld reconfigured with the previous files")
        else:
            notes.append(
                "slurmctld did not take the reconfigure after the rollback "
                f"({done.output or 'no answer'}); it loads the restored files when it starts"
            )
        return notes

    # --- read back --------------------------------------------------------------------------------

    def read_topology(self) -> list[dict]:
        """`scontrol show topology`, parsed (base and aggregated blocks)."""
        done = self.scontrol_run("show", "topology")
        if done.returncode != 0:
            if _UNREACHABLE.search(done.output) or not self.ping():
                raise SlurmUnavailable(
                    f"cannot read the topology: {done.output}", "retry later, once slurmctld runs again"
                )
            raise SlurmRejected(f"scontrol show topology failed: {done.output}", "check TopologyPlugin")
        return parse_show_topology(done.stdout)

    def read_tree(self, name: str = FABRIC_TOPOLOGY) -> list[dict]:
        """`scontrol show topology NAME` of a tree topology (topology.yaml, Slurm 25.05+), parsed."""
        done = self.scontrol_run("show", "topology", name)
        if done.returncode != 0:
            if _UNREACHABLE.search(done.output) or not self.ping():
                raise SlurmUnavailable(
                    f"cannot read the topology {name}: {done.output}",
                    "retry later, once slurmctld runs again",
                )
            raise SlurmRejected(f"scontrol show topology {name} failed: {done.output}", "check topology.yaml")
        return parse_show_tree(done.stdout)

    def read_back(self) -> list[SlurmBlock]:
        """The blocks slurmctld runs (base blocks as Slurm names them; the rack is not known to Slurm)."""
        return [
            SlurmBlock(name=b["name"], domain="", hostnames=tuple(b["hostnames"]))
            for b in self.read_topology()
            if not b["aggregated"]
        ]

    def read_partitions(self) -> dict[str, set[str]]:
        done = self.scontrol_run("show", "partition", "--oneliner")
        if done.returncode != 0:
            raise SlurmUnavailable(f"cannot read the partitions: {done.output}", "retry later")
        partitions = {}
        for fields in parse_conf_lines(done.stdout, "PartitionName"):
            nodes = fields.get("Nodes", "")
            partitions[fields["PartitionName"]] = set(expand(nodes)) if nodes and nodes != "(null)" else set()
        return partitions

    def _compare_partitions(self, expected: dict[str, set[str] | None]) -> list[str]:
        live = self.read_partitions()
        problems = []
        for name, nodes in sorted(expected.items()):
            if name not in live:
                problems.append(f"partition {name} is missing")
            elif nodes is not None and live[name] != nodes:
                problems.append(f"partition {name}: nodes {compress(live[name]) if live[name] else 'none'}")
        return problems

    # --- accounting (sacctmgr; needs slurmdbd) ----------------------------------------------------

    def _config_value(self, key: str) -> str:
        done = self.scontrol_run("show", "config")
        if done.returncode != 0:
            raise SlurmUnavailable(f"cannot read slurmctld's configuration: {done.output}", "retry later")
        match = re.search(rf"^{key}\s*=\s*(\S+)", done.stdout, re.MULTILINE)
        return match.group(1) if match else ""

    def tracked_tres(self) -> set[str]:
        """The TRES slurmctld tracks now (`scontrol show config`'s AccountingStorageTRES, lower case)."""
        return {t.lower() for t in self._config_value("AccountingStorageTRES").split(",") if t}

    def slurmdbd_configured(self) -> bool:
        return self._config_value("AccountingStorageType") == "accounting_storage/slurmdbd"

    def accounting_cluster(self) -> str | None:
        """The cluster's name in slurmdbd (ClusterName), or None when slurmctld keeps no accounting there."""
        if not self.slurmdbd_configured():
            return None
        return self._config_value("ClusterName") or None

    def ensure_qos(
        self, name: str, gpu_limit: int | None, mig_limits: tuple[tuple[str, int], ...] = ()
    ) -> QosResult:
        """Create QOS `name` if missing and set its GrpTRES=gres/gpu limit (None clears it).

        Skipped (applied=False, with a note) when the cluster has no slurmdbd: QOS limits live there.
        """
        qos = DepartmentQos(name=name, gpu_limit=gpu_limit, mig_limits=mig_limits)
        commands = sacctmgr_qos_commands(qos)  # validates the name and limit first
        if not self.slurmdbd_configured():
            return QosResult(
                False,
                f"QOS {name} not set: this cluster has no slurmdbd (AccountingStorageType is not "
                "accounting_storage/slurmdbd), and sacctmgr needs it. GPU limits are not enforced by Slurm.",
            )
        shown = self._run(self.sacctmgr, "-n", "-P", "show", "qos", f"name={name}", "format=name")
        if shown.returncode != 0:
            raise SlurmUnavailable(f"sacctmgr cannot reach slurmdbd: {shown.output}", "retry later")
        exists = name in shown.stdout.split()
        for args in commands[1:] if exists else commands:
            done = self._run(self.sacctmgr, *args)
            if done.returncode != 0:
                raise SlurmRejected(
                    f"sacctmgr {shlex.join(args)} failed: {done.output}", "check the QOS name"
                )
        typed = "".join(f",gres/gpu:{profile}={slices}" for profile, slices in mig_limits)
        return QosResult(
            True, f"QOS {name}: GrpTRES=gres/gpu={'none' if gpu_limit is None else gpu_limit}{typed}"
        )

    # --- helpers ----------------------------------------------------------------------------------

    @staticmethod
    def _check_names(rendered: dict[str, str]) -> None:
        unknown = sorted(set(rendered) - set(MANAGED_FILES))
        if unknown:
            raise ValueError(
                f"the Slurm target only writes {', '.join(MANAGED_FILES)}, not {', '.join(unknown)}"
            )

    def _expected_topology(self, rendered: dict[str, str]) -> ExpectedTopology:
        yaml_text = rendered.get(TOPOLOGY_YAML)
        if yaml_text is None:
            yaml_text = self._read(self.config_dir / TOPOLOGY_YAML)
            if yaml_text is not None and TOPOLOGY_CONF in rendered:
                raise SlurmRejected(
                    f"{self.config_dir / TOPOLOGY_YAML} exists, and Slurm reads it, not {TOPOLOGY_CONF}",
                    f"remove {TOPOLOGY_YAML} from the configuration directory, or set the target's topology "
                    "file to topology.yaml (Slurm 25.05+)",
                )
        if yaml_text is not None:
            try:
                expected = parse_topology_yaml(yaml_text)
            except ValueError as error:
                raise SlurmRejected(f"{TOPOLOGY_YAML} is not valid: {error}", "fix the plan") from error
        else:
            text = rendered.get(TOPOLOGY_CONF)
            if text is None:
                text = self._read(self.config_dir / TOPOLOGY_CONF)
            if text is None:
                raise SlurmConfigurationError(f"no {TOPOLOGY_CONF} to apply or in {self.config_dir}")
            try:
                expected = ExpectedTopology(parse_topology_conf(text))
            except ValueError as error:
                raise SlurmRejected(
                    f"{TOPOLOGY_CONF} is not valid for Slurm 24.11: {error}", "fix the plan"
                ) from error
        nodes_text = rendered.get(RACKPLANE_CONF) or self._read(self.config_dir / RACKPLANE_CONF) or ""
        known = {h for line in parse_conf_lines(nodes_text, "NodeName") for h in expand(line["NodeName"])}
        if known:
            named = {h for _, hosts, _ in expected.blocks.blocks for h in hosts}
            named |= expected.tree.nodes if expected.tree is not None else set()
            unknown = sorted(named - known)
            if unknown:
                # slurmctld would only warn and show the block as written: refuse here instead.
                raise SlurmRejected(
                    f"the topology names nodes that {RACKPLANE_CONF} does not define: {compress(unknown)}",
                    "render both files from the same state",
                )
        return expected

    def _expected_partitions(self, rendered: dict[str, str]) -> dict[str, set[str] | None] | None:
        text = rendered.get(RACKPLANE_CONF)
        if text is None:
            return None
        expected: dict[str, set[str] | None] = {}
        for line in parse_conf_lines(text, "PartitionName"):
            nodes = line.get("Nodes", "")
            expected[line["PartitionName"]] = None if nodes.upper() == "ALL" else set(expand(nodes))
        return expected

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text()
        except FileNotFoundError:
            return None

    def _log_size(self) -> int:
        if not self.slurmctld_log:
            return 0
        try:
            return self.slurmctld_log.stat().st_size
        except OSError:
            return 0

    def _controller_reasons(self, offset: int) -> list[str]:
        """slurmctld's error and fatal lines written since `offset` (its reasons for refusing)."""
        if not self.slurmctld_log:
            return []
        # The refusing copy writes its reason just before scontrol returns; give the log a moment.
        lines: list[str] = []
        for _ in range(10):
            try:
                with self.slurmctld_log.open("rb") as handle:
                    handle.seek(offset)
                    lines = handle.read().decode(errors="replace").splitlines()
            except OSError:
                return []
            if any("fatal" in line or "reconfigure failed" in line for line in lines):
                break
            time.sleep(0.2)
        wanted = [line for line in lines if re.search(r"\b(fatal|error):", line)]
        ignore = re.compile(r"MailProg|cgroup", re.IGNORECASE)  # noise of every start, not reasons
        return [re.sub(r"^\[[^\]]*\]\s*", "", line) for line in wanted if not ignore.search(line)]

    @contextlib.contextmanager
    def _lock(self):
        # One apply at a time per configuration directory (two workers could otherwise interleave).
        with open(self.config_dir / LOCK_NAME, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
