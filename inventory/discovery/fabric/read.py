"""One entry for every fabric file: bytes and the source they claim to be -> a ParsedFabric (pure)."""

from __future__ import annotations

import json
import re
import sys

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
    except json.JSONDecodeError as exc:
        raise FabricInputError(f"not JSON: {exc.msg}", exc.lineno) from None
    except ValueError:
        # Python refuses to turn a number of more than sys.get_int_max_str_digits() digits into an int (a
        # guard against slow conversion); its message names neither the number nor the line.
        limit = sys.get_int_max_str_digits()
        long = re.search(rf"\d{{{limit + 1},}}", text)
        raise FabricInputError(
            f"not JSON: a number too long (more than {limit:,} digits)",
            text.count("\n", 0, long.start()) + 1 if long else None,
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
