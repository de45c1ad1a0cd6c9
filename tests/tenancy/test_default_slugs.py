"""A project created without a slug gets one that is valid, or a plain request to type one.

The default used to be Django's slugify cut at 30: "3D Vision" became `3d-vision`, then refused ("start with a
letter") on a field the person had left empty, and "a_b" kept its `_`. tenancy.naming.default_slug now always
makes a valid slug ("p-3d-vision") or none, and then the refusal says what to type, on the slug field. Random
names through the service, the API and the department page's form: a valid slug, or a 400 naming the name or
slug field, nothing written, never a 500.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenancy import naming
from tenancy.models import Project
from tenancy.projects import create_project

HTMX = {"HTTP_HX_REQUEST": "true"}
SAMPLES = [
    "3D Vision", "3d", "9", "a_b", "__init__", "Équipe Nord", "日本語", "ß", "---", "- a -", "x" * 100,
    "1" * 40, "a" + "-" * 30 + "b", "Vision 2", "a" * 29 + " b", "kube-system", "default", "ﬁne tuning",
]  # fmt: skip
NAMES = st.one_of(
    st.sampled_from(SAMPLES),
    st.text(alphabet=st.sampled_from("aZ19 -_.é日\u0301"), max_size=40),
    st.text(max_size=40),
)


class _Rollback(Exception):
    pass


def in_rollback(check) -> None:
    try:
        with transaction.atomic():
            check()
            raise _Rollback
    except _Rollback:
        pass


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=500, deadline=None)
@given(name=NAMES)
def test_the_default_slug_is_valid_or_empty(name):
    slug = naming.default_slug(name)
    assert slug == "" or naming.is_slug(slug, department=False), (name, slug)
    if any(c.isascii() and c.isalnum() for c in name):
        assert slug, name  # a name with a Latin letter or digit always gives a slug


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("3D Vision", "p-3d-vision"),
        ("a_b", "a-b"),
        ("Équipe Nord", "equipe-nord"),
        ("x" * 100, "x" * 30),
        ("a" * 29 + " b", "a" * 29),  # cut at 30 without the trailing '-'
        ("Vision", "vision"),
    ],
)
@pytest.mark.django_db
def test_a_project_without_a_slug_gets_a_valid_default(lead_a, department_a, name, slug):
    project = create_project(lead_a, department_a, name=name)
    assert project.slug == slug
    assert naming.project_namespace(department_a.slug, project.slug)


@pytest.mark.django_db
def test_a_name_without_latin_letters_asks_for_a_slug_on_the_slug_field(lead_a, department_a):
    with pytest.raises(ValidationError) as refused:
        create_project(lead_a, department_a, name="日本語")
    assert "type one" in " ".join(refused.value.message_dict["slug"])
    assert create_project(lead_a, department_a, name="日本語", slug="nihongo").slug == "nihongo"


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_the_api_saves_a_valid_default_or_names_the_field(api_as, lead_a, department_a, name):
    client = api_as(lead_a)

    def check():
        body = {"department": department_a.slug, "name": name, "guaranteed_gpus": 0}
        response = client.post("/api/v1/projects/", body, format="json")
        assert response.status_code in (201, 400), (name, response.status_code, response.content)
        if response.status_code == 201:
            slug = response.json()["slug"]
            assert naming.is_slug(slug, department=False) and slug == naming.default_slug(name.strip())
        else:
            assert set(response.json()) & {"name", "slug"}, response.json()
            assert not Project.objects.named().exists()

    in_rollback(check)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_the_department_page_saves_a_valid_default_or_shows_the_error_on_the_field(
    client_as, lead_a, department_a, name
):
    client = client_as(lead_a)

    def check():
        body = {
            "name": name,
            "slug": "",
            "guaranteed_gpus": "0",
            "over_quota_weight": "1.00",
            "limit_gpus": "",
        }
        response = client.post(f"/tenancy/departments/{department_a.slug}/projects/", body, **HTMX)
        assert response.status_code in (200, 400), (name, response.status_code)
        project = Project.objects.first()
        if project is not None:
            assert naming.is_slug(project.slug, department=False)
        else:
            errors = response.context["project_form"].errors
            assert set(errors) & {"name", "slug"}, (name, errors)

    in_rollback(check)
