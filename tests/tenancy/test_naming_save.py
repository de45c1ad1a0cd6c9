"""Slugs are refused at save when a name derived from them would be invalid or could collide
(tenancy.naming): the API, the HTML and admin forms, the models and the database all refuse, naming the field;
random departments and projects made through the API render (integrations.state, the real renderers) into
valid, distinct identifiers; the migration refuses to rename the namespaces of projects with running jobs."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps as django_apps
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integrations import state as configstate
from scheduling.choices import JobState
from tenancy import naming
from tenancy.models import Department, Project
from tests.factories import make_job, token_client
from tests.forms import admin_department_form
from tests.tenancy.test_naming import ANY_SLUG, DEPARTMENT_SLUG, DNS1123_LABEL, SLURM_NAME, TEXT

DEPARTMENTS = "/api/v1/departments/"
PROJECTS = "/api/v1/projects/"
INVALID = ["Research", "a--b", "1e3", "-a", "a-", "a" * 31, "a_b", "kube-system", "kube", "default", "gpu"]


class _Rollback(Exception):
    """Ends a hypothesis example's transaction, so each example starts from the fixtures' database."""


def in_rollback(check) -> None:
    try:
        with transaction.atomic():
            check()
            raise _Rollback
    except _Rollback:
        pass


@pytest.fixture
def staff(platform_admin):
    return token_client(platform_admin)


# --- refused at save, naming the field ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("slug", INVALID)
def test_the_api_refuses_a_department_slug_that_cannot_name_its_namespace(staff, slug):
    response = staff.post(DEPARTMENTS, {"name": "Gamma", "slug": slug, "guaranteed_gpus": 0}, format="json")
    assert response.status_code == 400, response.content
    assert "slug" in response.json(), response.json()
    assert not Department.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("slug", ["a--b", "2d", "a" * 31, "Vision", "a_b"])
def test_the_api_refuses_a_project_slug_that_cannot_name_its_namespace(api_as, lead_a, department_a, slug):
    body = {"department": department_a.slug, "name": "Vision", "slug": slug, "guaranteed_gpus": 0}
    response = api_as(lead_a).post(PROJECTS, body, format="json")
    assert response.status_code == 400, response.content
    assert "slug" in response.json(), response.json()
    assert not Project.objects.named().exists()


@pytest.mark.django_db
def test_the_admin_form_shows_the_refusal_on_the_slug(client, admin_user):
    client.force_login(admin_user)
    form = admin_department_form(name="Research", slug="Research", guaranteed_gpus=0)
    response = client.post("/admin/tenancy/department/add/", form)
    assert response.status_code == 200
    assert "lower-case" in " ".join(response.context["adminform"].form.errors["slug"])
    assert not Department.objects.exists()


@pytest.mark.django_db
def test_the_model_refuses_with_the_field_and_the_database_with_its_named_constraints(department_a):
    for slug, words in (("Research", "lower-case"), ("kube-public", "reserved"), ("a--b", "'--'")):
        with pytest.raises(ValidationError) as refused:
            Department(name="X", slug=slug).full_clean()
        assert words in " ".join(refused.value.message_dict["slug"])
    constraints = {"Research": "slug_form", "a--b": "slug_form", "kube-system": "slug_not_reserved"}
    for slug, constraint in constraints.items():  # SQLite and PostgreSQL both name the constraint
        with pytest.raises(IntegrityError, match=f"tenancy_department_{constraint}"), transaction.atomic():
            Department.objects.filter(pk=department_a.pk).update(slug=slug)
    project = Project.objects.create(department=department_a, name="Vision", slug="vision")
    with pytest.raises(IntegrityError), transaction.atomic():
        Project.objects.filter(pk=project.pk).update(slug="a--b")


@pytest.mark.slow(reason="generated cases: 40 departments saved through the service")
@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT)
def test_a_random_slug_is_saved_exactly_when_it_is_one(staff, text):
    """Whatever the text, the API saves a department under it only if tenancy.naming accepts it; else a 400
    naming the slug and nothing written."""

    def check():
        body = {"name": "Gamma", "slug": text, "guaranteed_gpus": 0}
        response = staff.post(DEPARTMENTS, body, format="json")
        # The API trims surrounding white space from text fields (DRF's CharField) before the rule judges it.
        if naming.is_slug(text.strip()):
            assert response.status_code == 201, response.content
            assert response.json()["slug"] == text.strip()
        else:
            assert response.status_code == 400 and "slug" in response.json(), response.content
            assert not Department.objects.exists()

    in_rollback(check)


# --- random tenants through the API render into valid, distinct names --------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    layout=st.dictionaries(
        DEPARTMENT_SLUG, st.lists(ANY_SLUG, unique=True, max_size=3), min_size=1, max_size=4
    )
)
def test_tenants_made_through_the_api_render_into_valid_distinct_identifiers(demo_inventory, staff, layout):
    # "default" is each department's default project's slug (tenancy.projects): a second one is refused.
    layout = {d: [p for p in ps if p != "default"] for d, ps in layout.items()}

    def check():
        for i, (department, projects) in enumerate(layout.items()):
            body = {"name": f"Department {i}", "slug": department, "guaranteed_gpus": 0}
            assert staff.post(DEPARTMENTS, body, format="json").status_code == 201
            for j, project in enumerate(projects):
                body = {"department": department, "name": f"Project {j}", "slug": project}
                response = staff.post(PROJECTS, body, format="json")
                assert response.status_code == 201, response.content
        state = configstate.build_state()
        files = configstate.render_files(state)
        owners = {(d, None) for d in layout} | {(d, p) for d, ps in layout.items() for p in ps}
        namespace_file = files["kubernetes/01-namespaces.yaml"]
        namespaces = re.findall(r"^kind: Namespace\nmetadata:\n  name: '?([^'\n]+)'?$", namespace_file, re.M)
        accounts = [a.name for a in configstate.slurm_accounts(state)]
        for names in (namespaces, accounts):
            assert len(set(names)) == len(names) and {naming.split(n) for n in names} == owners
        assert all(len(n) <= 63 and DNS1123_LABEL.fullmatch(n) for n in namespaces), namespaces
        assert all(SLURM_NAME.fullmatch(a) for a in accounts), accounts
        assert sorted(q.name for q in state.qos) == sorted([*layout, *(f"{d}--borrowed" for d in layout)])
        opensm = re.findall(r"^(\w+)=0x", files[configstate.OPENSM_PARTITIONS], re.M)[1:]
        assert sorted(opensm) == sorted(d.replace("-", "_") for d in layout)
        exports = [line.split(" ")[0] for line in files[configstate.NFS_EXPORTS].splitlines()]
        assert sorted(exports) == sorted(f"/exports/tenants/{d}" for d in layout)

    in_rollback(check)


# --- existing deployments ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_migration_will_not_rename_the_namespace_of_a_project_with_running_jobs(department_a, settings):
    migration = importlib.import_module("tenancy.migrations.0009_tenant_slug_naming")
    project = Project.objects.create(department=department_a, name="Vision", slug="vision")
    make_job(department_a, "finished", JobState.COMPLETED, project=project)
    migration.check_existing_slugs(django_apps, None)  # nothing running: fine
    running = make_job(department_a, "running", JobState.RUNNING, project=project)
    with pytest.raises(RuntimeError, match=rf"job {running.pk} in alpha-vision.*<department>--<project>"):
        migration.check_existing_slugs(django_apps, None)
    settings.RACKPLANE_ALLOW_PROJECT_RENAME = True
    migration.check_existing_slugs(django_apps, None)
