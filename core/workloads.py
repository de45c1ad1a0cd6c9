"""What a job runs (`Job.work`) is each backend's own business: one rule per backend, asked here.

The integration that runs a backend registers its validator (integrations/slurm, integrations/kubernetes);
the jobs API, the job form and the backend itself all call `validate_work`, so a job is checked by exactly
one rule, wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class WorkError(ValueError):
    """The work does not suit the backend; the message says why, in words a user can act on."""


_VALIDATORS: dict[str, Callable[[Any], dict]] = {}


def register_work_validator(backend: str, validator: Callable[[Any], dict]) -> None:
    _VALIDATORS[backend] = validator


def validate_work(backend: str, work: Any) -> dict:
    """The work, normalised, or WorkError with the reason."""
    validator = _VALIDATORS.get(backend)
    if validator is None:
        raise WorkError(f"no integration runs {backend} jobs in this installation")
    if not isinstance(work, dict):
        raise WorkError("must be an object")
    return validator(work)
