"""The job form (scheduling.views.job_form): the API's fields and words, nothing written on error, a double
click makes
one job, clone only of visible jobs, and a preview that is the scheduler's own decision and writes nothing.

On the demo inventory: gb-r01 (default partition, one tray drained), gb-r02 (carved p1/p2, 9 trays each),
gb-r03 (one default partition)."""

import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hostlist import expand_hostlist

from core.models import AuditEvent
from inventory.models import ComputeTray
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.choices import JobState
from scheduling.models import Job, JobEvent, SchedulingRequest
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_job, make_unreachable_slurm_target

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
NEW = "/scheduling/jobs/new/"
PREVIEW = "/scheduling/jobs/new/preview/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha", guaranteed_gpus=40)


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Beta", guaranteed_gpus=24)


def text(response) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


def field_errors(response, name: str) -> list[str]:
    """The messages shown next to one input (the <p class="field-error" id="id_<name>_error">s)."""
    pattern = rf'<p class="field-error" id="id_{name}_error"[^>]*>(.*?)</p>'
    return [html.unescape(m) for m in re.findall(pattern, response.content.decode(), re.S)]


def form_key(response) -> str:
    return re.search(r'name="submission_key" value="([^"]+)"', response.content.decode()).group(1)


def form_data(**fields) -> dict:
    data = {"department": "alpha", "name": "train-llm", "gpus": "4", "backend": "slurm", "script": SCRIPT}
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def test_urls():
    assert reverse("scheduling:job-new") == NEW
    assert reverse("scheduling:job-preview") == PREVIEW


def test_the_form_has_every_field_the_api_takes(client, member_a):
    client.force_login(member_a)
    response = client.get(NEW)
    assert response.status_code == 200
    markup = response.content.decode()
    for name in JobSubmitSerializer().fields:
        if name != "work":
            assert f'name="{name}"' in markup, name
    assert 'name="script"' in markup and 'name="image"' in markup  # the work, per backend
    # Her one department is chosen for her.
    assert '<option value="alpha" selected>Alpha</option>' in markup
    assert "wider placement the job accepts" in markup and "absent or null" not in markup.lower()
    assert "beta" not in markup  # a department the member is not in is not offered
    # The short address of the brief and the menu entry lead here.
    assert client.get("/jobs/new/").url == NEW
    assert f'href="{NEW}"' in client.get(reverse("scheduling:job-list")).content.decode()


def test_someone_in_no_department_is_told_how_to_get_there(client, outsider):
    client.force_login(outsider)
    response = client.get(NEW)
    assert response.status_code == 403
    assert "ask a department lead" in text(response)
    assert client.get(PREVIEW, {"department": "alpha", "gpus": "4"}).status_code == 403
    assert client.post(NEW, form_data()).status_code == 403
    assert not Job.objects.exists()


def test_anonymous_users_are_sent_to_log_in(client, department_a):
    assert client.get(NEW).status_code == 302
    assert client.post(NEW, form_data()).status_code == 302
    assert not Job.objects.exists()


# --- the same validation as the API -------------------------------------------------------------------


# (form values, API body changes, field): the same bad input through both doors.
BAD = [
    ({"gpus": "0"}, {"gpus": 0}, "gpus"),
    ({"gpus": "6"}, {"gpus": 6}, "gpus"),
    ({"gpus": "400"}, {"gpus": 400}, "gpus"),
    ({"name": ""}, {"name": None}, "name"),
    ({"topology": "ring"}, {"topology": "ring"}, "topology"),
    ({"priority_class": "build", "gpus": "48"}, {"priority_class": "build", "gpus": 48}, "priority_class"),
    ({"time_limit_minutes": "0"}, {"time_limit_minutes": 0}, "time_limit_minutes"),
    ({"backend": "pbs"}, {"backend": "pbs"}, "backend"),
    ({"fallback_topology": "partition", "gpus": "8"}, {"fallback_topology": "partition", "gpus": 8}, None),
    # A whole number however long: the API's words on it (the cluster's bound), not "enter a whole number".
    ({"gpus": "1" + "0" * 29}, {"gpus": 10**29}, "gpus"),
    ({"backend": "kubernetes", "image": ""}, {"backend": "kubernetes", "work": {"image": ""}}, "work"),
]


