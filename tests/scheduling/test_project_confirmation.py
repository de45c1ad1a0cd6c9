"""The confirmed steps towards named projects (scheduling.views.projects, scheduling.project_changes): a
department's first named project and putting people of the default project in a named one are answered
with a confirmation page whose GET says who and what changes and writes nothing, and whose POST applies
the step; hostile input is a 4xx with nothing written."""

import re

import pytest
from django.urls import reverse

from core.models import AuditEvent
from scheduling.choices import JobState
from tenancy.models import Department, Project, ProjectMembership
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
CREATE = "/tenancy/departments/research/projects/"
CONFIRM = "/tenancy/departments/research/projects/confirm/"
PEOPLE = "/tenancy/departments/research/project-people/confirm/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=16)


@pytest.fixture
def running(department_a):
    """Two running 4-GPU jobs of the default project, in quota (the older first)."""
    default = Project.objects.get(department=department_a, is_default=True)
    return [
        make_job(department_a, name, trays=[tray], project=default, over_quota=False)
        for name, tray in zip(("older", "newer"), free_trays(2), strict=True)
    ]


def written() -> tuple:
    return (
        AuditEvent.objects.count(),
        Project.objects.count(),
        ProjectMembership.objects.count(),
    )


def test_the_first_named_project_is_confirmed_with_who_and_what_changes(
    client_as, lead_a, member_a, department_a, running
):
    client = client_as(lead_a)
    before = written()
    body = {"name": "LLM", "guaranteed_gpus": "12", "over_quota_weight": "1", "limit_gpus": ""}
    response = client.post(CREATE, body, **HTMX)
    assert response.status_code == 200 and response["HX-Redirect"].startswith(CONFIRM + "?")
    assert written() == before
    page = client.get(response["HX-Redirect"])
    markup = page.content.decode()
    assert page.status_code == 200 and 'data-confirm="new-project"' in markup
    assert "first named project" in markup
    assert "Default is guaranteed 16 GPUs now and 4 after it: the new project takes 12." in markup
    # The newer job is beyond the default project's 4 GPUs left; the older keeps its guarantee.
    assert (
        "1 running job of the default project (4 GPUs in all) falls beyond its new guarantee, and the new "
        "project's work may reclaim it."
    ) in " ".join(markup.split())
    newer = markup.split(f'data-job="{running[1].pk}"')[1].split("</tr>")[0]
    older = markup.split(f'data-job="{running[0].pk}"')[1].split("</tr>")[0]
    assert "may be reclaimed by the new project" in newer and "keeps its guarantee" in older
    assert "Nobody loses the right to submit" in markup
    assert written() == before  # a GET never writes

    # The page's hidden fields: its values and what it showed.
    response = client.post(CONFIRM, {**dict(page.context["values"]), "seen": page.context["changes"].digest})
    assert response.status_code == 302
    assert response["Location"] == reverse("scheduling:department-detail", args=["research"]) + "#projects"
    assert Project.objects.named().get().slug == "llm"
    # A later project that changes no running job's guarantee is created in place.
    response = client.post(CREATE, {**body, "name": "Tiny", "guaranteed_gpus": "0"}, **HTMX)
    assert "HX-Redirect" not in response and Project.objects.named().count() == 2


def test_a_plain_form_post_goes_to_the_confirmation_too(client_as, lead_a, department_a):
    response = client_as(lead_a).post(
        CREATE, {"name": "LLM", "guaranteed_gpus": "0", "over_quota_weight": "1"}
    )
    assert response.status_code == 302 and response["Location"].startswith(CONFIRM + "?")
    assert not Project.objects.named().exists()


