"""Global search (portal.pages.search) by a part or the words of a name: jobs, people, projects,
departments, racks and their locations, trays, GPU UUIDs and serials; ranked exact, then prefix, then
substring or words; narrowed by `visible_to` as the prefix search is. Runs on SQLite (`icontains` by
scanning) and on PostgreSQL (the same lookups read the trigram indexes of migration portal 0003; ranked by
trigram similarity)."""

import pytest
from django.db import connection
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st

from inventory.models import ComputeTray, Gpu, Rack
from portal.pages.search import COUNT_CAP, LIMIT, MIN_SUBSTRING, matched_parts, search
from tenancy.models import Project, ProjectMembership
from tests.factories import make_job, make_member

# Alpha and Beta (tests/conftest.py) on three seeded racks.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("demo_inventory")]

SEARCH = "/search/"


def kinds(response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.get("Location")
    return {g.kind: [h.title for h in g.hits] for g in response.context["results"].groups}


def found(user, q: str) -> dict[str, list[str]]:
    return {g.kind: [h.title for h in g.hits] for g in search(user, q).groups}


# --- every kind, by a part of its name ----------------------------------------------------------------------


def test_a_job_is_found_by_a_word_in_the_middle_of_its_name(client_as, department_a, member_a):
    middle = make_job(department_a, "train-pretrain-0042", state="pending")
    make_job(department_a, "train-finetune-0043", state="pending")
    response = client_as("member_a").get(SEARCH, {"q": "pretrain"})
    assert kinds(response)["job"] == [f"#{middle.pk} train-pretrain-0042"]
    assert reverse("scheduling:job-detail", args=[middle.pk]) in response.content.decode()
    # Any case, and a part that is no word of it.
    assert found(member_a, "PRETRA")["job"] == [f"#{middle.pk} train-pretrain-0042"]
    assert found(member_a, "rain-0042")["job"] == [f"#{middle.pk} train-pretrain-0042"]


def test_the_words_of_a_query_may_be_anywhere_in_the_name(department_a, member_a):
    job = make_job(department_a, "llama-70b-pretrain-long", state="pending")
    make_job(department_a, "llama-70b-finetune", state="pending")
    assert found(member_a, "pretrain llama")["job"] == [f"#{job.pk} llama-70b-pretrain-long"]
    assert found(member_a, "LONG 70b")["job"] == [f"#{job.pk} llama-70b-pretrain-long"]
    assert "job" not in found(member_a, "pretrain mistral")


def test_trays_and_racks_by_a_part_of_their_name(member_a):
    result = found(member_a, "r03")
    assert result["rack"] == ["gb-r03"]
    assert result["tray"] == [f"gb-r03-t{slot:02d}" for slot in range(1, 19)]
    assert found(member_a, "03-t1")["tray"] == [f"gb-r03-t{slot}" for slot in range(10, 19)]


def test_a_rack_by_a_part_or_the_words_of_its_location(member_a):
    rack = Rack.objects.get(name="gb-r02")
    assert rack.location == "DC1 hall A row 01 pos 02"
    assert found(member_a, "pos 02")["rack"] == ["gb-r02"]
    assert found(member_a, "HALL a ROW 01 POS 03")["rack"] == ["gb-r03"]  # its whole location, any case
    assert found(member_a, "pos 03 hall")["rack"] == ["gb-r03"]  # words in another order
    assert found(member_a, "row 01")["rack"] == ["gb-r01", "gb-r02", "gb-r03"]
    assert "rack" not in found(member_a, "hall B")


def test_the_words_of_a_query_may_be_in_different_fields(member_a, department_a, lead_a):
    # "hall" is in every location and "r01" in one rack's name: that rack (test_search_across.py).
    assert found(member_a, "hall r01")["rack"] == ["gb-r01"]
    assert found(member_a, "r02 pos")["rack"] == ["gb-r02"]
    assert found(member_a, "hall a")["rack"] == ["gb-r01", "gb-r02", "gb-r03"]
    # A person's first and last names, and their username with either.
    person = make_member("jdoe", department_a)
    person.first_name, person.last_name = "Jane", "Smith"
    person.save()
    assert found(lead_a, "smith jane")["user"] == [person.username]
    assert found(lead_a, "jdoe smith")["user"] == [person.username]


def test_a_rack_found_by_its_location_shows_it_with_the_match_marked(client_as, member_a):
    [racks] = [g for g in search(member_a, "hall a").groups if g.kind == "rack"]
    assert [hit.note for hit in racks.hits] == [f"DC1 hall A row 01 pos {n:02d}" for n in (1, 2, 3)]
    client = client_as("member_a")
    page = client.get(SEARCH, {"q": "hall a", "all": "1"}).content.decode()
    assert '<span class="muted">DC1 <mark>hall A</mark> row 01 pos 02</span>' in page
    # Words apart are marked apart; a short one only where a word starts.
    page = client.get(SEARCH, {"q": "pos 02 hall", "all": "1"}).content.decode()
    assert (
        '<span class="muted">DC1 <mark>hall</mark> A row 01 <mark>pos</mark> <mark>02</mark></span>' in page
    )
    typeahead = client.get("/search/suggest/", {"q": "hall a"}).content.decode()
    assert '<span class="muted">DC1 <mark>hall A</mark> row 01 pos 03</span>' in typeahead
    # A tray is found by its hostname, not by the rack and slot beside it: only the hostname is marked.
    page = client.get(SEARCH, {"q": "gb-r0", "all": "1"}).content.decode()
    assert '<mark>gb-r0</mark>1-t01</a> <span class="muted">gb-r01 · slot 1</span>' in page


def test_a_gpu_by_a_part_of_its_uuid_or_its_serial(member_a):
    gpu = Gpu.objects.exclude(serial="").order_by("pk")[5]
    middle = gpu.uuid[14:22]  # hex and dashes from inside the UUID
    assert gpu.uuid in found(member_a, middle.upper())["gpu"]
    assert all(middle in uuid for uuid in found(member_a, middle)["gpu"])
    fragment = gpu.serial[3:10]
    gpus = found(member_a, fragment)["gpu"]
    assert gpu.uuid in gpus
    expected = set(Gpu.objects.filter(serial__contains=fragment).values_list("uuid", flat=True))
    assert set(gpus) == expected
    # Its whole serial still jumps to it.
    assert search(member_a, gpu.serial).exact == reverse("inventory:gpu-detail", args=[gpu.pk])


def test_projects_departments_and_people_by_a_part_of_their_names(department_a, lead_a, member_a):
    vision = Project.objects.create(department=department_a, name="Computer Vision", slug="cv-lab")
    ProjectMembership.objects.create(user=member_a, project=vision)
    person = make_member("jdoe", department_a)
    person.first_name, person.last_name = "Jane", "Hopper-Smith"
    person.save()
    assert found(lead_a, "vision")["project"] == ["Alpha / Computer Vision"]
    assert found(lead_a, "lab")["project"] == ["Alpha / Computer Vision"]  # the slug
    assert found(lead_a, "pha")["department"] == ["Alpha"]
    assert found(lead_a, "hopper")["user"] == ["jdoe"]  # a part of the last name
    assert found(lead_a, "jane smith")["user"] == ["jdoe"]  # the words of the full name
    assert found(lead_a, "ber-a")["user"] == ["member-a"]  # a part of the username


def test_two_characters_look_at_prefixes_only(department_a, member_a):
    make_job(department_a, "train-pretrain-0001", state="pending")
    assert MIN_SUBSTRING == 3
    assert "job" not in found(member_a, "pr")  # no job starts with it; too short to look inside
    assert "job" in found(member_a, "tr")  # a prefix still is one


# --- ranking ------------------------------------------------------------------------------------------------


def test_exact_then_prefix_then_substring(department_a, member_a):
    inside = make_job(department_a, "llama-pretrain", state="pending")
    starts = make_job(department_a, "pretrain-llama", state="pending")
    whole = make_job(department_a, "pretrain", state="pending")
    newer_inside = make_job(department_a, "mistral-pretrain", state="pending")
    jobs = found(member_a, "pretrain")["job"]
    assert jobs == [
        f"#{whole.pk} pretrain",  # named so: first
        f"#{starts.pk} pretrain-llama",  # starts with it
        f"#{newer_inside.pk} mistral-pretrain",  # contains it, newest first
        f"#{inside.pk} llama-pretrain",
    ]


def test_a_rack_named_so_comes_before_racks_located_so(member_a):
    # "gb-r01" names a rack (first) and is no part of a location; "r0" would be too short to look inside.
    assert found(member_a, "gb-r01")["rack"] == ["gb-r01"]
    racks = search(member_a, "gb-r0").groups
    assert next(g for g in racks if g.kind == "rack").hits[0].title == "gb-r01"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="trigram similarity is PostgreSQL's")
