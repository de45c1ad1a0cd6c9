"""A Slurm partition has one owner: everyone or one department (tenancy.naming.slurm_partition).

A service tier (free text in the partition wizard) names a Slurm partition, and so does a department's slug
(its dedicated NVLink partitions). A tier `research` and a department `research` used to merge into one
Slurm partition, open only to research's QOS (the shared trays locked away from everyone else), and a tier
given to two departments' dedicated partitions opened each one's trays to the other. Now a tier is `gpu` or
`gpu_<name>` (no slug holds `_`), checked at save, and a dedicated partition is always served by its
department's Slurm partition: random tiers and departments, rendered by the real integrations.state and Slurm
renderer, never put two owners' trays in one Slurm partition.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import hostlist
import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from integrations import kept_rows
from integrations import state as configstate
from integrations.slurm.render import render_partition_lines
from inventory.models import NVLinkPartition
from tenancy import naming
from tenancy.services import dedicate_partition
from tests.factories import make_department
from tests.tenancy.test_naming import DEPARTMENT_SLUG

WORDS = ["research", "vision", "a", "a-b", "gpu", "gpu-a", "gpu_a", "gpu_research", "inference"]
DEPARTMENTS = st.lists(st.one_of(st.sampled_from(WORDS).filter(naming.is_slug), DEPARTMENT_SLUG), unique=True)
TIERS = st.one_of(
    st.sampled_from(
        ["", "gpu", "GPU", "gpu_", "gpu_a", "gpu_a-b", "gpu__a", "a_b", "Research", "gpu_research"]
    ),
    st.sampled_from(WORDS),
    DEPARTMENT_SLUG,  # every department slug is tried as a tier
    st.text(alphabet="abgpu_-1 ", max_size=12),
)


def accepted_at_save(tier: str) -> bool:
    """What the model (admin, wizard, API through full_clean) lets through as a service tier."""
    try:
        NVLinkPartition._meta.get_field("service_tier").run_validators(tier)
    except ValidationError:
        return False
    return True


BALANCED = {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}


def rendered_partitions(
    departments: list[str], partitions: list[tuple[int | None, str]], mig: frozenset[int] = frozenset()
):
    """The PartitionName lines integrations.state makes for one tray per NVLink partition (the trays at
    the indexes in `mig` given all-balanced): {Slurm partition: (hostnames, AllowQos)}, and each tray's owner
    (a department slug, None: shared)."""
    rows = kept_rows._Rows(
        racks=[kept_rows._RackRow(1, "gb-r01", None)],
        partitions=[
            kept_rows._PartitionRow(i + 1, 1, f"p{i + 1}", i + 1, owner, tier)
            for i, (owner, tier) in enumerate(partitions)
        ],
        trays=[
            kept_rows._TrayRow(
                i + 1, 1, i + 1, f"n{i + 1:02d}", i + 1, [], *(("all-balanced", BALANCED) if i in mig else ())
            )
            for i in range(len(partitions))
        ],
        departments=[SimpleNamespace(pk=pk, slug=slug) for pk, slug in enumerate(departments)],
        running=set(),
        tenancy=None,
    )
    owner_of_host = {
        f"n{i + 1:02d}": (departments[owner] if owner is not None else None)
        for i, (owner, _) in enumerate(partitions)
    }
    lines = render_partition_lines(configstate._service_tiers(rows))
    result = {}
    for line in lines:
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        allow = tuple(fields["AllowQos"].split(",")) if "AllowQos" in fields else ()
        result[fields["PartitionName"]] = (hostlist.expand_hostlist(fields["Nodes"]), allow)
        assert fields["OverSubscribe"] == ("NO" if fields["PartitionName"].endswith("--mig") else "EXCLUSIVE")
    return result, owner_of_host


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=400, deadline=None)
@given(
    departments=DEPARTMENTS.filter(bool),
    layout=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 20)), TIERS), min_size=1, max_size=12),
    mig=st.frozensets(st.integers(0, 11)),
)
def test_random_tiers_and_departments_never_share_a_slurm_partition(departments, layout, mig):
    partitions = [
        (owner % len(departments) if owner is not None else None, tier)
        for owner, tier in layout
        if accepted_at_save(tier)  # a refused tier is never saved (model, constraint, wizard)
    ]
    if not partitions:
        return
    slurm, owner_of_host = rendered_partitions(departments, partitions, mig)
    mig_hosts = {f"n{i + 1:02d}" for i in mig}
    for name, (hosts, allow_qos) in slurm.items():
        owners = {owner_of_host[h] for h in hosts}
        assert len(owners) == 1, f"Slurm partition {name} holds trays of {owners}"
        (owner,) = owners
        # Trays in MIG mode are in a MIG partition (`<partition>--mig`) and only there.
        whole, _, suffix = name.partition("--")
        assert (suffix == "mig") == bool(set(hosts) & mig_hosts) and (suffix != "mig") == bool(
            set(hosts) - mig_hosts
        ), (name, hosts)
        if owner is None:  # shared: open to everyone, never a department's name
            assert allow_qos == () and not naming.is_slug(whole), (name, allow_qos)
        else:  # a department's: its name (or its MIG partition's), its two QOS only
            qos = (naming.department_qos(owner), naming.department_borrowed_qos(owner))
            assert whole == naming.dedicated_partition(owner) and allow_qos == qos


@pytest.mark.parametrize("slug", ["research", "a", "inference", "a-b", "x" * 30])
def test_no_department_slug_is_a_service_tier(slug):
    assert naming.is_slug(slug)
    assert not accepted_at_save(slug)
    assert naming.slurm_partition(slug, slug) == slug  # ... but it is that department's partition


@pytest.mark.parametrize("tier", ["gpu", "gpu_interactive", "gpu_a-100", "gpu_" + "x" * 30])
def test_a_service_tier_is_never_a_department_slug(tier):
    assert accepted_at_save(tier)
    assert not naming.is_slug(tier)
    assert naming.slurm_partition(tier, None) == tier


@pytest.mark.parametrize("tier", ["research", "Interactive", "gpu_", "gpu__a", "gpu_a_b", "gpu_" + "x" * 31])
def test_the_refusal_names_the_field_and_what_to_type(tier):
    with pytest.raises(ValidationError) as refused:
        NVLinkPartition._meta.get_field("service_tier").run_validators(tier)
    assert "gpu_<name>" in " ".join(refused.value.messages)
    with pytest.raises(ValueError, match="service tier"):
        naming.slurm_partition(tier, None)


# --- through the database and the real build_state ----------------------------------------------------------


@pytest.fixture
def research(demo_inventory):
    return make_department("Research", guaranteed_gpus=36)


@pytest.mark.django_db
def test_a_tier_named_after_a_department_is_refused_at_save(research):
    partition = NVLinkPartition.objects.get(rack__name="gb-r02", name="p1")
    partition.service_tier = "research"
    with pytest.raises(ValidationError) as refused:
        partition.full_clean()
    assert "gpu_<name>" in " ".join(refused.value.message_dict["service_tier"])
    with (
        pytest.raises(IntegrityError, match="inventory_nvlinkpartition_service_tier_form"),
        transaction.atomic(),
    ):
        NVLinkPartition.objects.filter(pk=partition.pk).update(service_tier="research")


@pytest.mark.django_db
def test_a_dedicated_partition_is_served_by_its_department_whatever_its_tier(research):
    """One tier on a shared and a dedicated partition: the dedicated trays go to the department's Slurm
    partition, the tier keeps only shared trays and stays open to everyone."""
    NVLinkPartition.objects.filter(rack__name="gb-r02").update(service_tier="gpu_fast")
    dedicate_partition(research, NVLinkPartition.objects.get(rack__name="gb-r02", name="p2"))
    conf = configstate.render_files(configstate.build_state())["slurm/rackplane.conf"]
    assert (
        "PartitionName=gpu_fast Nodes=gb-r02-t[01-09] Default=NO MaxTime=INFINITE PriorityTier=1 "
        "OverSubscribe=EXCLUSIVE State=UP"
    ) in conf
    assert (
        "PartitionName=research Nodes=gb-r02-t[10-18] Default=NO AllowQos=research,research--borrowed "
        in conf
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_wizard_refuses_a_tier_that_names_a_department_or_a_dedicated_partitions_tier(
    research, admin_user
):
    staff = APIClient()
    staff.force_authenticate(admin_user)

    def findings(*partitions):
        body = {"rack": "gb-r01", "layout": {"partitions": list(partitions)}, "dry_run": True}
        response = staff.post("/api/v1/partition-plans/", body, format="json")
        assert response.status_code == 200, response.content
        return " ".join(f["message"] for f in response.json()["findings"] if f["level"] == "error")

    shared = {"name": "shared", "slots": list(range(10, 19))}
    errors = findings({"name": "train", "slots": "1-9", "slurm_partition": "research"}, shared)
    assert "'research' is not a usable Slurm partition name" in errors and "gpu_<name>" in errors
    errors = findings(
        {"name": "train", "slots": "1-9", "department": "research", "slurm_partition": "gpu_fast"}, shared
    )
    assert "served by the Slurm partition research" in errors
    assert not findings({"name": "train", "slots": "1-9", "slurm_partition": "gpu_fast"}, shared)
    assert not findings(
        {"name": "train", "slots": "1-9", "department": "research", "slurm_partition": "research"}, shared
    )
