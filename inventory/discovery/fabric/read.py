"""One entry for every fabric file: bytes and the source they claim to be -> a ParsedFabric (pure)."""

from __future__ import annotations

import json

from inventory.discovery.fabric import ibnetdiscover, site_file, topograph
from inventory.discovery.fabric.parsed import (
    IBNETDISCOVER,
    SITE_FILE,
    TOPOGRAPH,
    FabricInputError,
    ParsedFabric,
    decode,
)

SOURCES = (IBNETDISCOVER, TOPOGRAPH, SITE_FILE)


def topograph_json(text: str) -> ParsedFabric:
    """`kubectl get nodes -o json` (a NodeList, or a plain list of Nodes) with Topograph's labels."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise FabricInputError("JSON nested too deep") from None
    except ValueError as exc:
        raise FabricInputError(
            f"not JSON: {getattr(exc, 'msg', exc)}", getattr(exc, "lineno", None)
        ) from None
    items = data.get("items") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise FabricInputError("not a Kubernetes NodeList (`kubectl get nodes -o json`)")
    return topograph.parse(items)


def read(source: str, data: bytes, name: str = "") -> ParsedFabric:
    """Parse `data` as `source`'s format; FabricInputError, naming the line, when it cannot be taken."""
    text = decode(data)
    if source == IBNETDISCOVER:
        return ibnetdiscover.parse(text)
    if source == TOPOGRAPH:
        return topograph_json(text)
    if source == SITE_FILE:
        return site_file.parse(text, name)
    raise FabricInputError(f"unknown source {source!r} (one of {', '.join(SOURCES)})")
