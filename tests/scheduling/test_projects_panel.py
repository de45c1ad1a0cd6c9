"""The department page's projects panel (scheduling.views.projects): what each role sees, a lead's changes
(audited),
bad input answered in words with nothing written."""

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from scheduling.choices import HOLDING_STATES, JobState, PriorityClass
from scheduling.models import Job
from scheduling.project_changes import leaf_beyond
from tenancy.models import Project, ProjectMembership
from tenancy.projects import default_project
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=32)


@pytest.fixture
def vision(department_a):
    return Project.objects.create(department=department_a, name="Vision", slug="vision", guaranteed_gpus=16)


@pytest.fixture
def nlp(department_a):
    return Project.objects.create(department=department_a, name="NLP", slug="nlp", guaranteed_gpus=8)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_page_shows_each_projects_guarantee_and_use(
    client_as, lead_a, member_a, department_a, vision, nlp
):
    ProjectMembership.objects.create(user=member_a, project=vision)
    make_job(department_a, "v", trays=free_trays(2), project=vision, over_quota=False)
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    assert 'id="projects"' in page and "24 of its 32 guaranteed GPUs" in page
    row = page.split('data-project="vision"')[1].split("</tr>")[0]
    assert 'data-figure="guaranteed">16<' in row and 'data-figure="in-use">8<' in row
    assert "Create project" in page and "Move" in page
    # A member sees their own project, read-only.
    page = client_as(member_a).get("/tenancy/departments/research/").content.decode()
    assert 'data-project="vision"' in page and 'data-project="nlp"' not in page
    assert "Create project" not in page and "Move</button>" not in page


def test_a_lead_creates_a_project_in_place_and_it_is_audited(client_as, lead_a, department_a, vision):
    # Not the first named project and no running work changes: no confirmation (test_default_projects).
    response = client_as(lead_a).post(
        "/tenancy/departments/research/projects/",
        {"name": "Speech", "guaranteed_gpus": 8, "over_quota_weight": "1.50", "limit_gpus": ""},
        **HTMX,
    )
    assert response.status_code == 200 and 'data-project="speech"' in response.content.decode()
    project = Project.objects.get(slug="speech")
    assert (project.slug, project.guaranteed_gpus, project.limit_gpus) == ("speech", 8, None)
    assert AuditEvent.objects.filter(object_type="tenancy.project", action="create", actor=lead_a).exists()


def test_a_guarantee_that_does_not_fit_is_answered_in_words(client_as, lead_a, vision, nlp):
    response = client_as(lead_a).post(
        "/tenancy/departments/research/projects/",
        {"name": "Big", "guaranteed_gpus": 10, "over_quota_weight": "1"},
        **HTMX,
    )
    page = response.content.decode()
    assert "Research&#x27;s projects would be guaranteed 34 GPUs but the department is guaranteed 32" in page
    assert Project.objects.named().count() == 2


def test_a_lead_moves_a_member_between_projects(client_as, lead_a, member_a, vision, nlp):
    placed = ProjectMembership.objects.create(user=member_a, project=vision)
    client = client_as(lead_a)
    response = client.post(
        f"/tenancy/departments/research/project-people/{placed.pk}/move/", {"to": nlp.pk}, **HTMX
    )
    # Confirmed first (test_project_steps): the page says what changes, its form moves them.
    assert response.status_code == 200 and "/move/confirm/" in response["HX-Redirect"]
    assert ProjectMembership.objects.get(user=member_a).project == vision
    page = client.get(response["HX-Redirect"]).content.decode()
    seen = re.search(r'name="seen" value="(\w+)"', page)[1]
    response = client.post(response["HX-Redirect"].split("?")[0], {"to": nlp.pk, "seen": seen})
    assert response.status_code == 302
    assert ProjectMembership.objects.get(user=member_a).project == nlp
    event = AuditEvent.objects.get(object_type="tenancy.projectmembership", action="update")
    assert event.actor == lead_a and event.after["project"] == nlp.pk


def test_members_cannot_change_projects(client_as, member_a, vision, nlp):
    placed = ProjectMembership.objects.create(user=member_a, project=vision)
    client = client_as(member_a)
    assert client.post("/tenancy/departments/research/projects/", {"name": "X"}).status_code == 403
    assert (
        client.post(
            f"/tenancy/departments/research/project-people/{placed.pk}/move/", {"to": nlp.pk}
        ).status_code
        == 403
    )
    assert client.post(f"/tenancy/departments/research/projects/{vision.pk}/delete/").status_code == 403
    assert (
        ProjectMembership.objects.get(user=member_a).project == vision
        and Project.objects.named().count() == 2
    )


