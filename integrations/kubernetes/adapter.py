"""The Kubernetes target's adapter: validate, server-side apply what differs, prune (or dry run)."""

from __future__ import annotations

from collections.abc import Callable

from integrations.common import clip
from integrations.kubernetes.target import KubernetesError, KubernetesTarget

K8S_LOG_LINES = 200  # per-object lines kept in the log of a Kubernetes push (the counts are always there)


def _log_result(log: Callable[..., None], lines: list[str]) -> None:
    """The apply's log, clipped; fields taken over from other tools are always logged, clipped or not."""
    log(*clip(lines, K8S_LOG_LINES, "the log"))
    taken = [line for line in lines[K8S_LOG_LINES:] if line.startswith(("took over", "would take over"))]
    if taken:
        log(*taken)


class KubernetesAdapter:
    """KubernetesTarget.apply: validate, server-side apply what differs, prune (dry run if configured)."""

    def __init__(self, target, values: dict):
        self.values = values

    def _target(self) -> KubernetesTarget:
        v = self.values
        return KubernetesTarget(
            v["api_url"],
            token=v.get("token") or None,
            ca_cert=v.get("ca_file") or None,
            insecure=v["insecure"],
            force_conflicts=bool(v.get("force_conflicts")),
        )

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        objects = payload.get("objects") or []
        dry = bool(self.values.get("dry_run"))
        log(
            f"applying {len(objects)} objects to {self.values['api_url']}"
            + (" (server-side dry run)" if dry else "")
        )
        with self._target() as target:
            try:
                result = target.apply(objects, dry_run=dry)
            except KubernetesError as error:
                if error.result is not None:
                    _log_result(log, error.result.log)
                raise
        _log_result(log, result.log)
        summary = (
            f"{len(result.created)} created, {len(result.updated)} updated, {len(result.deleted)} deleted, "
            f"{len(result.unchanged)} unchanged"
            + (f", {len(result.skipped)} nodes not registered (skipped)" if result.skipped else "")
            + (f", {len(result.deleting)} being deleted already" if result.deleting else "")
            + (
                f", fields of other tools taken over on {len(result.taken_over)} object(s)"
                if result.taken_over
                else ""
            )
        )
        return ("dry run: " if dry else "") + summary

    def diff(self, payload: dict) -> list[str]:
        with self._target() as target:
            return clip(target.diff(payload.get("objects") or []).lines(), 400, "the diff")
