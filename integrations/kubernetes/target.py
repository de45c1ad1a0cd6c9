"""KubernetesTarget: the one place that talks to a Kubernetes API server. Render, diff, apply, read back.

Its connection, requests and reads are `KubernetesClient` (client.py), the field comparison is fields.py,
the errors errors.py, and what an apply takes and reports (`KubernetesState`, `Diff`, `ApplyResult`)
changes.py.

* Every write is a server-side apply: `PATCH` with `Content-Type: application/apply-patch+yaml`,
  `fieldManager=rackplane`, and `dryRun=All` in dry-run mode. Never `force` unasked: when another field
  manager (another tool, or a person with kubectl) set a field Rackplane sets to another value, the API
  server answers 409 Conflict and the apply stops with a `KubernetesRejected` naming the object, each field
  and the other manager. Only a target configured with `force_conflicts` (the setting "Take over fields
  other tools set") applies again with `force=true`, and its log says which fields it took over from whom.
  `diff` predicts those conflicts from the live objects' managedFields.
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
* Deletion is not instant: a Namespace stays Terminating until the namespace controller has emptied it, and
  a PersistentVolume(Claim) waits for its protection finalizer. An object that already has a
  deletionTimestamp is not deleted again (reported as being deleted). A desired object that is itself being
  deleted, or whose Namespace is, cannot be applied yet: the rest is applied and pruned, then the apply
  raises `KubernetesUnavailable` (transient) naming what waits, so the push task retries until the deletion
  has finished and the object can be created again.
* A slice (`racks`: issue 32, a partition plan's rack): the desired objects are those racks' nodes and
  per-partition ResourceFlavors only, and only those racks' objects are read and pruned: each node of the
  slice is read (the nodes carrying the racks' label in one list, any other one by name), and the
  ResourceFlavors labelled with the racks. Every other object and node is left as the cluster holds it, not
  even read; each node is one server-side apply of its labels, sent only when they differ.
* Kubernetes has no transactions: an apply that fails half way leaves the objects before the failure
  applied. Server-side apply is idempotent, so the retry (the push task retries transient errors)
  converges; the error carries what was done (`error.result`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from integrations.kubernetes import validate as schema
from integrations.kubernetes.changes import FORCE_CONFLICTS_LABEL, ApplyResult, Diff, KubernetesState
from integrations.kubernetes.client import CORE_KINDS, KubernetesClient
from integrations.kubernetes.errors import (
    KubernetesConfigurationError,
    KubernetesError,
    KubernetesRejected,
    KubernetesUnavailable,
    status_causes,
    status_message,
    status_reason,
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
    predicted_conflicts,
    value_at,
)
from integrations.kubernetes.render import (
    KIND_ORDER,
    RACK_LABEL,
    desired_objects,
    object_key,
    object_ref,
    sort_for_apply,
)
from integrations.kubernetes.tenants import (
    KUEUE_API_VERSION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
)

APPLY_PATCH = "application/apply-patch+yaml"
_RACK_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z"
)  # a DNS label (inventory.names): safe in a selector
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

# Kinds Rackplane prunes (when labelled managed-by rackplane and no longer desired), by apiVersion.
# Nodes are not here: they are never deleted, only relieved of Rackplane's labels.
MANAGED_KINDS = {
    "Namespace": "v1",
    "Topology": KUEUE_API_VERSION,
    "ResourceFlavor": KUEUE_API_VERSION,
    "Cohort": KUEUE_API_VERSION,  # a department with projects (tenants.department_cohort)
    "ClusterQueue": KUEUE_API_VERSION,
    "LocalQueue": KUEUE_API_VERSION,
    "ResourceQuota": "v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PersistentVolume": "v1",
    "PersistentVolumeClaim": "v1",
}


@dataclass
class _Step:
    obj: dict[str, Any]  # what to apply
    live: dict[str, Any] | None
    action: str  # create | update | adopt | unchanged | missing-node | release | waiting
    changes: list[FieldChange]
    why: str = ""  # waiting: what it waits for
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # predicted: (field path, other manager)


@dataclass
class _Plan:
    steps: list[_Step]
    delete: list[dict[str, Any]]
    deleting: list[dict[str, Any]] = field(default_factory=list)


def _being_deleted(obj: dict[str, Any] | None) -> bool:
    return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _waiting_words(steps: Sequence[_Step]) -> str:
    """What the waiting steps wait for: `Namespace vision is still being deleted (Terminating): it and the
    5 object(s) in it wait; PersistentVolume x is still being deleted`."""
    waiting = [step for step in steps if step.action == "waiting"]
    namespaces = {s.obj["metadata"]["name"] for s in waiting if s.obj["kind"] == "Namespace"}
    in_namespace: dict[str, int] = {}
    alone = []
    for step in waiting:
        obj = step.obj
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] == "Namespace":
            in_namespace.setdefault(obj["metadata"]["name"], 0)
        elif namespace and (namespace in namespaces or not _being_deleted(step.live)):
            in_namespace[namespace] = in_namespace.get(namespace, 0) + 1
        else:
            alone.append(f"{object_ref(obj)} is still being deleted")
    parts = [
        f"Namespace {name} is still being deleted (Terminating): "
        + (
            f"it and the {count} object(s) in it wait"
            if name in namespaces
            else f"{count} object(s) in it wait"
        )
        for name, count in in_namespace.items()
    ]
    return "; ".join(parts + alone)


def conflict_words(conflicts: Sequence[tuple[str, str]]) -> str:
    """[(path, manager)] -> `.spec.a and .spec.b (set by "x"), .metadata.labels.c (set by "y")`."""
    by_manager: dict[str, list[str]] = {}
    for path, manager in conflicts:
        by_manager.setdefault(manager, []).append(path)
    return ", ".join(f'{_and(paths)} (set by "{manager}")' for manager, paths in by_manager.items())


class KubernetesTarget(KubernetesClient):
    """One Kubernetes cluster's API server: render, diff, apply (server-side) and prune, read back.

    Configured as a `KubernetesClient`: `api_url` + `token` + (`ca_cert` path or PEM text, or
    `insecure=True`), or a `kubeconfig` path (and optionally `context`), or a ready `api_client`.
    `force_conflicts=True` lets it take over fields another field manager set (see the module doc).
    """

    def __init__(self, *args: Any, force_conflicts: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.force_conflicts = force_conflicts

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
            fabric=state.fabric,
        )

    def _live_slice(
        self, desired: Sequence[dict[str, Any]], racks: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[tuple, dict[str, Any]]]:
        """(nodes, labelled objects) of a slice: the nodes labelled with `racks` and the desired nodes not
        labelled yet (read by name), and the ResourceFlavors labelled with `racks` (the slice's kinds)."""
        in_racks = f"{RACK_LABEL} in ({','.join(racks)})"
        nodes = {n["metadata"]["name"]: n for n in self.list_objects("v1", "Node", in_racks)}
        for obj in desired:
            name = obj["metadata"]["name"]
            if obj["kind"] == "Node" and name not in nodes:
                live = self.get_object("v1", "Node", name)
                if live is not None:
                    nodes[name] = live
        flavors = self.list_objects(KUEUE_API_VERSION, "ResourceFlavor", f"{MANAGED_SELECTOR},{in_racks}")
        return nodes, {object_key(obj): obj for obj in flavors}

    def _plan(self, desired: Sequence[dict[str, Any]], racks: Sequence[str] | None = None) -> _Plan:
        if racks is not None:
            nodes, labelled = self._live_slice(desired, racks)
        else:
            nodes = {n["metadata"]["name"]: n for n in self.list_objects("v1", "Node")}
            labelled = {}
            for kind, api_version in MANAGED_KINDS.items():
                for obj in self.list_objects(api_version, kind, MANAGED_SELECTOR):
                    labelled[object_key(obj)] = obj
        lives: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
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
            lives.append((obj, live))
        # Namespaces being deleted (Terminating): nothing can be created in them until they are gone.
        terminating = {
            obj["metadata"]["name"]
            for obj, live in lives
            if obj["kind"] == "Namespace" and _being_deleted(live)
        } | {key[3] for key, obj in labelled.items() if key[1] == "Namespace" and _being_deleted(obj)}
        steps: list[_Step] = []
        for obj, live in lives:
            namespace = obj["metadata"].get("namespace")
            if _being_deleted(live):
                why = (
                    "still being deleted (Terminating); Rackplane creates it again once the deletion ends"
                    if obj["kind"] == "Namespace"
                    else "still being deleted; Rackplane applies it again once the deletion has finished"
                )
                steps.append(_Step(obj, live, "waiting", [], why=why))
            elif namespace and namespace in terminating:
                why = (
                    f"its Namespace {namespace} is still being deleted (Terminating); Rackplane applies it "
                    "once the namespace is gone and created again"
                )
                steps.append(_Step(obj, live, "waiting", [], why=why))
            else:
                steps.append(self._step(obj, live))
        delete, deleting = [], []
        for key, obj in labelled.items():
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if key in desired_keys or labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
                continue
            (deleting if _being_deleted(obj) else delete).append(obj)
        for objects in (delete, deleting):
            objects.sort(key=lambda o: (-KIND_ORDER.index(o["kind"]), *object_key(o)[2:]))
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
        return _Plan(steps, delete, deleting)

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
            return _Step(
                obj, live, "update", changes, conflicts=predicted_conflicts(obj, live, self.field_manager)
            )
        if all(any(paths_overlap(w, o) for o in owned) for w in wanted):
            return _Step(obj, live, "unchanged", [])
        return _Step(obj, live, "adopt", [])  # same values, but Rackplane does not own them all yet

    def diff(self, desired: Sequence[dict[str, Any]], racks: Sequence[str] | None = None) -> Diff:
        """What `apply(desired)` would change in the cluster, read from the live objects (of `racks`: a
        slice, see the module doc)."""
        desired = list(desired)
        plan = self._plan(desired, racks)
        result = Diff(force_conflicts=self.force_conflicts)
        for step in plan.steps:
            ref = object_ref(step.obj)
            if step.action == "create":
                result.create.append(ref)
            elif step.action in ("update", "release"):
                result.change[ref] = step.changes
            elif step.action == "missing-node":
                result.missing_nodes.append(step.obj["metadata"]["name"])
            elif step.action == "waiting":
                result.waiting[ref] = step.why
            if step.conflicts:
                result.conflicts[ref] = step.conflicts
        result.delete = [object_ref(o) for o in plan.delete]
        result.deleting = [object_ref(o) for o in plan.deleting]
        return result

    # --- apply ------------------------------------------------------------------------------------

    def apply(
        self, desired: Sequence[dict[str, Any]], dry_run: bool = False, racks: Sequence[str] | None = None
    ) -> ApplyResult:
        """Validate, then server-side apply every object that differs, then prune. See the module doc.
        `racks`: `desired` is those racks' slice (their nodes and ResourceFlavors): nothing else is read,
        applied or pruned."""
        desired = list(desired)
        if racks is not None:
            self._refuse_outside(desired, racks)
        self._refuse_invalid(desired)
        self.check_served(desired)
        plan = self._plan(desired, racks)
        result = ApplyResult(dry_run=dry_run)
        try:
            self._apply_steps(plan.steps, result, dry_run)
            self._prune(plan.delete, result, dry_run)
        except KubernetesError as error:
            error.result = result
            error.details.append(f"done before the failure: {result.counts()} (the log lists each object)")
            raise
        for obj in plan.deleting:
            ref = object_ref(obj)
            result.deleting.append(ref)
            result.log.append(f"{ref} is being deleted already (waiting for the cluster to finish)")
        if result.waiting:
            error = KubernetesUnavailable(
                f"{len(result.waiting)} object(s) could not be applied yet: {_waiting_words(plan.steps)}",
                "nothing, if the deletion finishes: the push is retried and applies them then. If a "
                "namespace stays Terminating, look at what holds it (kubectl get namespace <name> -o yaml: "
                "its finalizers and status conditions) and let its namespace controller finish",
                [f"done: {result.counts()} (the log lists each object)"],
            )
            error.result = result
            raise error
        return result

    @staticmethod
    def _refuse_outside(desired: list[dict[str, Any]], racks: Sequence[str]) -> None:
        """A slice holds the racks' nodes and ResourceFlavors only (what `_live_slice` reads and prunes)."""
        if not racks:
            raise ValueError("a slice names at least one rack")
        for rack in racks:
            if not isinstance(rack, str) or not rack or not _RACK_NAME.match(rack):
                raise ValueError(f"a slice's rack must be a rack name, not {rack!r}")
        for obj in desired:
            if not isinstance(obj, dict) or obj.get("kind") not in ("Node", "ResourceFlavor"):
                raise ValueError(f"a slice holds Nodes and ResourceFlavors only, not {object_ref(obj)}")
            rack = ((obj.get("metadata") or {}).get("labels") or {}).get(RACK_LABEL)
            if rack not in racks:
                raise ValueError(f"{object_ref(obj)} is not of the slice's racks ({', '.join(racks)})")

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
            if step.action == "waiting":
                result.waiting[ref] = step.why
                result.log.append(f"not applied {ref}: {step.why}")
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
            self._apply_one(step.obj, dry_run, result)
            (result.created if step.action == "create" else result.updated).append(ref)
            verb = {"create": "created", "release": "removed Rackplane's labels from"}.get(
                step.action, "updated"
            )
            result.log.append(("would have " if dry_run else "") + f"{verb} {ref}")

    def _prune(self, objects: list[dict[str, Any]], result: ApplyResult, dry_run: bool) -> None:
        """Delete what Rackplane no longer wants (never an object already being deleted: see `_plan`)."""
        for obj in objects:
            self._delete_one(obj, dry_run)
            result.deleted.append(object_ref(obj))
            result.log.append(("would have " if dry_run else "") + f"deleted {object_ref(obj)}")

    def _apply_one(
        self, obj: dict[str, Any], dry_run: bool, result: ApplyResult | None = None
    ) -> dict[str, Any]:
        """One server-side apply, without force: a conflict with another field manager is refused (or, with
        `force_conflicts`, logged and applied again with force)."""
        ref = object_ref(obj)
        query = [("fieldManager", self.field_manager)]
        if dry_run:
            query.append(("dryRun", "All"))
        path = self._object_path(obj)
        status, data = self.request("PATCH", path, query=query, body=obj, content_type=APPLY_PATCH)
        conflicts = self._conflicts(status, data)
        if conflicts:
            if not self.force_conflicts:
                raise self._conflict_error(ref, status, data, conflicts)
            if result is not None:
                result.taken_over[ref] = conflicts
                result.log.append(
                    ("would take over " if dry_run else "took over ")
                    + f"{conflict_words(conflicts)} on {ref} (the target may take over fields of other tools)"
                )
            status, data = self.request(
                "PATCH", path, query=[*query, ("force", "true")], body=obj, content_type=APPLY_PATCH
            )
        if status == 403 and any(c["reason"] == "NamespaceTerminating" for c in status_causes(data)):
            namespace = obj["metadata"].get("namespace", "")
            raise KubernetesUnavailable(
                f"applying {ref}: its Namespace {namespace} is being deleted (Terminating), so nothing can "
                f"be created in it until the deletion has finished (the API server answered {status}: "
                f"{status_message(data)})",
                "nothing, if the deletion finishes: the push is retried and creates it then. If the "
                "namespace stays Terminating, look at what holds it (kubectl get namespace <name> -o yaml)",
                status=status,
                reason=status_reason(data),
            )
        if status >= 400:
            raise self._rejected(f"applying {ref}", status, data)
        return data

    @staticmethod
    def _conflicts(status: int, data: Any) -> list[tuple[str, str]]:
        """A 409 answer's field-manager conflicts as [(field path, other manager)], in the server's order."""
        if status != 409:
            return []
        out = []
        for cause in status_causes(data):
            if cause["reason"] != "FieldManagerConflict":
                continue
            # 'conflict with "topograph"' or 'conflict with "kubectl-label" using v1'
            message = cause["message"]
            manager = message.split('"')[1] if message.count('"') >= 2 else message
            out.append((cause["field"], manager))
        return out

    @staticmethod
    def _conflict_error(
        ref: str, status: int, data: Any, conflicts: list[tuple[str, str]]
    ) -> KubernetesRejected:
        managers = sorted({m for _, m in conflicts})
        tools = _and([f'"{m}"' for m in managers])
        return KubernetesRejected(
            f"applying {ref}: another tool set fields Rackplane sets, to other values: "
            f"{conflict_words(conflicts)}; Rackplane did not overwrite them",
            f"change the field(s) back in {tools} (or stop {tools} from setting them), or, if Rackplane "
            f'should own them, tick "{FORCE_CONFLICTS_LABEL}" in the Kubernetes target\'s settings to let '
            "Rackplane take them over; then push again",
            [f"the API server said: {status_message(data)}"],
            status=status,
            reason=status_reason(data) or "Conflict",
        )

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
    "FieldChange",
    "KubernetesClient",
    "KubernetesConfigurationError",
    "KubernetesError",
    "KubernetesRejected",
    "KubernetesTarget",
    "KubernetesUnavailable",
    "owned_paths",
]
