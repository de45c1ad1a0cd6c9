"""Kubernetes renderers and validation (pure: no Django, no cluster).

Every rendered object is validated against the real schemas (validate.py: kubernetes-validate for core
kinds, the packaged Kueue / ComputeDomain CRDs with their CEL rules for custom resources), and the
validation is shown to bite.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from integrations.kubernetes import render as r
from integrations.kubernetes import validate as v
from integrations.kubernetes.tenants import to_yaml
from tenancy.renderers import TenantSpec

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED_CRDS = REPO_ROOT.parent / "shared" / "reference" / "crds"

UUID_1 = "dc6e40c4-d722-4357-9ba6-5291dd461278"
UUID_2 = "7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91"


def inventory(dedicated: str | None = "inference") -> r.InventoryState:
    """gb-r01: one default partition (18 trays); gb-r02 carved 2x9, p2 dedicated to `dedicated`."""
    return r.InventoryState(
        racks=[r.RackSpec("gb-r01", UUID_1), r.RackSpec("gb-r02", UUID_2)],
        partitions=[
            r.PartitionSpec("gb-r01", "default", 32766, service_tier="shared"),
            r.PartitionSpec("gb-r02", "p1", 1, service_tier="shared"),
            r.PartitionSpec(
                "gb-r02", "p2", 2, department=dedicated, service_tier="dedicated" if dedicated else "shared"
            ),
        ],
        nodes=[r.NodeSpec(f"gb-r01-t{slot:02d}", "gb-r01", "default") for slot in range(1, 19)]
        + [r.NodeSpec(f"gb-r02-t{slot:02d}", "gb-r02", "p1" if slot <= 9 else "p2") for slot in range(1, 19)],
    )


def tenant(slug: str = "inference", **overrides: Any) -> TenantSpec:
    fields: dict[str, Any] = {
        "slug": slug,
        "name": slug.title(),
        "guaranteed_gpus": 36,
        "limit_gpus": 72,
        "vlan_id": 100,
        "vxlan_vni": 10100,
        "pkey": 0x0010,
        "port_guids": (),
        "network_cidr": "10.42.3.0/24",
        "export_path": f"/exports/tenants/{slug}",
        "storage_quota_gib": 2048,
    }
    fields.update(overrides)
    return TenantSpec(**fields)


INFERENCE = tenant()
NFS = "nfs01.storage.example.com"


# --- Topograph's label hashing ------------------------------------------------------------------------


def test_fnv1a_64_matches_the_reference_vectors():
    # FNV-1a 64-bit test vectors (Fowler/Noll/Vo reference suite), as Go's hash/fnv New64a computes them.
    assert r.fnv1a_64(b"") == 0xCBF29CE484222325
    assert r.fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert r.fnv1a_64(b"foobar") == 0x85944171F73967E8


def test_topograph_label_value_keeps_63_bytes_and_hashes_longer():
    assert r.topograph_label_value("a" * 63) == "a" * 63
    long = "a" * 64
    assert r.topograph_label_value(long) == f"x{r.fnv1a_64(long.encode()):x}"
    # fmt.Sprintf("x%x", uint64) does not zero-pad: a hash below 2**60 gives fewer than 16 digits.
    short_hash = "r" * 60 + "-0400"
    assert r.fnv1a_64(short_hash.encode()) == 0x7A8DDF4D58950E4
    assert r.topograph_label_value(short_hash) == "x7a8ddf4d58950e4"


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_long_partition_names_are_hashed_like_topograph():
    rack_name, part_name = "rack-" + "a" * 40, "partition-" + "b" * 30
    state = r.InventoryState(
        racks=[r.RackSpec(rack_name, UUID_1)],
        partitions=[r.PartitionSpec(rack_name, part_name, 3)],
        nodes=[r.NodeSpec("n1", rack_name, part_name)],
    )
    value = r.node_labels(state)["n1"][r.PARTITION_LABEL]
    assert value == r.topograph_label_value(f"{rack_name}.{part_name}")
    assert re.fullmatch(r"x[0-9a-f]{1,16}", value)
    (flavor,) = [f for f in r.resource_flavors(state) if f["metadata"]["name"] != "nvl72"]
    assert flavor["metadata"]["name"] == value and flavor["spec"]["nodeLabels"] == {r.PARTITION_LABEL: value}
    for obj in [*r.node_objects(state), flavor]:
        v.validate(obj)


# --- exact output for a small inventory ---------------------------------------------------------------


def test_node_labels_exact():
    labels = r.node_labels(inventory())
    default = {
        "accelerator.topograph.run/domain": UUID_1,
        "accelerator.topograph.run/sub-domain": f"{UUID_1}.32766",
        "rackplane.io/nvlink-partition": "gb-r01.default",
        "rackplane.io/pool": "nvl72",
        "rackplane.io/rack": "gb-r01",
        "rackplane.io/service-tier": "shared",
    }
    p1 = {
        "accelerator.topograph.run/domain": UUID_2,
        "accelerator.topograph.run/sub-domain": f"{UUID_2}.1",
        "rackplane.io/nvlink-partition": "gb-r02.p1",
        "rackplane.io/pool": "nvl72",
        "rackplane.io/rack": "gb-r02",
        "rackplane.io/service-tier": "shared",
    }
    p2 = {
        "accelerator.topograph.run/domain": UUID_2,
        "accelerator.topograph.run/sub-domain": f"{UUID_2}.2",
        "rackplane.io/department": "inference",
        "rackplane.io/nvlink-partition": "gb-r02.p2",
        "rackplane.io/pool": "nvl72",
        "rackplane.io/rack": "gb-r02",
        "rackplane.io/service-tier": "dedicated",
    }
    expected = {f"gb-r01-t{s:02d}": default for s in range(1, 19)}
    expected |= {f"gb-r02-t{s:02d}": p1 for s in range(1, 10)}
    expected |= {f"gb-r02-t{s:02d}": p2 for s in range(10, 19)}
    assert labels == expected
    assert set().union(*labels.values()) <= set(r.NODE_LABEL_KEYS)
    assert r.node_objects(inventory())[0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gb-r01-t01", "labels": default},
    }


def test_department_label_is_absent_without_a_department():
    labels = r.node_labels(inventory(dedicated=None))["gb-r02-t10"]
    assert "rackplane.io/department" not in labels
    assert labels["rackplane.io/service-tier"] == "shared"


def test_topology_and_flavors_exact():
    assert r.topology() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "nvlink", "labels": {"app.kubernetes.io/managed-by": "rackplane"}},
        "spec": {
            "levels": [
                {"nodeLabel": "accelerator.topograph.run/domain"},
                {"nodeLabel": "accelerator.topograph.run/sub-domain"},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        },
    }
    flavors = r.resource_flavors(inventory())
    assert flavors[0] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "nvl72", "labels": {"app.kubernetes.io/managed-by": "rackplane"}},
        "spec": {"nodeLabels": {"rackplane.io/pool": "nvl72"}, "topologyName": "nvlink"},
    }
    assert flavors[1:] == [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {
                "name": name,
                "labels": {
                    "app.kubernetes.io/managed-by": "rackplane",
                    "rackplane.io/rack": rack,
                    "rackplane.io/nvlink-partition": name,
                },
            },
            "spec": {"nodeLabels": {"rackplane.io/nvlink-partition": name}, "topologyName": "nvlink"},
        }
        for rack, name in [("gb-r01", "gb-r01.default"), ("gb-r02", "gb-r02.p1"), ("gb-r02", "gb-r02.p2")]
    ]


def test_desired_objects_in_apply_order():
    objects = r.desired_objects(
        inventory(), [INFERENCE, tenant("vision", pkey=0x11, vlan_id=101)], nfs_server=NFS
    )
    refs = [r.object_ref(o) for o in objects]
    assert refs == [
        "Namespace inference",
        "Namespace vision",
        *[f"Node gb-r01-t{s:02d}" for s in range(1, 19)],
        *[f"Node gb-r02-t{s:02d}" for s in range(1, 19)],
        "Topology nvlink",
        "ResourceFlavor gb-r01.default",
        "ResourceFlavor gb-r02.p1",
        "ResourceFlavor gb-r02.p2",
        "ResourceFlavor nvl72",
        "ClusterQueue inference",
        "ClusterQueue vision",
        "LocalQueue inference/default",
        "LocalQueue vision/default",
        "ResourceQuota inference/rackplane-gpu-quota",
        "ResourceQuota vision/rackplane-gpu-quota",
        "NetworkPolicy inference/rackplane-department-isolation",
        "NetworkPolicy vision/rackplane-department-isolation",
        "PersistentVolume rackplane-inference-data",
        "PersistentVolume rackplane-vision-data",
        "PersistentVolumeClaim inference/department-data",
        "PersistentVolumeClaim vision/department-data",
    ]
    # Every ClusterQueue's flavor exists; every flavor's topology exists.
    flavors = {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"}
    for cq in (o for o in objects if o["kind"] == "ClusterQueue"):
        assert {f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]} <= flavors
    assert {o["spec"]["topologyName"] for o in objects if o["kind"] == "ResourceFlavor"} == {"nvlink"}
    # Deterministic whatever the input order.
    shuffled = r.InventoryState(
        racks=inventory().racks[::-1], partitions=inventory().partitions[::-1], nodes=inventory().nodes[::-1]
    )
    again = r.desired_objects(shuffled, [tenant("vision", pkey=0x11, vlan_id=101), INFERENCE], nfs_server=NFS)
    assert again == objects


def _desired() -> list[dict[str, Any]]:
    return r.desired_objects(inventory(), [INFERENCE], nfs_server=NFS)


@pytest.mark.parametrize("obj", _desired(), ids=r.object_ref)
def test_every_desired_object_validates(obj):
    v.validate(obj)


def test_desired_objects_round_trip_through_yaml():
    objects = _desired()
    docs = list(yaml.safe_load_all(to_yaml(objects)))
    assert docs == objects
    assert v.validate_all(docs) == []


def test_compute_domain_validates():
    cd = r.compute_domain("train-42", "inference", "train-42-channel")
    assert cd["spec"] == {
        "numNodes": 0,
        "channel": {"resourceClaimTemplate": {"name": "train-42-channel"}, "allocationMode": "Single"},
    }
    v.validate(cd)
    v.validate(r.compute_domain("train-43", "inference", "c", allocation_mode="All"))
    with pytest.raises(ValueError, match="allocation_mode"):
        r.compute_domain("x", "inference", "c", allocation_mode="Many")


# --- what the inventory cannot express ------------------------------------------------------------------


def test_rack_without_an_nvlink_domain_gets_no_topograph_labels_and_no_flavor():
    for unknown in (None, "00000000-0000-0000-0000-000000000000"):
        state = r.InventoryState(
            racks=[r.RackSpec("gb-r03", unknown)],
            partitions=[r.PartitionSpec("gb-r03", "default", 32766)],
            nodes=[r.NodeSpec("gb-r03-t01", "gb-r03", "default"), r.NodeSpec("gb-r03-t02", "gb-r03")],
        )
        assert r.node_labels(state) == {
            "gb-r03-t01": {"rackplane.io/nvlink-partition": "gb-r03.default", "rackplane.io/rack": "gb-r03"},
            "gb-r03-t02": {"rackplane.io/rack": "gb-r03"},
        }
        assert [f["metadata"]["name"] for f in r.resource_flavors(state)] == ["nvl72"]


def test_a_node_without_a_partition_has_domain_but_no_sub_domain_or_pool():
    state = r.InventoryState(racks=[r.RackSpec("gb-r01", UUID_1)], nodes=[r.NodeSpec("gb-r01-t01", "gb-r01")])
    assert r.node_labels(state) == {
        "gb-r01-t01": {"accelerator.topograph.run/domain": UUID_1, "rackplane.io/rack": "gb-r01"}
    }


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: r.RackSpec("gb r01", UUID_1), "rack name 'gb r01' cannot be a Kubernetes label value"),
        (lambda: r.RackSpec("gb-r01", "not-a-uuid"), "cluster UUID"),
        (lambda: r.PartitionSpec("gb-r01", "p1", 0), "clique ID 0"),
        (lambda: r.PartitionSpec("gb-r01", "p1", 1, department="ML"), "department 'ML'"),
        (lambda: r.PartitionSpec("gb-r01", "p1", 1, service_tier="gold tier"), "service tier"),
        (lambda: r.NodeSpec("GB_R01_T01", "gb-r01"), "node name"),
        (
            lambda: r.InventoryState(racks=[r.RackSpec("a", UUID_1), r.RackSpec("b", UUID_1)]),
            "same cluster UUID",
        ),
        (lambda: r.InventoryState(partitions=[r.PartitionSpec("gb-r09", "p1", 1)]), "rack gb-r09 is not"),
        (
            lambda: r.InventoryState(
                racks=[r.RackSpec("a", UUID_1), r.RackSpec("b", UUID_2)],
                partitions=[r.PartitionSpec("a", "p1", 1)],
                nodes=[r.NodeSpec("n1", "b", "p1")],
            ),
            "partition p1 is not a partition of rack b",
        ),
        (
            lambda: r.InventoryState(
                racks=[r.RackSpec("a", UUID_1)], nodes=[r.NodeSpec("n1", "a"), r.NodeSpec("n1", "a")]
            ),
            "node n1 is listed twice",
        ),
        (
            lambda: r.InventoryState(
                racks=[r.RackSpec("a", UUID_1)],
                partitions=[r.PartitionSpec("a", "p1", 1), r.PartitionSpec("a", "p2", 1)],
            ),
            "clique ID 1 is used by two partitions",
        ),
        (
            lambda: r.desired_objects(
                r.InventoryState(
                    racks=[r.RackSpec("A", UUID_1), r.RackSpec("a", UUID_2)],
                    partitions=[r.PartitionSpec("A", "p", 1), r.PartitionSpec("a", "p", 1)],
                ),
                [],
                nfs_server=NFS,
            ),
            "ResourceFlavor a.p would be rendered twice",
        ),
        (lambda: r.desired_objects(inventory(), [INFERENCE, INFERENCE], nfs_server=NFS), "rendered twice"),
    ],
)
def test_inventory_that_cannot_be_expressed_is_refused(build, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        build()


# --- validation bites ---------------------------------------------------------------------------------


def _broken(obj: dict[str, Any], path: tuple[str | int, ...], value: Any = None, *, delete: bool = False):
    obj = copy.deepcopy(obj)
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return obj


TOPOLOGY = r.topology()
FLAVOR = r.shared_flavor()
NODE = r.node_objects(inventory())[0]
LEVELS = TOPOLOGY["spec"]["levels"]


@pytest.mark.parametrize(
    "broken, field, reason",
    [
        pytest.param(
            _broken(TOPOLOGY, ("spec", "bogus"), 1),
            "spec",
            "'bogus' was unexpected",
            id="topology-unknown-field",
        ),
        pytest.param(
            _broken(TOPOLOGY, ("spec", "levels"), [LEVELS[2], LEVELS[0]]),
            "spec.levels",
            "the kubernetes.io/hostname label can only be used at the lowest level of topology",
            id="topology-cel-hostname-last",
        ),
        pytest.param(
            _broken(TOPOLOGY, ("spec", "levels"), [LEVELS[0], LEVELS[0], LEVELS[2]]),
            "spec.levels",
            "must be unique",
            id="topology-cel-unique",
        ),
        pytest.param(
            _broken(TOPOLOGY, ("spec", "levels"), []),
            "spec.levels",
            "should be non-empty",
            id="topology-min-items",
        ),
        pytest.param(
            _broken(FLAVOR, ("spec", "nodeLabels"), delete=True),
            "spec",
            "at least one nodeLabel is required when topology is set",
            id="flavor-cel-topology-needs-labels",
        ),
        pytest.param(
            _broken(FLAVOR, ("spec", "topologyName"), "NVLink"),
            "spec.topologyName",
            "does not match",
            id="flavor-pattern",
        ),
        pytest.param(
            _broken(FLAVOR, ("metadata", "namespace"), "x"),
            "metadata.namespace",
            "cluster-scoped",
            id="flavor-namespace",
        ),
        pytest.param(
            _broken(NODE, ("metadata", "labels", "rackplane.io/rack"), "r" * 64),
            "metadata.labels['rackplane.io/rack']",
            "label value",
            id="node-label-value-too-long",
        ),
        pytest.param(
            _broken(NODE, ("metadata", "name"), "GB-R01"),
            "metadata.name",
            "name 'GB-R01'",
            id="node-bad-name",
        ),
        pytest.param(
            _broken(NODE, ("spec",), {"bogus": True}), "spec", "'bogus' was unexpected", id="node-unknown"
        ),
        pytest.param(
            _broken(
                r.desired_objects(inventory(), [INFERENCE], nfs_server=NFS)[-2],  # the PersistentVolume
                ("spec", "capacity", "storage"),
                "2 TiB",
            ),
            "spec.capacity['storage']",
            "'2 TiB' is not a Kubernetes quantity",
            id="pv-bad-quantity",
        ),
        pytest.param(
            _broken(r.compute_domain("cd", "inference", "c"), ("spec", "channel", "allocationMode"), "Many"),
            "spec.channel.allocationMode",
            "is not one of",
            id="computedomain-enum",
        ),
        pytest.param(
            _broken(r.compute_domain("cd", "inference", "c"), ("spec", "channel"), delete=True),
            "spec",
            "'channel' is a required property",
            id="computedomain-required",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Gadget", "metadata": {"name": "x"}},
            "apiVersion",
            "not a Kubernetes 1.34.0 kind",
            id="unknown-kind",
        ),
        pytest.param(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Gadget", "metadata": {"name": "x"}},
            "kind",
            "no CRD of group kueue.x-k8s.io",
            id="unknown-crd-kind",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Node", "metadata": {}}, "metadata.name", "required", id="no-name"
        ),
    ],
)
def test_validation_names_object_and_field(broken, field, reason):
    with pytest.raises(v.ValidationError) as caught:
        v.validate(broken)
    assert caught.value.field == field
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{caught.value.ref}: {field}: ")


def test_validate_all_reports_every_invalid_object():
    objects = [TOPOLOGY, _broken(NODE, ("spec",), {"x": 1}), FLAVOR, _broken(FLAVOR, ("spec", "x"), 1)]
    problems = v.validate_all(objects)
    assert [p.ref for p in problems] == ["Node gb-r01-t01", "ResourceFlavor nvl72"]


@pytest.mark.parametrize(
    "obj",
    [
        NODE,
        _broken(NODE, ("spec",), {"bogus": 1}),
        _broken(NODE, ("metadata", "labelz"), {}),
        r.desired_objects(inventory(), [INFERENCE], nfs_server=NFS)[-1],
        _broken(
            r.desired_objects(inventory(), [INFERENCE], nfs_server=NFS)[-1], ("spec", "accessModes"), "RWX"
        ),
    ],
    ids=["node", "node-unknown-spec", "node-unknown-metadata", "pvc", "pvc-type"],
)
def test_cached_core_validator_agrees_with_kubernetes_validate(obj):
    """validate.py compiles kubernetes-validate's schemas once; it must judge exactly as the package does."""
    try:
        kubernetes_validate.validate(obj, v.KUBERNETES_VERSION, strict=True)
        expected = None
    except kubernetes_validate.ValidationError as exc:
        expected = (list(exc.absolute_path), exc.message)
    error = v._core_error(obj)
    assert (None if error is None else (list(error.absolute_path), error.message)) == expected


