"""ibnetdiscover output for a made-up rail-optimized GB200 fabric, written line for line as
infiniband-diags/ibnetdiscover.c prints it (rdma-core 691953d: dump_topology's header, out_ids, out_switch,
out_switch_detail, out_switch_port, out_ca, out_ca_detail, out_ca_port; the man page's "TOPOLOGY FILE
FORMAT"). tests/inventory/fixtures/fabric/README.md says which fixture came from here.

The fabric: spine groups of units, each unit a set of racks whose trays' four NICs (mlx5_0-3, one per GPU)
go to the unit's four rail leaves (rail n: NIC n); each leaf has an uplink to every spine of its spine group;
with more than one spine group, core switches link every spine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VENDOR = 0x2C9  # Mellanox/NVIDIA
SWITCH_DEVID = 0xD2F2  # Quantum-2 class switch
CA_DEVID = 0x1021  # ConnectX-7 class adapter


@dataclass
class _Node:
    kind: str  # "S" or "H"
    guid: int
    description: str
    lid: int
    ports: int
    links: dict[int, tuple[_Node, int]] = field(default_factory=dict)


def _connect(a: _Node, b: _Node) -> None:
    pa = next(p for p in range(1, a.ports + 1) if p not in a.links)
    pb = next(p for p in range(1, b.ports + 1) if p not in b.links)
    a.links[pa] = (b, pb)
    b.links[pb] = (a, pa)


def _name(node: _Node) -> str:
    return f'"{node.kind}-{node.guid:016x}"'


def build(
    spine_groups: int = 1,
    units_per_group: int = 2,
    racks_per_unit: int = 2,
    trays_per_rack: int = 18,
    spines_per_group: int = 2,
    rack_name=lambda n: f"gb-r{n:02d}",
    hostname=lambda rack, slot: f"{rack}-t{slot:02d}",
    extra_hosts: tuple[str, ...] = (),
) -> tuple[list[_Node], list[_Node]]:
    """(switches, adapters) of the fabric."""
    counter = iter(range(1, 1 << 30))
    guid = lambda: 0x0002C90300000000 + next(counter) * 16  # noqa: E731
    lid = iter(range(1, 1 << 15))
    switches: list[_Node] = []
    adapters: list[_Node] = []
    cores = []
    if spine_groups > 1:
        cores = [_Node("S", guid(), f"core-{i}", next(lid), 128) for i in range(1, 3)]
        switches += cores
    rack_number = 1
    unit_number = 1
    for group in range(1, spine_groups + 1):
        spines = [
            _Node("S", guid(), f"spine-g{group}-{i}", next(lid), 128) for i in range(1, spines_per_group + 1)
        ]
        switches += spines
        for spine in spines:
            for core in cores:
                _connect(spine, core)
        for _unit in range(units_per_group):
            leaves = [
                _Node("S", guid(), f"leaf-su{unit_number}-rail{rail}", next(lid), 128) for rail in range(4)
            ]
            switches += leaves
            for leaf in leaves:
                for spine in spines:
                    _connect(leaf, spine)
            for _rack in range(racks_per_unit):
                rack = rack_name(rack_number)
                rack_number += 1
                for slot in range(1, trays_per_rack + 1):
                    for nic in range(4):
                        adapter = _Node("H", guid(), f"{hostname(rack, slot)} mlx5_{nic}", next(lid), 1)
                        adapters.append(adapter)
                        _connect(adapter, leaves[nic])
            unit_number += 1
    # Hosts that are not trays (storage, the fabric manager) on the first unit's first leaf.
    first_leaf = next(s for s in switches if s.description.startswith("leaf-"))
    for host in extra_hosts:
        adapter = _Node("H", guid(), f"{host} mlx5_0", next(lid), 1)
        adapters.append(adapter)
        _connect(adapter, first_leaf)
    return switches, adapters


def render(switches: list[_Node], adapters: list[_Node]) -> str:
    """The topology as `ibnetdiscover` (no options) prints it: switches, then CAs."""
    first = adapters[0]
    out = [
        "#",
        "# Topology file: generated on Mon Nov 30 15:00:00 2026",
        "#",
        f"# Initiated from node {first.guid:016x} port {first.guid + 1:016x}",
    ]
    for node in switches:
        out += [
            "",
            f"vendid=0x{VENDOR:x}",
            f"devid=0x{SWITCH_DEVID:x}",
            f"sysimgguid=0x{node.guid:x}",
            f"switchguid=0x{node.guid:x}({node.guid:x})",
            f'Switch\t{node.ports} {_name(node)}\t\t# "{node.description}" enhanced port 0 '
            f"lid {node.lid} lmc 0",
        ]
        for port in sorted(node.links):
            remote, rport = node.links[port]
            guid = f"({remote.guid + rport:x}) " if remote.kind != "S" else ""
            out.append(
                f'[{port}]\t{_name(remote)}[{rport}]{guid}\t\t# "{remote.description}" lid {remote.lid} 4xNDR'
            )
        out.append("")
    for node in adapters:
        out += [
            "",
            f"vendid=0x{VENDOR:x}",
            f"devid=0x{CA_DEVID:x}",
            f"sysimgguid=0x{node.guid:x}",
            f"caguid=0x{node.guid:x}",
            f'Ca\t{node.ports} {_name(node)}\t\t# "{node.description}"',
        ]
        for port in sorted(node.links):
            remote, rport = node.links[port]
            out.append(
                f"[{port}]({node.guid + port:x}) \t{_name(remote)}[{rport}]\t\t# lid {node.lid} lmc 0 "
                f'"{remote.description}" lid {remote.lid} 4xNDR'
            )
    return "\n".join(out) + "\n"


def ibnetdiscover(**kwargs) -> str:
    return render(*build(**kwargs))
