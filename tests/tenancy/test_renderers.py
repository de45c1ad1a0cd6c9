"""Tenant renderers against the real consumers' formats.

Kubernetes objects are validated with Rackplane's production validator
(scheduling/backends/kubernetes/validate.py): core kinds with kubernetes-validate (strict: unknown fields
fail), Kueue kinds with jsonschema against the openAPIV3Schema of the packaged CRDs (byte-identical copies
of shared/reference/crds, made structural-strict, the same way the API server rejects unknown fields with
fieldValidation=Strict), plus the CRDs' CEL rules (x-kubernetes-validations) evaluated with cel-python after
applying the schema defaults, as the API server does. No Django: run with `-p no:django`.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from typing import Any

import pytest
import yaml

from integrations.kubernetes import validate as validation
from integrations.kubernetes.validate import validate
from tenancy import renderers as r
from tenancy.renderers import TenantSpec

SchemaError = validation.ValidationError  # an object that the real API server would reject


def kueue_crds() -> dict[str, dict[str, Any]]:
    """The CRDs production validates against, by kind."""
    return validation.crds()


def test_missing_crd_directory_fails_with_a_clear_message(tmp_path):
    with pytest.raises(validation.CRDsMissing, match=r"CRDs not found at .*crds.*must ship with"):
        validation.load_crds(tmp_path / "shared" / "reference" / "crds")
    (tmp_path / "kueue.x-k8s.io_cohorts.yaml").write_bytes(
        (validation.CRD_DIR / "kueue.x-k8s.io_cohorts.yaml").read_bytes()
    )
    with pytest.raises(validation.CRDsMissing, match=r"CRDs missing from .*'ClusterQueue'.*'LocalQueue'"):
        validation.load_crds(tmp_path)


# --- fixtures -----------------------------------------------------------------------------------------


def tenant(slug: str = "ml-research", **overrides: Any) -> TenantSpec:
    fields: dict[str, Any] = {
        "slug": slug,
        "name": "ML Research",
        "guaranteed_gpus": 16,
        "limit_gpus": 48,
        "vlan_id": 100,
        "vxlan_vni": 10100,
        "pkey": 0x0010,
        "port_guids": ("0x0002c90300a1b2c4", "0x0002C90300A1B2C3"),
        "network_cidr": "10.42.3.0/24",
        "export_path": f"/exports/tenants/{slug}",
        "storage_quota_gib": 2048,
    }
    fields.update(overrides)
    return TenantSpec(**fields)


ML = tenant()
VISION = tenant(
    "vision",
    name="Vision",
    guaranteed_gpus=8,
    limit_gpus=None,
    vlan_id=101,
    vxlan_vni=10101,
    pkey=0x0011,
    port_guids=("0x0002c90300a1c001",),
    network_cidr="10.42.4.0/24",
    storage_quota_gib=512,
)
EMPTY = tenant(
    "new-dept",
    name="New department",
    guaranteed_gpus=0,
    limit_gpus=0,
    vlan_id=102,
    vxlan_vni=10102,
    pkey=0x0005,
    port_guids=(),
    network_cidr="10.42.5.0/24",
    storage_quota_gib=1,
)
ODD_SLUG = tenant(  # a plain `no` is a boolean to YAML 1.1 readers: must be quoted (slugs start a-z)
    "no", pkey=0x0123, vlan_id=103, vxlan_vni=10103, network_cidr="fd00:42::/64", port_guids=()
)
ALL_TENANTS = [ML, VISION, EMPTY, ODD_SLUG]
NFS_SERVER = "nfs01.storage.example.com"


# --- Kubernetes objects -------------------------------------------------------------------------------


@pytest.mark.parametrize("t", ALL_TENANTS, ids=lambda t: t.slug)
def test_every_object_validates_against_the_real_schemas(t):
    objects = r.tenant_objects(t, NFS_SERVER)
    assert [o["kind"] for o in objects] == [
        "Namespace",
        "ResourceQuota",
        "NetworkPolicy",
        "ClusterQueue",
        "LocalQueue",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    for obj in objects:
        validate(obj)
        labels = obj["metadata"]["labels"]
        base = {"app.kubernetes.io/managed-by": "rackplane", "rackplane.io/department": t.slug}
        # The namespace also carries Pod Security Admission `restricted` (enforce, audit and warn).
        assert labels == (base | r.POD_SECURITY_LABELS if obj["kind"] == "Namespace" else base)
        if obj["kind"] not in ("Namespace", "ClusterQueue", "PersistentVolume"):
            assert obj["metadata"]["namespace"] == t.slug


def test_kueue_objects_use_the_newest_served_version_with_cohort_name():
    crd = kueue_crds()["ClusterQueue"]
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    with_cohort_name = [
        name
        for name, v in served.items()
        if "cohortName" in v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    ]
    assert r.KUEUE_API_VERSION == f"kueue.x-k8s.io/{max(with_cohort_name)}" == "kueue.x-k8s.io/v1beta2"
    assert served["v1beta2"]["storage"] is True


@pytest.mark.parametrize("t", ALL_TENANTS, ids=lambda t: t.slug)
def test_yaml_stream_round_trips_and_validates(t):
    objects = r.tenant_objects(t, NFS_SERVER)
    text = r.to_yaml(objects)
    assert text.startswith("---\napiVersion: v1\nkind: Namespace\nmetadata:\n")
    docs = list(yaml.safe_load_all(text))
    assert docs == objects
    for doc in docs:
        validate(doc)
    assert r.to_yaml(objects) == text


def test_yaml_quotes_strings_that_yaml_1_2_reads_as_numbers():
    text = r.to_yaml([r.namespace(ODD_SLUG), r.cluster_queue(ODD_SLUG)])
    assert "  name: 'no'\n" in text
    assert "rackplane.io/department: 'no'\n" in text
    assert "nominalQuota: '16'\n" in text
    assert "cohortName: rackplane\n" in text  # ordinary strings stay plain


def test_cluster_queue_quota_borrowing_and_preemption():
    spec = r.cluster_queue(ML)["spec"]
    assert spec["cohortName"] == "rackplane"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ml-research"}}
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    assert group["flavors"] == [
        {
            "name": "nvl72",
            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "32"}],
        }
    ]
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
        "withinClusterQueue": "LowerPriority",
    }
    unlimited = r.cluster_queue(VISION, cohort="site-a", flavor="gb300")["spec"]
    assert unlimited["cohortName"] == "site-a"
    assert unlimited["resourceGroups"][0]["flavors"] == [
        {"name": "gb300", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}
    ]
    assert r.cluster_queue(EMPTY)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "0",
        "borrowingLimit": "0",
    }
    with pytest.raises(ValueError, match="cohort"):
        r.cluster_queue(ML, cohort="Not A Name")


def test_local_queue_points_at_the_department_cluster_queue():
    lq = r.local_queue(ML)
    assert lq["metadata"]["name"] == "default"
    assert lq["metadata"]["namespace"] == "ml-research"
    assert lq["spec"] == {"clusterQueue": "ml-research"}
    assert r.local_queue(ML, "shared-cq")["spec"] == {"clusterQueue": "shared-cq"}
    validate(r.local_queue(ML, "shared-cq"))


def test_resource_quota_caps_at_the_limit_and_is_empty_without_one():
    assert r.resource_quota(ML)["spec"] == {"hard": {"requests.nvidia.com/gpu": "48"}}
    assert r.resource_quota(VISION)["spec"] == {"hard": {}}
    assert r.resource_quota(EMPTY)["spec"] == {"hard": {"requests.nvidia.com/gpu": "0"}}


def _selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """LabelSelector semantics, for the operators this test meets."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        op, key = expr["operator"], expr["key"]
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
        if op == "In" and labels.get(key) not in expr["values"]:
            return False
        if op == "NotIn" and key in labels and labels[key] in expr["values"]:
            return False
    return True