def test_someone_outside_the_department_gets_a_404(client_as, vision):
    assert (
        client_as("lead_b").post("/tenancy/departments/research/projects/", {"name": "X"}).status_code == 404
    )


def test_a_project_with_jobs_is_not_deleted_and_the_lead_is_told_why(client_as, lead_a, department_a, vision):
    make_job(department_a, "done", JobState.COMPLETED, project=vision)
    page = (
        client_as(lead_a)
        .post(f"/tenancy/departments/research/projects/{vision.pk}/delete/", **HTMX)
        .content.decode()
    )
    assert "has jobs (their history names it): it cannot be deleted" in page
    assert Project.objects.filter(pk=vision.pk).exists()


def _offered(page: str, project: Project) -> list[str]:
    """The usernames the lead's "Add to <project>" list offers."""
    select = page.split(f'id="add-{project.pk}"')[1].split("</select>")[0]
    return [part.split('"')[0] for part in select.split('<option value="')[1:]]


def test_add_to_a_project_offers_only_members_not_yet_in_it(client_as, lead_a, member_a, vision, nlp):
    ProjectMembership.objects.create(user=member_a, project=vision)
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    assert _offered(page, vision) == [lead_a.username]
    assert _offered(page, nlp) == sorted([lead_a.username, member_a.username])
    ProjectMembership.objects.create(user=lead_a, project=vision)
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    assert f'id="add-{vision.pk}"' not in page  # everyone is in it: no list to offer
    assert _offered(page, nlp) == sorted([lead_a.username, member_a.username])


def test_adding_someone_already_in_the_project_is_refused_in_words(client_as, lead_a, member_a, vision):
    placed = ProjectMembership.objects.create(user=member_a, project=vision)
    before = AuditEvent.objects.count()
    response = client_as(lead_a).post(
        f"/tenancy/departments/research/projects/{vision.pk}/people/",
        {"username": member_a.username, "role": "lead"},
        **HTMX,
    )
    assert response.status_code == 400
    assert f"{member_a.username} is already in Vision: nothing was changed." in response.content.decode()
    assert list(ProjectMembership.objects.values_list("pk", "role")) == [(placed.pk, "member")]
    assert AuditEvent.objects.count() == before
    # Someone not yet in it is added as before.
    response = client_as(lead_a).post(
        f"/tenancy/departments/research/projects/{vision.pk}/people/",
        {"username": lead_a.username, "role": "member"},
        **HTMX,
    )
    assert response.status_code == 200
    assert ProjectMembership.objects.filter(user=lead_a, project=vision).exists()


def test_deleting_a_project_asks_first_saying_where_its_guarantee_and_people_go(
    client_as, lead_a, member_a, vision
):
    ProjectMembership.objects.create(user=member_a, project=vision)
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    asked = re.search(rf'hx-post="[^"]*/projects/{vision.pk}/delete/[^"]*"[^>]*hx-confirm="([^"]*)"', page)
    assert asked, "the delete form asks before it posts"
    assert asked.group(1) == (
        "Delete project Vision? Its guarantee of 16 GPUs goes back to the default project. Its 1 member "
        "leaves it (member-a): back in the default project unless in another named project. It has no "
        "jobs, running, waiting or finished."
    )


def _question(page: str, project) -> str:
    asked = re.search(rf'hx-post="[^"]*/projects/{project.pk}/delete/[^"]*"[^>]*hx-confirm="([^"]*)"', page)
    return html.unescape(asked.group(1))


def _kept(page: str, project) -> str:
    """Why a project with jobs has no Delete button (its row's disclosure)."""
    kept = re.search(rf'data-project-kept="{project.slug}">.*?<p class="small">(.*?)</p>', page, re.S)
    return html.unescape(kept.group(1))


def test_deleting_without_htmx_asks_on_a_page_first(client_as, lead_a, member_a, vision):
    ProjectMembership.objects.create(user=member_a, project=vision)
    client = client_as(lead_a)
    url = f"/tenancy/departments/research/projects/{vision.pk}/delete/"
    asked = client.post(url)
    assert asked.status_code == 200 and 'data-confirm="asked"' in asked.content.decode()
    question = "Delete project Vision? Its guarantee of 16 GPUs goes back to the default project."
    assert question in html.unescape(asked.content.decode())
    assert Project.objects.filter(pk=vision.pk).exists()
    done = client.post(url, {"confirmed": "yes"})
    assert done.status_code == 302 and not Project.objects.filter(pk=vision.pk).exists()


