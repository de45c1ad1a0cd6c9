"""The node labels NVIDIA Topograph puts on Kubernetes nodes -> the fabric above the rack (pure).

Topograph v1.x (2026-08): `fabric.topograph.run/tier-N`, tier-0 the switch closest to the node, unbounded
depth, and `accelerator.topograph.run/domain` (the NVLink domain). v0.3-v0.5:
`network.topology.nvidia.com/leaf`, `.../spine`, `.../core` (v0.1: `block` instead of `leaf`; the briefly
released `network.topology.nvidia.com/tier-N` too). Both are read; a node carrying both is refused.

Topograph names switches as its provider does (cloud switch ids, "S1"): a value is lower-cased and its '.'
and '_' read as '-' to be a Rackplane group name (a Slurm switch name, a Kubernetes label value); two values
that would read the same are refused.

Tier 0 (the leaf switches a node's NICs reach, one group in Topograph's view) is the node's scalable unit,
tier 1 its spine group; a node without tier 1 is in a spine group of its unit alone. Nodes without fabric
labels (control-plane nodes, nodes Topograph has not labelled yet) are left aside and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inventory.discovery.fabric.parsed import (
    TOPOGRAPH,
    FabricInputError,
    ParsedFabric,
    group_name,
    hostname,
    place_unit,
)

V1_TIER = "fabric.topograph.run/tier-{}"
V1_DOMAIN = "accelerator.topograph.run/domain"
V0_KEYS = ("network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine")
V0_BLOCK = "network.topology.nvidia.com/block"
V0_TIER = "network.topology.nvidia.com/tier-{}"
MAX_NODES = 100_000


def _tiers(labels: Mapping[str, Any]) -> tuple[object, object] | None:
    """(tier 0, tier 1) of one node's labels, None when it has no fabric label."""
    found = []
    for unit_key, spine_key in (
        (V1_TIER.format(0), V1_TIER.format(1)),
        V0_KEYS,
        (V0_BLOCK, V0_KEYS[1]),
        (V0_TIER.format(0), V0_TIER.format(1)),
    ):
        if unit_key in labels:
            found.append((unit_key, labels[unit_key], labels.get(spine_key)))
    if not found:
        return None
    if len({key.split("/")[0] for key, _, _ in found}) > 1:
        raise FabricInputError(f"both Topograph v0 and v1 labels ({', '.join(k for k, _, _ in found)})")
    return found[0][1], found[0][2]


def _group(value: object, what: str, seen: dict[str, str]) -> str:
    if not isinstance(value, str):
        raise FabricInputError(f"{what} is not text")
    name = group_name(value.lower().replace(".", "-").replace("_", "-"), what, None)
    if seen.setdefault(name, value) != value:
        raise FabricInputError(f"{what} {value!r} and {seen[name]!r} both read as {name!r}")
    return name


def parse(nodes: Iterable[Mapping[str, Any]]) -> ParsedFabric:
    """The fabric in Kubernetes Node objects' labels (as `kubectl get nodes -o json` gives its `items`, or the
    Kubernetes target reads them); FabricInputError naming the node it stopped at."""
    parsed = ParsedFabric(source=TOPOGRAPH)
    unlabelled = 0
    seen: dict[str, str] = {}
    for number, node in enumerate(nodes, start=1):
        if number > MAX_NODES:
            raise FabricInputError(f"more than {MAX_NODES:,} nodes")
        metadata = node.get("metadata") if isinstance(node, Mapping) else None
        if not isinstance(metadata, Mapping):
            raise FabricInputError(f"node {number} has no metadata")
        name = metadata.get("name")
        labels = metadata.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise FabricInputError(f"node {number}: its labels are not a mapping")
        try:
            tiers = _tiers(labels)
            if tiers is None:
                unlabelled += 1
                continue
            host = hostname(name, None)
            unit = _group(tiers[0], "tier 0 (the unit)", seen)
            spine = unit if tiers[1] is None else _group(tiers[1], "tier 1 (the spine group)", seen)
            if host in parsed.hosts:
                raise FabricInputError("listed twice")
            place_unit(parsed.units, unit, spine, None)
        except FabricInputError as exc:
            raise FabricInputError(f"node {number} ({str(name)[:70]!r}): {exc.message}") from None
        parsed.hosts[host] = unit
    if not parsed.hosts:
        raise FabricInputError("no node has Topograph's fabric labels (fabric.topograph.run/tier-0)")
    if unlabelled:
        parsed.notes.append(f"{unlabelled} nodes without Topograph's fabric labels left aside")
    return parsed
