"""Validate Kubernetes objects against the real schemas before anything is sent. No Django, no network.

* Core kinds: `kubernetes-validate` (the API's OpenAPI schemas as JSON schema) for a fixed Kubernetes
  version, strict (unknown fields fail, as with `fieldValidation=Strict`, kubectl's default). The bundled
  schemas type a Quantity as any string and know nothing of ObjectMeta's name and label rules, so those
  are checked here the way the API server does.
* Custom resources (Kueue, NVIDIA's ComputeDomain): jsonschema against the openAPIV3Schema of the CRDs in
  `crds/` (copies of the published CRDs: the versions the cluster runs) for the object's apiVersion,
  made strict the same way, then the CRDs' CEL rules (`x-kubernetes-validations`, evaluated with
  cel-python after applying the schema's defaults, as the API server does) and the list-type constraints
  (`x-kubernetes-list-type: map|set`). Transition rules (those that read `oldSelf`) only apply to updates
  of an existing object and are skipped here.

`validate(obj)` raises `ValidationError` naming the object and the field; `validate_all` collects every
problem of a batch so an apply can refuse all of it at once.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

# DRA's resource.k8s.io/v1 (ComputeDomain claims) needs 1.34: every object is validated against it.
KUBERNETES_VERSION = "1.34.0"
CRD_DIR = Path(__file__).resolve().with_name("crds")
REQUIRED_CRD_KINDS = frozenset({"ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology", "ComputeDomain"})

# Scope of the core kinds Rackplane writes (kubernetes-validate does not know scopes).
CORE_SCOPES = {
    "Namespace": "Cluster",
    "Node": "Cluster",
    "PersistentVolume": "Cluster",
    "ResourceQuota": "Namespaced",
    "NetworkPolicy": "Namespaced",
    "PersistentVolumeClaim": "Namespaced",
    "ConfigMap": "Namespaced",
    "Job": "Namespaced",
    "Pod": "Namespaced",
    "ResourceClaimTemplate": "Namespaced",
}

_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _ref(obj: Any) -> str:
    if not isinstance(obj, dict):
        return f"<{type(obj).__name__}>"
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name, namespace = metadata.get("name", "<no name>"), metadata.get("namespace")
    kind = obj.get("kind", "<no kind>")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class ValidationError(ValueError):
    """An object the API server would reject. `ref` names the object, `field` the offending field."""

    def __init__(self, obj: Any, field: str, reason: str):
        self.ref = _ref(obj)
        self.field = field
        self.reason = reason
        super().__init__(f"{self.ref}: {field}: {reason}" if field else f"{self.ref}: {reason}")


class CRDsMissing(RuntimeError):
    """The CRD copies that ship with this package are not where they should be."""


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# --- CRDs ---------------------------------------------------------------------------------------------


def load_crds(directory: Path | str = CRD_DIR) -> dict[str, dict[str, Any]]:
    """CRDs by kind, read from `directory` (every *.yaml in it)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CRDsMissing(
            f"CRDs not found at {directory}: the package's crds/ directory (copies of "
            "shared/reference/crds) must ship with scheduling/backends/kubernetes"
        )
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kind = crd["spec"]["names"]["kind"]
        if kind in crds:
            raise CRDsMissing(f"two CRDs in {directory} define kind {kind}")
        crds[kind] = crd
    missing = REQUIRED_CRD_KINDS - crds.keys()
    if missing:
        raise CRDsMissing(f"CRDs missing from {directory}: {sorted(missing)} (found {sorted(crds)})")
    return crds


@cache
def crds() -> dict[str, dict[str, Any]]:
    """The packaged CRDs by kind (read once)."""
    return load_crds(CRD_DIR)


def crd_for(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The CRD that defines this object's kind in its API group; None for core kinds."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    crd = crds().get(obj.get("kind"))
    if crd is not None and crd["spec"]["group"] == group:
        return crd
    if any(c["spec"]["group"] == group for c in crds().values()):
        raise ValidationError(obj, "kind", f"no CRD of group {group} defines kind {obj.get('kind')!r}")
    return None


def served_schema(crd: dict[str, Any], version: str) -> dict[str, Any] | None:
    for v in crd["spec"]["versions"]:
        if v["name"] == version and v.get("served"):
            return v["schema"]["openAPIV3Schema"]
    return None


def _strict(schema: Any) -> Any:
    """Structural schema -> JSON schema that rejects unknown fields (the API server prunes them, or with
    fieldValidation=Strict - kubectl's default - refuses the request)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if k != "properties"}
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


@cache
def _strict_validator(kind: str, version: str) -> jsonschema.protocols.Validator:
    schema = served_schema(crds()[kind], version)
    return jsonschema.Draft202012Validator(_strict(schema))


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """The object as the API server stores it: schema `default`s filled in (recursively)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(schema["items"], v) for v in value]
    return value


