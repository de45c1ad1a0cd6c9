"""What a job runs (`Job.work`) is each backend's own business: one rule per backend, asked here.

The integration that runs a backend registers its validator (integrations/slurm, integrations/kubernetes);
the jobs API, the job form and the backend itself all call `validate_work`, so a job is checked by exactly
one rule, wherever it comes from. Each rule also comes with its JSON Schema and an example, so the OpenAPI
document describes `work` per backend (scheduling.api.serializers) from the same registry.

One rule holds for every backend on top of its own: a job's environment may not choose its devices
(`core.devices`: the scheduler alone gives a job its GPUs). Each rule that takes an environment calls
`refuse_device_variables`, and `validate_work` checks the `env` of whatever a rule returns, so a backend that
forgets is still covered.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from core import devices


class WorkError(ValueError):
    """The work does not suit the backend; the message says why, in words a user can act on."""


@dataclass(frozen=True)
class WorkRule:
    """A backend's rule for `work`: the validator, the same rule as a JSON Schema (the OpenAPI document's
    per-backend `work`), and an example the validator accepts (the API's example request)."""

    backend: str
    validate: Callable[[Any], dict]
    schema: dict = field(default_factory=lambda: {"type": "object"})
    example: dict = field(default_factory=dict)


_RULES: dict[str, WorkRule] = {}


def refuse_unknown_keys(work: dict, known: Collection[str], job: str) -> None:
    """WorkError naming each key of `work` not in `known` (with the closest known key, for a typo) and the
    keys `job` ("a Slurm job") takes: a key the backend would ignore is refused, not dropped."""
    unknown = sorted(set(work) - set(known), key=str)
    if not unknown:
        return
    names = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), sorted(known), n=1)
        names.append(f'"{key}" (did you mean "{close[0]}"?)' if close else f'"{key}"')
    takes = ", ".join(f'"{key}"' for key in sorted(known))
    raise WorkError(f"unknown keys for {job}: {', '.join(names)}; it takes {takes}")


def refuse_device_variables(names: Iterable[Any], where: str = '"env"') -> None:
    """WorkError naming each variable among `names` that selects devices, MIG instances or driver
    capabilities (core.devices.DEVICE_VARIABLES, case-insensitive)."""
    found = devices.device_variables(names)
    if found:
        raise WorkError(devices.refusal(found, where))


def register_work_validator(
    backend: str, validator: Callable[[Any], dict], *, schema: dict | None = None, example: dict | None = None
) -> None:
    _RULES[backend] = WorkRule(backend, validator, schema or {"type": "object"}, example or {})


def work_rules() -> list[WorkRule]:
    """Every registered backend's rule, by backend name."""
    return [_RULES[backend] for backend in sorted(_RULES)]


def validate_work(backend: str, work: Any) -> dict:
    """The work, normalised, or WorkError with the reason."""
    rule = _RULES.get(backend)
    if rule is None:
        raise WorkError(f"no integration runs {backend} jobs in this installation")
    if not isinstance(work, dict):
        raise WorkError("must be an object")
    out = rule.validate(work)
    env = out.get("env") if isinstance(out, dict) else None
    if isinstance(env, dict):
        refuse_device_variables(env)
    return out
