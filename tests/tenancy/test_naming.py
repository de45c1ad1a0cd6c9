"""Identifiers derived from tenant slugs are valid for their consumers and distinct by construction
(tenancy.naming).

Random departments and projects (slugs from a tiny alphabet so that prefixes, `a`/`a-b` pairs and equal
project slugs in different departments are frequent, plus maximum lengths and reserved words) are rendered
with the real renderers: the Kubernetes objects (integrations.kubernetes.tenants through
integrations.kubernetes.render, read back from their YAML), the Slurm account tree, QOS and dedicated
partitions (integrations.slurm.render), OpenSM partitions.conf and the NFS exports. Every name must be valid
where it goes and owned by one tenant.
The database paths (models, API, migration) are in test_naming_save.py.
"""

from __future__ import annotations

import re
import string
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from integrations.kubernetes.render import InventoryState, desired_objects
from integrations.kubernetes.tenants import to_yaml
from integrations.kubernetes.validate import validate
from integrations.slurm.render import (
    ServiceTier,
    render_account_script,
    render_partition_lines,
    sacctmgr_qos_commands,
)
from integrations.state import SHARED_TIER, department_qos, partition_tier, slurm_accounts
from tenancy import naming
from tenancy.renderers import (
    ProjectSpec,
    TenantSpec,
    render_nfs_exports,
    render_opensm_partitions,
)

NFS = "nfs.storage.example.com"
EXPORT_ROOT = "/exports/tenants"
LOWER, DIGITS = string.ascii_lowercase, string.digits
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SLURM_NAME = re.compile(r"[a-z][a-z0-9-]*")  # what Slurm keeps as given (it lower-cases accounts and QOS)
KUBERNETES_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


# --- strategies -------------------------------------------------------------------------------------------


def _slug(letters: str, alnum: str) -> st.SearchStrategy[str]:
    """A valid slug by construction: a letter, then (optional hyphen, letter or digit) pairs, cut at 30."""
    parts = st.lists(st.tuples(st.booleans(), st.sampled_from(alnum)), max_size=40)
    return st.builds(
        lambda first, rest: (first + "".join(("-" if hyphen else "") + c for hyphen, c in rest))[
            : naming.SLUG_MAX
        ].rstrip("-"),
        st.sampled_from(letters),
        parts,
    )


ADVERSARIAL = [
    "a", "b", "a-b", "b-c", "a-b-c", "ab", "a1", "ab-c", "a-bc",
    "a" * 30, "b" * 30, "a-" * 14 + "ab", "ab" + "-a" * 14,
    "default", "kube", "root", "normal", "gpu", "all", "none", "rackplane",  # fine as project slugs
]  # fmt: skip
ANY_SLUG = st.one_of(
    _slug("ab", "ab1"),  # tiny alphabet: prefixes and a/a-b pairs everywhere
    _slug(LOWER, LOWER + DIGITS),
    st.sampled_from(ADVERSARIAL).filter(lambda s: naming.is_slug(s, department=False)),
)
DEPARTMENT_SLUG = ANY_SLUG.filter(naming.is_slug)
LAYOUTS = st.dictionaries(
    DEPARTMENT_SLUG, st.lists(ANY_SLUG, unique=True, max_size=4), min_size=1, max_size=6
)


def tenants_of(layout: dict[str, list[str]]) -> list[TenantSpec]:
    """TenantSpecs for {department slug: [project slugs]}, with distinct isolation values."""
    return [
        TenantSpec(
            slug=department,
            name=f"Department {department}",
            guaranteed_gpus=len(projects),
            limit_gpus=None,
            vlan_id=100 + i,
            vxlan_vni=10_000 + i,
            pkey=0x0100 + i,
            port_guids=(),
            network_cidr=f"10.64.{i}.0/24",
            export_path=naming.export_path(EXPORT_ROOT, department),
            storage_quota_gib=1,
            projects=tuple(ProjectSpec(p, f"Project {p}", 1) for p in projects),
        )
        for i, (department, projects) in enumerate(sorted(layout.items()))
    ]