@pytest.mark.slow(reason="11 cases, each a full request through the stack")
@pytest.mark.parametrize(("form", "api", "field"), BAD)
def test_bad_input_gets_the_apis_words_next_to_its_field_and_writes_nothing(
    client, api_as, member_a, department_b, form, api, field
):
    body = {"department": "alpha", "name": "train-llm", "gpus": 4, "work": {"script": SCRIPT}}
    body.update(api)
    body = {k: v for k, v in body.items() if v is not None}
    answer = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 400, answer.json()
    expected = answer.json()
    field = field or next(iter(expected))
    assert field in expected, expected

    client.force_login(member_a)
    events, requests = AuditEvent.objects.count(), SchedulingRequest.objects.count()
    response = client.post(NEW, form_data(**form))
    assert response.status_code == 400
    assert field_errors(response, field) == [str(m) for m in expected[field]]
    assert not Job.objects.exists() and not JobEvent.objects.exists()
    assert (AuditEvent.objects.count(), SchedulingRequest.objects.count()) == (events, requests)
    # What was typed stays in the form (in the inputs one types in; a select offers only its choices).
    for name, value in form.items():
        if name in ("name", "gpus", "time_limit_minutes") and value:
            assert f'value="{value}"' in response.content.decode()


# The form's department is a choice among the user's own (the API answers with the slug it was sent).
NOT_OFFERED = "Select a valid choice. That choice is not one of the available choices."


def test_a_department_not_offered_is_a_choice_not_offered_whatever_it_is(client, member_a, department_b):
    client.force_login(member_a)
    for value in ("beta", str(department_b.pk), "nowhere", "99999", "Alpha"):
        response = client.post(NEW, form_data(department=value))
        assert response.status_code == 400
        # The same words for another tenant's department (by slug or by id), one that does not exist and
        # one of the member's own in the wrong case: nothing echoed, nothing confirmed.
        assert field_errors(response, "department") == [NOT_OFFERED], value
        assert "Beta" not in text(response) and "beta" not in text(response)
        answer = preview(client, department=value)
        assert f"Department: {NOT_OFFERED}" in text(response := answer), value
        assert "member" not in text(response) and "beta" not in text(response)
    assert not Job.objects.exists()
    # A department left empty is still "required", in the preview's list of what is missing.
    assert field_errors(client.post(NEW, form_data(department="")), "department") == [
        "This field is required."
    ]


def test_a_number_that_is_not_one_is_said_so_in_the_forms_words(client, member_a):
    client.force_login(member_a)
    response = client.post(NEW, form_data(gpus="four"))
    assert response.status_code == 400
    assert field_errors(response, "gpus") == ["Enter a whole number (for example 4)."]
    assert not Job.objects.exists()


@pytest.mark.parametrize("script", ["", "srun python train.py", "  #!/bin/bash"])
def test_a_slurm_job_without_a_script_is_told_so_beside_the_script_in_the_forms_words(
    client, member_a, script
):
    """The walkthrough: the form answered a missing script with the API's JSON ('a Slurm job needs
    {"script": "#!/bin/bash ..."}: ...') at the top of the section; now its own sentence, by the script."""
    client.force_login(member_a)
    response = client.post(NEW, form_data(script=script))
    assert response.status_code == 400
    assert field_errors(response, "work") == [
        "A Slurm job needs a script starting with #! (for example #!/bin/bash)."
    ]
    markup = response.content.decode()
    field = markup.split('<label for="id_script">')[1].split("</div>")[0]
    assert 'id="id_work_error"' in field and 'aria-describedby="id_work_error"' in field
    assert "{" not in field_errors(response, "work")[0]
    assert not Job.objects.exists()
    # In Japanese too.
    response = client.post(NEW, form_data(script=script), HTTP_ACCEPT_LANGUAGE="ja")
    japanese = "Slurm ジョブには #! で始まるスクリプトが必要です（例: #!/bin/bash）。"  # noqa: RUF001
    assert field_errors(response, "work") == [japanese]


def test_the_script_placeholder_reads_as_an_example(client, member_a):
    client.force_login(member_a)
    markup = client.get(NEW).content.decode()
    placeholder = re.search(r'<textarea name="script"[^>]*placeholder="([^"]*)"', markup).group(1)
    assert placeholder.startswith("For example:") and "#!/bin/bash" in placeholder


