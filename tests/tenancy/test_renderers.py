"""Tenant renderers against the real consumers' formats: OpenSM partitions.conf and NFS exports, and the
tenant model they read (TenantSpec). The same departments' Kubernetes objects are tested in
tests/integrations/kubernetes/test_tenants.py. No Django: run with `-p no:django`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest

from tenancy import renderers as r
from tenancy.renderers import TenantSpec

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
