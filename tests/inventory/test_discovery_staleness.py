"""Nodes that stop reporting: a tray whose node reported before but not within
HealthSettings.node_silent_after_s is stale ("node silent"), computed from last-seen times when read (never
written). The rack view, the tray page, the API (field and filter) and the scheduler agree; the node_silent
health rule says what the scheduler does (default "hold": no new work, no drain; "warn" or disabled: only
shown)."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from inventory.choices import HealthKind, RuleAction, TrayState
from inventory.discovery.rule_defaults import NODE_SILENT_RULE
from inventory.health.rules import seed_default_rules
from inventory.models import ComputeTray, HealthRule, HealthSettings
from inventory.staleness import silent_policy
from scheduling import pass_cache
from scheduling.choices import JobState, Topology
from scheduling.models import Job
from scheduling.services.passes import run_pass
from tests.factories import free_trays, make_department

pytestmark = pytest.mark.django_db
SILENT = "gb-r01-t05"


def go_silent(*hosts: str, minutes: int = 30, all_but: tuple[str, ...] = ()) -> None:
    trays = (
        ComputeTray.objects.exclude(hostname__in=all_but)
        if all_but
        else ComputeTray.objects.filter(hostname__in=hosts)
    )
    trays.update(last_report_at=timezone.now() - timedelta(minutes=minutes))


def node_silent_rule() -> HealthRule:
    seed_default_rules()
    return HealthRule.objects.get(kind=HealthKind.NODE_SILENT)


def test_the_default_policy_holds_after_five_minutes(demo_inventory):
    rule = node_silent_rule()
    assert (rule.name, rule.action, rule.enabled) == (NODE_SILENT_RULE.name, RuleAction.HOLD, True)
    policy = silent_policy()
    assert policy.after == timedelta(seconds=300) and policy.hold is True
    now = timezone.now()
    assert policy.is_silent(now - timedelta(seconds=301), now)
    assert not policy.is_silent(now - timedelta(seconds=299), now)
    assert not policy.is_silent(None, now)  # never reported: no agent yet, not silent


def test_the_rule_may_only_hold_or_warn_and_hold_is_for_node_silent_only(demo_inventory):
    rule = node_silent_rule()
    rule.action = RuleAction.DRAIN
    with pytest.raises(IntegrityError), transaction.atomic():
        rule.save()
    with pytest.raises(IntegrityError), transaction.atomic():
        HealthRule.objects.create(
            name="xid hold", kind=HealthKind.XID, xid_first=1, xid_last=2, action="hold"
        )


def test_the_api_shows_and_filters_stale_trays(demo_inventory, admin_client_logged_in):
    node_silent_rule()
    go_silent(SILENT, minutes=30)
    ComputeTray.objects.filter(hostname="gb-r01-t06").update(last_report_at=None)  # never reported
    settings = HealthSettings.load()
    settings.node_silent_after_s = 600
    settings.save()

    rows = admin_client_logged_in.get("/api/v1/trays/", {"stale": "true", "page_size": 200}).json()["results"]
    assert [row["hostname"] for row in rows] == [SILENT]
    assert rows[0]["stale"] is True and rows[0]["holds_new_work"] is True
    assert 1790 <= rows[0]["silent_for_s"] <= 1830
    fresh = admin_client_logged_in.get("/api/v1/trays/", {"stale": "false", "page_size": 200}).json()
    hosts = {row["hostname"] for row in fresh["results"]}
    assert SILENT not in hosts and "gb-r01-t06" in hosts and len(hosts) == 53
    assert all(row["stale"] is False and row["silent_for_s"] is None for row in fresh["results"])

    # A longer silence time: the same tray is no longer stale, in the field and the filter alike.
    settings.node_silent_after_s = 3600
    settings.save()
    assert admin_client_logged_in.get("/api/v1/trays/", {"stale": "true"}).json()["results"] == []
    pk = ComputeTray.objects.get(hostname=SILENT).pk
    assert admin_client_logged_in.get(f"/api/v1/trays/{pk}/").json()["stale"] is False


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_rack_view_and_the_tray_page_show_the_silence(demo_inventory, admin_client_logged_in):
    node_silent_rule()
    go_silent(SILENT, minutes=42)
    page = admin_client_logged_in.get(reverse("scheduling:rack-detail", args=["gb-r01"])).content.decode()
    assert 'data-silent-trays="1"' in page
    assert page.count("silent-badge") == 1
    row = page[page.index(f'data-tray-hostname="{SILENT}"') :]
    row = row[: row.index("</li>")]
    assert "silent-badge" in row and "silent 42" in row and "no new work is placed on it" in row
    other = admin_client_logged_in.get(reverse("scheduling:rack-detail", args=["gb-r02"])).content.decode()
    assert "silent-badge" not in other and "data-silent-trays" not in other

    pk = ComputeTray.objects.get(hostname=SILENT).pk
    tray_page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[pk])).content.decode()
    assert "silent-note" in tray_page and "The node has not reported for 42" in tray_page
    assert "no new work is placed on this tray" in tray_page

    rule = node_silent_rule()
    rule.action = RuleAction.WARN
    rule.save()
    tray_page = admin_client_logged_in.get(reverse("inventory:tray-detail", args=[pk])).content.decode()
    assert "the health rules only warn; jobs are still placed on it" in tray_page


def whole_tray_jobs(count: int) -> list[Job]:
    research = make_department("Research", guaranteed_gpus=120)
    return Job.objects.bulk_create(
        Job(department=research, name=f"whole-{n}", gpus=4, topology=Topology.ANY) for n in range(count)
    )


def schedulable_hosts() -> list[str]:
    """Up trays in a partition with four healthy GPUs, settled fabric and no job: a whole-tray job fits."""
    return [
        tray.hostname
        for tray in free_trays(100)
        if tray.partition_id is not None
        and not tray.fabric_problems
        and not tray.gpus.exclude(fabric_state="completed").exists()
    ]


def test_the_scheduler_places_no_new_work_on_silent_trays(demo_inventory):
    """Every up tray but two is silent: of three whole-tray jobs two start, on the two that report, and
    the third waits. Nothing is drained."""
    node_silent_rule()
    pass_cache.forget()
    hosts = schedulable_hosts()
    reporting = hosts[:2]
    go_silent(all_but=tuple(reporting))
    jobs = whole_tray_jobs(3)
    run_pass()
    placed = {
        job.name: job.placement
        for job in Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.STARTING)
    }
    assert sorted(host for placement in placed.values() for host in placement) == sorted(reporting)
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.PENDING).count() == 1
    assert ComputeTray.objects.filter(hostname__in=hosts[2:], state=TrayState.UP).count() == len(hosts) - 2


def test_with_the_rule_set_to_warn_silent_trays_get_work(demo_inventory):
    rule = node_silent_rule()
    rule.action = RuleAction.WARN
    rule.save()
    pass_cache.forget()
    go_silent(all_but=("none",))
    jobs = whole_tray_jobs(3)
    run_pass()
    assert Job.objects.filter(pk__in=[j.pk for j in jobs], state=JobState.STARTING).count() == 3


def test_a_disabled_rule_does_not_hold_either(demo_inventory):
    rule = node_silent_rule()
    rule.enabled = False
    rule.save()
    pass_cache.forget()
    go_silent(all_but=("none",))
    jobs = whole_tray_jobs(1)
    run_pass()
    assert Job.objects.get(pk=jobs[0].pk).state == JobState.STARTING


def test_a_tray_that_reports_again_gets_work_again(demo_inventory):
    node_silent_rule()
    pass_cache.forget()
    hosts = schedulable_hosts()
    go_silent(all_but=("none",))
    jobs = whole_tray_jobs(1)
    run_pass()
    assert Job.objects.get(pk=jobs[0].pk).state == JobState.PENDING
    ComputeTray.objects.filter(hostname=hosts[0]).update(last_report_at=timezone.now())
    run_pass()
    job = Job.objects.get(pk=jobs[0].pk)
    assert job.state == JobState.STARTING and job.placement == [hosts[0]]


def test_a_one_gpu_job_is_not_placed_on_a_silent_tray_either(demo_inventory):
    """Partial-tray jobs too: with every schedulable tray silent, a 1-GPU job waits."""
    node_silent_rule()
    pass_cache.forget()
    go_silent(all_but=("no-such-host",))
    research = make_department("Research", guaranteed_gpus=120)
    job = Job.objects.create(department=research, name="one-gpu", gpus=1, topology=Topology.ANY)
    run_pass()
    job.refresh_from_db()
    assert job.state == JobState.PENDING, job.placement


def test_gpus_a_preemption_frees_on_a_silent_tray_take_no_new_work(demo_inventory):
    """The pass holds silent trays out of placement, so GPUs that free up there during the pass (a borrower
    preempted) are not handed to the job that preempted it."""
    from tests.factories import make_job

    node_silent_rule()
    pass_cache.forget()
    research = make_department("Research", guaranteed_gpus=0)
    tray = free_trays(1)[0]
    running = make_job(research, "on-a-silent-tray", trays=[tray])
    go_silent(tray.hostname)
    state = pass_cache.read()
    pass_cache.silence(state)
    cluster = state.cluster
    free_before = cluster.free_gpus
    cluster.release(running.pk)  # what a preemption does in the engine
    assert cluster.free_gpus == free_before  # the freed GPUs are not offered to anyone