def _ingress_allowed(policy: dict[str, Any], src_namespace: str, src_ns_labels: dict[str, str]) -> bool:
    """Whether a pod in `src_namespace` may connect to any pod selected by the policy (no port rules)."""
    own = policy["metadata"]["namespace"]
    for rule in policy["spec"].get("ingress", []):
        for peer in rule.get("from", []):
            assert "ipBlock" not in peer
            if "namespaceSelector" in peer:
                ns_ok = _selector_matches(peer["namespaceSelector"], src_ns_labels)
            else:
                ns_ok = src_namespace == own
            pod_ok = _selector_matches(peer.get("podSelector", {}), {})
            if ns_ok and pod_ok:
                return True
    return False


def test_network_policy_isolates_departments_but_not_system_namespaces():
    policy = r.network_policy(ML)
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress"]

    def ns_labels(obj_or_name):
        if isinstance(obj_or_name, dict):
            return {
                **obj_or_name["metadata"]["labels"],
                "kubernetes.io/metadata.name": obj_or_name["metadata"]["name"],
            }
        return {"kubernetes.io/metadata.name": obj_or_name}

    assert _ingress_allowed(policy, "ml-research", ns_labels(r.namespace(ML)))
    assert not _ingress_allowed(policy, "vision", ns_labels(r.namespace(VISION)))
    assert not _ingress_allowed(policy, "no", ns_labels(r.namespace(ODD_SLUG)))
    for system in ("kube-system", "monitoring", "ingress-nginx", "default"):
        assert _ingress_allowed(policy, system, ns_labels(system))