def host(i: int) -> str:
    return f"gb-r{i // 18 + 1:02d}-t{i % 18 + 1:02d}"


def rendered_identifiers(tenants: list[TenantSpec]) -> dict[str, list[str]]:
    """Every tenant-derived name, read back from what the real renderers write."""
    objects = list(yaml.safe_load_all(to_yaml(desired_objects(InventoryState(), tenants, nfs_server=NFS))))
    for obj in objects:
        validate(obj)  # the Kubernetes (and Kueue) schemas: names, namespaces, labels
    names = {kind: [] for kind in ("Namespace", "ClusterQueue", "Cohort", "PersistentVolume")}
    for obj in objects:
        if obj["kind"] in names:
            names[obj["kind"]].append(obj["metadata"]["name"])
    state = SimpleNamespace(tenants=tenants, slurm=SimpleNamespace(nodes=()))
    script = render_account_script(slurm_accounts(state))
    accounts = re.findall(r"^sacctmgr -i add account (\S+) parent=\S+$", script, re.M)
    qos = [
        args[3]
        for t in tenants
        for q in department_qos(t.slug, 8)
        for args in sacctmgr_qos_commands(q)
        if args[:3] == ["-i", "add", "qos"]
    ]
    tiers = [  # each department's dedicated NVLink partitions, as integrations.state serves them
        ServiceTier(
            partition_tier("", t.slug),
            (host(i),),
            allow_qos=tuple(q.name for q in department_qos(t.slug, 8)),
        )
        for i, t in enumerate(tenants)
    ]
    lines = render_partition_lines(tiers, known_nodes=[host(i) for i in range(len(tenants))])
    partitions = [re.match(r"PartitionName=(\S+) ", line).group(1) for line in lines]
    opensm = re.findall(r"^(\w+)=0x[0-9a-f]{4}, ipoib", render_opensm_partitions(tenants), re.M)
    exports = [line.split(" ", 1)[0] for line in render_nfs_exports(tenants).splitlines()]
    return {
        "namespace": names["Namespace"],
        "cluster_queue": names["ClusterQueue"],
        "cohort": names["Cohort"],
        "persistent_volume": names["PersistentVolume"],
        "slurm_account": accounts,
        "slurm_qos": qos,
        "slurm_partition": partitions,
        "opensm_partition": opensm[1:],  # the first is Default
        "export": exports,
    }


def assert_valid_and_distinct(layout: dict[str, list[str]]) -> None:
    tenants = tenants_of(layout)
    ids = rendered_identifiers(tenants)
    owners = {(d, None) for d in layout} | {(d, p) for d, projects in layout.items() for p in projects}
    for kind, names in ids.items():
        assert len(set(names)) == len(names), f"two tenants share a {kind}: {sorted(names)}"
    # Namespaces, ClusterQueues and Slurm accounts: one per department and project, each splitting back
    # into the one tenant it was made for.
    for kind in ("namespace", "cluster_queue", "slurm_account"):
        assert {naming.split(name) for name in ids[kind]} == owners, kind
    for name in ids["namespace"]:
        assert len(name) <= 63 and DNS1123_LABEL.fullmatch(name), name
        assert name not in KUBERNETES_NAMESPACES and not name.startswith("kube-"), name
        assert not name[0].isdigit(), name  # a DNS-1035 label too, and never a number to YAML
    for kind in ("slurm_account", "slurm_qos", "slurm_partition"):
        for name in ids[kind]:
            assert SLURM_NAME.fullmatch(name) and name == name.lower(), (kind, name)
            assert name not in ("root", "normal", "all", "none", "default"), (kind, name)
    assert SHARED_TIER not in ids["slurm_partition"]
    assert set(ids["slurm_qos"]) == set(layout) | {f"{d}--borrowed" for d in layout}
    for name in ids["opensm_partition"]:
        assert len(name) <= naming.OPENSM_NAME_MAX and re.fullmatch(r"[a-z][a-z0-9_]*", name), name
    assert sorted(ids["export"]) == sorted(f"{EXPORT_ROOT}/{d}" for d in layout)
    assert sorted(ids["persistent_volume"]) == sorted(f"rackplane-{d}-data" for d in layout)