def test_on_postgresql_substring_matches_are_ranked_by_similarity(department_a, lead_a):
    far = Project.objects.create(department=department_a, name="Big vision transformer zoo", slug="zoo")
    near = Project.objects.create(department=department_a, name="Vision", slug="the-vision")
    close = Project.objects.create(department=department_a, name="Old visions", slug="old")
    # None starts with "isio"; the one whose word is most like it comes first, not the alphabet's.
    result = found(lead_a, "ision")["project"]
    assert result[0] == f"Alpha / {near.name}", result
    assert set(result) == {f"Alpha / {p.name}" for p in (far, near, close)}


# --- counts -------------------------------------------------------------------------------------------------


def test_substring_matches_are_counted_after_the_shown_ones(department_a, member_a):
    for n in range(LIMIT + 7):
        make_job(department_a, f"sweep-pretrain-{n:03d}", state="pending")
    group = next(g for g in search(member_a, "pretrain").groups if g.kind == "job")
    assert len(group.hits) == LIMIT
    assert group.more == 7 and not group.more_at_least


def test_a_count_stops_at_the_cap(monkeypatch, department_a, member_a, client_as):
    from portal.pages import search as search_module

    monkeypatch.setattr(search_module, "COUNT_CAP", LIMIT + 3)
    for n in range(LIMIT + 10):
        make_job(department_a, f"sweep-pretrain-{n:03d}", state="pending")
    group = next(g for g in search(member_a, "pretrain").groups if g.kind == "job")
    assert group.more == 3 and group.more_at_least
    html = client_as("member_a").get(SEARCH, {"q": "pretrain"}).content.decode()
    assert "and at least 3 more" in html
    assert COUNT_CAP == 1000