def test_persistent_volume_and_claim_bind_to_each_other_statically():
    pv, pvc = r.persistent_volume(ML, NFS_SERVER), r.persistent_volume_claim(ML)
    assert pv["spec"]["nfs"] == {"server": NFS_SERVER, "path": "/exports/tenants/ml-research"}
    assert pv["spec"]["capacity"] == {"storage": "2048Gi"}
    assert pvc["spec"]["resources"] == {"requests": {"storage": "2048Gi"}}
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    claim = pv["spec"]["claimRef"]
    assert (claim["namespace"], claim["name"]) == (pvc["metadata"]["namespace"], pvc["metadata"]["name"])
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] == "rackplane-ml-research-data"
    validate(r.persistent_volume(ML, "192.0.2.10"))
    for bad in ("", "nfs server", "nfs_01.example.com", None):
        with pytest.raises(ValueError, match="nfs_server"):
            r.persistent_volume(ML, bad)


# --- proof that the validation bites ------------------------------------------------------------------


def _broken(obj: dict[str, Any], path: tuple[str | int, ...], value: Any = None, *, delete: bool = False):
    """A deep copy of `obj` with the value at `path` replaced (or deleted)."""
    obj = copy.deepcopy(obj)
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return obj


CQ = r.cluster_queue(ML)
LQ = r.local_queue(ML)
RES = ("spec", "resourceGroups", 0, "flavors", 0, "resources", 0)


@pytest.mark.parametrize(
    "broken, reason",
    [
        pytest.param(_broken(CQ, (*RES, "nominalQuota"), "abc"), "does not match", id="cq-quantity-pattern"),
        pytest.param(
            _broken(CQ, ("spec", "cohort"), "rackplane"),
            "'cohort' was unexpected",
            id="cq-unknown-field-v1beta1-cohort",
        ),
        pytest.param(
            _broken(CQ, ("spec", "preemption", "withinClusterQueue"), "Lower"), "is not one of", id="cq-enum"
        ),
        pytest.param(
            _broken(CQ, ("spec", "preemption", "reclaimWithinCohort"), "Never"),
            "reclaimWithinCohort=Never",
            id="cq-cel-preemption",
        ),
        pytest.param(
            _broken(CQ, ("spec", "cohortName"), delete=True),
            "borrowingLimit must be nil",
            id="cq-cel-borrowing-without-cohort",
        ),
        pytest.param(
            _broken(CQ, ("spec", "resourceGroups", 0, "coveredResources"), ["nvidia.com/gpu", "cpu"]),
            "same number of resources",
            id="cq-cel-resource-count",
        ),
        pytest.param(
            _broken(
                CQ, ("spec", "resourceGroups", 0, "flavors"), CQ["spec"]["resourceGroups"][0]["flavors"] * 2
            ),
            "duplicate list-map keys",
            id="cq-duplicate-list-map-key",
        ),
        pytest.param(
            _broken(CQ, ("metadata", "namespace"), "ml-research"),
            "cluster-scoped",
            id="cq-cluster-scoped-namespace",
        ),
        pytest.param(
            _broken(CQ, ("metadata", "name"), "ML_Research"), "name 'ML_Research'", id="cq-bad-name"
        ),
        pytest.param(
            _broken(CQ, ("apiVersion",), "kueue.x-k8s.io/v1alpha1"), "not served", id="cq-unserved-version"
        ),
        pytest.param(
            _broken(CQ, ("metadata", "labels", "bad key!"), "x"), "label key", id="cq-bad-label-key"
        ),
        pytest.param(
            _broken(LQ, ("metadata", "namespace"), delete=True), "has no namespace", id="lq-without-namespace"
        ),
        pytest.param(_broken(LQ, ("spec", "queue"), "x"), "'queue' was unexpected", id="lq-unknown-field"),
        pytest.param(_broken(LQ, ("spec", "clusterQueue"), "Not_A_Name"), "does not match", id="lq-pattern"),
        pytest.param(
            _broken(r.namespace(ML), ("spec",), {"bogus": 1}), "'bogus' was unexpected", id="ns-unknown-field"
        ),
        pytest.param(
            _broken(r.namespace(ML), ("metadata", "labelz"), {}),
            "'labelz' was unexpected",
            id="ns-unknown-metadata-field",
        ),
        pytest.param(
            _broken(r.namespace(ML), ("metadata", "name"), "ml.research"),
            "name 'ml.research'",
            id="ns-name-not-a-label",
        ),
        pytest.param(
            _broken(r.resource_quota(ML), ("spec", "hard", "requests.nvidia.com/gpu"), "lots"),
            "not a Kubernetes quantity",
            id="rq-quantity",
        ),
        pytest.param(
            _broken(r.network_policy(ML), ("spec", "policyTypes"), "Ingress"),
            "is not of type 'array'",
            id="np-type",
        ),
        pytest.param(
            _broken(r.network_policy(ML), ("spec", "ingress", 0, "sources"), []),
            "'sources' was unexpected",
            id="np-unknown-field",
        ),
        pytest.param(
            _broken(r.persistent_volume(ML, NFS_SERVER), ("spec", "nfs", "share"), "x"),
            "'share' was unexpected",
            id="pv-unknown",
        ),
        pytest.param(
            _broken(
                r.persistent_volume_claim(ML), ("metadata", "labels", "rackplane.io/department"), "x" * 64
            ),
            "label value",
            id="pvc-label-value-too-long",
        ),
    ],
)
def test_broken_objects_fail_validation(broken, reason):
    with pytest.raises(SchemaError, match=re.escape(reason)):
        validate(broken)