def test_the_delete_question_names_a_few_people_then_counts_the_rest(client_as, lead_a, vision, nlp):
    from tests.factories import make_member

    for name in ("erin", "bob", "dave", "alice", "carol"):
        ProjectMembership.objects.create(user=make_member(name, vision.department), project=vision)
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    assert _question(page, vision) == (
        "Delete project Vision? Its guarantee of 16 GPUs goes back to the default project. Its 5 members "
        "leave it (alice, bob, carol and 2 more): each back in the default project unless in another named "
        "project. It has no jobs, running, waiting or finished."
    )
    assert _question(page, nlp) == (
        "Delete project NLP? Its guarantee of 8 GPUs goes back to the default project. Nobody is in it. It "
        "has no jobs, running, waiting or finished."
    )


def test_the_delete_question_of_a_project_with_jobs_says_it_stays_as_it_is(
    client_as, lead_a, member_a, department_a, vision
):
    """tenancy.projects.delete_project refuses a project that ever had a job: the question says so, with
    its running and waiting jobs, and the delete indeed changes nothing."""
    ProjectMembership.objects.create(user=member_a, project=vision)
    make_job(department_a, "runs", trays=free_trays(1), project=vision, over_quota=False)
    make_job(department_a, "waits", JobState.PENDING, project=vision)
    make_job(department_a, "waits-too", JobState.PENDING, project=vision)
    make_job(department_a, "done", JobState.COMPLETED, project=vision)
    client = client_as(lead_a)
    page = client.get("/tenancy/departments/research/").content.decode()
    # No Delete button that could only be refused: why not, and what to do instead, behind a disclosure.
    assert f"/projects/{vision.pk}/delete/" not in page
    assert _kept(page, vision) == (
        "Project Vision cannot be deleted: it has 4 jobs, and their history names the project. Of them, "
        "running now: 1; waiting: 2. Nothing changes for them, nor for its people. To wind it down, set its "
        "guarantee to 0 and take out its people (member-a)."
    )
    before = (AuditEvent.objects.count(), list(ProjectMembership.objects.values_list("pk", flat=True)))
    response = client.post(f"/tenancy/departments/research/projects/{vision.pk}/delete/", **HTMX)
    assert "cannot be deleted" in response.content.decode()
    assert Project.objects.filter(pk=vision.pk).exists()
    after = (AuditEvent.objects.count(), list(ProjectMembership.objects.values_list("pk", flat=True)))
    assert after == before


def test_the_delete_question_reads_the_same_alone(rf, lead_a, member_a, department_a, vision):
    """The question's context for one project (scheduling.project_changes.delete_changes, what a page about
    that project alone gives scheduling/_project_delete_question.html) is the panel's."""
    from django.template.loader import render_to_string

    from scheduling.project_changes import delete_changes
    from scheduling.views.projects import panel_context

    ProjectMembership.objects.create(user=member_a, project=vision)
    make_job(department_a, "waits", JobState.PENDING, project=vision)
    request = rf.get("/")
    request.user = lead_a
    panel = next(p for p in panel_context(request, department_a)["projects"] if p.pk == vision.pk)
    assert panel.deletion == delete_changes(vision)
    alone = render_to_string("scheduling/_project_delete_question.html", {"deletion": delete_changes(vision)})
    assert alone.startswith("Project Vision cannot be deleted: it has 1 job, and its history names the")


def _render_panel(rf, user, department) -> str:
    from django.template.loader import render_to_string

    from scheduling.views.projects import panel_context

    request = rf.get("/")
    request.user = user
    return render_to_string("scheduling/_projects.html", panel_context(request, department), request=request)


@pytest.mark.parametrize(("persona", "queries"), [("lead_a", 6), ("member_a", 4)])
def test_the_panel_reads_its_figures_once_however_many_projects(
    rf, request, persona, queries, department_a, vision, nlp, member_a, django_assert_num_queries
):
    """The named projects' total guarantee comes from the rows (a member's rows carry the hidden ones'), and
    a row's namespace does not read its department again: a lead's panel is 6 queries (access, projects,
    their people, GPUs in use, the department's members, the projects' jobs for the Delete question), a
    member's 4, with three projects as with one."""
    speech = Project.objects.create(department=department_a, name="Speech", slug="speech", guaranteed_gpus=4)
    for project in (vision, nlp, speech):
        ProjectMembership.objects.create(user=member_a, project=project)
    user = request.getfixturevalue(persona)
    with django_assert_num_queries(queries):
        page = _render_panel(rf, user, department_a)
    assert 'data-project="speech"' in page and "namespace and Slurm account" in page


