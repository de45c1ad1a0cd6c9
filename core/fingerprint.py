"""What a confirmation page showed, in one word: `fingerprint(*parts)`, a SHA-256 of a stable serialisation
of `parts`. The page sends it back with its confirming POST, and the step is applied only while the facts
it is computed from again give the same word (else the page again, 409): the confirmed steps towards named
projects (scheduling.project_changes.Confirmable.digest), a drain of running work
(integrations.views.tray_actions) and a partition plan's base layout (integrations.plans.service).

The serialisation is canonical JSON of a tagged form, so two parts that differ in type or value never
share it: `1`, `"1"`, `1.0` and `True` are four things; a sequence (tuple or list: the same to it) keeps
its order; a mapping and a set do not (their items are sorted by their own serialisation). Anything else
(a model instance, an object with a repr) is a TypeError: say what of it the page showed (its pk, its
state) instead. Pure: no Django.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import hashlib
import json
from collections.abc import Mapping, Set
from typing import Any


def _form(value: Any) -> Any:
    """`value` as JSON whose objects are tags: plain JSON arrays are sequences, never a mapping or a set."""
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return {"float": repr(value)}  # 1.0 is not 1; nan and inf are stable as text
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return {type(value).__name__: value.isoformat()}
    if isinstance(value, list | tuple):
        return [_form(item) for item in value]
    if isinstance(value, Mapping):
        pairs = [[_form(key), _form(item)] for key, item in value.items()]
        return {"map": sorted(pairs, key=_text)}
    if isinstance(value, Set):
        return {"set": sorted((_form(item) for item in value), key=_text)}
    raise TypeError(f"fingerprint: {type(value).__name__} has no stable form; pass what the page showed")


def _text(form: Any) -> str:
    return json.dumps(form, separators=(",", ":"), sort_keys=True)


def fingerprint(*parts: Any) -> str:
    """The SHA-256 (64 hex digits) of `parts`' stable serialisation (module docstring)."""
    return hashlib.sha256(_text(_form(list(parts))).encode()).hexdigest()