# --- OpenSM partitions.conf ---------------------------------------------------------------------------

_ENTRY = re.compile(
    r"^\s*(?P<name>[^=,:;#\s]+)\s*=\s*(?P<pkey>0x[0-9a-fA-F]{1,4})\s*"
    r"(?P<flags>(?:,\s*[A-Za-z_]+(?:\s*=\s*[A-Za-z0-9_]+)?\s*)*)"
    r":(?P<members>[^:;]*)$",
    re.DOTALL,
)
_MEMBER = re.compile(
    r"^(?P<port>0x[0-9a-fA-F]{16}|ALL|ALL_CAS|ALL_SWITCHES|ALL_ROUTERS|SELF)(?:=(?P<m>full|limited|both))?$"
)
_FLAG = re.compile(r"^(?P<flag>[A-Za-z_]+)(?:\s*=\s*(?P<value>[A-Za-z0-9_]+))?$")


def parse_partitions_conf(text: str) -> dict[int, dict[str, Any]]:
    """A reader for OpenSM's partitions.conf grammar (doc/partition-config.txt):
    `Name=PKey[,flag[=value]]... : [member[=full|limited|both]] [, member...] ;`, '#' comments, entries may
    span lines after ':' and after ','. Returns {pkey: {name, flags, members: [(port, membership)]}}."""
    for lineno, line in enumerate(text.splitlines(), 1):
        # OpenSM reads lines with fgets into a 4096-byte buffer: longer lines get split mid-token.
        assert len(line) < 4094, f"line {lineno} is {len(line)} characters long"
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    assert body.rstrip().endswith(";"), "last entry is not terminated by ';'"
    partitions: dict[int, dict[str, Any]] = {}
    for raw in body.split(";")[:-1]:
        match = _ENTRY.match(raw)
        assert match, f"not a partition entry: {raw!r}"
        flags = {}
        for flag in filter(None, (f.strip() for f in match["flags"].split(","))):
            fm = _FLAG.match(flag)
            assert fm, f"bad flag {flag!r}"
            flags[fm["flag"]] = fm["value"]
        default = flags.get("defmember", "limited")
        members = []
        for token in (m.strip() for m in match["members"].split(",")):
            if not token:  # "Empty list means no ports in this partition"; a trailing ',' is ignored too
                continue
            mm = _MEMBER.match(token)
            assert mm, f"bad member {token!r}"
            members.append((mm["port"], mm["m"] or default))
        pkey = int(match["pkey"], 16) & 0x7FFF
        assert pkey not in partitions, f"PKey 0x{pkey:04x} defined twice"
        partitions[pkey] = {"name": match["name"], "flags": flags, "members": members}
    return partitions


