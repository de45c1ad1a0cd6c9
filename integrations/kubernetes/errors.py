"""The errors of the Kubernetes target: unavailable (transient), rejected, misconfigured (permanent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.errors import ExternalError


class KubernetesError(ExternalError):
    """A push to Kubernetes failed. `what_to_do` says what an operator (or the retrying task) should do."""

    transient = False
    advice_in_text = True  # core.errors.RackplaneError formats "What to do:"

    def __init__(
        self,
        message: str,
        what_to_do: str = "",
        details: Sequence[str] = (),
        *,
        status: int | None = None,
        reason: str = "",
    ):
        super().__init__(message, what_to_do, details)
        self.status = status
        self.reason = reason
        self.result = None  # an interrupted apply's ApplyResult: what it had done


class KubernetesUnavailable(KubernetesError):
    """The API server did not answer, timed out, throttled (429) or failed (5xx). Transient: retry later."""

    transient = True


class KubernetesRejected(KubernetesError):
    """The API server (or validation before sending) refused the request. Permanent: fix and push again."""


class KubernetesConfigurationError(KubernetesError):
    """The target itself is misconfigured (kubeconfig, token, CA certificate, TLS). Permanent."""


def status_message(data: Any) -> str:
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or data)
    return str(data or "no message")


def status_reason(data: Any) -> str:
    return str(data.get("reason", "")) if isinstance(data, dict) else ""


def status_causes(data: Any) -> list[dict[str, str]]:
    """The `details.causes` of an API server's Status answer (reason, message, field), [] when none."""
    if not isinstance(data, dict):
        return []
    causes = (data.get("details") or {}).get("causes") or []
    return [
        {k: str(cause.get(k) or "") for k in ("reason", "message", "field")}
        for cause in causes
        if isinstance(cause, dict)
    ]
