"""One error base for Rackplane's own errors, and the one for every outside system (Slurm, Kubernetes, the
fabric manager, DCGM exporters).

`RackplaneError` carries a `message`, optional `details` (one indented line each) and `what_to_do`, the
sentence shown to the admin beside the message; its text is formatted here and nowhere else:

    <message>
      <detail>
    What to do: <what_to_do>

`client_error` marks an error the caller made (an unknown host, a body that is not Prometheus text): the API
answers it 400 (core.api.exception_handler), `{field: [text]}` when the error names a `field`, else
`{"detail": text}`.

Retry logic reads one thing: `transient`. A transient error (the system could not be reached, answered 5xx,
timed out) is worth trying again later; anything else is a refusal that needs a person.
"""

from __future__ import annotations

from collections.abc import Sequence

WHAT_TO_DO = "What to do:"


def with_advice(text: str, what_to_do: str) -> str:
    """`text` ending with its "What to do:" line: `what_to_do`'s, unless there is none or the text has one."""
    if not what_to_do or WHAT_TO_DO in text:
        return text
    return f"{text}\n{WHAT_TO_DO} {what_to_do}"


def advice(text: str) -> str:
    """The "What to do:" sentence of a formatted error text (empty if none)."""
    for line in reversed(text.splitlines()):
        if line.startswith(WHAT_TO_DO):
            return line.removeprefix(WHAT_TO_DO).strip()
    return ""


class RackplaneError(Exception):
    """An error whose text says what happened and, when it can, what to do about it."""

    what_to_do: str = ""
    # False where callers word the advice their own way beside the message (ExternalError).
    advice_in_text: bool = True
    # The caller's mistake: the API answers 400 (core.api.exception_handler), naming `field` when set.
    client_error: bool = False
    field: str | None = None

    def __init__(self, message: str = "", what_to_do: str | None = None, details: Sequence[str] = ()):
        super().__init__(message)
        self.message = message
        if what_to_do is not None:
            self.what_to_do = what_to_do
        self.details = list(details)

    def __str__(self) -> str:
        text = self.message
        if self.details:
            text += "\n" + "\n".join(f"  {d}" for d in self.details)
        if self.advice_in_text and self.what_to_do:
            text += f"\n{WHAT_TO_DO} {self.what_to_do}"
        return text


class ExternalError(RackplaneError):
    """An outside system failed or refused; subclasses set `transient` and may carry advice.

    Its text is the message alone: callers give `what_to_do` their own way (a notification's
    " What to do: ...", the telemetry page's "(...)") or wrap the text in their own message. The adapters'
    errors (Slurm, Kubernetes, the fabric) set `advice_in_text` and read as every RackplaneError."""

    transient: bool = False
    advice_in_text = False

    def __init__(
        self,
        message: str = "",
        what_to_do: str | None = None,
        details: Sequence[str] = (),
        *,
        transient: bool | None = None,
    ):
        super().__init__(message, what_to_do, details)
        if transient is not None:
            self.transient = transient


class Unreachable(ExternalError):
    """No (whole) answer came back: refused, reset, timed out, DNS, or the answer was cut off mid-way."""

    transient = True
    what_to_do = "retry later, once the system answers"
