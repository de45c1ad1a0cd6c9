"""Taking a tray out by hand (issue 31): a drain or maintenance of a tray holding running work is a confirmed
step that names the jobs and what happens to each (integrations.views.tray_actions, scheduling.requeue's
decisions), a stale confirmation is shown again, and a person's own drain returns at once while the health
rules' drains keep their healthy-time wait (inventory.health.returns)."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.choices import ActionKind, TrayState
from inventory.health.actions import HealthError, drain_tray
from inventory.health.ingest import record_admin_event
from inventory.health.returns import return_eligibility, return_to_service
from inventory.models import ComputeTray, HealthAction
from scheduling.choices import FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.models import FaultPolicy, Job, JobEvent
from tests.factories import make_job
from tests.i18n_check import assert_japanese

pytestmark = pytest.mark.django_db
CHECKPOINT = "Asked to checkpoint (SIGUSR1), then requeued after 5 minutes unless it ends first."


@pytest.fixture
def busy(demo_inventory, department_a, member_a):
    """gb-r03-t01 and t02 running one training job of member-a (checkpoint policy, grace 5 min)."""
    FaultPolicy.objects.update_or_create(
        priority_class=PriorityClass.TRAIN, defaults={"action": FaultAction.CHECKPOINT, "grace_s": 300}
    )
    trays = [tray("gb-r03-t01"), tray("gb-r03-t02")]
    return make_job(
        department_a,
        "llama-pretrain",
        trays=trays,
        submitted_by=member_a,
        priority_class=PriorityClass.TRAIN,
        backend_id="4242",
    )


def tray(hostname: str) -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


def url(name: str, hostname: str) -> str:
    return reverse(f"integrations:tray-{name}", args=[tray(hostname).pk])


def fingerprint(html: str) -> str:
    return re.search(r'name="confirm" value="([0-9a-f]{64})"', html)[1]


def nothing_written(job: Job, hostname: str = "gb-r03-t01") -> None:
    job.refresh_from_db()
    assert tray(hostname).state == TrayState.UP
    assert not HealthAction.objects.filter(tray__hostname=hostname).exists()
    assert job.state == JobState.RUNNING and job.requeue_at is None
    assert not JobEvent.objects.filter(job=job, kind=JobEventKind.FAULT).exists()


def test_the_get_of_a_drain_names_the_jobs_and_what_happens_and_writes_nothing(busy, client_as):
    admin = client_as("platform_admin")
    response = admin.get(url("drain", "gb-r03-t01"), {"drain-reason": "fan noise"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Confirm the drain of gb-r03-t01" in html
    assert f"#{busy.pk}" in html and "llama-pretrain" in html
    assert re.search(r"member-a</span> · department <span [^>]*>Alpha</span> · 8 GPUs", html)
    assert CHECKPOINT in html
    assert 'value="fan noise"' in html  # the typed reason is kept for the confirming post
    nothing_written(busy)


def test_a_drain_posted_without_confirmation_is_shown_first_and_applied_once_confirmed(
    busy, client_as, platform_admin, django_capture_on_commit_callbacks
):
    admin = client_as(platform_admin)
    response = admin.post(url("drain", "gb-r03-t01"), {"drain-reason": "fan noise"})
    assert response.status_code == 200 and CHECKPOINT in response.content.decode()
    nothing_written(busy)

    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(
            url("drain", "gb-r03-t01"),
            {"drain-reason": "fan noise", "confirm": fingerprint(response.content.decode())},
        )
    assert response.status_code == 303
    assert tray("gb-r03-t01").state_reason == "rackplane: platform-admin: fan noise"
    busy.refresh_from_db()
    assert busy.requeue_at is not None  # asked to checkpoint, as the confirmation said
    assert "asked to checkpoint (SIGUSR1)" in busy.events.get(kind=JobEventKind.FAULT).message


def test_a_stale_confirmation_is_shown_again_not_applied(busy, client_as, department_a, member_a):
    admin = client_as("platform_admin")
    page = admin.get(url("drain", "gb-r03-t01"), {"drain-reason": "fan noise"}).content.decode()
    # Meanwhile the job's class changes policy: it would now be requeued at once.
    FaultPolicy.objects.filter(priority_class=PriorityClass.TRAIN).update(action=FaultAction.STOP)
    response = admin.post(
        url("drain", "gb-r03-t01"), {"drain-reason": "fan noise", "confirm": fingerprint(page)}
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "the jobs on the tray changed since you were asked" in html
    assert "Requeued at once: its class&#x27;s policy stops it without a checkpoint." in html
    nothing_written(busy)

    # The job ends: the confirmation of a busy tray no longer holds either.
    again = fingerprint(html)
    Job.objects.filter(pk=busy.pk).update(state=JobState.COMPLETED, finished_at=timezone.now())
    response = admin.post(url("drain", "gb-r03-t01"), {"drain-reason": "fan noise", "confirm": again})
    assert response.status_code == 409 and "No job holds GPUs on this tray" in response.content.decode()
    assert tray("gb-r03-t01").state == TrayState.UP
    # Forged or garbled confirmations are stale too.
    for forged in ("x" * 5000, "0" * 64, "<script>"):
        response = admin.post(url("drain", "gb-r03-t02"), {"drain-reason": "fan", "confirm": forged})
        assert response.status_code == 409
    assert tray("gb-r03-t02").state == TrayState.UP


def test_a_tray_without_running_work_drains_at_once(busy, client_as):
    admin = client_as("platform_admin")
    response = admin.post(url("drain", "gb-r03-t05"), {"drain-reason": "fan noise"})
    assert response.status_code == 303 and tray("gb-r03-t05").state == TrayState.DRAIN


def test_maintenance_of_a_busy_tray_says_its_jobs_are_waited_for(
    busy, client_as, django_capture_on_commit_callbacks
):
    admin = client_as("platform_admin")
    start = timezone.now().astimezone(timezone.get_fixed_timezone(0))
    data = {
        "maintenance-reason": "fan swap",
        "maintenance-start": start.strftime("%Y-%m-%dT%H:%M"),
        "maintenance-end": (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
    }
    response = admin.post(url("maintenance", "gb-r03-t01"), data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Confirm maintenance of gb-r03-t01" in html
    assert "Left to finish on the tray: maintenance waits for running jobs." in html
    nothing_written(busy)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(url("maintenance", "gb-r03-t01"), {**data, "confirm": fingerprint(html)})
    assert response.status_code == 303 and tray("gb-r03-t01").state == TrayState.MAINTENANCE
    busy.refresh_from_db()
    # A maintenance window waits for the job as the confirmation said (it is not checkpointed).
    assert busy.state == JobState.RUNNING and busy.requeue_at is None


@pytest.mark.parametrize("persona", ["member_a", "lead_a"])
def test_members_and_leads_are_refused_as_before(busy, client_as, persona):
    client = client_as(persona)
    assert client.get(url("drain", "gb-r03-t01"), {"drain-reason": "x"}).status_code == 403
    assert client.post(url("drain", "gb-r03-t01"), {"drain-reason": "x"}).status_code == 403
    assert client.post(url("maintenance", "gb-r03-t01"), {"maintenance-reason": "x"}).status_code == 403
    nothing_written(busy)


def test_the_bulk_drain_of_busy_trays_is_confirmed_too(busy, client_as):
    admin = client_as("platform_admin")
    bulk = reverse("integrations:tray-bulk", args=["gb-r03"])
    picked = [str(tray("gb-r03-t01").pk), str(tray("gb-r03-t05").pk)]
    data = {"action": "drain", "reason": "cabling", "tray": picked}
    response = admin.post(bulk, data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Confirm the drain of 2 trays on gb-r03" in html and CHECKPOINT in html
    assert "No job holds GPUs on this tray" in html  # gb-r03-t05
    assert html.count('name="tray"') == 2
    nothing_written(busy)
    assert tray("gb-r03-t05").state == TrayState.UP
    response = admin.post(bulk, {**data, "confirm": fingerprint(html)})
    assert response.status_code == 303
    assert {tray("gb-r03-t01").state, tray("gb-r03-t05").state} == {TrayState.DRAIN}
    # Returning in bulk asks nothing.
    response = admin.post(bulk, {"action": "return", "tray": picked})
    assert response.status_code == 303


# --- return to service --------------------------------------------------------------------------------------


def test_a_persons_drain_returns_at_once_the_rules_drain_waits(demo_inventory, platform_admin):
    healthy = timezone.now() - timedelta(minutes=11)  # the default wait is 30 minutes
    by_hand, by_rules = tray("gb-r03-t07"), tray("gb-r03-t08")
    drain_tray(by_hand, "reseat cable", actor=platform_admin)
    record_admin_event(by_rules, code="", xid=79, gpu_uuid=by_rules.gpus.first().uuid, message="Xid 79")
    assert tray("gb-r03-t08").state == TrayState.DRAIN
    ComputeTray.objects.filter(pk__in=[by_hand.pk, by_rules.pk]).update(healthy_since=healthy)

    verdict = return_eligibility(tray("gb-r03-t08"))
    assert not verdict.eligible and "19 more minutes" in verdict.why
    with pytest.raises(HealthError, match="more minutes"):
        return_to_service(tray("gb-r03-t08"), actor=platform_admin)

    assert return_eligibility(tray("gb-r03-t07")).eligible
    action = return_to_service(tray("gb-r03-t07"), actor=platform_admin)
    assert tray("gb-r03-t07").state == TrayState.UP
    assert action.kind == ActionKind.RETURN and "forced" not in action.reason
    assert "drained by hand, not by the health rules" in action.reason


def test_a_persons_drain_returns_from_the_tray_page_without_force(demo_inventory, client_as):
    admin = client_as("platform_admin")
    admin.post(url("drain", "gb-r03-t07"), {"drain-reason": "reseat cable"})
    ComputeTray.objects.filter(hostname="gb-r03-t07").update(healthy_since=timezone.now())
    page = admin.get(reverse("inventory:tray-detail", args=[tray("gb-r03-t07").pk])).content.decode()
    assert "Eligible: it was drained by hand, not by the health rules, with no fault since." in page
    response = admin.post(url("return", "gb-r03-t07"), {"return-note": "reseated"})
    assert response.status_code == 303 and tray("gb-r03-t07").state == TrayState.UP


def test_the_confirmation_reads_in_japanese(busy, client_as):
    admin = client_as("platform_admin")
    target = url("drain", "gb-r03-t01") + "?drain-reason=fan"
    html = assert_japanese(admin, target)
    assert "先に終了しなければ 5 分後に再キュー投入します。" in html
    assert "gb-r03-t01 のドレインの確認" in html


def test_a_one_gpu_job_is_counted_in_the_singular(demo_inventory, department_a, member_a, client_as):
    make_job(department_a, "notebook", trays=[tray("gb-r03-t03")], submitted_by=member_a, gpus=1)
    html = (
        client_as("platform_admin").get(url("drain", "gb-r03-t03"), {"drain-reason": "fan"}).content.decode()
    )
    assert re.search(r"member-a</span> · department <span [^>]*>Alpha</span> · 1 GPU<", html)