@pytest.mark.parametrize(
    "body",
    [
        {"name": "LLM", "guaranteed_gpus": "many", "over_quota_weight": "1"},
        {"name": "LLM", "guaranteed_gpus": "-1", "over_quota_weight": "1"},
        {"name": "LLM", "guaranteed_gpus": "99999999999999999999", "over_quota_weight": "1"},
        {"name": "LLM", "guaranteed_gpus": "17", "over_quota_weight": "1"},  # more than the department's
        {"name": "bad\x00name", "guaranteed_gpus": "1", "over_quota_weight": "1"},
        # Invalid UTF-8 in a form (a lone surrogate's bytes) arrives as replacement characters.
        {"name": "N\ufffd\ufffd\ufffd", "guaranteed_gpus": "1", "over_quota_weight": "1"},
        {"name": "", "guaranteed_gpus": "1", "over_quota_weight": "1"},
        {"name": "LLM", "slug": "Not A Slug", "guaranteed_gpus": "1", "over_quota_weight": "1"},
        {"name": "Default", "guaranteed_gpus": "1", "over_quota_weight": "1"},  # the default's name
        {"name": "LLM-Pretrain", "slug": "default", "guaranteed_gpus": "1", "over_quota_weight": "1"},
    ],
)
def test_hostile_input_on_the_new_project_confirmation_is_a_400_and_writes_nothing(
    client_as, lead_a, department_a, body
):
    client = client_as(lead_a)
    before = written()
    page = client.get(CONFIRM, body)
    # A project that would be refused is not asked about: the GET answers the refusal, in words, labelled
    # with the form's own field names, and offers nothing to confirm.
    markup = page.content.decode()
    said = "NUL character" in markup if "\x00" in body["name"] else 'role="alert"' in markup  # (an address)
    assert page.status_code == 400 and said and 'data-confirm="new-project"' not in markup
    assert "guaranteed_gpus:" not in markup and "__all__" not in markup
    assert written() == before
    response = client.post(CONFIRM, body)
    assert response.status_code == 400, response.content
    assert 'role="alert"' in response.content.decode()
    assert written() == before