def test_unreadable_kubernetes_work_is_refused_with_the_reason(client, member_a):
    client.force_login(member_a)
    response = client.post(
        NEW, form_data(backend="kubernetes", image="nvcr.io/nvidia/pytorch:25.01-py3", env="NCCL_DEBUG")
    )
    assert response.status_code == 400
    assert "has no '='" in field_errors(response, "work")[0]
    assert not Job.objects.exists()


# --- submitting -----------------------------------------------------------------------------------------


def test_a_member_submits_a_slurm_job_and_sees_it_on_the_list(client, member_a, department_a):
    client.force_login(member_a)
    key = form_key(client.get(NEW))
    response = client.post(
        NEW,
        form_data(gpus="8", topology="partition", fallback_topology="rack", time_limit_minutes="90")
        | {"submission_key": key},
    )
    assert response.status_code == 302 and response.url == reverse("scheduling:job-list")
    job = Job.objects.get()
    assert (job.department, job.submitted_by, job.name, job.gpus, job.topology) == (
        department_a,
        member_a,
        "train-llm",
        8,
        "partition",
    )
    assert (job.fallback_topology, job.fallback_after_minutes, job.time_limit_minutes) == ("rack", 120, 90)
    assert job.work == {"script": SCRIPT} and job.state == JobState.PENDING
    assert job.idempotency_key == key
    listing = text(client.get(response.url))
    assert f"Job #{job.pk} train-llm submitted" in listing and "train-llm" in listing


def test_a_kubernetes_job_is_assembled_as_the_api_takes_it(client, member_a):
    client.force_login(member_a)
    response = client.post(
        NEW,
        form_data(
            backend="kubernetes",
            script=None,
            image="nvcr.io/nvidia/pytorch:25.01-py3",
            command="torchrun",
            args="--nproc-per-node=4 'train.py --name=a b'",
            env="NCCL_DEBUG=INFO\r\n\r\nWANDB_MODE=offline",
        ),
    )
    assert response.status_code == 302
    assert Job.objects.get().work == {
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "command": ["torchrun"],
        "args": ["--nproc-per-node=4", "train.py --name=a b"],
        "env": {"NCCL_DEBUG": "INFO", "WANDB_MODE": "offline"},
    }


def test_a_double_click_makes_one_job(client, member_a):
    client.force_login(member_a)
    key = form_key(client.get(NEW))
    first = client.post(NEW, form_data(submission_key=key))
    second = client.post(NEW, form_data(submission_key=key), follow=True)
    assert first.status_code == 302 and second.status_code == 200
    job = Job.objects.get()
    assert f"Job #{job.pk} train-llm was already submitted by this form" in text(second)
    # The same key with other values: refused, nothing written, a new key to submit them with.
    third = client.post(NEW, form_data(submission_key=key, gpus="8"))
    assert third.status_code == 400
    assert f"This form already submitted job #{job.pk} with other values" in text(third)
    assert form_key(third) != key
    assert Job.objects.count() == 1
    assert client.post(NEW, form_data(submission_key=form_key(third), gpus="8")).status_code == 302
    assert Job.objects.count() == 2


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_an_admin_submits_for_any_department(client, platform_admin, department_a, department_b):
    client.force_login(platform_admin)
    assert '<option value="beta">Beta</option>' in client.get(NEW).content.decode()
    assert client.post(NEW, form_data(department="beta")).status_code == 302
    assert Job.objects.get().department == department_b


# --- clone ----------------------------------------------------------------------------------------------


def test_clone_prefills_the_form_from_a_visible_job(client, member_a, department_a):
    job = make_job(
        department_a,
        "llm-sweep",
        state=JobState.COMPLETED,
        gpus=8,
        topology="rack",
        priority_class="train",
        backend="kubernetes",
        time_limit_minutes=45,
        fallback_topology="any",
        fallback_after_minutes=30,
        work={"image": "img:1", "command": ["torchrun"], "args": ["a b", "c"], "env": {"X": "1", "ON": True}},
    )
    client.force_login(member_a)
    detail = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert f'href="{NEW}?clone={job.pk}"' in detail
    response = client.get(NEW, {"clone": job.pk})
    assert response.status_code == 200
    markup = response.content.decode()
    assert 'value="llm-sweep"' in markup and 'id="id_gpus" value="8"' in markup
    assert 'id="id_time_limit_minutes" value="45"' in markup
    assert '<option value="rack" selected>' in markup and '<option value="kubernetes" selected>' in markup
    assert 'id="id_fallback_after_minutes" value="30"' in markup
    assert 'value="img:1"' in markup and "value=\"'a b' c\"" in html.unescape(markup)
    assert ">X=1\nON=true</textarea>" in markup


