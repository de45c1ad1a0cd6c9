"""Field-level comparison of Kubernetes objects for server-side apply: what differs between a desired and
a live object, which fields a field manager owns (metadata.managedFields), and how a field path reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

FIELD_MANAGER = "rackplane"  # Rackplane's name as a server-side apply field manager

# Paths whose scalars are Kubernetes quantities: the API server canonicalises them (2048Gi -> 2Ti).
_QUANTITY_PARENTS = {"hard", "capacity", "requests", "limits"}
_QUANTITY_FIELDS = {"nominalQuota", "borrowingLimit", "lendingLimit"}


@dataclass(frozen=True)
class FieldChange:
    """One field of one object: `old` None = added, `new` None = removed."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        if self.old is None:
            return f"{self.path}: + {self.new!r}"
        if self.new is None:
            return f"{self.path}: - {self.old!r}"
        return f"{self.path}: {self.old!r} -> {self.new!r}"


def path_text(path: Sequence[Any]) -> str:
    """('spec', 'hard', 'gpu/x', 0) -> `spec.hard["gpu/x"][0]`."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif any(c in str(part) for c in "./"):
            text += f"[{json.dumps(part)}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _is_quantity_path(path: Sequence[Any]) -> bool:
    return bool(path) and (path[-1] in _QUANTITY_FIELDS or (len(path) > 1 and path[-2] in _QUANTITY_PARENTS))


def _quantity(value: Any) -> Decimal | None:
    # Importing it imports the whole `kubernetes` package (client.py says why that waits for a use).
    from kubernetes.utils.quantity import parse_quantity

    try:
        return parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None


def _same_scalar(path: Sequence[Any], desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    if live is None and desired in ("", 0):
        # The server leaves zero values of plain (omitempty) fields out: an applied `storageClassName: ""`
        # of a PersistentVolume reads back absent. Ownership of the field is checked by the caller.
        return True
    if _is_quantity_path(path):
        a, b = _quantity(desired), _quantity(live)
        return a is not None and a == b
    return False


def collect_changes(
    path: list[Any], desired: Any, live: Any, changes: list[FieldChange], strict: bool = False
) -> None:
    """Field changes that make `live` hold every field of `desired`.

    Maps: keys the server added (defaults) are ignored; keys Rackplane stopped setting are found through
    its field ownership instead (`KubernetesTarget._step`). Inside lists the comparison is exact
    (`strict`): a list item is owned as a whole, and the API server adds no defaults inside the lists
    Rackplane renders.
    Quantities compare by value (the server canonicalises 2048Gi to 2Ti).
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            if live is None and not desired:  # an empty map the server leaves out (omitempty)
                return
            changes.append(FieldChange(path_text(path), live, desired))
            return
        for key, value in desired.items():
            collect_changes([*path, key], value, live.get(key), changes, strict)
        if strict:
            for key in sorted(live.keys() - desired.keys()):
                changes.append(FieldChange(path_text([*path, key]), live[key], None))
    elif isinstance(desired, list):
        if isinstance(live, list) and len(live) == len(desired):
            for i, (d, v) in enumerate(zip(desired, live, strict=True)):
                collect_changes([*path, i], d, v, changes, strict=True)
        elif not (live is None and not desired):
            changes.append(FieldChange(path_text(path), live, desired))
    elif not _same_scalar(path, desired, live):
        changes.append(FieldChange(path_text(path), live, desired))


IDENTITY_PATHS = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of the fields an applied object sets: scalars, lists (atomic here) and empty maps."""
    if isinstance(value, dict) and value:
        out = []
        for key, sub in value.items():
            out += leaf_paths(sub, (*path, key))
        return out
    return [] if path in IDENTITY_PATHS else [path]


def _fields_v1_paths(tree: dict[str, Any], path: tuple = ()) -> list[tuple]:
    """managedFields `fieldsV1` -> field paths. List items (`k:`, `v:`, `i:`) stop at the list."""
    out: list[tuple] = []
    children = {k: v for k, v in (tree or {}).items() if k != "."}
    if not children:
        return [path] if path else []
    for key, sub in children.items():
        if key.startswith("f:"):
            out += _fields_v1_paths(sub, (*path, key[2:]))
        elif path:  # k:{...}, v:..., i:N -> the list itself is owned
            out.append(path)
    return sorted(set(out))


def owned_paths(obj: dict[str, Any], manager: str = FIELD_MANAGER) -> list[tuple]:
    """Field paths `manager` owns through server-side apply (from metadata.managedFields)."""
    paths: set[tuple] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            paths.update(_fields_v1_paths(entry.get("fieldsV1") or {}))
    return sorted(paths)


def value_at(value: Any, path: Sequence[Any]) -> Any:
    """The value at a field path, None where the path does not lead."""
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def paths_overlap(a: tuple, b: tuple) -> bool:
    """One path is a prefix of the other (a field and a map or list that holds it)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def server_path_text(path: Sequence[Any]) -> str:
    """A field path as the API server writes it in conflicts: `.metadata.labels.rackplane.io/rack`."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path)


def other_managers(obj: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[tuple, set[str]]:
    """Field path -> the field managers other than `manager` that own it (Apply and Update alike)."""
    out: dict[tuple, set[str]] = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        name = entry.get("manager") or "unknown"
        if name == manager or entry.get("subresource"):
            continue
        for path in _fields_v1_paths(entry.get("fieldsV1") or {}):
            out.setdefault(path, set()).add(name)
    return out


def predicted_conflicts(
    desired: dict[str, Any], live: dict[str, Any], manager: str = FIELD_MANAGER
) -> list[tuple[str, str]]:
    """(field path as the server writes it, other manager) for each field `desired` sets to another value
    than `live` holds while another field manager owns it: what a server-side apply without force is
    refused for (409 Conflict). A prediction from metadata.managedFields, for previews; the API server's
    answer is what `apply` goes by."""
    owners = other_managers(live, manager)
    if not owners:
        return []
    found: set[tuple[str, str]] = set()
    for wanted in leaf_paths(desired):
        if wanted[:1] in (("apiVersion",), ("kind",)):
            continue
        changes: list[FieldChange] = []
        collect_changes(list(wanted), value_at(desired, wanted), value_at(live, wanted), changes)
        if not changes:
            continue
        for owned, names in owners.items():
            if paths_overlap(owned, wanted):
                found.update((server_path_text(owned), name) for name in names)
    return sorted(found)