# --- tenants ------------------------------------------------------------------------------------------------


THEIRS = ("beta-confidential-pretrain", "Classified Robotics", "Secretkeeper", "bob-beta")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_member_finds_nothing_of_another_department_by_a_part_of_it(
    client_as, department_a, department_b, member_a, lead_a, platform_admin
):
    make_job(department_b, "beta-confidential-pretrain", state="pending")
    Project.objects.create(department=department_b, name="Classified Robotics", slug="robotics")
    person = make_member("bob-beta", department_b)
    person.first_name, person.last_name = "Robert", "Secretkeeper"
    person.save()
    for viewer in ("member_a", "lead_a"):
        client = client_as(viewer)
        parts = ("confidential", "fidential pretrain", "robotic", "classified", "secretkeep", "bob-b", "eta")
        for q in parts:
            response = client.get(SEARCH, {"q": q})
            assert response.status_code == 200, (viewer, q)
            html = response.content.decode()
            result = kinds(response)
            assert not set(result) & {"job", "project", "user", "department"}, (viewer, q, result)
            suggested = client.get("/search/suggest/", {"q": q}).content.decode()
            for text in (html, suggested):
                for theirs in (
                    "beta-confidential-pretrain",
                    "Classified Robotics",
                    "Secretkeeper",
                    "bob-beta",
                ):
                    assert theirs not in text, (viewer, q, theirs)
                assert "Beta" not in text, (viewer, q)
    # The admin finds all of them by the same parts.
    admin_found = found(platform_admin, "fidential")
    assert admin_found["job"][0].endswith("beta-confidential-pretrain")
    assert found(platform_admin, "classified")["project"] == ["Beta / Classified Robotics"]
    assert found(platform_admin, "secretkeep")["user"] == ["bob-beta"]


def test_the_inventory_is_everyones_by_a_part_too(client_as, department_a, member_a, outsider):
    tray = ComputeTray.objects.get(hostname="gb-r02-t07")
    assert "gb-r02-t07" in found(outsider, "02-t07")["tray"]
    assert (
        reverse("inventory:tray-detail", args=[tray.pk])
        in client_as(outsider).get(SEARCH, {"q": "02-t07"}).content.decode()
    )


@given(text=st.text(max_size=60), q=st.text(max_size=20))
def test_marking_keeps_the_text_and_marks_only_what_the_query_matched(text, q):
    parts = matched_parts(text, q)
    assert "".join(part for part, _ in parts) == text
    words = {word.casefold() for word in [q, *q.split()]}
    for part, hit in parts:
        assert part
        if hit:  # a marked part is the query or its words (overlapping matches are merged)
            assert any((w and w in part.casefold()) or part.casefold() in w for w in words), (part, q)
