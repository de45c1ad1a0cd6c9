"""Kueue quotas for MIG slices (issue 30): the ClusterQueues and Cohorts cover every MIG resource the fleet's
layouts offer, in GPU-equivalents (tenants.mig_quota), validated against the packaged CRDs and the rules of
Kueue's own ClusterQueue webhook (which the testbed's Kueue does not run). The real Kueue admitting a slice
job through them: tests/integrations/kubernetes/test_kueue.py. No Django: run with `-p no:django`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from integrations.kubernetes import render as r
from integrations.kubernetes import tenants as t
from integrations.kubernetes.validate import validate
from inventory.mig_layouts import layout
from tenancy.renderers import ProjectSpec
from tests.integrations.kubernetes.test_render import NFS, tenant

BALANCED = layout("all-balanced", {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1})
SEVENS = layout("all-1g.23gb", {"1g.23gb": 7})
# +me has no resource name under the mixed strategy: never covered.
WITH_ME = layout("media", {"1g.23gb+me": 1, "1g.23gb": 6})
UUID = "3f0d2b8a-1c4e-4f6a-9b7d-2e5c8a1f0b31"


def fleet(*layouts) -> r.InventoryState:
    """One rack, one default partition, a tray per layout (None: whole GPUs) after one whole-GPU tray."""
    return r.InventoryState(
        racks=[r.RackSpec("gb-r01", UUID)],
        partitions=[r.PartitionSpec("gb-r01", "default", 32766)],
        nodes=[
            r.NodeSpec(f"gb-r01-t{slot:02d}", "gb-r01", "default", mig_layout=chosen)
            for slot, chosen in enumerate((None, *layouts), start=1)
        ],
    )


def resources(queue: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The quota of each covered resource of a queue's one flavor, by resource name."""
    (group,) = queue["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return {q["name"]: {k: v for k, v in q.items() if k != "name"} for q in flavor["resources"]}


def test_the_offer_counts_every_gpu_of_each_mig_tray_and_leaves_out_what_has_no_resource():
    assert r.mig_offer(fleet()) == {}
    assert r.mig_offer(fleet(BALANCED, SEVENS)) == {"1g.23gb": 8 + 28, "2g.47gb": 4, "3g.93gb": 4}
    assert r.mig_offer(fleet(WITH_ME)) == {"1g.23gb": 24}
    assert r.mig_offer(fleet(layout("all-disabled", {}))) == {}


def test_a_department_queue_covers_each_offered_profile_in_gpu_equivalents():
    # Guarantee 1 GPU, limit 2: 7 one-slice, 3 two-slice and 2 three-slice devices nominal (1 GPU of
    # compute slices each, rounded down), up to 14, 7 and 4 with borrowing, never more than the fleet has.
    department = tenant("vision", guaranteed_gpus=1, limit_gpus=2)
    queue = t.cluster_queue(department, mig=r.mig_offer(fleet(BALANCED)))
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == [
        "nvidia.com/gpu",
        "resource.nvidia.com/imex-channel",
        "nvidia.com/mig-1g.23gb",
        "nvidia.com/mig-2g.47gb",
        "nvidia.com/mig-3g.93gb",
    ]
    assert resources(queue) == {
        "nvidia.com/gpu": {"nominalQuota": "1", "borrowingLimit": "1"},
        "resource.nvidia.com/imex-channel": {"nominalQuota": "1", "borrowingLimit": "1"},
        # the fleet has 8: nominal 7, and 8 - 7 more borrowed
        "nvidia.com/mig-1g.23gb": {"nominalQuota": "7", "borrowingLimit": "1"},
        # 4 in the fleet: 3 (6 compute slices of 7), then 1 more
        "nvidia.com/mig-2g.47gb": {"nominalQuota": "3", "borrowingLimit": "1"},
        "nvidia.com/mig-3g.93gb": {"nominalQuota": "2", "borrowingLimit": "2"},
    }
    validate(queue)
    # No limit: no borrowing bound on any resource; no guarantee: nothing nominal.
    free = resources(t.cluster_queue(tenant("free", guaranteed_gpus=0, limit_gpus=None), mig={"3g.93gb": 8}))
    assert free["nvidia.com/mig-3g.93gb"] == {"nominalQuota": "0"}


def test_without_mig_trays_the_queues_are_as_before():
    department = tenant("vision", guaranteed_gpus=8, limit_gpus=16)

    def queues(state):
        objects = r.desired_objects(state, [department], nfs_server=NFS)
        return [o for o in objects if o["kind"] == "ClusterQueue"]

    assert queues(fleet()) == queues(fleet(layout("all-disabled", {}))) == [t.cluster_queue(department)]
    queue = t.cluster_queue(department)
    assert set(resources(queue)) == {"nvidia.com/gpu", "resource.nvidia.com/imex-channel"}


def webhook_problems(obj: dict[str, Any]) -> list[str]:
    """What Kueue's ClusterQueue/Cohort webhook (pkg/webhooks/clusterqueue_webhook.go, validateResourceGroups
    and validateFlavorQuotas, v0.19.2) refuses: a resource covered by two groups, a flavor in two groups, a
    flavor's resources not named as the covered resources, in their order; a negative quantity."""
    problems = []
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for group in obj["spec"].get("resourceGroups") or []:
        covered = group["coveredResources"]
        problems += [f"resource {n} twice" for n in covered if n in seen_resources]
        seen_resources.update(covered)
        for flavor in group["flavors"]:
            if flavor["name"] in seen_flavors:
                problems.append(f"flavor {flavor['name']} twice")
            seen_flavors.add(flavor["name"])
            if [q["name"] for q in flavor["resources"]] != covered:
                problems.append(f"flavor {flavor['name']}: resources not in the covered order")
            for quota in flavor["resources"]:
                for key in ("nominalQuota", "borrowingLimit"):
                    if key in quota and int(quota[key]) < 0:
                        problems.append(f"{quota['name']} {key} {quota[key]}")
    return problems


PROJECTS = (ProjectSpec("train", "Train", 2, 4, "1"), ProjectSpec("serve", "Serve", 1, None, "2"))


@pytest.mark.slow(reason="hypothesis: a hundred generated guarantees, limits and offers")
@given(
    guaranteed=st.integers(0, 64),
    extra=st.one_of(st.none(), st.integers(0, 64)),
    offer=st.dictionaries(
        st.sampled_from(["1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.23gb+me"]),
        st.integers(0, 2000),
    ),
)
def test_every_rendered_queue_and_cohort_keeps_kueues_rules_and_the_gpu_equivalent_bounds(
    guaranteed, extra, offer
):
    limit = None if extra is None else guaranteed + extra
    department = tenant("vision", guaranteed_gpus=guaranteed, limit_gpus=limit)
    queue = t.cluster_queue(department, mig=offer)
    assert webhook_problems(queue) == []
    for name, quota in resources(queue).items():
        if not name.startswith(t.MIG_RESOURCE_PREFIX):
            continue
        profile = name.removeprefix(t.MIG_RESOURCE_PREFIX)
        g = int(profile.split("g.")[0])
        nominal = int(quota["nominalQuota"])
        # Never more than the fleet has, never more GPU-equivalents than the guarantee...
        assert nominal <= offer[profile] and nominal * g <= 7 * guaranteed
        # ...and as many as both allow: one more slice would pass one of them.
        assert nominal == offer[profile] or (nominal + 1) * g > 7 * guaranteed
        if limit is None:
            assert "borrowingLimit" not in quota
        else:
            most = nominal + int(quota["borrowingLimit"])
            assert most <= offer[profile] and most * g <= 7 * limit
            assert most == offer[profile] or (most + 1) * g > 7 * limit
    assert "nvidia.com/mig-1g.23gb+me" not in resources(queue)


def test_a_department_with_projects_covers_the_slices_in_its_cohort_and_every_queue():
    department = tenant("vision", guaranteed_gpus=4, limit_gpus=8, projects=PROJECTS)
    objects = t.tenant_objects(department, NFS, mig={"1g.23gb": 56, "3g.93gb": 8})
    queues = [o for o in objects if o["kind"] in ("ClusterQueue", "Cohort")]
    assert [o["metadata"]["name"] for o in queues] == ["vision", "vision", "vision--serve", "vision--train"]
    for obj in queues:
        validate(obj)
        assert webhook_problems(obj) == []
    cohort, own, serve, train = (resources(o) for o in queues)
    # The cohort: nothing nominal, borrowing up to limit - guarantee (4 GPUs: 28 one-slice, 9 three-slice
    # capped by the fleet's 8).
    assert cohort["nvidia.com/mig-1g.23gb"] == {"nominalQuota": "0", "borrowingLimit": "28"}
    assert cohort["nvidia.com/mig-3g.93gb"] == {"nominalQuota": "0", "borrowingLimit": "8"}
    # The department's own queue: the 1 GPU its projects leave.
    assert own["nvidia.com/mig-1g.23gb"] == {"nominalQuota": "7"}
    assert train["nvidia.com/mig-1g.23gb"] == {"nominalQuota": "14", "borrowingLimit": "14"}
    assert train["nvidia.com/mig-3g.93gb"] == {"nominalQuota": "4", "borrowingLimit": "4"}
    assert serve["nvidia.com/mig-3g.93gb"] == {"nominalQuota": "2"}


def test_desired_objects_cover_the_fleets_profiles_in_every_department_queue():
    objects = r.desired_objects(
        fleet(BALANCED),
        [tenant("vision", guaranteed_gpus=8, limit_gpus=16), tenant("nlp", guaranteed_gpus=0, limit_gpus=4)],
        nfs_server=NFS,
    )
    queues = {o["metadata"]["name"]: resources(o) for o in objects if o["kind"] == "ClusterQueue"}
    assert queues["vision"]["nvidia.com/mig-2g.47gb"] == {"nominalQuota": "4", "borrowingLimit": "0"}
    assert queues["nlp"]["nvidia.com/mig-1g.23gb"] == {"nominalQuota": "0", "borrowingLimit": "8"}


@pytest.mark.parametrize("bad", ["7g.186gb+me", "1g.23gb+gfx"])
def test_profiles_without_a_resource_name_are_never_covered(bad):
    queue = t.cluster_queue(tenant("vision"), mig={bad: 8})
    assert all(not n.startswith(t.MIG_RESOURCE_PREFIX) for n in resources(queue))
