"""Cordon, taint and mark a tray's Node when Rackplane drains it, and undo exactly that when it returns.

A drained tray's Node gets, each written as field manager `rackplane-health` (so `kubectl get node -o yaml
--show-managed-fields` says who set what):

* `spec.unschedulable: true` (a cordon) and the annotations `rackplane.io/cordoned-by: rackplane`,
  `rackplane.io/drain-reason` (the reason, `rackplane: XID 79 ... on GPU-...`),
  `rackplane.io/drain-requested-by` and `rackplane.io/drained-at`, by server-side apply. A Node someone
  else cordoned already (kubectl cordon, another tool) is not cordoned again: Rackplane does not take a
  share of that field, so its resume can never uncordon it, and it does not write `cordoned-by`.
* the taint `rackplane.io/gpu-fault=<class>:NoSchedule` (class: xid-79, needs-service, maintenance, ...).
  `spec.taints` is an atomic list (x-kubernetes-list-type: atomic, as the API server's OpenAPI says):
  a server-side apply of it would claim every taint on the Node and conflict with whoever set the others
  (the kubelet, an admin's `kubectl taint`). So the taint is written as kubectl writes taints: read, add or
  drop Rackplane's own key only, merge-patch the whole list with the Node's resourceVersion (the API server
  answers 409 "the object has been modified" if anyone changed the Node in between: read again, retry).
* the condition `RackplaneGPUHealthy` (False with the reason; True again on return) in `status.conditions`,
  by server-side apply to the `nodes/status` subresource (conditions are a map list keyed by type, so
  Rackplane owns exactly its own condition).

Resume (return to service) applies the Node without those fields: server-side apply removes exactly the
fields Rackplane owned and no other manager shares (the cordon, the annotations), drops Rackplane's taint,
and sets the condition True. A cordon another owner made stays, and the outcome says whose it is.

A conflict on a field Rackplane applies (another manager set `rackplane.io/drain-reason` to another value,
say) is refused with the managers' names, as the configuration target does, unless the target may take over
fields of other tools (`force_conflicts`). Dry run (`dry_run`, or the target's own setting): the writes go
with `dryRun=All`; the API server validates them and changes nothing.

RBAC (deploy/kubernetes/rbac.yaml): nodes get + patch, nodes/status patch. Rackplane never creates a
Node: a tray the cluster does not know is reported as not registered (a server-side apply to a missing Node
would try to create it, so the Node is always read first).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from core.outbound import ALLOW_PRIVATE_SETTING
from integrations.drain import (
    ALREADY_DRAINED,
    DRAINED,
    NOT_DRAINED,
    NOT_OURS,
    NOT_REGISTERED,
    NOT_SUPPORTED,
    RESUMED,
    WOULD_DRAIN,
    WOULD_RESUME,
    TrayOutcome,
    with_prefix,
)
from integrations.kubernetes.client import KubernetesClient
from integrations.kubernetes.errors import KubernetesRejected, KubernetesUnavailable
from integrations.kubernetes.render import MIG_CONFIG_LABEL, MIG_CONFIG_STATE_LABEL
from integrations.kubernetes.target import APPLY_PATCH, KubernetesTarget

KIND = "kubernetes"
HEALTH_MANAGER = "rackplane-health"  # the field manager of everything the drain writes
TAINT_KEY = "rackplane.io/gpu-fault"
TAINT_EFFECT = "NoSchedule"
CONDITION = "RackplaneGPUHealthy"
CORDONED_BY = "rackplane.io/cordoned-by"
DRAIN_REASON = "rackplane.io/drain-reason"
REQUESTED_BY = "rackplane.io/drain-requested-by"
DRAINED_AT = "rackplane.io/drained-at"
OWNER_VALUE = "rackplane"
MERGE_PATCH = "application/merge-patch+json"
TAINT_RETRIES = 5
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def taint_value(fault: str) -> str:
    """A fault class as a valid taint value (a label value: 63 characters, alphanumeric at both ends)."""
    value = _LABEL_VALUE.sub("-", fault or "fault").strip("-_.")[:63].strip("-_.")
    return value or "fault"


def condition_reason(reason: str, fault: str) -> str:
    """A CamelCase condition reason: Xid79, NeedsService, Maintenance, Fabric, GPUFault."""
    if fault.startswith("xid-"):
        return "Xid" + re.sub(r"\D", "", fault)
    words = {"needs-service": "NeedsService", "maintenance": "Maintenance", "fabric": "Fabric"}
    return words.get(fault, "CheckFailed" if fault == "check" else "GPUFault")


def field_managers(obj: dict[str, Any], *path: str, subresource: str = "") -> list[tuple[str, str]]:
    """(manager, operation) of every managedFields entry that owns the field at `path` (e.g. "spec",
    "unschedulable"; a list item as in fieldsV1: `k:{"type":"Ready"}`) of the object (or of its
    `subresource`)."""
    out = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (entry.get("subresource") or "") != subresource:
            continue
        tree: Any = entry.get("fieldsV1") or {}
        for part in path:
            key = part if part[:2] in ("f:", "k:", "v:", "i:") else f"f:{part}"
            tree = tree.get(key) if isinstance(tree, dict) else None
            if tree is None:
                break
        if tree is not None:
            out.append((entry.get("manager", "?"), entry.get("operation", "?")))
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _our_taint(node: dict[str, Any]) -> dict[str, Any] | None:
    return next((t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == TAINT_KEY), None)


def _condition(node: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == CONDITION), None)


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def node_words(node: dict[str, Any]) -> str:
    """`cordoned (by kubectl-cordon); taints rackplane.io/gpu-fault=xid-79:NoSchedule; RackplaneGPUHealthy
    False (Xid79)`: what the Node shows."""
    spec = node.get("spec") or {}
    parts = []
    if spec.get("unschedulable"):
        owners = sorted({m for m, _ in field_managers(node, "spec", "unschedulable")})
        parts.append("cordoned" + (f" (by {_and(owners)})" if owners else ""))
    else:
        parts.append("schedulable")
    taints = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in spec.get("taints") or []]
    if taints:
        parts.append("taints " + ", ".join(taints))
    condition = _condition(node)
    if condition:
        parts.append(f"{CONDITION} {condition.get('status')} ({condition.get('reason', '')})")
    labels = (node.get("metadata") or {}).get("labels") or {}
    if MIG_CONFIG_LABEL in labels:  # the MIG layout asked for, and the GPU Operator's MIG manager's progress
        parts.append(
            f"MIG config {labels[MIG_CONFIG_LABEL]} ({labels.get(MIG_CONFIG_STATE_LABEL) or 'no state yet'})"
        )
    return "; ".join(parts)


class KubernetesDrainer:
    """Drain and resume of trays' Nodes on one Kubernetes API server (a Kubernetes target's settings)."""

    kind = KIND

    def __init__(self, values: dict, *, name: str = ""):
        self.values = values
        self.name = name

    def _client(self) -> KubernetesClient:
        v = self.values
        return KubernetesClient(
            v["api_url"],
            token=v.get("token") or None,
            ca_cert=v.get("ca_file") or None,
            insecure=bool(v.get("insecure")),
            field_manager=HEALTH_MANAGER,
            allow_private=bool(v.get(ALLOW_PRIVATE_SETTING, True)),
        )

    def _outcome(self, host: str, action: str, message: str, node: dict | None = None, **kw: Any):
        fields: dict[str, Any] = {}
        if node is not None:
            fields["state"] = node_words(node)
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            condition = _condition(node)
            fields["reason"] = annotations.get(DRAIN_REASON) or (condition or {}).get("message", "")
            cordoners = sorted({m for m, _ in field_managers(node, "spec", "unschedulable")})
            fields["owner"] = ", ".join(cordoners)
        fields.update(kw)
        return TrayOutcome(target=self.name, kind=KIND, host=host, action=action, message=message, **fields)

    # --- requests ---------------------------------------------------------------------------------

    @staticmethod
    def _read(client: KubernetesClient, host: str) -> dict[str, Any] | None:
        return client.get_object("v1", "Node", host)

    def _apply(
        self, client: KubernetesClient, host: str, body: dict, dry: bool, sent: list[str], status=False
    ) -> dict[str, Any]:
        """A server-side apply as `rackplane-health` (to nodes/status when `status`); a conflict with
        another field manager is refused in words (or taken over, if the target may)."""
        path = f"/api/v1/nodes/{host}" + ("/status" if status else "")
        query = [("fieldManager", HEALTH_MANAGER)] + ([("dryRun", "All")] if dry else [])
        ref = f"Node {host}" + (" status" if status else "")
        code, data = client.request("PATCH", path, query=query, body=body, content_type=APPLY_PATCH)
        conflicts = KubernetesTarget._conflicts(code, data)
        if conflicts:
            if not self.values.get("force_conflicts"):
                raise KubernetesTarget._conflict_error(f"applying {ref}", code, data, conflicts)
            code, data = client.request(
                "PATCH", path, query=[*query, ("force", "true")], body=body, content_type=APPLY_PATCH
            )
        if code == 404:
            raise KubernetesRejected(
                f"{ref}: the Node is gone (deleted while Rackplane was draining it)",
                "nothing to do if the tray left the cluster; otherwise register it again",
                status=code,
            )
        if code >= 400:
            raise client._rejected(f"applying {ref}", code, data)
        sent.append(
            f"PATCH {path} (server-side apply, fieldManager={HEALTH_MANAGER}"
            + (", dryRun=All" if dry else "")
            + ")"
        )
        return data

    def _set_taint(
        self, client: KubernetesClient, node: dict, value: str | None, dry: bool, sent: list[str]
    ) -> dict[str, Any]:
        """Put Rackplane's taint on the Node with `value` (None: take it off), leaving every other taint;
        optimistic: the whole list is written with the resourceVersion it was read at."""
        host = node["metadata"]["name"]
        for _ in range(TAINT_RETRIES):
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY]
            if value is not None:
                taints.append({"key": TAINT_KEY, "value": value, "effect": TAINT_EFFECT})
            if taints == ((node.get("spec") or {}).get("taints") or []):
                return node  # already so
            body = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": taints or None},
            }
            query = [("fieldManager", HEALTH_MANAGER)] + ([("dryRun", "All")] if dry else [])
            code, data = client.request(
                "PATCH", f"/api/v1/nodes/{host}", query=query, body=body, content_type=MERGE_PATCH
            )
            if code == 409:  # someone changed the Node since it was read: read again, write again
                node = self._read(client, host)
                if node is None:
                    break
                continue
            if code >= 400:
                raise client._rejected(f"writing the taints of Node {host}", code, data)
            sent.append(
                f"PATCH /api/v1/nodes/{host} (merge patch of spec.taints at resourceVersion "
                f"{body['metadata']['resourceVersion']}: {'add' if value is not None else 'remove'} "
                f"{TAINT_KEY}"
                + (f"={value}:{TAINT_EFFECT}" if value is not None else "")
                + (", dryRun=All" if dry else "")
                + ")"
            )
            return data
        raise KubernetesUnavailable(
            f"Node {host} kept changing while Rackplane wrote its taint ({TAINT_RETRIES} tries) or is gone",
            "retry later",
        )

    def _set_condition(
        self,
        client: KubernetesClient,
        host: str,
        live: dict,
        healthy: bool,
        reason: str,
        message: str,
        dry: bool,
        sent: list[str],
    ) -> dict[str, Any]:
        status = "True" if healthy else "False"
        before = _condition(live) or {}
        now = _now()
        condition = {
            "type": CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": before.get("lastTransitionTime")
            if before.get("status") == status and before.get("lastTransitionTime")
            else now,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": host},
            "status": {"conditions": [condition]},
        }
        return self._apply(client, host, body, dry, sent, status=True)

    # --- drain and resume -------------------------------------------------------------------------

    def drain(
        self,
        host: str,
        reason: str,
        *,
        owner: str = "",
        fault: str = "fault",
        dry_run: bool = False,
        resume_after_s: int | None = None,
    ) -> TrayOutcome:
        """Cordon (unless another owner did), taint and mark the Node `host` with Rackplane's reason."""
        reason = with_prefix(reason)
        dry = dry_run or bool(self.values.get("dry_run"))
        value = taint_value(fault)
        sent: list[str] = []
        with self._client() as client:
            node = self._read(client, host)
            if node is None:
                return self._outcome(
                    host,
                    NOT_REGISTERED,
                    f"the cluster has no Node {host}: nothing to cordon there",
                    dry_run=dry,
                )
            spec = node.get("spec") or {}
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            cordoners = {m for m, _ in field_managers(node, "spec", "unschedulable")}
            ours = (HEALTH_MANAGER, "Apply") in field_managers(node, "spec", "unschedulable")
            others_cordon = bool(spec.get("unschedulable")) and not ours
            already = (
                (ours or others_cordon)
                and annotations.get(DRAIN_REASON) == reason
                and (_our_taint(node) or {}).get("value") == value
                and (_condition(node) or {}).get("status") == "False"
            )
            if already:
                return self._outcome(host, ALREADY_DRAINED, "already drained by Rackplane", node, dry_run=dry)
            meta: dict[str, Any] = {
                "name": host,
                "annotations": {
                    DRAIN_REASON: reason,
                    REQUESTED_BY: owner or OWNER_VALUE,
                    DRAINED_AT: annotations.get(DRAINED_AT)
                    if ours and annotations.get(DRAINED_AT)
                    else _now(),
                },
            }
            body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
            if not others_cordon:
                meta["annotations"][CORDONED_BY] = OWNER_VALUE
                body["spec"] = {"unschedulable": True}
            after = self._apply(client, host, body, dry, sent)
            after = self._set_taint(client, after, value, dry, sent)
            after = self._set_condition(
                client, host, after, False, condition_reason(reason, value), reason, dry, sent
            )
            if not dry:
                after = self._read(client, host) or after
                self._verify_drained(host, after, value)
        left = (
            f"; it was cordoned already by {_and(sorted(cordoners))}, so that cordon stays theirs (Rackplane "
            "will not uncordon it)"
            if others_cordon
            else ""
        )
        if dry:
            return self._outcome(
                host,
                WOULD_DRAIN,
                f"dry run: the API server accepted the cordon, taint {TAINT_KEY}={value}:{TAINT_EFFECT} and "
                f"condition {CONDITION}=False and changed nothing{left}",
                after,
                dry_run=True,
                sent=sent,
            )
        return self._outcome(
            host,
            DRAINED,
            f"cordoned and tainted {TAINT_KEY}={value}:{TAINT_EFFECT}: no new pod is scheduled on {host}; "
            f"pods already there run on{left}",
            after,
            changed=True,
            sent=sent,
        )

    @staticmethod
    def _verify_drained(host: str, node: dict, value: str) -> None:
        problems = []
        if not (node.get("spec") or {}).get("unschedulable"):
            problems.append("it is schedulable")
        if (_our_taint(node) or {}).get("value") != value:
            problems.append(f"it lacks the taint {TAINT_KEY}={value}")
        if (_condition(node) or {}).get("status") != "False":
            problems.append(f"its {CONDITION} condition is not False")
        if problems:
            raise KubernetesRejected(
                f"Node {host} was written but reads back otherwise: {'; '.join(problems)} "
                f"({node_words(node)})",
                "something else changes this Node (an admission webhook or controller): find it, then drain "
                "again",
            )

    def resume(self, host: str, *, owner: str = "", dry_run: bool = False) -> TrayOutcome:
        """Take off what Rackplane put on the Node: its cordon (if it made it), taint and annotations, and
        mark it healthy. Another owner's cordon stays."""
        dry = dry_run or bool(self.values.get("dry_run"))
        sent: list[str] = []
        with self._client() as client:
            node = self._read(client, host)
            if node is None:
                return self._outcome(
                    host, NOT_REGISTERED, f"the cluster has no Node {host}: nothing to uncordon", dry_run=dry
                )
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            applied = any(m == HEALTH_MANAGER and op == "Apply" for m, op in field_managers(node, "metadata"))
            ours = applied or _our_taint(node) is not None or annotations.get(CORDONED_BY) == OWNER_VALUE
            condition = _condition(node) or {}
            if not ours and condition.get("status") != "False":
                if (node.get("spec") or {}).get("unschedulable"):
                    return self._outcome(
                        host,
                        NOT_OURS,
                        f"left as it is: Rackplane did not drain {host}; it is {node_words(node)}, which "
                        "only that owner may undo",
                        node,
                        dry_run=dry,
                    )
                return self._outcome(
                    host,
                    NOT_DRAINED,
                    f"nothing of Rackplane's on {host}: {node_words(node)}",
                    node,
                    dry_run=dry,
                )
            # The Node with none of Rackplane's fields: server-side apply drops those Rackplane owned alone.
            after = self._apply(
                client, host, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host}}, dry, sent
            )
            after = self._set_taint(client, after, None, dry, sent)
            message = f"rackplane: returned to service at {_now()}" + (
                f" (asked by {owner})" if owner else ""
            )
            after = self._set_condition(client, host, after, True, "ReturnedToService", message, dry, sent)
            if not dry:
                after = self._read(client, host) or after
                if _our_taint(after) is not None:
                    raise KubernetesRejected(
                        f"Node {host} still has the taint {TAINT_KEY} after Rackplane removed it",
                        "something puts it back (another tool): find it, then resume again",
                    )
        still = bool((after.get("spec") or {}).get("unschedulable"))
        cordoners = sorted({m for m, _ in field_managers(after, "spec", "unschedulable")}) or [
            "another owner"
        ]
        tail = (
            f"; it stays cordoned by {_and(cordoners)}, whose cordon Rackplane leaves"
            if still
            else f": pods may be scheduled on {host} again"
        )
        if dry:
            return self._outcome(
                host,
                WOULD_RESUME,
                f"dry run: the API server accepted the uncordon and the removal of {TAINT_KEY} and changed "
                f"nothing{tail}",
                after,
                dry_run=True,
                sent=sent,
            )
        return self._outcome(
            host,
            RESUMED,
            f"Rackplane's cordon, taint {TAINT_KEY} and annotations removed, {CONDITION}=True{tail}",
            after,
            changed=True,
            sent=sent,
        )

    # --- maintenance windows ----------------------------------------------------------------------

    def schedule_maintenance(self, host, window_id, start, end, reason="", *, dry_run=False) -> TrayOutcome:
        return self._outcome(
            host,
            NOT_SUPPORTED,
            "Kubernetes has no reservations: the Node is cordoned when the tray is put into maintenance "
            "(drain it at the window's start)",
            dry_run=dry_run,
        )

    def end_maintenance(self, host, window_id, *, dry_run=False) -> TrayOutcome:
        return self._outcome(
            host,
            NOT_SUPPORTED,
            "Kubernetes has no reservations: nothing to remove (return the tray to service to uncordon it)",
            dry_run=dry_run,
        )