def test_a_members_panel_figures_add_up_to_the_department(rf, member_a, department_a, vision, nlp):
    """A member sees only their projects, but the named projects' total and what the default project keeps
    are one figure: they add up to the department's guarantee (the total said 16 of 32 while the default
    project kept 8)."""
    ProjectMembership.objects.create(user=member_a, project=vision)
    page = " ".join(_render_panel(rf, member_a, department_a).split())
    assert 'data-project="nlp"' not in page
    assert "24 of its 32 guaranteed GPUs are guaranteed to its named projects" in page
    assert "The default project keeps the rest (8 GPUs)" in page


def test_the_delete_question_is_asked_in_japanese(client_as, lead_a, department_a, vision, nlp):
    from tests.factories import make_member
    from tests.i18n_check import english_left, spacing_slips

    for name in ("erin", "bob", "dave", "alice"):
        ProjectMembership.objects.create(user=make_member(name, department_a), project=vision)
    make_job(department_a, "waits", JobState.PENDING, project=nlp)
    page = client_as(lead_a).get("/tenancy/departments/research/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    deletable, kept = _question(page, vision), _kept(page, nlp)
    assert deletable == (
        "プロジェクト Vision を削除しますか？保証の 16 基の GPU は既定のプロジェクトに戻ります。"  # noqa: RUF001
        "メンバー 4 人（alice、bob、dave ほか 1 人）はこのプロジェクトから外れます。"  # noqa: RUF001
        "ほかの名前付きプロジェクトに属していなければ既定のプロジェクトに戻ります。"
        "ジョブ（実行中、待機中、終了済み）はありません。"  # noqa: RUF001
    )
    assert kept.startswith("プロジェクト NLP は削除できません。ジョブが 1 件あり")
    assert "そのうち実行中 0 件、待機中 1 件です。" in kept
    for question in (deletable, kept):
        assert not english_left(f"<p>{question}</p>"), question
        assert not spacing_slips(question), question


_PANEL_JOB = st.tuples(
    st.sampled_from(["vision", "nlp", "default", None]),  # its project (None: from before projects)
    st.integers(1, 12),  # GPUs
    st.sampled_from(list(PriorityClass.values)),
    st.integers(0, 5),  # started (and placed, when placed again) this many minutes ago: ties too
    st.booleans(),  # placed again since it started
    st.booleans(),  # borrowing from other departments
    st.sampled_from(list(HOLDING_STATES)),
)


@pytest.mark.slow(reason="40 examples, about 5 s on 2 cores: beyond make test-fast's budget")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(_PANEL_JOB, max_size=14), vision_gpus=st.integers(0, 40))
def test_the_panels_gpus_beyond_each_guarantee_are_the_confirmations_answer(
    department_a, vision, nlp, jobs, vision_gpus
):
    """The panel sums the GPUs beyond each leaf's guarantee in the database (issue 32: a department with
    20,000 running jobs); the confirmations answer the same question in Python over the jobs in standing
    order (scheduling.project_changes.leaf_beyond). They agree on any mix of projects, sizes, classes, start
    and placement times (ties too), borrowing and guarantees (the default project's cut to 0 when the named
    ones take more than the department's)."""
    from scheduling.project_changes import running_figures as _running

    Project.objects.filter(pk=vision.pk).update(guaranteed_gpus=vision_gpus)
    projects = {"vision": vision, "nlp": nlp, "default": default_project(department_a), None: None}
    now = timezone.now()
    made = Job.objects.bulk_create(
        Job(
            department=department_a,
            name=f"j{n}",
            state=state,
            project=projects[project],
            gpus=gpus,
            priority_class=priority,
            started_at=now - timedelta(minutes=minutes),
            placed_at=now - timedelta(minutes=minutes - 1) if placed else None,
            over_quota=borrowing,
        )
        for n, (project, gpus, priority, minutes, placed, borrowing, state) in enumerate(jobs)
    )
    try:
        running = list(Job.objects.filter(pk__in=[job.pk for job in made]))
        leaves = {
            vision.pk: (vision_gpus, [j for j in running if j.project_id == vision.pk]),
            nlp.pk: (nlp.guaranteed_gpus, [j for j in running if j.project_id == nlp.pk]),
            None: (
                max(0, department_a.guaranteed_gpus - vision_gpus - nlp.guaranteed_gpus),
                [j for j in running if j.project_id in (None, projects["default"].pk)],
            ),
        }
        expected = {
            leaf: sum(j.gpus for j in jobs if j.pk in leaf_beyond(guaranteed, jobs))
            for leaf, (guaranteed, jobs) in leaves.items()
        }
        _, beyond = _running(department_a)
        assert {leaf: beyond.get(leaf, 0) for leaf in leaves} == expected
    finally:
        Job.objects.filter(pk__in=[job.pk for job in made]).delete()
