"""Slurm configuration from Rackplane's state: pure functions, no Django, no I/O.

Inputs are the small dataclasses below and topology.py's `SlurmBlock` (built from the inventory by the
caller); outputs are the exact text of the files slurmctld reads (`topology.conf`, `topology.yaml`,
`rackplane.conf`, the node and partition lines) and the sacctmgr commands for accounts and QOS. How NVLink
partitions become Slurm blocks, and the parsers that read them back: topology.py.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import hostlist
import yaml

from integrations.slurm.topology import (
    HOSTNAME,
    PAIR,
    SlurmBlock,
    check_blocks,
    check_name,
    compress,
    compress_block,
    natural_key,
    order_blocks,
    plan_topology,
    slurm_aggregates,
)
from integrations.slurm.tree import FABRIC_TOPOLOGY, TreePlan, tree_topology

NVLINK_TOPOLOGY = "nvlink"
MANAGED_HEADER = "# Managed by Rackplane (integrations/slurm). Changes made here are overwritten."

_FEATURE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
# NodeHostName / NodeAddr: a host name or an IP address (IPv6 may start with ':'); `\Z`, not `$`, which
# would let a trailing newline through and start a new line of slurm.conf.
_ADDRESS = re.compile(r"^[A-Za-z0-9:][A-Za-z0-9.:-]*\Z")


@dataclass(frozen=True)
class SlurmNode:
    """One compute tray as a Slurm node.

    `address`, `node_hostname` and `port` are for sites (and the testbed) where slurmd is not reached at the
    node's own name on the default port; leave them empty otherwise.
    """

    hostname: str
    gpus: int = 4
    cpus: int = 144
    memory_mb: int = 0
    features: tuple[str, ...] = ()
    address: str = ""
    node_hostname: str = ""
    port: int | None = None
    # A tray in MIG mode: its MIG devices as GRES types and counts for the whole node (("1g.23gb", 28)),
    # rendered instead of `gpu:<gpus>`. The type is the profile name, a substring of the type slurmd's NVML
    # plugin builds for the device ("nvidia_gb200_1g.23gb"), which is how Slurm matches them.
    mig: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "features", tuple(sorted(set(self.features))))
        object.__setattr__(self, "mig", tuple(sorted((str(t), int(n)) for t, n in self.mig)))


@dataclass(frozen=True)
class ServiceTier:
    """A service tier, rendered as one Slurm partition.

    `qos` is the partition QOS (its limits); `allow_qos` restricts which job QOS (departments) may submit
    (empty: all); `max_time_minutes` None means no limit.
    """

    name: str
    hostnames: tuple[str, ...]
    qos: str = ""
    default: bool = False
    allow_qos: tuple[str, ...] = ()
    max_time_minutes: int | None = None
    priority_tier: int = 1
    exclusive: bool = True
    # The topology.yaml topology the partition's jobs are placed with (`Topology=`, Slurm 25.05+); "": the
    # cluster default. Never set for Slurm 24.11, which does not know the option.
    topology: str = ""
    # A partition of trays in MIG mode (integrations.state, tenancy.naming.mig_partition): slice jobs share
    # a node, each holding its MIG devices only (`OverSubscribe=NO`, `exclusive` is ignored), and each takes
    # `DefMemPerGPU` of the node's memory unless it asks (render_rackplane_conf: the node's memory over its
    # MIG devices; without it a job would take the whole node's memory and the next wait).
    mig: bool = False
    def_mem_per_gpu: int = 0

    def __post_init__(self):
        object.__setattr__(self, "hostnames", tuple(self.hostnames))
        object.__setattr__(self, "allow_qos", tuple(sorted(set(self.allow_qos))))


@dataclass(frozen=True)
class DepartmentQos:
    """A department's QOS: `gpu_limit` is its GrpTRES gres/gpu limit (None: no limit); `mig_limits` its
    GrpTRES gres/gpu:<profile> limits, (profile, slices) by profile (integrations.state.mig_limits)."""

    name: str
    gpu_limit: int | None = None
    mig_limits: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class SlurmAccount:
    """One account of the account tree (needs slurmdbd): a department's (parent `root`) or a project's (its
    department's account as parent). `gpu_limit` is its GrpTRES gres/gpu limit (None: no limit); `qos` the
    QOS its jobs may run under, the first their default (its department's two, integrations.state
    .department_qos; empty: Slurm's default); `shares` its
    fairshare (Slurm's raw shares among its siblings, what the multifactor priority weighs usage against):
    the guarantee in GPUs, at least 1 (Slurm's own default)."""

    name: str
    parent: str = "root"
    gpu_limit: int | None = None
    qos: tuple[str, ...] = ()
    shares: int = 1
    mig_limits: tuple[tuple[str, int], ...] = ()  # GrpTRES gres/gpu:<profile>, as DepartmentQos's

    def __post_init__(self):
        qos = self.qos
        object.__setattr__(self, "qos", ((qos,) if qos else ()) if isinstance(qos, str) else tuple(qos))

    @property
    def default_qos(self) -> str:
        return self.qos[0] if self.qos else ""


@dataclass(frozen=True)
class SlurmAssociation:
    """A person who may submit under `account`: a user association (needs slurmdbd). `user` is their Slurm
    user name, which is their POSIX login name (jobs run as it)."""

    account: str
    user: str


# --- renderers ----------------------------------------------------------------------------------------


def render_topology_conf(blocks: Sequence[SlurmBlock], notes: Sequence[str] = ()) -> str:
    """topology.conf for Slurm 24.11's topology/block: one BlockName line per block, then BlockSizes.
    `notes`: comment lines under the header (what the file leaves out and why)."""
    plan = plan_topology(blocks)
    lines = [MANAGED_HEADER, *(f"# {line}" for note in notes for line in textwrap.wrap(note, 110))]
    lines += [f"BlockName={name} Nodes={compress_block(tuple(hosts))}" for name, hosts, _ in plan.blocks]
    lines.append("BlockSizes=" + ",".join(str(s) for s in plan.block_sizes))
    return "\n".join(lines) + "\n"


def render_topology_yaml(
    blocks: Sequence[SlurmBlock],
    cluster_default: bool = True,
    name: str = NVLINK_TOPOLOGY,
    tree: TreePlan | None = None,
    tree_name: str = FABRIC_TOPOLOGY,
) -> str:
    """topology.yaml (Slurm 25.05+): the NVLink block topology (base = the largest partition, nothing split)
    and, given the fabric's `tree` (integrations.slurm.tree), a tree topology `tree_name` after it, never the
    cluster default (see docs/operators/targets.md, "The compute fabric in Slurm")."""
    check_blocks(blocks)
    check_name("topology", name)
    base = max(len(b.hostnames) for b in blocks)
    ordered = order_blocks(blocks, lambda b: len(b.hostnames))
    levels = [0]
    per_domain: dict[str, list[int]] = {}
    for i, block in enumerate(ordered):
        per_domain.setdefault(block.domain, []).append(i)
    counts = {len(v) for v in per_domain.values()}
    if len(counts) == 1 and (count := counts.pop()) > 1:
        rack_level = (count - 1).bit_length()
        kept, groups = slurm_aggregates(len(ordered), [0, rack_level])
        if rack_level in kept and all(
            any(set(members) == set(span) for lvl, members in groups if lvl == rack_level)
            for span in per_domain.values()
        ):
            levels.append(rack_level)
    document = [
        {
            "topology": name,
            "cluster_default": bool(cluster_default),
            "block": {
                "block_sizes": [base << level for level in levels],
                "blocks": [{"block": b.name, "nodes": compress_block(tuple(b.hostnames))} for b in ordered],
            },
        }
    ]
    if tree is not None:
        if tree_name == name:
            raise ValueError(f"the block and the tree topology cannot both be named {name}")
        document.append(tree_topology(tree, tree_name, cluster_default=False))
    return MANAGED_HEADER + "\n" + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _node_attrs(node: SlurmNode) -> tuple:
    return (node.node_hostname, node.address, node.cpus, node.memory_mb, node.gpus, node.features, node.mig)


def render_node_lines(nodes: Sequence[SlurmNode]) -> list[str]:
    """NodeName lines, one per run of nodes with equal attributes (and consecutive ports, if any).

    Kept for the last few node sets (by content): the lines compress hostnames across racks, so they are a
    whole, but a partition plan changes no node (issue 32: a re-carve renders them once, not per push)."""
    return list(_node_lines(tuple(nodes)))


@functools.lru_cache(maxsize=4)
def _node_lines(nodes: tuple[SlurmNode, ...]) -> tuple[str, ...]:
    return tuple(_render_node_lines(nodes))


def _render_node_lines(nodes: Sequence[SlurmNode]) -> list[str]:
    if not nodes:
        raise ValueError("no nodes to render")
    by_name: dict[str, SlurmNode] = {}
    for node in nodes:
        if not HOSTNAME.match(node.hostname):
            raise ValueError(f"{node.hostname!r} is not a valid node name")
        if node.hostname in by_name:
            raise ValueError(f"node {node.hostname} is listed twice")
        if node.gpus < 0 or node.cpus < 1 or node.memory_mb < 0:
            raise ValueError(f"node {node.hostname}: gpus, cpus and memory must be positive")
        for feature in node.features:
            if not _FEATURE.match(feature):
                raise ValueError(f"node {node.hostname}: feature {feature!r} is not a valid Slurm feature")
        for gres_type, count in node.mig:
            if not _FEATURE.match(gres_type) or count < 1:
                raise ValueError(
                    f"node {node.hostname}: MIG GRES {gres_type}:{count} is not a GRES type and count"
                )
        for key, value in (("NodeHostName", node.node_hostname), ("NodeAddr", node.address)):
            if value and not _ADDRESS.match(value):
                raise ValueError(f"node {node.hostname}: {key} {value!r} is not a host name or an IP address")
        by_name[node.hostname] = node

    # Group by attributes; inside a group, hostlist order, split where the port does not follow on.
    groups: dict[tuple, list[SlurmNode]] = {}
    for name in hostlist.numerically_sorted(list(by_name)):
        groups.setdefault(_node_attrs(by_name[name]), []).append(by_name[name])
    runs: list[list[SlurmNode]] = []
    for members in groups.values():
        run: list[SlurmNode] = []
        for node in members:
            follows = bool(run) and (
                (node.port is None and run[-1].port is None)
                or (node.port is not None and run[-1].port is not None and node.port == run[-1].port + 1)
            )
            if run and not follows:
                runs.append(run)
                run = []
            run.append(node)
        runs.append(run)
    runs.sort(key=lambda r: natural_key(r[0].hostname))

    lines = []
    for run in runs:
        first = run[0]
        parts = [f"NodeName={compress(n.hostname for n in run)}"]
        if first.node_hostname:
            parts.append(f"NodeHostName={first.node_hostname}")
        if first.address:
            parts.append(f"NodeAddr={first.address}")
        if first.port is not None:
            ports = f"[{first.port}-{run[-1].port}]" if len(run) > 1 else str(first.port)
            parts.append(f"Port={ports}")
        parts.append(f"CPUs={first.cpus}")
        if first.memory_mb:
            parts.append(f"RealMemory={first.memory_mb}")
        if first.mig:
            parts.append("Gres=" + ",".join(f"gpu:{gres_type}:{count}" for gres_type, count in first.mig))
        elif first.gpus:
            parts.append(f"Gres=gpu:{first.gpus}")
        if first.features:
            parts.append("Features=" + ",".join(first.features))
        parts.append("State=UNKNOWN")
        lines.append(" ".join(parts))
    return lines


def render_partition_lines(
    tiers: Sequence[ServiceTier], known_nodes: Iterable[str] | None = None
) -> list[str]:
    """PartitionName lines, in the order given (Slurm lists partitions in file order)."""
    known = set(known_nodes) if known_nodes is not None else None
    names: set[str] = set()
    defaults = [t.name for t in tiers if t.default]
    if len(defaults) > 1:
        raise ValueError(f"only one partition can be the default, not {', '.join(defaults)}")
    lines = []
    for tier in tiers:
        check_name("partition", tier.name)
        if tier.name in names:
            raise ValueError(f"partition {tier.name} is listed twice")
        names.add(tier.name)
        if tier.name.upper() == "DEFAULT":
            raise ValueError(
                "'DEFAULT' is Slurm's keyword for default partition options, not a partition name"
            )
        if not tier.hostnames:
            raise ValueError(f"partition {tier.name} has no nodes")
        if known is not None:
            unknown = sorted(set(tier.hostnames) - known)
            if unknown:
                raise ValueError(
                    f"partition {tier.name} names nodes that are not defined: {compress(unknown)}"
                )
        if tier.qos:
            check_name("QOS", tier.qos)
        for qos in tier.allow_qos:  # every entry: an empty one would render "AllowQos=", a broken token
            check_name("QOS", qos)
        parts = [f"PartitionName={tier.name}", f"Nodes={compress_block(tuple(tier.hostnames))}"]
        parts.append(f"Default={'YES' if tier.default else 'NO'}")
        if tier.qos:
            parts.append(f"QOS={tier.qos}")
        if tier.allow_qos:
            parts.append("AllowQos=" + ",".join(tier.allow_qos))
        if tier.max_time_minutes is not None:
            if tier.max_time_minutes < 1:
                raise ValueError(f"partition {tier.name}: max time must be at least one minute")
            parts.append(f"MaxTime={tier.max_time_minutes}")
        else:
            parts.append("MaxTime=INFINITE")
        parts.append(f"PriorityTier={tier.priority_tier}")
        parts.append(f"OverSubscribe={'EXCLUSIVE' if tier.exclusive and not tier.mig else 'NO'}")
        if tier.def_mem_per_gpu < 0:
            raise ValueError(f"partition {tier.name}: DefMemPerGPU must be positive")
        if tier.def_mem_per_gpu:
            parts.append(f"DefMemPerGPU={tier.def_mem_per_gpu}")
        if tier.topology:
            check_name("topology", tier.topology)
            parts.append(f"Topology={tier.topology}")
        parts.append("State=UP")
        lines.append(" ".join(parts))
    return lines


def render_rackplane_conf(nodes: Sequence[SlurmNode], tiers: Sequence[ServiceTier]) -> str:
    """The file slurm.conf includes (`Include rackplane.conf`): Rackplane's NodeName and PartitionName lines.

    Nodes: compressed where they share attributes, `Gres=gpu:N` (GresTypes=gpu and gres.conf are the
    site's), `State=UNKNOWN` so slurmd registration decides. Partitions (service tiers): `Nodes=`, `QOS=`
    (the tier's limits), `AllowQos=` (departments allowed, when set), `Default=YES/NO` (at most one YES),
    `MaxTime=`, `PriorityTier=`, `OverSubscribe=EXCLUSIVE` (whole trays: a job gets all 4 GPUs of a node,
    never shares it; MNNVL jobs need that) and `State=UP`. A MIG partition (`ServiceTier.mig`) has
    `OverSubscribe=NO` instead, so slice jobs share its nodes (select/cons_tres gives each its GRES), and,
    when every node's memory is known, `DefMemPerGPU` = the smallest node memory over its MIG devices.
    When a node carries MIG GRES, the file also sets `AccountingStorageTRES` (`accounting_storage_tres`:
    gres/gpu and each MIG profile's typed GRES), without which slurmdbd refuses a QOS or account limit on a
    profile ("no TRES known by type gres/gpu:1g.23gb") and sacct records no slices. slurmctld registers the
    TRES in slurmdbd when it starts, which `scontrol reconfigure` does since 23.11 (a new process);
    slurm.conf's own line, if any, gives way to this one when `Include rackplane.conf` comes after it (Slurm
    takes the latest value and logs "specified more than once"): SlurmTarget.tracked_tres reads it back.
    """
    node_lines = render_node_lines(nodes)
    tiers = [mig_memory(tier, nodes) for tier in tiers]
    part_lines = render_partition_lines(tiers, known_nodes=[n.hostname for n in nodes])
    profiles = [profile for node in nodes for profile, _ in node.mig]
    tres = [f"{ACCOUNTING_TRES}={accounting_storage_tres(profiles)}"] if profiles else []
    return "\n".join([MANAGED_HEADER, *tres, *node_lines, *part_lines]) + "\n"


ACCOUNTING_TRES = "AccountingStorageTRES"


def declared_tres(rackplane_conf: str) -> tuple[str, ...]:
    """The TRES a rendered rackplane.conf has slurmctld track (its AccountingStorageTRES line; () if none)."""
    for raw in rackplane_conf.splitlines():
        key, _, value = raw.split("#", 1)[0].strip().partition("=")
        if key.lower() == ACCOUNTING_TRES.lower():
            return tuple(t for t in value.split(",") if t)
    return ()


def mig_memory(tier: ServiceTier, nodes: Sequence[SlurmNode]) -> ServiceTier:
    """A MIG partition with its `def_mem_per_gpu` (a MIG device counts as one gres/gpu): each node's memory
    over its MIG devices, the smallest of the partition's nodes, so as many slice jobs as the node has
    devices fit its memory; unchanged when a node's memory is not known (RealMemory not rendered)."""
    if not tier.mig or tier.def_mem_per_gpu:
        return tier
    members = [n for n in nodes if n.hostname in set(tier.hostnames)]
    shares = [n.memory_mb // sum(c for _, c in n.mig) for n in members if n.mig and n.memory_mb]
    if not members or len(shares) != len(members) or min(shares) < 1:
        return tier
    return dataclasses.replace(tier, def_mem_per_gpu=min(shares))


# A typed GRES a TRES limit may name: a MIG profile as the node lines declare it (`1g.23gb`).
MIG_TRES_PROFILE = re.compile(r"^[0-9]{1,2}g\.[0-9]{1,4}gb\Z")


def grp_tres(gpu_limit: int | None, mig_limits: Sequence[tuple[str, int]] = ()) -> str:
    """`gres/gpu=<limit>` (-1 clears it), then `gres/gpu:<profile>=<slices>` per MIG profile."""
    parts = [f"gres/gpu={'-1' if gpu_limit is None else gpu_limit}"]
    for profile, slices in mig_limits:
        if not MIG_TRES_PROFILE.match(profile) or slices < 0:
            raise ValueError(f"{profile!r}: {slices} is not a MIG profile's slice limit")
        parts.append(f"gres/gpu:{profile}={slices}")
    return ",".join(parts)


def accounting_storage_tres(profiles: Iterable[str]) -> str:
    """slurm.conf's `AccountingStorageTRES` value that makes slurmctld track (and slurmdbd take limits on)
    each MIG profile's typed GRES beside gres/gpu: `gres/gpu,gres/gpu:1g.23gb,...`."""
    return ",".join(
        ["gres/gpu", *(f"gres/gpu:{p}" for p in sorted(set(profiles)) if MIG_TRES_PROFILE.match(p))]
    )


def sacctmgr_qos_commands(qos: DepartmentQos) -> list[list[str]]:
    """sacctmgr arguments that create the QOS (if missing) and set its GPU limit (-1 clears it)."""
    check_name("QOS", qos.name)
    if qos.gpu_limit is not None and qos.gpu_limit < 0:
        raise ValueError(f"QOS {qos.name}: the GPU limit must be >= 0 or None")
    return [
        ["-i", "add", "qos", qos.name],
        [
            "-i",
            "modify",
            "qos",
            "where",
            f"name={qos.name}",
            "set",
            f"GrpTRES={grp_tres(qos.gpu_limit, qos.mig_limits)}",
        ],
    ]


def sacctmgr_account_commands(accounts: Sequence[SlurmAccount]) -> list[list[str]]:
    """sacctmgr arguments that build the account tree: each account added under its parent (parents first;
    `-i add` of an existing account changes nothing), its GPU limit (`-1` clears it) and fairshare set, e.g.
    `-i add account research-vision parent=research` then
    `-i modify account name=research-vision set GrpTRES=gres/gpu=48 Fairshare=32
    QOS=research,research--borrowed DefaultQOS=research` (the QOS exist first: `render_account_script`)."""
    names = {a.name for a in accounts}
    for account in accounts:
        check_name("account", account.name)
        check_name("account", account.parent)
        if account.parent != "root" and account.parent not in names:
            raise ValueError(f"account {account.name}: its parent {account.parent} is not in the tree")
        if account.gpu_limit is not None and account.gpu_limit < 0:
            raise ValueError(f"account {account.name}: the GPU limit must be >= 0 or None")
        if account.shares < 1:
            raise ValueError(f"account {account.name}: the fairshare must be at least 1")
        for qos in account.qos:
            check_name("QOS", qos)
    if len(names) != len(accounts):
        raise ValueError("an account is listed twice")
    depth = {}

    def level(account: SlurmAccount) -> int:
        if account.name not in depth:
            parent = next((a for a in accounts if a.name == account.parent), None)
            depth[account.name] = 0 if parent is None else level(parent) + 1
        return depth[account.name]

    commands = []
    for account in sorted(accounts, key=lambda a: (level(a), a.name)):
        commands.append(["-i", "add", "account", account.name, f"parent={account.parent}"])
    for account in sorted(accounts, key=lambda a: (level(a), a.name)):
        limit = grp_tres(account.gpu_limit, account.mig_limits)
        qos = [f"QOS={','.join(account.qos)}", f"DefaultQOS={account.default_qos}"] if account.qos else []
        commands.append(
            [
                "-i",
                "modify",
                "account",
                f"name={account.name}",
                "set",
                f"GrpTRES={limit}",
                f"Fairshare={account.shares}",
                *qos,
            ]
        )
    return commands


def render_account_script(accounts: Sequence[SlurmAccount], qos: Sequence[DepartmentQos] = ()) -> str:
    """The QOS and the account tree as the exact sacctmgr commands, one a line (`sacctmgr_qos_commands`,
    `sacctmgr_account_commands`): a script an operator runs on a host with slurmdbd (`sh accounts.sh`)."""
    lines = [
        MANAGED_HEADER,
        "# Slurm QOS, then accounts: departments under root, their projects under them (needs slurmdbd).",
    ]
    profiles = {
        p for limits in [*(q.mig_limits for q in qos), *(a.mig_limits for a in accounts)] for p, _ in limits
    }
    if profiles:
        lines.append(
            "# slurmctld must track the MIG profiles (rackplane.conf sets it when a tray is in MIG mode): "
            f"AccountingStorageTRES={accounting_storage_tres(profiles)}"
        )
    lines += ["sacctmgr " + " ".join(command) for q in qos for command in sacctmgr_qos_commands(q)]
    lines += ["sacctmgr " + " ".join(command) for command in sacctmgr_account_commands(accounts)]
    return "\n".join(lines) + "\n"


def parse_conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """`Key=value` lines of a slurm.conf-style file that start with `key=` (NodeName, PartitionName...)."""
    result = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.lower().startswith(key.lower() + "="):
            result.append({k: v for k, v in PAIR.findall(line)})
    return result