def test_opensm_exact_text():
    text = r.render_opensm_partitions([VISION, ML, EMPTY])
    assert text == (
        "Default=0x7fff, ipoib : ALL=full ;\n"
        "new_dept=0x0005, ipoib, defmember=full : ;\n"
        "ml_research=0x0010, ipoib, defmember=full : 0x0002c90300a1b2c3=full, 0x0002c90300a1b2c4=full ;\n"
        "vision=0x0011, ipoib, defmember=full : 0x0002c90300a1c001=full ;\n"
    )
    assert r.render_opensm_partitions([]) == "Default=0x7fff, ipoib : ALL=full ;\n"
    assert r.render_opensm_partitions([EMPTY, VISION, ML]) == text


def test_opensm_limited_default_partition():
    text = r.render_opensm_partitions([ML], default_membership="limited")
    assert text.splitlines()[0] == "Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full ;"
    parsed = parse_partitions_conf(text)
    assert parsed[0x7FFF]["members"] == [("ALL", "limited"), ("ALL_SWITCHES", "full"), ("SELF", "full")]
    with pytest.raises(ValueError, match="default_membership"):
        r.render_opensm_partitions([ML], default_membership="both")


def test_opensm_round_trip_including_wrapped_member_lists():
    many = tenant(
        "big-lab",
        pkey=0x7FFE,
        vlan_id=200,
        vxlan_vni=20000,
        network_cidr="10.50.0.0/16",
        port_guids=tuple(f"0x0002c903{i:08x}" for i in range(400, 0, -1)),  # 400 ports, > 4 KiB of members
    )
    tenants = [*ALL_TENANTS, many]
    text = r.render_opensm_partitions(tenants)
    assert max(len(line) for line in text.splitlines()) <= r.OPENSM_MAX_LINE
    assert len(text.splitlines()) > len(tenants) + 1  # the big one was wrapped
    parsed = parse_partitions_conf(text)
    assert parsed.pop(0x7FFF) == {"name": "Default", "flags": {"ipoib": None}, "members": [("ALL", "full")]}
    expected = {
        t.pkey: {
            "name": t.slug.replace("-", "_"),
            "flags": {"ipoib": None, "defmember": "full"},
            "members": [(g.lower(), "full") for g in sorted(t.port_guids)],
        }
        for t in tenants
    }
    assert parsed == expected
    assert list(parse_partitions_conf(text))[1:] == sorted(expected)  # Default first, then by PKey
    assert len(parsed[0x7FFE]["members"]) == 400


def test_opensm_rejects_duplicate_pkeys_and_slugs():
    clash = tenant("other", pkey=ML.pkey, vlan_id=300, vxlan_vni=30000, network_cidr="10.60.0.0/24")
    with pytest.raises(ValueError, match=r"pkey 0x0010 is used by both 'ml-research' and 'other'"):
        r.render_opensm_partitions([ML, clash])
    with pytest.raises(ValueError, match="slug 'ml-research' appears more than once"):
        r.render_opensm_partitions([ML, tenant(pkey=0x0099)])
    with pytest.raises(TypeError):
        r.render_opensm_partitions([ML, "vision"])


@pytest.mark.parametrize("pkey", [0, 0x7FFF, 0x8000, 0xFFFF, -1, "0x0010", True])
def test_pkey_out_of_range_is_rejected(pkey):
    with pytest.raises(ValueError, match="pkey"):
        tenant(pkey=pkey)


@pytest.mark.parametrize("pkey", [0x0001, 0x7FFE])
def test_pkey_range_bounds_are_accepted(pkey):
    assert f"=0x{pkey:04x}, ipoib" in r.render_opensm_partitions([tenant(pkey=pkey)])


@pytest.mark.parametrize(
    "guid",
    ["0002c90300a1b2c3", "0x2c90300a1b2c3", "0x0002c90300a1b2c3f", "0x0002c90300a1b2g3", "0x" + "0" * 16],
)
def test_bad_port_guid_is_rejected(guid):
    with pytest.raises(ValueError, match="port GUID"):
        tenant(port_guids=(guid,))


def test_port_guids_are_normalised_and_deduplicated():
    t = tenant(port_guids=["0x0002C90300A1B2C3", "0x0002c90300a1b2c3"])
    assert t.port_guids == ("0x0002c90300a1b2c3",)
    with pytest.raises(ValueError, match="port_guids"):
        tenant(port_guids="0x0002c90300a1b2c3")


# --- NFS exports --------------------------------------------------------------------------------------


