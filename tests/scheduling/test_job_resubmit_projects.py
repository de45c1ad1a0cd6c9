"""Jobs and projects on the job page (scheduling.resubmit): a job without a project, in a department that now
shares its GPUs among projects, is resubmitted into the default project by someone in no named project, or
offered with one of their named projects to choose, never a button the submission then refuses; its clone
preselects the job's project, or says the department now needs one.

On the demo inventory (submit_job checks the cluster can hold the job)."""

import re

import pytest
from django.urls import reverse

from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.models import Project, ProjectMembership
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
NEW = "/scheduling/jobs/new/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha", guaranteed_gpus=40)


@pytest.fixture
def old_job(department_a, member_a):
    """Alpha's own work from before it had projects."""
    return make_job(department_a, "nightly", JobState.FAILED, submitted_by=member_a, work={"script": SCRIPT})


@pytest.fixture
def projects(department_a):
    return {
        "vision": Project.objects.create(department=department_a, name="Vision", slug="vision"),
        "speech": Project.objects.create(department=department_a, name="Speech", slug="speech"),
    }


def page(client, job) -> str:
    response = client.get(reverse("scheduling:job-detail", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def resubmit_control(markup: str) -> str:
    """The Resubmit link or button of the job page's actions."""
    found = re.search(r'<(a|button)[^>]*data-resubmit="[^"]*"[^>]*>.*?</\1>', markup, re.S)
    assert found, "no Resubmit control on the job page"
    return found.group(0)


def test_a_job_whose_values_pass_offers_a_plain_resubmit(client_as, old_job):
    client = client_as("member_a")
    control = resubmit_control(page(client, old_job))
    assert 'data-resubmit="ready"' in control
    assert f'href="{reverse("scheduling:job-resubmit", args=[old_job.pk])}"' in control
    assert 'id="resubmit-why"' not in page(client, old_job)
    confirm = client.get(reverse("scheduling:job-resubmit", args=[old_job.pk])).content.decode()
    assert 'name="project"' not in confirm


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_job_without_project_in_a_department_with_projects_asks_for_one(
    client_as, member_a, old_job, projects
):
    ProjectMembership.objects.create(user=member_a, project=projects["vision"])
    client = client_as(member_a)
    markup = page(client, old_job)
    control = resubmit_control(markup)
    assert 'data-resubmit="choose-project"' in control and "disabled" not in control
    assert (
        "This job is in Alpha&#x27;s default project, which is for its members in no named project: choose "
        "one of your projects to run it under." in markup
    )

    url = reverse("scheduling:job-resubmit", args=[old_job.pk])
    confirm = client.get(url)
    markup = confirm.content.decode()
    # Only the projects member_a may use; the one project is the choice.
    assert '<option value="vision">Vision (vision)</option>' in markup
    assert "speech" not in markup
    assert Job.objects.count() == 1  # a GET never writes

    # No project, or one not theirs: a clear 400, nothing written.
    refused = client.post(url, {"key": confirm.context["key"]})
    assert refused.status_code == 400
    assert "Choose the project to run the job under (yours in Alpha: Vision)." in refused.content.decode()
    refused = client.post(url, {"key": confirm.context["key"], "project": "speech"})
    assert refused.status_code == 400
    assert Job.objects.count() == 1

    response = client.post(url, {"key": confirm.context["key"], "project": "vision"})
    new = Job.objects.exclude(pk=old_job.pk).get()
    assert response.status_code == 302, response.content
    assert response["Location"] == reverse("scheduling:job-detail", args=[new.pk])
    assert new.project == projects["vision"] and new.name == "nightly" and new.work == old_job.work
    assert new.submitted_by == member_a


def test_in_no_named_project_a_job_from_before_the_projects_goes_to_the_default_project(
    client_as, old_job, projects
):
    client = client_as("member_a")  # in none of Alpha's named projects: in its default project
    control = resubmit_control(page(client, old_job))
    assert 'data-resubmit="ready"' in control and " disabled" not in control
    url = reverse("scheduling:job-resubmit", args=[old_job.pk])
    confirm = client.get(url)
    assert client.post(url, {"key": confirm.context["key"]}).status_code == 302
    new = Job.objects.exclude(pk=old_job.pk).get()
    assert new.project == Project.objects.get(department=old_job.department, is_default=True)
    # The clone chooses the default project too, with nothing to say.
    clone = client.get(NEW, {"clone": old_job.pk}).content.decode()
    assert selected_project(clone) == "default" and "data-clone-note" not in clone


def test_a_job_over_its_projects_limit_cannot_be_resubmitted_and_says_why(
    client_as, department_a, projects, lead_a
):
    projects["vision"].limit_gpus = 4
    projects["vision"].save()
    job = make_job(
        department_a, "big", JobState.COMPLETED, gpus=8, project=projects["vision"], work={"script": SCRIPT}
    )
    markup = page(client_as(lead_a), job)
    assert 'data-resubmit="blocked"' in resubmit_control(markup)
    assert (
        "over project Vision&#x27;s limit of 4 GPUs" in markup and "clone it and ask for fewer GPUs" in markup
    )


# --- clone ----------------------------------------------------------------------------------------------


def selected_project(markup: str) -> str:
    select = re.search(r'<select name="project".*?</select>', markup, re.S)
    assert select, "no project field"
    chosen = re.findall(r'<option value="([^"]*)" selected>', select.group(0))
    return chosen[0] if chosen else ""


def test_clone_preselects_the_jobs_project(client_as, member_a, department_a, projects):
    ProjectMembership.objects.create(user=member_a, project=projects["speech"])
    ProjectMembership.objects.create(user=member_a, project=projects["vision"])
    job = make_job(
        department_a, "asr", JobState.COMPLETED, project=projects["speech"], work={"script": SCRIPT}
    )
    markup = client_as(member_a).get(NEW, {"clone": job.pk}).content.decode()
    assert selected_project(markup) == "speech"
    assert "data-clone-note" not in markup


def test_clone_of_a_job_without_project_chooses_the_one_project_and_says_so(
    client_as, member_a, old_job, projects
):
    ProjectMembership.objects.create(user=member_a, project=projects["vision"])
    markup = client_as(member_a).get(NEW, {"clone": old_job.pk}).content.decode()
    assert selected_project(markup) == "vision"
    assert (
        "This job is in Alpha&#x27;s default project, which is for its members in no named project: Vision, "
        "your one project there, is chosen; change it if the job belongs elsewhere." in markup
    )


def test_clone_of_a_job_without_project_says_one_is_needed(client_as, member_a, old_job, projects):
    ProjectMembership.objects.create(user=member_a, project=projects["vision"])
    ProjectMembership.objects.create(user=member_a, project=projects["speech"])
    markup = client_as(member_a).get(NEW, {"clone": old_job.pk}).content.decode()  # in two named projects
    assert selected_project(markup) == ""
    note = re.search(r'<p class="note note-warn" id="id_project_note" data-clone-note>([^<]*)</p>', markup)
    assert note and note.group(1) == (
        "This job is in Alpha&#x27;s default project, which is for its members in no named project: choose "
        "one of your projects (Speech, Vision)."
    )


def test_a_job_of_the_default_project_says_so_not_that_it_ran_before_the_projects(
    client_as, member_a, department_a, projects
):
    """A job its submitter sent to the default project (pending, never run) after the department's projects
    existed, seen once they are in a named project: the page once said "This job ran as Alpha's own work"
    (found by a walkthrough, on a job that had never run)."""
    default = Project.objects.get(department=department_a, is_default=True)
    job = make_job(department_a, "compile", JobState.PENDING, submitted_by=member_a, project=default)
    ProjectMembership.objects.create(user=member_a, project=projects["vision"])
    markup = page(client_as(member_a), job)
    assert "ran as" not in markup
    assert (
        "This job is in Alpha&#x27;s default project, which is for its members in no named project: "
        "choose one of your projects to run it under." in markup
    )
    assert 'data-resubmit="choose-project"' in resubmit_control(markup)


def test_resubmitting_a_job_still_pending_says_the_original_goes_on(client_as, member_a, department_a):
    """The second walkthrough resubmitted a pending job into a named project and found the original still
    queued, the page having said nothing of it: both would have run."""
    pending = make_job(
        department_a, "compile", JobState.PENDING, submitted_by=member_a, work={"script": SCRIPT}
    )
    ended = make_job(department_a, "nightly", JobState.FAILED, submitted_by=member_a, work={"script": SCRIPT})
    client = client_as(member_a)
    page = client.get(reverse("scheduling:job-resubmit", args=[pending.pk])).content.decode()
    assert (
        f"Job #{pending.pk} is still pending: resubmitting adds a second job beside it, and #{pending.pk} "
        "goes on until it ends or is cancelled (on its page)." in page
    )
    assert (
        'data-resubmit="original-active"'
        not in client.get(reverse("scheduling:job-resubmit", args=[ended.pk])).content.decode()
    )
