"""A partition plan pushes its rack's slice (issue 32): the targets that apply parts (the fabric manager, the
Kubernetes nodes) are sent that rack alone once they are known to hold the rest, and the whole state
otherwise; targets of whole files (the directory, Slurm) always get every file."""

from __future__ import annotations

import pytest
from django.utils import timezone

from integrations import pushes
from integrations.contents import payload_of
from integrations.fabric import adapter
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.plans import service as plans
from integrations.push_history import push_diff
from integrations.registry import clean_settings
from inventory.choices import PlanStatus
from inventory.models import Rack
from inventory.planning import preset_layout

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def fabric(demo_inventory, monkeypatch) -> ConfigTarget:
    monkeypatch.setattr(adapter, "_SIMULATED", {})  # a fresh in-memory fabric, as in a new process
    return ConfigTarget.objects.create(name="fabric", kind="fabric", settings={"kind": "simulated"})


@pytest.fixture
def run_on_commit(django_capture_on_commit_callbacks):
    """Run `action()` and the pushes it queues on commit (eager Celery, as `make run`)."""

    def run(action):
        with django_capture_on_commit_callbacks(execute=True):
            return action()

    return run


def apply(rack_name: str, layout: str, user):
    return plans.create_and_apply(
        Rack.objects.get(name=rack_name), preset_layout(layout), drain=False, user=user
    )


def whole_push() -> list[ConfigPush]:
    return pushes.queue_pushes(reason="the first push")


def plan_push(plan, target) -> ConfigPush:
    return ConfigPush.objects.get(plan_id=plan.pk, target=target)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plan_sends_the_fabric_its_rack_alone_and_the_whole_fabric_is_then_as_planned(
    fabric, run_on_commit, admin_user
):
    first = ConfigPush.objects.filter(pk__in=[p.pk for p in run_on_commit(whole_push)])
    assert {p.status for p in first} == {PushStatus.SUCCEEDED} and len(first) == 2
    assert not any("scope" in p.payload for p in first)

    plan = run_on_commit(lambda: apply("gb-r03", "2x9", admin_user))
    push = plan_push(plan, fabric)
    assert push.status == PushStatus.SUCCEEDED, push.error
    assert push.payload["scope"] == {"racks": ["gb-r03"]}
    assert [rack["rack"] for rack in push.payload["racks"]] == ["gb-r03"]
    assert [p["name"] for p in push.payload["racks"][0]["partitions"]] == ["p1", "p2"]
    # Only that rack was read back and changed; the others were not even looked at.
    assert "1 rack(s) changed, 0 already as planned, 0 skipped" in push.log, push.log
    # The directory takes whole files: every file, with the rack's new blocks in them.
    files = plan_push(plan, ConfigTarget.objects.get(name="local"))
    assert (
        "scope" not in files.payload and "r03p1" in payload_of(files.payload)["files"]["slurm/topology.conf"]
    )
    plan.refresh_from_db()
    assert plan.status == PlanStatus.APPLIED
    # The slice on top of what the fabric held is the whole desired state: a whole dry run finds nothing.
    assert pushes.dry_run([fabric])["fabric"] == ["no changes"]
    # Its diff is the rack it carried (and its scope), against what the whole push before held for it: the
    # racks it did not carry are not "removed".
    changes = {item.name: item.state for item in push_diff(push).changed}
    assert changes == {"rack gb-r03": "changed", "scope": "added"}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_whole_state_is_sent_until_the_target_is_known_to_hold_it(fabric, run_on_commit, admin_user):
    # No push has succeeded yet: the plan's push carries every rack.
    plan = run_on_commit(lambda: apply("gb-r03", "2x9", admin_user))
    push = plan_push(plan, fabric)
    assert push.status == PushStatus.SUCCEEDED and "scope" not in push.payload
    assert {rack["rack"] for rack in push.payload["racks"]} == {"gb-r01", "gb-r02", "gb-r03"}
    # Now it holds everything: the next plan sends its rack alone.
    plan = run_on_commit(lambda: apply("gb-r03", "1x18", admin_user))
    assert plan_push(plan, fabric).payload["scope"] == {"racks": ["gb-r03"]}
    # A failed push may have left anything half done: the whole state again.
    ConfigPush.objects.create(
        target=fabric, status=PushStatus.FAILED, payload_hash="x", error="failed", finished_at=timezone.now()
    )
    plan = run_on_commit(lambda: apply("gb-r03", "2x9", admin_user))
    assert "scope" not in plan_push(plan, fabric).payload


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_forced_or_waiting_push_is_whole(fabric, run_on_commit):
    run_on_commit(whole_push)
    assert "scope" in pushes.queue_pushes(reason="slice", racks=["gb-r01"], targets=[fabric])[0].payload
    # The push above is still queued (its task runs on commit): a newer one supersedes it, so it carries all.
    newer = pushes.queue_pushes(reason="again", racks=["gb-r01"], targets=[fabric])[0]
    assert "scope" not in newer.payload
    ConfigPush.objects.filter(target=fabric, status=PushStatus.QUEUED).update(status=PushStatus.SUPERSEDED)
    forced = pushes.queue_pushes(reason="repair", racks=["gb-r01"], targets=[fabric], force=True)[0]
    assert "scope" not in forced.payload


def test_a_kubernetes_slice_holds_the_racks_nodes_and_flavors_only(demo_inventory):
    target = ConfigTarget.objects.create(
        name="k8s",
        kind="kubernetes",
        settings=clean_settings("kubernetes", {"api_url": "http://127.0.0.1:9"}),
    )
    ConfigPush.objects.create(
        target=target, status=PushStatus.SUCCEEDED, payload_hash="whole", finished_at=timezone.now()
    )
    push = pushes.queue_pushes(reason="plan", racks=["gb-r02"], targets=[target])[0]
    objects = push.payload["objects"]
    assert push.payload["scope"] == {"racks": ["gb-r02"]}
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Node"] == [
        f"gb-r02-t{slot:02d}" for slot in range(1, 19)
    ]
    assert {o["kind"] for o in objects} == {"Node", "ResourceFlavor"}
    assert {o["metadata"]["labels"]["rackplane.io/rack"] for o in objects} == {"gb-r02"}
    assert len([o for o in objects if o["kind"] == "ResourceFlavor"]) == 2  # p1 and p2, not the shared one