# --- the two reported collisions (fail on the old `<department>-<project>` derivation) -------------------


def test_a_department_and_another_departments_project_get_different_namespaces():
    """Department `a-b`, and department `a`'s project `b`: one namespace `a-b` before, which Kubernetes
    rendering refused ("rendered twice"), breaking every push."""
    assert naming.project_namespace("a", "b") != naming.department_namespace("a-b")
    assert_valid_and_distinct({"a-b": [], "a": ["b"]})


def test_two_projects_of_two_departments_get_different_namespaces_and_accounts():
    """Department `a`'s project `b-c` and department `a-b`'s project `c`: both `a-b-c` before."""
    assert naming.project_namespace("a", "b-c") != naming.project_namespace("a-b", "c")
    assert_valid_and_distinct({"a": ["b-c"], "a-b": ["c"]})


def test_the_longest_names_still_fit_their_consumers():
    longest = "a" * naming.SLUG_MAX
    assert len(naming.project_namespace(longest, longest)) == 62
    assert_valid_and_distinct({longest: [longest, "b" * 30], "b" * 30: [longest]})


# --- the property ------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=60, deadline=None)
@given(LAYOUTS)
def test_every_rendered_identifier_is_valid_and_owned_by_one_tenant(layout):
    assert_valid_and_distinct(layout)


# --- what is a slug ----------------------------------------------------------------------------------------


def oracle(text: str) -> bool:
    """The rule, written out independently of tenancy.naming's regular expression."""
    return (
        1 <= len(text) <= 30
        and text[0] in LOWER
        and text[-1] in LOWER + DIGITS
        and set(text) <= set(LOWER + DIGITS + "-")
        and "--" not in text
    )


TEXT = st.one_of(
    st.text(alphabet=st.sampled_from("ab1-_. A\n\tZé\u202e-"), max_size=34),
    st.text(max_size=34),
    st.sampled_from(["Research", "a--b", "1e3", "-a", "a-", "a" * 31, "kube-system", "default", "kube"]),
    ANY_SLUG,
)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_a_slug_is_exactly_what_the_rule_says(text):
    reserved = text in naming.RESERVED_SLUGS or text.startswith("kube-")
    assert naming.is_slug(text, department=False) == oracle(text)
    assert naming.is_slug(text) == (oracle(text) and not reserved)
    if not naming.is_slug(text):
        with pytest.raises(ValueError, match="department slug"):
            naming.department_namespace(text)


@pytest.mark.parametrize(
    "slug, words",
    [
        ("Research", "lower-case"),
        ("a--b", "no '--'"),
        ("1e3", "start with a letter"),
        ("-a", "start with a letter"),
        ("a-", "end with a letter or a digit"),
        ("a" * 31, "at most 30"),
        ("a_b", "single hyphens"),
        ("kube-system", "reserved"),
        ("kube", "reserved"),
        ("default", "reserved"),
        ("gpu", "reserved"),
        ("all", "reserved"),
    ],
)
def test_each_refusal_says_why(slug, words):
    assert words in naming.slug_error(slug)


def test_the_shared_slurm_partition_is_reserved():
    assert SHARED_TIER == naming.SHARED_PARTITION and not naming.is_slug(SHARED_TIER)


def test_a_job_runs_where_its_project_namespace_is():
    from integrations.jobs import DispatchRequest

    request = DispatchRequest(1, "x", "a", "train", ("gb-r01-t01",), 4, 60, {}, project="b")
    assert request.home == "a--b" == naming.project_account("a", "b")
    assert DispatchRequest(1, "x", "a-b", "train", ("gb-r01-t01",), 4, 60, {}).home == "a-b"