@cache
def _cel_env() -> celpy.Environment:
    """Built at the first CEL rule, not at import: its parser costs every process ~0.2 s otherwise."""
    return celpy.Environment()


@cache
def _cel_program(rule: str):
    return _cel_env().program(_cel_env().compile(rule))


def _check_cel_and_lists(obj: dict[str, Any], schema: dict[str, Any], value: Any, path: list[Any]) -> None:
    for validation in schema.get("x-kubernetes-validations", []):
        rule = validation["rule"]
        if re.search(r"\boldSelf\b", rule):  # transition rules only apply to updates
            continue
        try:
            result = _cel_program(rule).evaluate({"self": celpy.json_to_cel(value)})
        except Exception as error:  # a rule that cannot be evaluated fails, as on the API server
            result = error
        if result is not True and result != celpy.celtypes.BoolType(True):
            detail = "" if isinstance(result, (bool, celpy.celtypes.BoolType)) else f"; evaluation: {result}"
            raise ValidationError(
                obj, _path(path), f"{validation.get('message', rule)} (rule: {rule}{detail})"
            )
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _check_cel_and_lists(obj, sub, value[key], [*path, key])
    elif isinstance(value, list) and "items" in schema:
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]) for item in value]
            if len(keys) != len(set(keys)):
                raise ValidationError(obj, _path(path), f"duplicate list-map keys {keys}")
        elif list_type == "set" and len(value) != len({repr(v) for v in value}):
            raise ValidationError(obj, _path(path), "duplicate items in a set")
        for i, item in enumerate(value):
            _check_cel_and_lists(obj, schema["items"], item, [*path, i])


def _check_scope(obj: dict[str, Any], kind: str, scope: str | None) -> None:
    metadata = obj["metadata"]
    if scope == "Cluster" and "namespace" in metadata:
        raise ValidationError(obj, "metadata.namespace", f"{kind} is cluster-scoped but has a namespace")
    if scope == "Namespaced" and not metadata.get("namespace"):
        raise ValidationError(obj, "metadata.namespace", f"{kind} is namespaced but has no namespace")


def validate_custom(obj: dict[str, Any], crd: dict[str, Any]) -> None:
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].partition("/")
    if group != crd["spec"]["group"]:
        raise ValidationError(obj, "apiVersion", f"group {group!r} is not {crd['spec']['group']!r}")
    schema = served_schema(crd, version)
    if schema is None:
        served = sorted(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
        raise ValidationError(obj, "apiVersion", f"{kind} {version!r} is not served (served: {served})")
    _check_scope(obj, kind, crd["spec"]["scope"])
    check_metadata(obj)
    try:
        _strict_validator(kind, version).validate(obj)
    except jsonschema.ValidationError as exc:
        raise ValidationError(obj, _path(exc.absolute_path), exc.message) from exc
    _check_cel_and_lists(obj, schema, apply_defaults(schema, obj), [])


# --- core kinds ---------------------------------------------------------------------------------------


@cache
def _core_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    """kubernetes-validate's strict schema for one kind, compiled once.

    Same files and resolution as `kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)`, which
    re-reads and re-compiles the whole definitions file on every call (~15 ms): too slow for the 18,000
    node objects of 1,000 racks.
    """
    directory = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    # "rbac.authorization.k8s.io/v1" -> "rbac-v1", "v1" -> "v1" (kubernetes-validate's file naming)
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv_utils.schema_contents(
            f"{directory}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION
        )
    except FileNotFoundError as exc:
        raise kubernetes_validate.SchemaNotFoundError(
            version=KUBERNETES_VERSION, kind=kind, api_version=api_version
        ) from exc
    definitions = kv_utils.schema_contents(f"{directory}/_definitions.json", KUBERNETES_VERSION)
    registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _core_error(obj: dict[str, Any]) -> jsonschema.ValidationError | None:
    """The error `kubernetes_validate.validate(..., strict=True)` would raise, or None."""
    return jsonschema.exceptions.best_match(_core_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj))


