"""The Kubernetes target's adapter: validate, server-side apply what differs, prune (or dry run)."""

from __future__ import annotations

from collections.abc import Callable

from core.outbound import ALLOW_PRIVATE_SETTING
from integrations.common import clip
from integrations.kubernetes.errors import KubernetesRejected
from integrations.kubernetes.target import KubernetesError, KubernetesTarget

# API groups whose served versions Test connection reads (integrations.versions: the removals ahead).
SERVED_GROUPS = {"kueue.x-k8s.io": "Kueue APIs served", "resource.nvidia.com": "ComputeDomain APIs served"}
K8S_LOG_LINES = 200  # per-object lines kept in the log of a Kubernetes push (the counts are always there)


def _log_result(log: Callable[..., None], lines: list[str]) -> None:
    """The apply's log, clipped; fields taken over from other tools are always logged, clipped or not."""
    log(*clip(lines, K8S_LOG_LINES, "the log"))
    taken = [line for line in lines[K8S_LOG_LINES:] if line.startswith(("took over", "would take over"))]
    if taken:
        log(*taken)


def _scope(payload: dict) -> list[str] | None:
    """The racks of a slice's payload (integrations.rendering: {"scope": {"racks": [...]}}), else None."""
    scope = payload.get("scope")
    return None if scope is None else list(scope.get("racks") or [])


class KubernetesAdapter:
    """KubernetesTarget.apply: validate, server-side apply what differs, prune (dry run if configured)."""

    def __init__(self, target, values: dict):
        self.values = values
        self.facts: dict = {}  # what Test connection read: versions (integrations.versions)

    def _target(self) -> KubernetesTarget:
        v = self.values
        return KubernetesTarget(
            v["api_url"],
            token=v.get("token") or None,
            ca_cert=v.get("ca_file") or None,
            insecure=v["insecure"],
            force_conflicts=bool(v.get("force_conflicts")),
            allow_private=bool(v.get(ALLOW_PRIVATE_SETTING, True)),
        )

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        objects = payload.get("objects") or []
        dry = bool(self.values.get("dry_run"))
        racks = _scope(payload)
        log(
            f"applying {len(objects)} objects to {self.values['api_url']}"
            + (f" (the slice of {', '.join(racks)}: their nodes and flavors only)" if racks else "")
            + (" (server-side dry run)" if dry else "")
        )
        with self._target() as target:
            try:
                result = target.apply(objects, dry_run=dry, racks=racks)
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

    def check(self) -> list[str]:
        """Test connection (integrations.push_history): the API server's version, then whether the token
        may read Nodes (what every push starts with). Reads only; raises KubernetesError in words."""
        url = self.values["api_url"]
        with self._target() as target:
            status, data = target.request("GET", "/version")
            if status == 401:
                raise KubernetesRejected(
                    f"the API server at {url} refused the token (401 Unauthorized)",
                    "give the target a valid service-account token",
                )
            if status >= 400:
                raise KubernetesRejected(
                    f"the API server at {url} answered {status} to GET /version", "check the API URL"
                )
            version = (data or {}).get("gitVersion", "unknown version") if isinstance(data, dict) else "?"
            status, _ = target.request("GET", "/api/v1/nodes", query=[("limit", "1")])
            if status == 401:
                raise KubernetesRejected(
                    f"the API server at {url} ({version}) refused the token (401 Unauthorized)",
                    "give the target a valid service-account token",
                )
            if status == 403:
                raise KubernetesRejected(
                    f"the API server at {url} ({version}) accepted the token but it may not read Nodes "
                    "(403 Forbidden)",
                    "apply deploy/kubernetes/rbac.yaml and use the rackplane service account's token",
                )
            if status >= 400:
                raise KubernetesRejected(f"GET /api/v1/nodes answered {status}", "check the API server")
            served = {group: self._served(target, group) for group in SERVED_GROUPS}
        self.facts = {
            "kubernetes_version": version,
            "kueue_versions": served["kueue.x-k8s.io"],
            "compute_domain_versions": served["resource.nvidia.com"],
        }
        return [
            f"Kubernetes {version} at {url}",
            "the TLS certificate was verified" if not self.values.get("insecure") else "TLS not verified",
            "the token is accepted and may read Nodes",
            *(
                f"{label}: {', '.join(served[group]) or f'not installed ({group} is not served)'}"
                for group, label in SERVED_GROUPS.items()
            ),
        ]

    @staticmethod
    def _served(target: KubernetesTarget, group: str) -> list[str]:
        """The versions of an API group the server serves (API discovery, which every authenticated
        client may read), preferred first; none when the group is not installed."""
        status, data = target.request("GET", f"/apis/{group}")
        if status == 404 or not isinstance(data, dict):
            return []
        if status >= 400:
            raise KubernetesRejected(f"GET /apis/{group} answered {status}", "check the API server")
        versions = [str(v.get("version")) for v in data.get("versions") or [] if isinstance(v, dict)]
        preferred = (data.get("preferredVersion") or {}).get("version")
        return sorted(versions, key=lambda v: v != preferred)

    def diff(self, payload: dict) -> list[str]:
        with self._target() as target:
            return clip(
                target.diff(payload.get("objects") or [], racks=_scope(payload)).lines(), 400, "the diff"
            )
