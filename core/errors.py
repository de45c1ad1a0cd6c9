"""One error base for every outside system (Slurm, Kubernetes, the fabric manager, DCGM exporters).

Retry logic reads one thing: `transient`. A transient error (the system could not be reached, answered 5xx,
timed out) is worth trying again later; anything else is a refusal that needs a person. `what_to_do` is the
sentence shown to the admin beside the message.
"""

from __future__ import annotations


class ExternalError(Exception):
    """An outside system failed or refused; subclasses set `transient` and may carry advice."""

    transient: bool = False
    what_to_do: str = ""

    def __init__(self, message: str = "", what_to_do: str | None = None, *, transient: bool | None = None):
        super().__init__(message)
        if what_to_do is not None:
            self.what_to_do = what_to_do
        if transient is not None:
            self.transient = transient


class Unreachable(ExternalError):
    """No (whole) answer came back: refused, reset, timed out, DNS, or the answer was cut off mid-way."""

    transient = True
    what_to_do = "retry later, once the system answers"