# --- the packaged CRDs ----------------------------------------------------------------------------------


def test_packaged_crds_are_byte_identical_to_the_reference():
    if not SHARED_CRDS.is_dir():
        pytest.skip(f"{SHARED_CRDS} is not present on this machine")
    packaged = sorted(p.name for p in v.CRD_DIR.glob("*.yaml"))
    assert packaged == sorted(p.name for p in SHARED_CRDS.glob("*.yaml"))
    for name in packaged:
        assert (v.CRD_DIR / name).read_bytes() == (SHARED_CRDS / name).read_bytes(), name


def test_validation_reads_the_packaged_crds():
    assert Path(r.__file__).parent / "crds" == v.CRD_DIR
    assert set(v.crds()) >= v.REQUIRED_CRD_KINDS


def test_missing_crds_fail_with_a_clear_message(tmp_path):
    with pytest.raises(v.CRDsMissing, match=r"CRDs not found at .*crds.*must ship with"):
        v.load_crds(tmp_path / "crds")
    (tmp_path / "kueue.x-k8s.io_topologies.yaml").write_bytes(
        (v.CRD_DIR / "kueue.x-k8s.io_topologies.yaml").read_bytes()
    )
    with pytest.raises(v.CRDsMissing, match=r"CRDs missing from .*'ClusterQueue'"):
        v.load_crds(tmp_path)