def test_clone_of_a_job_the_user_may_not_see_is_a_404(client, member_a, department_b):
    theirs = make_job(department_b, "secret", state=JobState.COMPLETED, work={"script": SCRIPT})
    client.force_login(member_a)
    assert client.get(NEW, {"clone": theirs.pk}).status_code == 404
    assert client.get(NEW, {"clone": 987654}).status_code == 404


def test_a_cloned_job_is_checked_again_on_submit(client, member_a, department_a, department_b):
    # A member who has left the department can clone nothing of it, and cannot submit to it.
    job = make_job(
        department_a, "old", state=JobState.COMPLETED, submitted_by=member_a, work={"script": SCRIPT}
    )
    client.force_login(member_a)
    values = client.get(NEW, {"clone": job.pk})
    assert values.status_code == 200
    response = client.post(NEW, form_data(department="beta"))
    assert response.status_code == 400 and field_errors(response, "department")
    assert Job.objects.count() == 1


# --- the preview ----------------------------------------------------------------------------------------


def preview(client, **fields):
    data = {"department": "alpha", "gpus": "4", "backend": "slurm"}
    data.update(fields)
    return client.get(PREVIEW, data, headers={"HX-Request": "true"})


def test_the_preview_says_where_it_would_go_and_the_pass_agrees(client, member_a, department_a):
    client.force_login(member_a)
    response = preview(client, gpus="8", topology="partition")
    assert response.status_code == 200
    assert 'data-preview="fits"' in response.content.decode()
    words = text(response)
    assert "It fits now: it would start in quota on 2 trays" in words
    trays = expand_hostlist(re.search(r"on 2 trays \(([^)]*)\)", words).group(1))
    # Submitted now, the pass places it exactly there.
    assert client.post(NEW, form_data(gpus="8", topology="partition")).status_code == 302
    run_pass()
    job = Job.objects.get()
    assert job.state == JobState.STARTING and sorted(job.placement) == sorted(trays)


def test_the_preview_names_its_trays_as_a_hostlist(client, member_a, department_a):
    """The walkthrough: 18 trays read "gb-r08-t01, gb-r08-t02, ... gb-r08-t18"; the hostlist form the job
    pages use ("gb-r08-t[01-18]", python-hostlist) in the sentence and in the Trays row alike."""
    client.force_login(member_a)
    response = preview(client, gpus="36", topology="partition")
    assert 'data-preview="fits"' in response.content.decode()
    words = text(response)
    named = re.search(r"on 9 trays \(([^)]*)\)", words).group(1)
    assert re.fullmatch(r"gb-r0\d-t\[\d\d-\d\d\]", named), named
    trays = expand_hostlist(named)
    assert len(trays) == 9 and set(trays) <= set(ComputeTray.objects.values_list("hostname", flat=True))
    row = re.search(r"<dt>Trays</dt><dd>([^<]*)</dd>", response.content.decode()).group(1)
    assert row == named and ", " not in row


def test_the_preview_says_why_it_would_wait(client, member_a, department_a):
    # Every tray is taken: a 9-tray partition job has nowhere to go.
    trays = list(ComputeTray.objects.filter(partition__isnull=False))
    make_job(department_a, "everything", trays=trays, gpus=4 * len(trays))
    client.force_login(member_a)
    response = preview(client, gpus="36", topology="partition")
    assert 'data-preview="waits"' in response.content.decode()
    assert "It would wait:" in text(response) and "no NVLink partition has 9 free trays" in text(response)


