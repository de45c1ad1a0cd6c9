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
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core import devices


class WorkError(ValueError):
    """The work does not suit the backend; the message says why, in words a user can act on."""


@dataclass(frozen=True)
class WorkInput:
    """One input of the job form for a backend's work (scheduling.views.job_form draws every backend's)."""

    name: str  # the form field's name; the same name in two backends' inputs means the same value
    label: str
    multiline: bool = False  # a textarea (`rows` high), else a one-line text input
    rows: int = 3
    placeholder: str = ""
    help: str = ""  # plain text; `backquoted` words are shown as code
    id: str = ""  # the element's id (default: id_<name>)

    @property
    def html_id(self) -> str:
        return self.id or f"id_{self.name}"


JSON_INPUT = "work_json"  # the form's input for the work of a backend that names no inputs of its own


def work_from_json(values: Mapping[str, str]) -> dict:
    """The work typed as JSON (JSON_INPUT); WorkError when it is not JSON."""
    text = values.get(JSON_INPUT, "").strip()
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise WorkError(
            f"the work is not JSON: {error.msg} (line {error.lineno}, column {error.colno})"
        ) from None


def work_to_json(work: dict) -> dict[str, str]:
    return {JSON_INPUT: json.dumps(work, indent=2)}


@dataclass(frozen=True)
class WorkForm:
    """How the job form asks for a backend's work: its inputs, their values -> the work (`from_form`,
    WorkError with the reason when they cannot be read as one; the work is validated afterwards like any
    other) and a work -> their values (`to_form`: a job cloned into the form). A backend without one is
    asked for its work as JSON (`json_form`)."""

    label: str
    inputs: tuple[WorkInput, ...]
    from_form: Callable[[Mapping[str, str]], Any]
    to_form: Callable[[dict], dict[str, str]]


def json_form(backend: str) -> WorkForm:
    """The job form's JSON input for `backend`'s work."""
    textarea = WorkInput(
        JSON_INPUT, f"Work for {backend} (JSON)", multiline=True, rows=6, id=f"id_{JSON_INPUT}_{backend}"
    )
    return WorkForm(backend, (textarea,), work_from_json, work_to_json)


@dataclass(frozen=True)
class WorkRule:
    """A backend's rule for `work`: the validator, the same rule as a JSON Schema (the OpenAPI document's
    per-backend `work`), an example the validator accepts (the API's example request, the demo's jobs) and
    how the job form asks for it (`form`; None: as JSON)."""

    backend: str
    validate: Callable[[Any], dict]
    schema: dict = field(default_factory=lambda: {"type": "object"})
    example: dict = field(default_factory=dict)
    form: WorkForm | None = None

    def job_form(self) -> WorkForm:
        return self.form or json_form(self.backend)


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
    register_rule(WorkRule(backend, validator, schema or {"type": "object"}, example or {}))


def register_rule(rule: WorkRule) -> None:
    """A backend's rule; integrations.registry registers each job-running kind's (`Kind.work`)."""
    _RULES[rule.backend] = rule


def unregister_rule(rule: WorkRule) -> None:
    if _RULES.get(rule.backend) is rule:
        del _RULES[rule.backend]


def work_rules() -> list[WorkRule]:
    """Every registered backend's rule, by backend name."""
    return [_RULES[backend] for backend in sorted(_RULES)]


def work_rule(backend: str) -> WorkRule | None:
    """The rule registered for `backend`, or None."""
    return _RULES.get(backend)


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