def check_metadata(obj: dict[str, Any], schema: bool = True) -> None:
    """ObjectMeta as the API server checks it: its schema (`schema`; a CRD's schema says only `object`,
    a core kind's strict schema has already checked it) and, beyond that, names and labels."""
    metadata = obj["metadata"]
    if schema:  # ObjectMeta's own schema, strict, through a kind that has no other required field
        error = _core_error({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
        if error is not None:
            raise ValidationError(obj, _path(["metadata", *list(error.absolute_path)[1:]]), error.message)
    name = metadata.get("name", "")
    name_re, limit = (_DNS_LABEL, 63) if obj["kind"] == "Namespace" else (_DNS_SUBDOMAIN, 253)
    if not isinstance(name, str) or not name_re.match(name) or len(name) > limit:
        what = "DNS-1123 label" if obj["kind"] == "Namespace" else "DNS-1123 subdomain"
        raise ValidationError(obj, "metadata.name", f"{obj['kind']} name {name!r} is not a valid {what}")
    namespace = metadata.get("namespace")
    if namespace is not None and not (_DNS_LABEL.match(namespace) and len(namespace) <= 63):
        raise ValidationError(obj, "metadata.namespace", f"namespace {namespace!r} is not valid")
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, label_name = key.rpartition("/")
        field = f"metadata.labels[{key!r}]"
        if (
            (prefix and (not _DNS_SUBDOMAIN.match(prefix) or len(prefix) > 253))
            or len(label_name) > 63
            or not _LABEL_NAME.match(label_name)
        ):
            raise ValidationError(obj, field, f"label key {key!r} is not valid")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValidationError(obj, field, f"label value {value!r} is not valid")


def _quantities(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    found: dict[str, Any] = {}
    if kind == "ResourceQuota":
        found = {f"spec.hard[{k!r}]": v for k, v in (spec.get("hard") or {}).items()}
    elif kind == "PersistentVolume":
        found = {f"spec.capacity[{k!r}]": v for k, v in (spec.get("capacity") or {}).items()}
    elif kind == "PersistentVolumeClaim":
        resources = spec.get("resources") or {}
        for part in ("requests", "limits"):
            found.update({f"spec.resources.{part}[{k!r}]": v for k, v in (resources.get(part) or {}).items()})
    elif kind in ("Pod", "Job"):  # container requests/limits (a Job's in its pod template)
        pod_path, pod = ("spec", spec) if kind == "Pod" else ("spec.template.spec", _pod_spec_of_job(spec))
        for group in ("initContainers", "containers"):
            for i, container in enumerate(pod.get(group) or []):
                resources = (container.get("resources") if isinstance(container, dict) else None) or {}
                for part in ("requests", "limits"):
                    where = f"{pod_path}.{group}[{i}].resources.{part}"
                    found.update({f"{where}[{k!r}]": v for k, v in (resources.get(part) or {}).items()})
    return list(found.items())


def _pod_spec_of_job(spec: dict[str, Any]) -> dict[str, Any]:
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    return template.get("spec") if isinstance(template.get("spec"), dict) else {}


def validate_core(obj: dict[str, Any]) -> None:
    _check_scope(obj, obj["kind"], CORE_SCOPES.get(obj["kind"]))
    try:
        error = _core_error(obj)
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise ValidationError(
            obj,
            "apiVersion",
            f"{obj['apiVersion']} {obj['kind']} is not a Kubernetes {KUBERNETES_VERSION} kind",
        ) from exc
    if error is not None:
        raise ValidationError(obj, _path(error.absolute_path), error.message)
    check_metadata(obj, schema=False)
    for field, quantity in _quantities(obj):  # the bundled schema types Quantity as any string
        if not (isinstance(quantity, int) or (isinstance(quantity, str) and _QUANTITY.match(quantity))):
            raise ValidationError(obj, field, f"{quantity!r} is not a Kubernetes quantity")


# --- entry points -------------------------------------------------------------------------------------


def validate(obj: dict[str, Any]) -> None:
    """Raise ValidationError (naming the object and the field) for anything the API server would reject."""
    if not isinstance(obj, dict):
        raise ValidationError(obj, "", "an object must be a mapping")
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ValidationError(obj, field, f"{field} is required")
    if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
        raise ValidationError(obj, "metadata.name", "metadata.name is required")
    crd = crd_for(obj)
    if crd is not None:
        validate_custom(obj, crd)
    else:
        validate_core(obj)


def validate_all(objects: Sequence[dict[str, Any]]) -> list[ValidationError]:
    """Every invalid object of a batch (empty when all are valid)."""
    problems = []
    for obj in objects:
        try:
            validate(obj)
        except ValidationError as error:
            problems.append(error)
    return problems
