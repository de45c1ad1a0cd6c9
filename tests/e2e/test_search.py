"""Global search as a person uses it: type part of a hostname in the header box, see the grouped results,
type a whole hostname and land on the tray's page. Also the member's home and the menu, at desktop and phone
width (screenshots in `shots`)."""

import re
from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu
from tests.factories import make_department, make_job, make_member

PASSWORD = "e2e-search-password-1"


@pytest.fixture
def member(transactional_db):
    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=8)
    user = make_member("e2e-searcher", department, password=PASSWORD)
    make_job(department, "research-llama-pretrain", state="pending", gpus=16)
    make_job(make_department("Hidden"), "research-llama-elsewhere", state="pending")
    return user


def sign_in(page, live_server):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "e2e-searcher")
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def header_search(page, text: str) -> None:
    """Type `text` in the header's search box and press Enter: the results page (or the object's)."""
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.fill(text)
    with page.expect_navigation():
        box.press("Enter")


@pytest.mark.e2e
def test_search_from_the_header_lands_on_the_tray(live_server, page, member, shots):
    sign_in(page, live_server)
    # The member's home: their work, not the fleet.
    expect(page.get_by_role("heading", name="Your work")).to_be_visible()
    expect(page.locator('section[aria-labelledby="work-quota"]')).to_contain_text("Research")
    expect(page.locator("main")).not_to_contain_text("Trays with fabric problems")
    page.screenshot(path=str(shots / "home-member-desktop.png"), full_page=True)

    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.fill("research-ll")
    with page.expect_navigation():
        box.press("Enter")
    expect(page).to_have_url(re.compile(r"/search/\?q=research-ll$"))
    jobs = page.locator('section[data-kind="job"]')
    expect(jobs).to_contain_text("research-llama-pretrain")
    expect(page.locator("main")).not_to_contain_text("research-llama-elsewhere")

    header_search(page, "gb-r02-t0")
    trays = page.locator('section[data-kind="tray"] li')
    expect(trays).to_have_count(9)
    page.screenshot(path=str(shots / "search-results-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "search-results-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})

    tray = ComputeTray.objects.get(hostname="gb-r02-t05")
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.fill("GB-R02-T05")
    with page.expect_navigation():
        box.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/inventory/trays/{tray.pk}/")
    expect(page.locator("main")).to_contain_text("gb-r02-t05")
    page.screenshot(path=str(shots / "search-landed-on-tray.png"), full_page=True)


@pytest.mark.e2e
def test_search_finds_projects_and_jumps_to_a_job_by_its_whole_name(live_server, page, member, shots):
    from django.urls import reverse

    from scheduling.models import Job
    from tenancy.models import Department, Project, ProjectMembership

    research = Department.objects.get(slug="research")
    vision = Project.objects.create(department=research, name="Vision Models", slug="vision")
    ProjectMembership.objects.create(user=member, project=vision)
    Project.objects.create(department=research, name="Vision Secret", slug="vision-secret")  # not hers
    Project.objects.create(department=Department.objects.get(slug="hidden"), name="Visionaries", slug="vis")
    make_job(research, "sweep-lr", state="pending")
    make_job(research, "sweep-lr", state="completed")
    sign_in(page, live_server)

    def search(text: str) -> None:
        box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
        box.fill(text)
        with page.expect_navigation():
            box.press("Enter")

    # Projects she may see, by the start of the name or slug; not the others.
    search("visi")
    projects = page.locator('section[data-kind="project"]')
    expect(projects.locator("li")).to_have_count(1)
    expect(projects).to_contain_text("Research / Vision Models")
    expect(page.locator("main")).not_to_contain_text("Vision Secret")
    expect(page.locator("main")).not_to_contain_text("Visionaries")
    page.screenshot(path=str(shots / "search-projects.png"), full_page=True)
    # Its whole slug goes to its row on the department page.
    search("vision")
    department_page = reverse("scheduling:department-detail", args=["research"])
    expect(page).to_have_url(f"{live_server.url}{department_page}#project-vision")
    expect(page.locator("#project-vision")).to_contain_text("Vision Models")
    page.screenshot(path=str(shots / "search-landed-on-project.png"), full_page=True)

    # A job's whole name, one job: its page.
    job = Job.objects.get(name="research-llama-pretrain")
    search("research-llama-pretrain")
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    page.screenshot(path=str(shots / "search-landed-on-job.png"), full_page=True)

    # Two jobs of that name: listed, with a word why there was no jump.
    search("sweep-lr")
    expect(page).to_have_url(re.compile(r"/search/\?q=sweep-lr$"))
    jobs = page.locator('section[data-kind="job"]')
    expect(jobs.locator("li")).to_have_count(2)
    expect(jobs.locator("[data-note=job]")).to_have_text(
        "2 jobs are named 'sweep-lr': they are listed first, newest first."
    )
    page.screenshot(path=str(shots / "search-jobs-sharing-a-name.png"), full_page=True)


