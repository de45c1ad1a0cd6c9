"""Search results show why they matched and whose they are (issue 31): a GPU found by a part of its serial
shows the serial with the part marked (never the tray's hostname beside it), a tray found by an IB port GUID
shows that port, and a job shows its department / project in one shape and the person who submitted it,
on the results page and in the header's typeahead. On the demo inventory (three racks)."""

import re

import pytest

from inventory.models import ComputeTray, Gpu
from portal.pages.search import search
from tenancy.models import Project
from tests.factories import make_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SEARCH = "/search/"
SUGGEST = "/search/suggest/"


def hits(user, q: str, kind: str):
    [group] = [g for g in search(user, q).groups if g.kind == kind]
    return group.hits


def test_a_gpu_found_by_a_part_of_its_serial_shows_the_serial_marked(client_as, member_a):
    gpu = Gpu.objects.exclude(serial="").select_related("tray").order_by("pk")[3]
    fragment = gpu.serial[:10]
    client = client_as("member_a")
    marked = f"serial <mark>{fragment}</mark>{gpu.serial[10:]}"
    page = client.get(SEARCH, {"q": fragment}).content.decode()
    typeahead = client.get(SUGGEST, {"q": fragment}).content.decode()
    for html in (page, typeahead):
        assert f"{gpu.tray.hostname} · GPU {gpu.index} · {marked}</span>" in html
    # What no search looks at is never marked, even when the query's words are in it.
    tray_words = client.get(SEARCH, {"q": gpu.tray.hostname[:6], "all": "1"}).content.decode()
    assert f"<mark>{gpu.tray.hostname[:6]}</mark>{gpu.tray.hostname[6:]} · GPU" not in tray_words


def test_a_tray_found_by_an_ib_port_guid_shows_that_port_marked(client_as, member_a):
    tray = ComputeTray.objects.get(hostname="gb-r02-t04")
    guid = tray.ib_port_guids[1]
    prefix = guid[:17]  # a GUID prefix lists the trays whose ports start so
    [hit] = [hit for hit in hits(member_a, prefix, "tray") if hit.title == tray.hostname]
    assert f"IB port {guid}" in hit.note
    page = client_as("member_a").get(SEARCH, {"q": prefix, "all": "1"}).content.decode()
    assert f"IB port <mark>{prefix}</mark>{guid[17:]}" in page


def test_a_job_result_names_its_submitter_and_its_department_and_project_one_way(
    client_as, department_a, member_a, lead_a
):
    project = Project.objects.create(department=department_a, name="Vision", slug="vision")
    in_project = make_job(
        department_a, "who-search-vision", state="running", submitted_by=lead_a, project=project
    )
    own_work = make_job(department_a, "who-search-done", state="completed", submitted_by=member_a)
    gone = make_job(department_a, "who-search-orphan", state="completed")
    notes = {hit.title: hit.note for hit in hits(member_a, "who-search", "job")}
    assert notes[f"#{in_project.pk} who-search-vision"] == "Alpha / Vision · Running · 4 GPUs · by lead-a"
    assert notes[f"#{own_work.pk} who-search-done"] == "Alpha / no project · Completed · 4 GPUs · by member-a"
    assert notes[f"#{gone.pk} who-search-orphan"] == "Alpha / no project · Completed · 4 GPUs"  # account gone
    client = client_as("member_a")
    for html in (
        client.get(SEARCH, {"q": "who-search"}).content.decode(),
        client.get(SUGGEST, {"q": "who-search"}).content.decode(),
    ):
        assert "Alpha / Vision · Running · 4 GPUs · by lead-a</span>" in html
        # The job's name is marked, its note (not searched) never is.
        assert re.search(r"<mark>who-search</mark>-vision</(a|span)>", html)


def test_a_job_result_reads_in_japanese(client_as, department_a, member_a, lead_a):
    make_job(department_a, "who-search-ja", state="running", submitted_by=lead_a)
    html = client_as("member_a").get(SEARCH, {"q": "who-search"}, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "Alpha / プロジェクトなし" in html and "投入者 lead-a" in html


def test_a_project_found_by_its_namespace_shows_it_marked(client_as, department_a, lead_a):
    Project.objects.create(department=department_a, name="Large models", slug="llm")
    [hit] = hits(lead_a, "alpha--ll", "project")
    assert hit.note == "llm · namespace alpha--llm"
    page = client_as("lead_a").get(SEARCH, {"q": "alpha--ll", "all": "1"}).content.decode()
    assert "namespace <mark>alpha--ll</mark>m</span>" in page
