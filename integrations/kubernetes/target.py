"""KubernetesTarget: the one place that talks to a Kubernetes API server. Render, diff, apply, read back.

Its connection, requests and reads are `KubernetesClient` (client.py), the field comparison is fields.py
and the errors errors.py; every name callers use is importable from here.

* Every write is a server-side apply: `PATCH` with `Content-Type: application/apply-patch+yaml`,
  `fieldManager=rackplane`, `force=true` (Rackplane is the source of truth for the fields it sets), and
  `dryRun=All` in dry-run mode.
* Server-side apply owns fields per manager: a field Rackplane applied before and leaves out now is removed
  unless another manager also owns it. That is how a node label or a ResourceQuota key goes away.
* `apply` validates every object first (validate.py) and sends nothing if any is invalid; checks that the
  CRD groups it needs are served; reads the live objects; applies what differs (or what Rackplane does not
  own yet); then prunes: objects of the managed kinds labelled `app.kubernetes.io/managed-by: rackplane`
  that are not desired are deleted (in reverse apply order), and nodes that are no longer desired lose
  Rackplane's labels (an apply of the bare node). Unlabelled objects are never touched, Nodes are never
  created or deleted (a desired node that is not registered is skipped and reported).
* Pruning a department's Namespace deletes everything in it, workloads included: that is what removing a
  department means. Its PersistentVolume has reclaim policy Retain, so the data on the file server stays.
* Kubernetes has no transactions: an apply that fails half way leaves the objects before the failure
  applied. Server-side apply is idempotent, so the retry (the push task retries transient errors)
  converges; the error carries what was done (`error.result`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from integrations.kubernetes import validate as schema
from integrations.kubernetes.client import CORE_KINDS, KubernetesClient
from integrations.kubernetes.errors import (
    KubernetesConfigurationError,
    KubernetesError,
    KubernetesRejected,
    KubernetesUnavailable,
)
from integrations.kubernetes.fields import (
    FIELD_MANAGER,
    IDENTITY_PATHS,
    FieldChange,
    collect_changes,
    leaf_paths,
    owned_paths,
    path_text,
    paths_overlap,
    value_at,
)
from integrations.kubernetes.render import (
    KIND_ORDER,
    InventoryState,
    desired_objects,
    object_key,
    object_ref,
    sort_for_apply,
)
from tenancy.renderers import (
    DEFAULT_COHORT,
    DEFAULT_FLAVOR,
    KUEUE_API_VERSION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TenantSpec,
)

APPLY_PATCH = "application/apply-patch+yaml"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

# Kinds Rackplane prunes (when labelled managed-by rackplane and no longer desired), by apiVersion.
# Nodes are not here: they are never deleted, only relieved of Rackplane's labels.
MANAGED_KINDS = {
    "Namespace": "v1",
    "Topology": KUEUE_API_VERSION,
    "ResourceFlavor": KUEUE_API_VERSION,
    "ClusterQueue": KUEUE_API_VERSION,
    "LocalQueue": KUEUE_API_VERSION,
    "ResourceQuota": "v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PersistentVolume": "v1",
    "PersistentVolumeClaim": "v1",
}


@dataclass(frozen=True)
class KubernetesState:
    """Everything Rackplane pushes to one cluster."""

    inventory: InventoryState
    tenants: tuple[TenantSpec, ...] = ()
    nfs_server: str = ""
    cohort: str = DEFAULT_COHORT
    flavor: str = DEFAULT_FLAVOR

    def __post_init__(self):
        object.__setattr__(self, "tenants", tuple(self.tenants))


@dataclass
class Diff:
    """What an apply would do: objects created, changed (field by field), deleted; nodes skipped."""

    create: list[str] = field(default_factory=list)
    change: dict[str, list[FieldChange]] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.change or self.delete)

    def lines(self) -> list[str]:
        out = [f"+ {ref}" for ref in self.create]
        for ref, changes in self.change.items():
            out.append(f"~ {ref}")
            out += [f"    {c}" for c in changes]
        out += [f"- {ref}" for ref in self.delete]
        out += [
            f"! Node {name}: not registered in the cluster, labels not applied" for name in self.missing_nodes
        ]
        return out


@dataclass
class ApplyResult:
    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


@dataclass
class _Step:
    obj: dict[str, Any]  # what to apply
    live: dict[str, Any] | None
    action: str  # create | update | adopt | unchanged | missing-node | release
    changes: list[FieldChange]


@dataclass
class _Plan:
    steps: list[_Step]
    delete: list[dict[str, Any]]


class KubernetesTarget(KubernetesClient):
    """One Kubernetes cluster's API server: render, diff, apply (server-side) and prune, read back.

    Configured as a `KubernetesClient`: `api_url` + `token` + (`ca_cert` path or PEM text, or
    `insecure=True`), or a `kubeconfig` path (and optionally `context`), or a ready `api_client`.
    """

    def read_back(self) -> list[dict[str, Any]]:
        """The objects Rackplane manages, as the cluster has them: every labelled object of the managed
        kinds, and each node Rackplane labels as a partial Node (name and Rackplane's labels only)."""
        objects = []
        for kind, api_version in MANAGED_KINDS.items():
            objects += self.list_objects(api_version, kind, MANAGED_SELECTOR)
        for node in self.list_objects("v1", "Node"):
            labels = self._rackplane_node_labels(node)
            if labels:
                name = node["metadata"]["name"]
                objects.append(
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
                )
        return sort_for_apply(objects)

    def _rackplane_node_labels(self, node: dict[str, Any]) -> dict[str, str]:
        live = (node.get("metadata") or {}).get("labels") or {}
        owned = {
            p[2]
            for p in owned_paths(node, self.field_manager)
            if len(p) == 3 and p[:2] == ("metadata", "labels")
        }
        return {k: v for k, v in sorted(live.items()) if k in owned}

    # --- render and diff --------------------------------------------------------------------------

    def render(self, state: KubernetesState) -> list[dict[str, Any]]:
        """Every object Rackplane wants in the cluster for this state, in apply order."""
        return desired_objects(
            state.inventory,
            state.tenants,
            nfs_server=state.nfs_server,
            cohort=state.cohort,
            flavor=state.flavor,
        )

    def _plan(self, desired: Sequence[dict[str, Any]]) -> _Plan:
        nodes = {n["metadata"]["name"]: n for n in self.list_objects("v1", "Node")}
        labelled: dict[tuple, dict[str, Any]] = {}
        for kind, api_version in MANAGED_KINDS.items():
            for obj in self.list_objects(api_version, kind, MANAGED_SELECTOR):
                labelled[object_key(obj)] = obj
        steps: list[_Step] = []
        desired_keys = set()
        for obj in desired:
            key = object_key(obj)
            desired_keys.add(key)
            metadata = obj["metadata"]
            if obj["kind"] == "Node":
                live = nodes.get(metadata["name"])
            elif key in labelled:
                live = labelled[key]
            else:
                live = self.get_object(
                    obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace")
                )
            steps.append(self._step(obj, live))
        delete = [
            obj
            for key, obj in labelled.items()
            if key not in desired_keys
            and ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        ]
        delete.sort(key=lambda o: (-KIND_ORDER.index(o["kind"]), *object_key(o)[2:]))
        for name, node in sorted(nodes.items()):
            if ("", "Node", "", name) in desired_keys:
                continue
            labels = self._rackplane_node_labels(node)
            if labels:
                bare = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                changes = [
                    FieldChange(path_text(("metadata", "labels", k)), v, None) for k, v in labels.items()
                ]
                steps.append(_Step(bare, node, "release", changes))
        return _Plan(steps, delete)

    def _step(self, obj: dict[str, Any], live: dict[str, Any] | None) -> _Step:
        if live is None:
            return _Step(obj, None, "missing-node" if obj["kind"] == "Node" else "create", [])
        changes: list[FieldChange] = []
        collect_changes([], {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}, live, changes)
        wanted = leaf_paths(obj)
        owned = owned_paths(live, self.field_manager)
        for path in owned:
            if path[:1] in (("apiVersion",), ("kind",)) or path in IDENTITY_PATHS:
                continue
            if any(w[: len(path)] == path for w in wanted):
                # Still desired. When Rackplane owns a whole map (an atomic map, or a coarse owner), keys
                # the desired map no longer has go away with the apply.
                want, have = value_at(obj, path), value_at(live, path)
                if isinstance(want, dict) and isinstance(have, dict):
                    for key in sorted(have.keys() - want.keys()):
                        changes.append(FieldChange(path_text((*path, key)), have[key], None))
                continue
            # A field Rackplane applied before and no longer sets: the apply removes it.
            value = value_at(live, path)
            if value is not None:
                changes.append(FieldChange(path_text(path), value, None))
        if changes:
            return _Step(obj, live, "update", changes)
        if all(any(paths_overlap(w, o) for o in owned) for w in wanted):
            return _Step(obj, live, "unchanged", [])
        return _Step(obj, live, "adopt", [])  # same values, but Rackplane does not own them all yet

    def diff(self, desired: Sequence[dict[str, Any]]) -> Diff:
        """What `apply(desired)` would change in the cluster, read from the live objects."""
        desired = list(desired)
        plan = self._plan(desired)
        result = Diff()
        for step in plan.steps:
            ref = object_ref(step.obj)
            if step.action == "create":
                result.create.append(ref)
            elif step.action in ("update", "release"):
                result.change[ref] = step.changes
            elif step.action == "missing-node":
                result.missing_nodes.append(step.obj["metadata"]["name"])
        result.delete = [object_ref(o) for o in plan.delete]
        return result

    # --- apply ------------------------------------------------------------------------------------

    def apply(self, desired: Sequence[dict[str, Any]], dry_run: bool = False) -> ApplyResult:
        """Validate, then server-side apply every object that differs, then prune. See the module doc."""
        desired = list(desired)
        self._refuse_invalid(desired)
        self.check_served(desired)
        plan = self._plan(desired)
        result = ApplyResult(dry_run=dry_run)
        try:
            self._apply_steps(plan.steps, result, dry_run)
            self._prune(plan.delete, result, dry_run)
        except KubernetesError as error:
            error.result = result
            done = "; ".join(result.log) if result.log else "nothing"
            error.details.append(f"done before the failure: {done}")
            raise
        return result

    def _refuse_invalid(self, desired: list[dict[str, Any]]) -> None:
        """Raise before anything is sent: an empty set (it would prune everything), an object the API server
        would reject or that is listed twice, a kind this target does not write."""
        if not desired:
            raise ValueError(
                "refusing to apply an empty desired set: it would prune everything Rackplane manages"
            )
        problems = [str(p) for p in schema.validate_all(desired)]
        seen: set[tuple] = set()
        for obj in desired:
            if isinstance(obj, dict) and not problems:
                key = object_key(obj)
                if key in seen:
                    problems.append(f"{object_ref(obj)}: listed twice")
                seen.add(key)
        if problems:
            raise KubernetesRejected(
                f"{len(problems)} object(s) would be rejected by the API server; nothing was sent",
                "fix the rendering (each line names the object and the field)",
                problems,
                status=422,
                reason="Invalid",
            )
        for obj in desired:
            self._kind(obj["apiVersion"], obj["kind"])

    def _apply_steps(self, steps: list[_Step], result: ApplyResult, dry_run: bool) -> None:
        """Apply every step that changes something, recording each in `result` as it goes."""
        new_namespaces = {
            s.obj["metadata"]["name"] for s in steps if s.action == "create" and s.obj["kind"] == "Namespace"
        }
        for step in steps:
            ref = object_ref(step.obj)
            if step.action == "unchanged":
                result.unchanged.append(ref)
                continue
            if step.action == "missing-node":
                result.skipped.append(ref)
                result.log.append(f"skipped {ref}: the node is not registered in the cluster")
                continue
            namespace = step.obj["metadata"].get("namespace")
            if dry_run and namespace in new_namespaces:
                # The server cannot dry-run an object into a namespace that a dry run did not create.
                result.created.append(ref)
                result.log.append(f"would create {ref} (in a new namespace: not checked by the server)")
                continue
            self._apply_one(step.obj, dry_run)
            (result.created if step.action == "create" else result.updated).append(ref)
            verb = {"create": "created", "release": "removed Rackplane's labels from"}.get(
                step.action, "updated"
            )
            result.log.append(("would have " if dry_run else "") + f"{verb} {ref}")

    def _prune(self, objects: list[dict[str, Any]], result: ApplyResult, dry_run: bool) -> None:
        for obj in objects:
            self._delete_one(obj, dry_run)
            result.deleted.append(object_ref(obj))
            result.log.append(("would have " if dry_run else "") + f"deleted {object_ref(obj)}")

    def _apply_one(self, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        query = [("fieldManager", self.field_manager), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        status, data = self.request(
            "PATCH", self._object_path(obj), query=query, body=obj, content_type=APPLY_PATCH
        )
        if status >= 400:
            raise self._rejected(f"applying {object_ref(obj)}", status, data)
        return data

    def _delete_one(self, obj: dict[str, Any], dry_run: bool) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if obj["kind"] == "Node" or labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise AssertionError(f"refusing to delete {object_ref(obj)}: not a Rackplane-managed object")
        query = [("dryRun", "All")] if dry_run else []
        status, data = self.request("DELETE", self._object_path(obj), query=query)
        if status == 404:
            return  # already gone (a namespace's deletion took it along)
        if status >= 400:
            raise self._rejected(f"deleting {object_ref(obj)}", status, data)


__all__ = [
    "APPLY_PATCH",
    "CORE_KINDS",
    "FIELD_MANAGER",
    "MANAGED_KINDS",
    "MANAGED_SELECTOR",
    "ApplyResult",
    "Diff",
    "FieldChange",
    "KubernetesClient",
    "KubernetesConfigurationError",
    "KubernetesError",
    "KubernetesRejected",
    "KubernetesState",
    "KubernetesTarget",
    "KubernetesUnavailable",
    "owned_paths",
]
