"""The jobs list on a phone (390 px), in English and Japanese, as a member (frank, Inference) on the demo
(`seed_demo`): the list fits the screen without scrolling sideways, each row shows its name (whole, wrapped:
cut to "build-compile-00…", jobs named alike differed only by their numbers), GPUs and state, and a waiting
job's reason shows under its name, whole and inside the screen (it sat in a column off
the side, and the row was a tall empty band). Screenshots in `shots`."""

from contextlib import closing
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import expect

from scheduling.models import Department
from tests.e2e.browser import PHONE, sign_in
from tests.e2e.test_phone_rows_and_header import LANGUAGES, inside
from tests.factories import make_job

PASSWORD = "e2e-phone-list-password-1"
# A reason as the scheduler stores it (English; the page reads it in the viewer's language), long enough to
# wrap on a phone.
REASON = (
    "waiting: inference jobs run only within the department's guarantee (84 GPUs); it holds 73 and this job "
    "needs 16"
)
# The reason's words as each language shows them.
SHOWN = {"en": "inference jobs run only within the department's guarantee", "ja": "部門の保証"}


@pytest.fixture
def frank(transactional_db, settings, tmp_path):
    settings.VAR_DIR = tmp_path  # where seed_demo writes the demo logins
    call_command("seed_demo", "--racks", "3", stdout=StringIO())
    user = get_user_model().objects.get(username="frank")
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    # The newest job of frank's department, so the first row: a waiting one with the scheduler's reason.
    make_job(
        Department.objects.get(slug="inference"),
        "inference-serve-chat-waiting",
        state="pending",
        gpus=16,
        submitted_by=user,
        pending_reason=REASON,
    )
    return user


@pytest.mark.e2e
@pytest.mark.parametrize("language", ["en", "ja"])
def test_the_phone_jobs_list_fits_and_shows_why_a_job_waits(live_server, browser, frank, shots, language):
    phone = {"viewport": PHONE, "locale": LANGUAGES[language], "is_mobile": True, "has_touch": True}
    with closing(browser.new_context(**phone)) as context:
        page = context.new_page()
        sign_in(page, live_server, frank.username, PASSWORD)
        page.goto(f"{live_server.url}/scheduling/jobs/")
        expect(page.locator("html")).to_have_attribute("lang", language)
        rows = page.locator("table.jobs tbody tr")
        expect(rows.first).to_be_visible()

        # Nothing scrolls sideways: the table's box holds the table, and the page the box.
        wrap = page.locator("#job-table .table-wrap")
        widths = wrap.evaluate("el => [el.scrollWidth, el.clientWidth]")
        # What sticks out of the box, should anything: named in the failure.
        over = wrap.evaluate(
            """el => [...el.querySelectorAll("th, td, .badge")]
                .filter((c) => c.getBoundingClientRect().right > el.getBoundingClientRect().right)
                .slice(0, 3).map((c) => c.outerHTML.slice(0, 100))"""
        )
        assert widths[0] <= widths[1], f"the table is {widths[0]} px wide in a {widths[1]} px box: {over}"
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        shown = wrap.bounding_box()
        right = shown["x"] + shown["width"]

        # Each heading shown holds its label and sort arrow whole (none spills into the next column).
        spilled = page.evaluate(
            """() => [...document.querySelectorAll("table.jobs thead th")]
                .filter((th) => th.offsetWidth > 0 && th.querySelector("a").getBoundingClientRect().right
                    > th.getBoundingClientRect().right + 0.5).map((th) => th.innerText)"""
        )
        assert not spilled, spilled

        # Every row shows its name, GPUs and state inside the screen.
        # Measured in one go: the list refreshes itself every few seconds (htmx), replacing its rows.
        cells = page.evaluate(
            """() => [...document.querySelectorAll("table.jobs tbody tr")].slice(0, 12).map((row) =>
                [row.querySelector(".job-link"), row.querySelectorAll("td.num")[1],
                 row.querySelector(".badge")]
                    .map((el) => {
                        const r = el.getBoundingClientRect();
                        return {x: r.x, width: r.width, text: el.innerText,
                                cut: el.scrollWidth > el.clientWidth + 0.5};
                    }))"""
        )
        assert cells
        for index, row in enumerate(cells):
            for cell in row:
                assert inside(cell, right), (index, cell["text"])
            # The name whole: nothing of it hidden (no ellipsis).
            assert not row[0]["cut"], (index, row[0]["text"])
        # The newest job's name is longer than its column: it wraps onto lines of its own, all shown.
        newest = page.locator(".job-link", has_text="inference-serve-chat-waiting")
        assert newest.evaluate(
            "el => el.getClientRects().length > 1 || el.offsetHeight > 1.5 * "
            "parseFloat(getComputedStyle(el).lineHeight)"
        )

        # The waiting job: its reason under its name, in the viewer's language, inside the screen, and the
        # row no taller than its name, submitter and reason need.
        waiting = page.locator(
            "table.jobs tbody tr[data-state=pending]", has_text="inference-serve-chat-waiting"
        )
        name, reason = waiting.locator(".job-link"), waiting.locator(".pending-reason")
        expect(reason).to_be_visible()
        expect(reason).to_contain_text(SHOWN[language])
        name_box, reason_box, row_box = name.bounding_box(), reason.bounding_box(), waiting.bounding_box()
        assert inside(reason_box, right), reason_box
        assert reason_box["y"] >= name_box["y"] + name_box["height"] - 0.5, (name_box, reason_box)
        assert reason_box["x"] <= name_box["x"] + 1, "the reason starts under the name"
        assert row_box["height"] <= reason_box["y"] + reason_box["height"] - row_box["y"] + 16, row_box
        page.screenshot(path=str(shots / f"phone-jobs-{language}-390.png"))
        page.screenshot(path=str(shots / f"phone-jobs-{language}-390-full.png"), full_page=True)