def settled(listbox, text: str) -> None:
    """Until the typeahead shows the list answering `text` (its last option searches for it): a list answering
    an earlier keystroke (typed slower than the box's 200 ms, as under load) may show first."""
    expect(listbox.locator("#suggest-all")).to_have_attribute(
        "href", re.compile(rf"\?q={re.escape(quote(text))}&all=1$")
    )


@pytest.mark.e2e
def test_the_typeahead_lists_matches_as_one_types_and_the_keyboard_opens_one(
    live_server, page, member, shots
):
    from scheduling.models import Job

    job = Job.objects.get(name="research-llama-pretrain")
    sign_in(page, live_server)
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    listbox = page.get_by_role("listbox", name="Matches")
    expect(box).to_have_attribute("aria-expanded", "false")
    expect(listbox).to_be_hidden()

    # A word from the middle of the job's name: the list opens under the box, the other tenant's job absent.
    box.press_sequentially("pretrain", delay=30)
    settled(listbox, "pretrain")
    expect(listbox).to_be_visible()
    expect(box).to_have_attribute("aria-expanded", "true")
    jobs = listbox.get_by_role("group", name="Jobs")
    expect(jobs.get_by_role("option")).to_have_count(1)
    expect(jobs.get_by_role("option")).to_contain_text("research-llama-pretrain")
    expect(listbox).not_to_contain_text("research-llama-elsewhere")
    expect(listbox.get_by_role("option").last).to_contain_text("Every result for")
    page.screenshot(path=str(shots / "typeahead-desktop.png"))

    # Arrows move the highlight (aria-activedescendant), Escape closes and keeps the text, Enter opens.
    box.press("ArrowDown")
    first = listbox.get_by_role("option").first
    expect(first).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", first.get_attribute("id"))
    box.press("ArrowUp")  # wraps to the last option ("every result")
    expect(listbox.get_by_role("option").last).to_have_attribute("aria-selected", "true")
    box.press("Escape")
    expect(listbox).to_be_hidden()
    expect(box).to_have_attribute("aria-expanded", "false")
    expect(box).to_have_value("pretrain")
    box.press("ArrowDown")
    expect(listbox).to_be_visible()
    expect(first).to_have_attribute("aria-selected", "true")
    with page.expect_navigation():
        box.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/{job.pk}/")

    # On a phone: a part of a rack's name lists the rack and its trays; the keyboard picks a tray.
    page.set_viewport_size({"width": 390, "height": 844})
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.press_sequentially("r03-t0", delay=30)
    settled(listbox, "r03-t0")
    trays = listbox.get_by_role("group", name="Compute trays")
    expect(trays.get_by_role("option")).to_have_count(5)
    expect(trays.get_by_role("option").first).to_contain_text("gb-r03-t01")
    box_right = box.bounding_box()
    shown = listbox.bounding_box()
    assert shown["x"] >= 0 and shown["x"] + shown["width"] <= 390, shown  # the list fits the phone
    assert shown["y"] >= box_right["y"] + box_right["height"] - 1, (shown, box_right)  # under the box
    page.screenshot(path=str(shots / "typeahead-phone.png"))
    box.press("ArrowDown")
    box.press("ArrowDown")
    tray = ComputeTray.objects.get(hostname="gb-r03-t02")
    expect(trays.get_by_role("option").nth(1)).to_have_attribute("aria-selected", "true")
    with page.expect_navigation():
        box.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/inventory/trays/{tray.pk}/")
    page.set_viewport_size({"width": 1400, "height": 1000})


