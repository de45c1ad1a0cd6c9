"""A member's home, inbox and job page in Japanese in a real Chromium, at 1400 and 390 px: why a job waits
(the engine's reason), a notification about a job and the embedded backend's words, all stored in English,
read in Japanese with Japanese punctuation; the names in them stay as written. Screenshots in the test's
tmp_path (printed) or $RACKPLANE_SCREENSHOTS."""

import pytest
from playwright.sync_api import expect

from core.models import NotificationChannel, NotificationSubscription
from core.sentences import minutes, say
from integrations import words as integration_words
from integrations.dispatch import backend_state_words
from integrations.jobs import BackendJobState, BackendJobStatus
from inventory.demo import seed_datacenter
from scheduling.choices import JobEventKind, JobState
from scheduling.engine import placement, scheduler
from scheduling.engine.words import CLAUSES, WAITING
from scheduling.services.actions import notify_job
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import make_department, make_job, make_member
from tests.i18n_check import spacing_slips

PASSWORD = "e2e-words-password-1"


@pytest.fixture
def member(transactional_db):
    seed_datacenter(racks=1)
    person = make_member("e2e-words", make_department("Research"))
    person.set_password(PASSWORD)
    person.save()
    return person


@pytest.mark.e2e
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1400", "390"])
def test_a_members_stored_words_read_in_japanese(live_server, browser, member, shots, viewport):
    department = member.memberships.get().department
    reason = say(
        WAITING,
        reason=say(placement.NO_RACK_HAS, trays=18, most=16)
        + CLAUSES
        + say(scheduler.RESERVED_FOR_IT, wait=minutes(23.9 * 3600)),
    )
    make_job(
        department, "bigone", state=JobState.PENDING, gpus=72, pending_reason=reason, submitted_by=member
    )
    NotificationSubscription.objects.create(
        name="mine", channel=NotificationChannel.PORTAL, events=["job_started"], owner=member,
        scope=f"user:{member.pk}",
    )  # fmt: skip
    running = make_job(department, "belltest", trays=["gb-r01-t01"], submitted_by=member)
    status = BackendJobStatus(
        "rendered/rp-1",
        BackendJobState.RUNNING,
        say(integration_words.EMBEDDED_RENDERED, rendered_file="rp-1.json", backend_kind="slurm"),
    )
    running.backend_message = backend_state_words(integration_words.RENDERED_FILES, status)
    running.save(update_fields=["backend_message"])
    notify_job(
        running,
        JobEventKind.STARTED,
        say(
            integration_words.RUNNING_ON, backend=integration_words.RENDERED_FILES, backend_id="rendered/rp-1"
        ),
    )
    context = browser.new_context(viewport=viewport, locale="ja-JP")
    try:
        page = context.new_page()
        sign_in(page, live_server, member.username, PASSWORD)
        width = viewport["width"]

        page.goto(f"{live_server.url}/")
        why = page.locator("#work-pending").locator("xpath=..").locator("td[data-why-waits]").first
        expect(why).to_contain_text("空きトレイが 18 台あるラックがありません")
        expect(why).to_contain_text("約 24 時間後")  # whole hours, no space before the particle
        assert not spacing_slips(why.inner_text()), why.inner_text()
        page.screenshot(path=str(shots / f"home-pending-{width}.png"), full_page=True)

        page.goto(f"{live_server.url}/account/inbox/")
        item = page.locator("main a", has_text="belltest").first
        started = f"ジョブ belltest（#{running.pk}）が開始しました"  # noqa: RUF001
        expect(item).to_have_text(f"{started}: レンダリング済みファイルで rendered/rp-1 として実行中")
        page.screenshot(path=str(shots / f"inbox-{width}.png"), full_page=True)

        page.goto(f"{live_server.url}/scheduling/jobs/{running.pk}/")
        message = page.locator("[data-backend-message]")
        said = "レンダリング済みファイル: 実行中（rp-1.json にレンダリングしました。"  # noqa: RUF001
        expect(message).to_contain_text(said)
        box = message.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width  # wraps on a phone
        page.screenshot(path=str(shots / f"job-{width}.png"), full_page=True)
    finally:
        context.close()