def test_a_lone_surrogate_in_the_name_is_a_400_and_writes_nothing(client_as, lead_a, department_a):
    # UTF-8 cannot carry one: sent as the bytes a careless encoder makes of U+D800.
    raw = "name=%ED%A0%80&guaranteed_gpus=1&over_quota_weight=1"
    client = client_as(lead_a)
    before = written()
    response = client.post(CONFIRM, raw, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400
    assert written() == before


def test_only_the_departments_leads_confirm_and_other_departments_are_404(
    client_as, member_a, lead_b, department_a
):
    body = {"name": "LLM", "guaranteed_gpus": "1", "over_quota_weight": "1"}
    before = written()
    assert client_as(member_a).get(CONFIRM, body).status_code == 403
    assert client_as(member_a).post(CONFIRM, body).status_code == 403
    assert client_as(lead_b).get(CONFIRM, body).status_code == 404
    assert client_as(lead_b).post(CONFIRM, body).status_code == 404
    assert client_as(lead_b).post(PEOPLE, {"project": "1", "username": "member-a"}).status_code == 404
    assert client_as("outsider").post(CONFIRM, body).status_code == 404
    assert written() == before


@pytest.fixture
def vision(department_a, lead_a):
    from tenancy.projects import create_project

    return create_project(lead_a, department_a, name="Vision", guaranteed_gpus=8)


def test_putting_someone_of_the_default_project_in_a_named_one_is_confirmed(
    client_as, lead_a, member_a, vision, running, department_a
):
    running[0].submitted_by = member_a
    running[0].save()
    waiting = make_job(
        department_a, "compile", JobState.PENDING, submitted_by=member_a, project=running[0].project, gpus=1
    )
    client = client_as(lead_a)
    before = written()
    response = client.post(
        f"/tenancy/departments/research/projects/{vision.pk}/people/",
        {"username": member_a.username, "role": "member"},
        **HTMX,
    )
    assert response["HX-Redirect"].startswith(PEOPLE + "?") and written() == before
    page = client.get(response["HX-Redirect"])
    markup = page.content.decode()
    assert page.status_code == 200 and 'data-confirm="people"' in markup
    row = markup.split(f'data-username="{member_a.username}"')[1].split("</tr>")[0]
    assert "no longer in Default: their next jobs go to Vision" in row
    # Which of their jobs stay, named, and what becomes of the pending one (the second walkthrough: the
    # count alone did not say that job #471 would go on waiting under the default project's guarantee).
    said = " ".join(re.sub(r"<[^>]+>", "", row).split())
    assert (
        f"2 running or pending jobs of theirs stay in the default project (a move moves no job): "
        f"#{running[0].pk} older (running), #{waiting.pk} compile (pending). The pending one goes on waiting "
        "there, under the default project's guarantee: cancel it and submit it again in Vision if it belongs "
        "there."
    ) in said
    assert f'href="/scheduling/jobs/{waiting.pk}/"' in row
    assert written() == before
    body = {"project": vision.pk, "username": member_a.username, "role": "member"}
    response = client.post(PEOPLE, {**body, "seen": page.context["changes"].digest})
    assert response.status_code == 302
    assert list(ProjectMembership.objects.values_list("user", "project")) == [(member_a.pk, vision.pk)]


def test_the_default_project_row_moves_several_people_at_once_after_confirmation(
    client_as, lead_a, member_a, vision, department_a
):
    from tests.factories import make_member

    other = make_member("other-a", department_a)
    client = client_as(lead_a)
    page = client.get("/tenancy/departments/research/").content.decode()
    row = page.split('data-project="default"')[1].split("</tr>")[0]
    assert f'value="{member_a.username}"' in row and 'value="other-a"' in row and "Review the move" in row
    query = {"project": vision.pk, "username": [member_a.username, "other-a"], "role": "member"}
    page = client.get(PEOPLE, query)
    assert page.status_code == 200
    assert not ProjectMembership.objects.exists()
    assert client.post(PEOPLE, {**query, "seen": page.context["changes"].digest}).status_code == 302
    assert set(ProjectMembership.objects.values_list("user", flat=True)) == {member_a.pk, other.pk}


@pytest.mark.slow(reason="12 cases, 0.9 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "query",
    [
        {"project": "x", "username": "member-a"},  # not a number
        {"project": "-3", "username": "member-a"},
        {"project": "99999999999999", "username": "member-a"},
        {"username": "member-a"},  # no project
        {"project": "VISION", "username": "member-a"},  # a slug, in the wrong case
        {"project": "{vision}", "username": "member-b"},  # another department's member
        {"project": "{vision}", "username": "nobody"},
        {"project": "{vision}"},  # nobody chosen
        {"project": "{vision}", "username": "member-a", "role": "admin"},
        {"project": "{vision}", "username": "member-a", "role": "LEAD"},
        {"project": "{default}", "username": "member-a"},  # the default project
        {"project": "{vision}", "username": "member-a\x00"},
    ],
)
def test_hostile_input_on_the_people_confirmation_is_a_4xx_and_writes_nothing(
    client_as, lead_a, member_a, member_b, vision, department_a, query
):
    default = Project.objects.get(department=department_a, is_default=True)
    query = {
        k: v.format(vision=vision.pk, default=default.pk) if k == "project" else v for k, v in query.items()
    }
    client = client_as(lead_a)
    before = written()
    for response in (client.get(PEOPLE, query), client.post(PEOPLE, query)):
        assert response.status_code in (400, 404), (query, response.status_code)
    assert written() == before


def test_another_departments_project_id_is_a_404(client_as, lead_a, member_a, department_a):
    theirs = make_department("Beta", guaranteed_gpus=8)
    other = Project.objects.create(department=theirs, name="B", slug="b")
    query = {"project": other.pk, "username": member_a.username}
    client = client_as(lead_a)
    assert client.get(PEOPLE, query).status_code == 404
    assert client.post(PEOPLE, query).status_code == 404
    assert not ProjectMembership.objects.exists()


def test_stale_confirmations_are_shown_again_not_applied(client_as, lead_a, member_a, department_a, running):
    """What the page showed changed before its POST: the page again (409) with the changes as they are now,
    nothing written; confirmed from that page, the step is applied."""
    client = client_as(lead_a)
    body = {"name": "LLM", "guaranteed_gpus": "12", "over_quota_weight": "1", "limit_gpus": ""}
    seen = client.get(CONFIRM, body).context["changes"].digest
    running[1].delete()  # the job the page said could be reclaimed has ended
    before = written()
    response = client.post(CONFIRM, {**body, "seen": seen})
    assert response.status_code == 409 and "data-stale" in response.content.decode()
    assert "Every running job keeps its guarantee." in response.content.decode()
    assert client.post(CONFIRM, body).status_code == 409  # nothing seen: nothing applied
    assert written() == before
    response = client.post(CONFIRM, {**body, "seen": response.context["changes"].digest})
    assert response.status_code == 302 and Project.objects.named().get().slug == "llm"

    query = {"project": Project.objects.named().get().pk, "username": member_a.username, "role": "member"}
    seen = client.get(PEOPLE, query).context["changes"].digest
    running[0].submitted_by = member_a  # a job of theirs in the default project, unknown to the page
    running[0].save()
    before = written()
    response = client.post(PEOPLE, {**query, "seen": seen})
    assert response.status_code == 409
    assert "1 running or pending job of theirs stays in the default project" in response.content.decode()
    assert written() == before


def test_the_sentence_and_the_table_count_the_same_jobs_beyond_the_guarantee(client_as, lead_a, department_a):
    """As in the demo (a department's work is training, builds and inference, all in the default project):
    a first named project that leaves the default project less than its work not preemptible holds (which
    holds it first, as the scheduler stands it), so five jobs fall beyond it, three of them training
    (preemptible) and two not. The sentence and the table come from one list and say the same."""
    from html import unescape

    from scheduling.choices import PriorityClass

    department = department_a
    default = Project.objects.get(department=department, is_default=True)
    t, b, i = PriorityClass.TRAIN, PriorityClass.BUILD, PriorityClass.INFERENCE
    classes = [t, b, t, i, b, t, b]  # oldest first, 4 GPUs each
    for n, (cls, tray) in enumerate(zip(classes, free_trays(len(classes)), strict=True)):
        make_job(department, f"llm-{n}", trays=[tray], project=default, over_quota=False, priority_class=cls)
    Department.objects.filter(pk=department.pk).update(guaranteed_gpus=28)  # all of it in quota
    # The default project keeps 8: the two oldest jobs not preemptible (llm-1, llm-3) keep it.
    body = {"name": "LLM", "guaranteed_gpus": "20", "over_quota_weight": "1", "limit_gpus": ""}
    page = client_as(lead_a).get(CONFIRM, body)
    assert page.status_code == 200
    markup = page.content.decode()

    rows = re.findall(r'<tr data-job="(\d+)">(.*?)</tr>', markup, re.S)
    after = {int(pk): re.sub(r"<[^>]+>", "", cells.rsplit("<td>", 1)[1]) for pk, cells in rows}
    names = dict(department.jobs.values_list("pk", "name"))
    kept = [names[pk] for pk, said in after.items() if said == "keeps its guarantee"]
    reclaimed = [pk for pk, said in after.items() if said.startswith("beyond the guarantee: may be reclaim")]
    kept_running = [pk for pk, said in after.items() if "not preemptible: it keeps running" in said]
    assert kept == ["llm-1", "llm-3"] and (len(after), len(reclaimed), len(kept_running)) == (7, 3, 2)

    sentence = unescape(re.search(r'data-change="beyond">(.*?)</p>', markup, re.S).group(1))
    assert " ".join(sentence.split()) == (
        "5 running jobs of the default project (20 GPUs in all) fall beyond its new guarantee. Of these, 3 "
        "(12 GPUs) may be reclaimed; 2 are not preemptible and keep running."
    )
    changes = page.context["changes"]
    assert {c.job.pk for c in changes.losing} == set(reclaimed + kept_running)
    assert {c.job.pk for c in changes.beyond} == set(reclaimed)

    # In Japanese too, the two sentences one after the other (no space after 。).
    from tests.i18n_check import assert_japanese, spacing_slips

    markup = assert_japanese(client_as(lead_a), CONFIRM, data=body)
    sentence = re.search(r'data-change="beyond">(.*?)</p>', markup, re.S).group(1)
    assert sentence == (
        "既定のプロジェクトの実行中のジョブ 5 件（合計 GPU 20 基）が新しい保証を超えます。"  # noqa: RUF001
        "そのうち 3 件（GPU 12 基）は回収されることがあります。"  # noqa: RUF001
        "2 件はプリエンプト不可のため実行を続けます。"
    )
    assert not spacing_slips(sentence)


def test_the_gpus_beyond_are_the_figure_the_panel_shows_once_the_project_is_made(
    client_as, lead_a, department_a
):
    """A job across the new guarantee: the scheduler holds a guarantee with whole jobs, so it is beyond it
    whole, and the sentence, the table and the panel's Default row (once the project is made) all say its
    8 GPUs (the panel said 6, the GPUs in quota minus the guarantee, beside a sentence counting 8)."""
    default = Project.objects.get(department=department_a, is_default=True)
    trays = free_trays(3)
    for name, held in (("oldest", trays[:1]), ("across", trays[1:3])):  # 4 GPUs, then 8
        make_job(department_a, name, trays=held, project=default, over_quota=False)
    # The default project keeps 16 - 10 = 6: "oldest" (4) keeps it, "across" (8) falls beyond, all of it.
    body = {"name": "LLM", "guaranteed_gpus": "10", "over_quota_weight": "1", "limit_gpus": ""}
    client = client_as(lead_a)
    page = client.get(CONFIRM, body)
    markup = " ".join(page.content.decode().split()).replace("&#x27;", "'")
    assert (
        "1 running job of the default project (8 GPUs in all) falls beyond its new guarantee, and the new "
        "project's work may reclaim it."
    ) in markup
    response = client.post(CONFIRM, {**dict(page.context["values"]), "seen": page.context["changes"].digest})
    assert response.status_code == 302 and Project.objects.filter(name="LLM").exists()
    panel = client.get(reverse("scheduling:department-detail", args=["research"]))
    assert panel.context["unassigned"].from_siblings == 8
    assert "8 beyond its guarantee" in panel.content.decode()


def test_a_first_project_that_leaves_the_defaults_build_work_no_room_says_so_and_it_waits_as_told(
    client_as, lead_a, member_a, department_a
):
    """The default project's running inference (8 GPUs, not preemptible) fits its 16 GPUs now and not the 4
    the new project leaves it: its new build and inference jobs will wait, and the confirmation says so
    before the step (a walkthrough found such a job waiting with no word of it anywhere); after it, a new
    build job of the default project waits naming that share."""
    from scheduling.services.passes import run_pass

    default = Project.objects.get(department=department_a, is_default=True)
    for name, tray in zip(("serve-1", "serve-2"), free_trays(2), strict=True):
        make_job(
            department_a, name, trays=[tray], project=default, priority_class="inference", over_quota=False
        )
    client = client_as(lead_a)
    body = {"name": "LLM", "guaranteed_gpus": "12", "over_quota_weight": "1", "limit_gpus": ""}
    page = client.get(client.post(CREATE, body, **HTMX)["HX-Redirect"])
    markup = " ".join(page.content.decode().split())
    assert (
        "New build, interactive and inference jobs in Default will wait until some of its running ones end: "
        "work that is not preemptible runs only within its project's guarantee, and Default's running work "
        "of those kinds holds 8 GPUs against the 4 it keeps."
    ) in markup
    client.post(CONFIRM, {**dict(page.context["values"]), "seen": page.context["changes"].digest})
    assert Project.objects.named().filter(department=department_a).count() == 1

    build = make_job(
        department_a, "compile", JobState.PENDING, project=default, priority_class="build", gpus=1
    )
    run_pass()
    build.refresh_from_db()
    assert build.state == JobState.PENDING
    assert (
        "the default project: 4 GPUs, what" in build.pending_reason and "it holds 8" in build.pending_reason
    )


def test_a_later_project_that_leaves_the_defaults_build_work_no_room_is_confirmed_too(
    client_as, lead_a, department_a
):
    """Only the first named project always asks; a later one asks when it leaves the default project's new
    non-preemptible work no room, and otherwise is created in place."""
    default = Project.objects.get(department=department_a, is_default=True)
    client = client_as(lead_a)
    body = {"name": "LLM", "guaranteed_gpus": "4", "over_quota_weight": "1", "limit_gpus": ""}
    first = client.get(client.post(CREATE, body, **HTMX)["HX-Redirect"])
    client.post(CONFIRM, {**dict(first.context["values"]), "seen": first.context["changes"].digest})
    make_job(
        department_a,
        "serve",
        trays=free_trays(2),
        project=default,
        priority_class="inference",
        over_quota=False,
    )
    # 12 left to the default project, 8 of it held by inference: a 2-GPU project leaves 10, room still.
    response = client.post(CREATE, {**body, "name": "Small", "guaranteed_gpus": "2"}, **HTMX)
    assert "HX-Redirect" not in response
    response = client.post(CREATE, {**body, "name": "Large", "guaranteed_gpus": "4"}, **HTMX)
    page = client.get(response["HX-Redirect"])
    assert 'data-change="firm-fills"' in page.content.decode()
    assert "Default's running work of those kinds holds 8 GPUs against the 6 it keeps" in " ".join(
        page.content.decode().split()
    )