@pytest.mark.e2e
def test_a_location_search_shows_each_racks_location_with_the_words_marked(live_server, page, member, shots):
    """ "hall a" finds the racks of hall A by their location, which each result shows, the matched words
    marked; at desktop and phone width, on the page and in the typeahead. And the home line of a department
    that borrows reads as what it is."""
    from tenancy.models import Department
    from tests.factories import free_trays, run_job

    research = Department.objects.get(slug="research")
    run_job(research, name="r1", trays=free_trays(2))  # its whole guarantee (8)
    run_job(research, name="r2", trays=free_trays(3))  # 12 more: borrowed
    sign_in(page, live_server)
    line = page.locator("[data-figures=in-use]")
    expect(line).to_have_text("20 GPUs in use: 8 within the guarantee of 8, 12 borrowed beyond it")
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(shots / "home-borrowing-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.screenshot(path=str(shots / "home-borrowing-desktop.png"))

    header_search(page, "hall a")
    racks = page.locator('section[data-kind="rack"] li')
    expect(racks).to_have_count(3)
    for number, rack in enumerate(racks.all(), start=1):
        expect(rack).to_have_text(f"gb-r{number:02d} DC1 hall A row 01 pos {number:02d}")
        expect(rack.locator("mark")).to_have_text("hall A")
    marked = racks.first.locator("mark")
    assert marked.evaluate("e => getComputedStyle(e).backgroundColor") not in (
        "rgba(0, 0, 0, 0)",
        "transparent",
    )
    page.screenshot(path=str(shots / "search-location-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(shots / "search-location-phone.png"), full_page=True)

    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.fill("")
    box.press_sequentially("pos 02 hall", delay=30)
    listbox = page.get_by_role("listbox", name="Matches")
    options = listbox.get_by_role("group", name="Racks").get_by_role("option")
    expect(options).to_have_count(1)
    expect(options.first).to_have_text("gb-r02 DC1 hall A row 01 pos 02")
    expect(options.first.locator("mark")).to_have_text(["hall", "pos", "02"])
    page.screenshot(path=str(shots / "typeahead-location-phone.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})


def inside(inner, outer) -> bool:
    return inner["x"] >= outer["x"] - 0.5 and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5


@pytest.mark.e2e
@pytest.mark.parametrize(
    "viewport", [{"width": 1400, "height": 1000}, {"width": 390, "height": 844}], ids=str
)
def test_a_serial_typed_in_the_header_shows_the_serial_marked(live_server, page, member, shots, viewport):
    """A GPU found by a part of its serial, as a person types it (issue 31): at a desktop's and a phone's
    width the typeahead's row shows the serial with the typed part marked, inside the list (not cut off
    behind an ellipsis), and so does the results page; a job's row names who submitted it."""
    from tenancy.models import Department

    research = Department.objects.get(slug="research")
    make_job(
        research, "who-search-sweep", state="pending", gpus=8, submitted_by=make_member("e2e-lead", research)
    )
    gpu = Gpu.objects.exclude(serial="").select_related("tray").order_by("pk")[9]
    typed, width = gpu.serial[:10], viewport["width"]
    page.set_viewport_size(viewport)
    sign_in(page, live_server)
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    box.press_sequentially(typed, delay=30)
    listbox = page.get_by_role("listbox", name="Matches")
    option = listbox.get_by_role("group", name="GPUs").get_by_role("option", name=re.compile(gpu.uuid))
    expect(option).to_contain_text(f"serial {gpu.serial}")
    mark = option.locator("mark")
    expect(mark).to_have_text(typed)
    expect(mark).to_be_visible()
    shown, marked = listbox.bounding_box(), mark.bounding_box()
    assert inside(marked, shown) and marked["x"] + marked["width"] <= width, (marked, shown)
    assert option.evaluate("e => e.scrollWidth <= e.clientWidth")  # nothing of the row cut off
    page.screenshot(path=str(shots / f"who-search-serial-typeahead-{width}.png"))

    box.fill("")
    box.press_sequentially("who-search", delay=30)
    expect(listbox.get_by_role("group", name="Jobs").get_by_role("option")).to_contain_text(
        "Research / no project · Pending · 8 GPUs · by e2e-lead"
    )

    page.goto(f"{live_server.url}/search/?q={typed}")
    result = page.locator('section[data-kind="gpu"] li', has_text=gpu.uuid)
    expect(result.locator("mark")).to_have_text(typed)
    marked = result.locator("mark").bounding_box()
    assert marked["x"] >= 0 and marked["x"] + marked["width"] <= width, marked
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=str(shots / f"who-search-serial-page-{width}.png"), full_page=True)


@pytest.mark.e2e
def test_the_highlighted_option_stays_when_a_newer_list_arrives(live_server, page, member):
    """One types on after moving with the arrows (or the list for the last keystroke comes late): the option
    highlighted stays highlighted in the new list, the job by its link, the last option ("Every result for")
    though its link now searches for the longer text; Enter then opens what is highlighted."""
    sign_in(page, live_server)
    box = page.get_by_role("combobox", name=re.compile("Search GPUs, trays"))
    listbox = page.get_by_role("listbox", name="Matches")
    options = listbox.get_by_role("option")
    box.press_sequentially("pretr", delay=30)
    settled(listbox, "pretr")
    box.press("ArrowUp")  # the last option: every result for "pretr"
    expect(options.last).to_have_attribute("aria-selected", "true")
    box.press_sequentially("ain", delay=30)
    settled(listbox, "pretrain")
    expect(options.last).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", "suggest-all")
    expect(listbox.locator('[aria-selected="true"]')).to_have_count(1)

    box.press("ArrowDown")  # wraps to the first: the job
    job = listbox.get_by_role("group", name="Jobs").get_by_role("option")
    expect(job).to_have_attribute("aria-selected", "true")
    box.press("Backspace")
    settled(listbox, "pretrai")
    expect(job).to_have_attribute("aria-selected", "true")
    expect(listbox.locator('[aria-selected="true"]')).to_have_count(1)
    with page.expect_navigation():
        box.press("Enter")
    expect(page).to_have_url(re.compile(r"/scheduling/jobs/[0-9]+/$"))