def test_the_preview_says_when_it_could_never_run(client, member_a, department_a):
    client.force_login(member_a)
    response = preview(client, gpus="400", topology="partition")
    assert 'data-preview="never"' in response.content.decode()
    assert "more than any NVLink partition can hold" in text(response)
    response = preview(client, gpus="0")
    assert 'data-preview="invalid"' in response.content.decode()
    assert "GPUs: Ensure this value is greater than or equal to 1." in text(response)
    response = preview(client, gpus="8", topology="rack", fallback_topology="partition")
    assert "Fallback topology: the fallback must be wider than the job's topology" in text(response)
    # Another tenant's department: a choice not offered, nothing about it.
    response = preview(client, department="beta")
    assert f"Department: {NOT_OFFERED}" in text(response) and "beta" not in text(response)


def test_the_preview_writes_nothing(client, member_a, department_a, department_b):
    make_job(department_b, "waiting", state=JobState.PENDING, gpus=4, pending_reason="old reason")
    client.force_login(member_a)
    requests = SchedulingRequest.objects.count()
    with CaptureQueriesContext(connection) as queries:
        response = preview(client, gpus="8", topology="partition")
    assert 'data-preview="fits"' in response.content.decode()
    writes = [
        q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))
    ]
    assert writes == []
    assert Job.objects.get().pending_reason == "old reason"
    assert SchedulingRequest.objects.count() == requests


def test_the_preview_says_a_person_without_a_posix_identity_is_refused(
    client, member_a, department_a, tmp_path
):
    """A live Slurm backend runs jobs as their person: without a POSIX identity the submission is refused on
    the backend field, and the preview beside it says so too instead of "It fits now"."""
    from tenancy.models import PosixAccount

    make_unreachable_slurm_target(tmp_path)  # nothing listens at its port
    PosixAccount.objects.filter(user=member_a).delete()
    client.force_login(member_a)
    refused = client.post(NEW, form_data())
    assert refused.status_code == 400
    assert "no POSIX identity" in " ".join(field_errors(refused, "backend"))
    response = preview(client)
    assert 'data-preview="invalid"' in response.content.decode()
    assert 'data-preview="fits"' not in response.content.decode()
    assert "Backend: Your account has no POSIX identity (uid/gid), and jobs on Slurm run as" in text(response)
    # Kubernetes has no live cluster here (the embedded renderer): nothing to refuse there.
    assert 'data-preview="fits"' in preview(client, backend="kubernetes").content.decode()
    assert not Job.objects.exists()


# --- projects (the serializer's `project` field drives a select) ----------------------------------------


@pytest.fixture
def projects(platform_admin, department_a, member_a):
    from tenancy.projects import create_project, set_project_member

    vision = create_project(platform_admin, department_a, name="Vision", guaranteed_gpus=24)
    create_project(platform_admin, department_a, name="Speech", guaranteed_gpus=8)
    set_project_member(platform_admin, vision, member_a)
    return vision


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_department_with_projects_offers_the_members_own(client, api_as, member_a, projects):
    client.force_login(member_a)
    markup = client.get(NEW).content.decode()
    # Their one project is offered and chosen (not "no project", which a department with projects refused).
    assert '<optgroup label="Alpha"><option value="vision" selected>Vision</option></optgroup>' in markup
    assert "speech" not in markup and 'value="default"' not in markup  # in a named project: not the default
    # Without a project: the API takes their only project too (tenancy.projects.default_job_project).
    answer = api_as(member_a).post(
        "/api/v1/jobs/",
        {"department": "alpha", "name": "train-llm", "gpus": 4, "work": {"script": SCRIPT}},
        format="json",
    )
    assert answer.status_code == 201 and answer.json()["project"] == "vision"
    Job.objects.all().delete()
    # With it: the preview answers for it, and the job runs under it.
    assert 'data-preview="fits"' in preview(client, project="vision").content.decode()
    assert 'data-preview="fits"' in preview(client).content.decode()  # none chosen: theirs
    assert client.post(NEW, form_data(project="vision")).status_code == 302
    assert Job.objects.get().project == projects


def test_a_very_large_gpus_value_gets_the_clusters_bound_in_the_preview_too(client, member_a):
    """30 digits are a whole number: the preview says the cluster's bound, as the API does, not "enter a
    whole number"."""
    client.force_login(member_a)
    response = client.get(PREVIEW, {"department": "alpha", "gpus": "1" + "0" * 29, "backend": "slurm"})
    assert response.status_code == 200
    said = text(response)
    assert "more than any NVLink partition can hold" in said and "whole number" not in said
