"""The Kubernetes target's adapter: validate, server-side apply what differs, prune (or dry run)."""

from __future__ import annotations

from collections.abc import Callable

from integrations.common import clip
from integrations.kubernetes.target import KubernetesError, KubernetesTarget

K8S_LOG_LINES = 200  # per-object lines kept in the log of a Kubernetes push (the counts are always there)


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
                    log(*clip(error.result.log, K8S_LOG_LINES, "the log"))
                raise
        log(*clip(result.log, K8S_LOG_LINES, "the log"))
        summary = (
            f"{len(result.created)} created, {len(result.updated)} updated, {len(result.deleted)} deleted, "
            f"{len(result.unchanged)} unchanged"
            + (f", {len(result.skipped)} nodes not registered (skipped)" if result.skipped else "")
        )
        return ("dry run: " if dry else "") + summary

    def diff(self, payload: dict) -> list[str]:
        with self._target() as target:
            return clip(target.diff(payload.get("objects") or []).lines(), 400, "the diff")
