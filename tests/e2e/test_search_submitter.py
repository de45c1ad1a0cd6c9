"""A member types a colleague's username in the header box (issue 31): the typeahead lists her jobs that the
member may see, each saying "submitted by alice" with the match marked, and nothing of another department's
submitter; Enter on "Enter gives the same on the results page. At 1400 and 390 px (screenshots in
`shots`). And the department page's cards at both widths: in use, borrowed and fair share in words that add
up, inside the phone's width."""

import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from scheduling.choices import JobState
from tests.factories import healthy_gpus, make_department, make_job, make_member, run_job

PASSWORD = "e2e-submitter-password-1"


@pytest.fixture
def colleagues(transactional_db):
    seed_datacenter(racks=3)
    research = make_department("Research", guaranteed_gpus=16, over_quota_weight=1)
    elsewhere = make_department("Elsewhere", guaranteed_gpus=8, over_quota_weight=9)
    member = make_member("bob", research, password=PASSWORD)
    make_member("lead", research, role="lead", password=PASSWORD)
    alice = make_member("alice", research)
    gpus = healthy_gpus(40)
    run_job(research, gpus[:16], "llama-pretrain", submitted_by=alice)
    run_job(research, gpus[16:], "llama-sweep", submitted_by=alice)
    make_job(research, "bob-notebook", JobState.PENDING, submitted_by=member)
    outsider = make_member("alicia-elsewhere", elsewhere)
    make_job(elsewhere, "hidden-run", JobState.PENDING, gpus=200, submitted_by=outsider)
    return member


def sign_in(page, live_server, username: str):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page).not_to_have_url(re.compile(r"/login/"))
    page.wait_for_load_state()


@pytest.mark.e2e
def test_a_member_finds_a_colleagues_jobs_by_her_username_in_the_typeahead(
    live_server, page, colleagues, shots
):
    sign_in(page, live_server, "bob")
    for width, height in ((1400, 1000), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
        box.fill("")
        box.press_sequentially("alic", delay=30)
        listbox = page.get_by_role("listbox", name="Matches")
        expect(listbox).to_be_visible()
        jobs = listbox.get_by_role("group", name="Jobs").get_by_role("option")
        expect(jobs).to_have_count(2)
        expect(jobs.nth(0)).to_contain_text("llama-sweep")
        expect(jobs.nth(1)).to_contain_text("llama-pretrain")
        for n in range(2):
            expect(jobs.nth(n)).to_contain_text("submitted by alice")
            expect(jobs.nth(n).locator("mark").last).to_have_text("alic")
        # The person herself, of bob's own department (people are visible to their departments' members),
        # and not the other department's "alicia-elsewhere".
        users = listbox.get_by_role("group", name="Users").get_by_role("option")
        expect(users).to_have_count(1)
        expect(users.first).to_contain_text("alice")
        expect(listbox).not_to_contain_text("alicia")
        expect(listbox).not_to_contain_text("hidden-run")
        shown = listbox.bounding_box()
        assert shown["x"] >= 0 and shown["x"] + shown["width"] <= width, shown
        page.screenshot(path=str(shots / f"typeahead-submitter-{width}.png"))

    # Enter with no option highlighted: the results page, the same jobs with the same words.
    with page.expect_navigation():
        box.press("Enter")
    page.wait_for_load_state()
    expect(page).to_have_url(re.compile(r"/search/\?q=alic$"))
    jobs = page.locator('section[data-kind="job"] li')
    expect(jobs).to_have_count(2)
    expect(jobs.nth(0).locator("mark")).to_have_text("alic")
    expect(page.locator('section[data-kind="job"] .count-pill')).to_have_text("2")
    expect(page.locator("main")).not_to_contain_text("alicia")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(shots / "search-submitter-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.screenshot(path=str(shots / "search-submitter-1400.png"), full_page=True)

    # The other department's submitter: nothing, and the typeahead says so.
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.fill("")
    box.press_sequentially("alicia", delay=30)
    listbox = page.get_by_role("listbox", name="Matches")
    expect(listbox.get_by_role("option")).to_have_count(1)
    expect(listbox.get_by_role("option")).to_contain_text("Nothing you may see matches")


@pytest.mark.e2e
def test_the_department_cards_name_their_numbers_at_both_widths(live_server, page, colleagues, shots):
    sign_in(page, live_server, "lead")
    page.goto(f"{live_server.url}/tenancy/departments/research/")
    page.wait_for_load_state()
    cards = page.locator("section.cards")
    in_use = "16 within the guarantee · 24 borrowed beyond it"
    expect(cards.locator("[data-figures=in-use]")).to_have_text(in_use)
    expect(cards.locator("[data-figures=fair-share]")).to_have_text(
        re.compile(r"^16 within the guarantee \+ 19 beyond it · of \d+ schedulable GPUs$")
    )
    expect(page.locator("[data-figures=reclaimable]")).to_contain_text("(40 in use, fair share 35)")
    page.screenshot(path=str(shots / "department-cards-1400.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    for name in ("in-use", "fair-share"):
        box = cards.locator(f"[data-figures={name}]").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (name, box)
    page.screenshot(path=str(shots / "department-390.png"), full_page=True)
    cards.screenshot(path=str(shots / "department-cards-390.png"))