def test_exports_exact_text():
    text = r.render_nfs_exports([VISION, ML, EMPTY, ODD_SLUG])
    assert text == (
        "/exports/tenants/ml-research 10.42.3.0/24(rw,sync,no_subtree_check,root_squash)\n"
        "/exports/tenants/new-dept 10.42.5.0/24(rw,sync,no_subtree_check,root_squash)\n"
        "/exports/tenants/no fd00:42::/64(rw,sync,no_subtree_check,root_squash)\n"
        "/exports/tenants/vision 10.42.4.0/24(rw,sync,no_subtree_check,root_squash)\n"
    )
    assert r.render_nfs_exports([]) == ""
    for line in text.splitlines():  # exports(5): path, whitespace, client immediately followed by "(opts)"
        _path, client = line.split()
        host, options = re.fullmatch(r"([^()\s]+)\(([^()\s]+)\)", client).groups()
        ipaddress.ip_network(host, strict=True)
        assert options.split(",") == ["rw", "sync", "no_subtree_check", "root_squash"]


@pytest.mark.parametrize(
    "cidr", ["10.42.3.1/24", "10.42.3.0/33", "10.42.3.0/", "not-a-cidr", "", None, "10.42.3"]
)
def test_invalid_cidr_is_rejected(cidr):
    with pytest.raises(ValueError, match="network_cidr"):
        tenant(network_cidr=cidr)


def test_single_host_is_a_slash_32_network():
    assert tenant(network_cidr="10.42.3.7").network_cidr == "10.42.3.7/32"


def test_exports_reject_shared_nested_or_overlapping_storage():
    other = dict(pkey=0x0099, vlan_id=300, vxlan_vni=30000)
    with pytest.raises(ValueError, match="export_path '/exports/tenants/ml-research' is used by both"):
        r.render_nfs_exports(
            [ML, tenant("other", export_path=ML.export_path, network_cidr="10.9.0.0/24", **other)]
        )
    nested = tenant("other", export_path=ML.export_path + "/other", network_cidr="10.9.0.0/24", **other)
    with pytest.raises(ValueError, match="lies inside"):
        r.render_nfs_exports([ML, nested])
    sibling = tenant("ml-research-2", export_path=ML.export_path + "-2", network_cidr="10.9.0.0/24", **other)
    assert r.render_nfs_exports([ML, sibling]).count("\n") == 2  # a shared prefix is not nesting
    with pytest.raises(ValueError, match="overlaps"):
        r.render_nfs_exports([ML, tenant("other", network_cidr="10.42.0.0/16", **other)])


# --- TenantSpec validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"slug": "ML"}, "lower-case"),
        ({"slug": "-ml"}, "start with a letter"),
        ({"slug": "ml.research"}, "single hyphens"),
        ({"slug": "a" * 64}, "at most 30"),
        ({"slug": "ml--research"}, "no '--'"),
        ({"slug": "kube-system"}, "reserved"),
        ({"slug": "default"}, "reserved"),
        ({"name": " "}, "name"),
        ({"guaranteed_gpus": -1}, "guaranteed_gpus"),
        ({"limit_gpus": 8}, "below guaranteed_gpus"),
        ({"vlan_id": 0}, "vlan_id"),
        ({"vlan_id": 4095}, "vlan_id"),
        ({"vxlan_vni": 0}, "vxlan_vni"),
        ({"vxlan_vni": 2**24}, "vxlan_vni"),
        ({"storage_quota_gib": 0}, "storage_quota_gib"),
        ({"export_path": "exports/ml"}, "export_path"),
        ({"export_path": "/exports/my data"}, "export_path"),
        ({"export_path": "/exports/ml/"}, "export_path"),
        ({"export_path": "/exports/../etc"}, "export_path"),
        ({"export_path": "/exports/ml(rw)"}, "export_path"),
    ],
)
def test_tenant_spec_rejects_invalid_values(overrides, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        tenant(**overrides)


def test_validate_tenants_checks_every_cross_department_invariant():
    assert r.validate_tenants(ALL_TENANTS) == ALL_TENANTS
    with pytest.raises(ValueError, match="vlan_id 100"):
        r.validate_tenants([ML, tenant("other", pkey=0x0099, vxlan_vni=30000, network_cidr="10.9.0.0/24")])
    with pytest.raises(ValueError, match="vxlan_vni 10100"):
        r.validate_tenants([ML, tenant("other", pkey=0x0099, vlan_id=300, network_cidr="10.9.0.0/24")])
