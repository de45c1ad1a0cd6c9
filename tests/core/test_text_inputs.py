"""The text rule where names come in: the jobs API, departments and projects (API and pages), node reports.

Each refusal is a 400 (a page: the form again with the error) naming the field and the character; nothing
is written.
"""

from __future__ import annotations

import pytest
from django.apps import apps

from inventory.models import ComputeTray
from scheduling.models import Job
from tenancy.models import Project
from tests.factories import make_department, node_report

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
PERSIAN_NAME = "学習ジョブ \u0646\u0627\u0645\u200c\u06a9\u0627\u0631"  # the ZWNJ joins Persian letters


def row_counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.fixture
def research(demo_inventory, member_a):
    department = make_department("Research", guaranteed_gpus=96)
    department.memberships.create(user=member_a)
    return department


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("train\nrm -rf", "U+000A LINE FEED (a newline) at position 6"),
        ("train-llm\u202etxt.exe", "U+202E RIGHT-TO-LEFT OVERRIDE at position 10"),
        ("train\u200b-llm", "U+200B ZERO WIDTH SPACE at position 6"),
        ("x" * 201, "201 characters long: at most 200"),
    ],
)
def test_a_job_name_breaking_the_text_rule_is_a_400_naming_it(api_as, member_a, research, name, named):
    client = api_as(member_a)
    before = row_counts()
    body = {"department": "research", "name": name, "gpus": 8, "work": {"script": SCRIPT}}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert list(response.json()) == ["name"]
    assert response.json()["name"][0].startswith("name ")
    assert named in response.json()["name"][0]
    assert row_counts() == before


def test_a_job_name_in_another_script_is_taken(api_as, member_a, research):
    body = {
        "department": "research",
        "name": PERSIAN_NAME,
        "gpus": 8,
        "work": {"script": SCRIPT},
    }
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content[:300]
    assert Job.objects.get().name == PERSIAN_NAME


def test_the_job_service_refuses_it_too(member_a, research):
    """scheduling.services.admission.submit_job (every other path: resubmission, the admin) runs full_clean:
    the model field's validator is the rule there."""
    from django.core.exceptions import ValidationError

    from scheduling.services.admission import submit_job

    with pytest.raises(ValidationError) as caught:
        submit_job(
            user=member_a,
            department=research,
            name="a\u202eb",
            gpus=8,
            topology="partition",
            priority_class="train",
            backend="slurm",
            work={"script": SCRIPT},
            time_limit_minutes=60,
        )
    assert "U+202E" in str(caught.value.message_dict["name"])
    assert Job.objects.count() == 0


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("post", "/api/v1/departments/", {"name": "Gamma\u202e", "slug": "gamma"}),
        ("patch", "/api/v1/departments/alpha/", {"name": "Alpha\nBeta"}),
        ("post", "/api/v1/projects/", {"department": "alpha", "name": "Vision\u2066", "slug": "vision"}),
    ],
)
def test_department_and_project_names_follow_the_rule_in_the_api(
    api_as, platform_admin, department_a, method, url, body
):
    client = api_as(platform_admin)
    before = row_counts()
    response = getattr(client, method)(url, body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "name" in response.json()
    assert "U+" in response.json()["name"][0]
    assert row_counts() == before


def test_a_project_name_with_a_bidi_override_is_refused_on_the_page(client_as, lead_a, department_a):
    client = client_as(lead_a)
    response = client.post(
        f"/tenancy/departments/{department_a.slug}/projects/",
        {"name": "Vision\u202e", "guaranteed_gpus": 0, "over_quota_weight": "1.00"},
        HTTP_HX_REQUEST="true",  # the panel with the form (a full page redirects to the department's)
    )
    assert response.status_code == 200
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in response.content.decode()
    assert not Project.objects.named().exists()


def test_a_node_reports_product_name_with_a_bidi_override_is_refused(api_as, node_agent, demo_inventory):
    report = node_report(ComputeTray.objects.order_by("pk").first())
    report["gpus"][0]["product"] = "NVIDIA GB200\u202e"
    client = api_as(node_agent)
    before = row_counts()
    response = client.post("/api/v1/discovery/reports/", report, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "U+202E" in str(response.json())
    assert row_counts() == before


def test_a_node_reports_xid_line_with_an_escape_sequence_is_refused(api_as, node_agent, demo_inventory):
    report = node_report(ComputeTray.objects.order_by("pk").first())
    report["xids"] = [{"time": "2026-01-01T00:00:00Z", "xid": 79, "text": "NVRM: Xid 79\x1b[2J"}]
    response = api_as(node_agent).post("/api/v1/discovery/reports/", report, format="json")
    assert response.status_code == 400, response.content[:300]
    assert "U+001B" in str(response.json())


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("script", "named"),
    [
        ('#!/bin/bash\nif [ "$USER" != "admin\u202e \u2066" ]; then srun train; fi\n', "U+202E"),
        ("#!/bin/bash\necho ok\x1b[2K\rrm -rf ~\n", "U+001B"),
        ("#!/bin/bash\necho ok\rrm -rf ~\n", "U+000D"),
    ],
)
def test_a_slurm_script_that_reads_otherwise_than_it_runs_is_refused(
    api_as, member_a, research, script, named
):
    client = api_as(member_a)
    before = row_counts()
    body = {"department": "research", "name": "train", "gpus": 8, "work": {"script": script}}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content[:300]
    assert named in response.json()["work"][0]
    assert row_counts() == before


def test_a_slurm_script_with_tabs_and_crlf_line_ends_is_taken(api_as, member_a, research):
    body = {
        "department": "research",
        "name": "t",
        "gpus": 8,
        "work": {"script": "#!/bin/bash\r\n\tsrun x\r\n"},
    }
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content[:300]


def test_the_django_admin_refuses_a_name_breaking_the_rule(admin_client_logged_in, demo_inventory):
    """The model field's validator is what the admin's ModelForm runs: a rack renamed with a bidi override."""
    from inventory.models import Rack

    rack = Rack.objects.order_by("pk").first()
    response = admin_client_logged_in.get(f"/admin/inventory/rack/{rack.pk}/change/")
    assert response.status_code == 200
    form = response.context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data["name"] = "gb-r01\u202e"
    response = admin_client_logged_in.post(f"/admin/inventory/rack/{rack.pk}/change/", data)
    assert response.status_code == 200  # the form again, not a redirect
    assert "U+202E RIGHT-TO-LEFT OVERRIDE" in response.content.decode()
    rack.refresh_from_db()
    assert "\u202e" not in rack.name
