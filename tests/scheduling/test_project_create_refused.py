"""A new project the service refuses is answered with the form again, filled with what was typed and the
error beside its field, in the viewer's language (htmx and a plain post), never with a page that loses it
(the walkthrough: "チャット推論" with the slug left blank, whose slug cannot be derived, went to the
confirmation page's "The project was not created" with only a way back, in English)."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

from tenancy.models import Project
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def department_a(demo_inventory):
    return factories.make_department("Research", guaranteed_gpus=96)


def _field(html: str, name: str) -> str:
    """The form field `name` of the new-project form, its input and errors."""
    form = re.search(r'<form class="add-project".*?</form>', html, re.DOTALL).group(0)
    return re.search(
        rf'<div class="form-field[^"]*">\s*<label for="id_{name}".*?</div>', form, re.DOTALL
    ).group(0)


@pytest.mark.parametrize("htmx", [False, True], ids=["plain", "htmx"])
@pytest.mark.parametrize("guaranteed", [0, 8], ids=["no-guarantee", "asks-to-confirm"])
def test_a_refused_new_project_shows_the_form_again_filled_with_the_error_in_japanese(
    client, lead_a, department_a, htmx, guaranteed
):
    client.force_login(lead_a)
    headers = {"HTTP_HX_REQUEST": "true"} if htmx else {}
    data = {"name": "チャット推論", "slug": "", "guaranteed_gpus": guaranteed, "over_quota_weight": "2.50"}
    response = client.post(
        reverse("scheduling:project-create", args=[department_a.slug]),
        data,
        HTTP_ACCEPT_LANGUAGE="ja",
        **headers,
    )
    assert not Project.objects.filter(name="チャット推論").exists()
    assert response.status_code == (200 if htmx else 400)
    assert "HX-Redirect" not in response.headers and "Location" not in response.headers
    html = response.content.decode()
    slug = _field(html, "slug")
    assert 'class="form-field has-error"' in slug
    error = unescape(re.search(r'<p class="field-error"[^>]*>(.*?)</p>', slug).group(1))
    assert "no slug" not in error and "スラッグ" in error, error
    # What was typed is there again.
    assert 'value="チャット推論"' in _field(html, "name")
    assert 'value="2.50"' in _field(html, "over_quota_weight")
    assert f'value="{guaranteed}"' in _field(html, "guaranteed_gpus")


def test_in_english_the_error_stays_as_it_was(client, lead_a, department_a):
    client.force_login(lead_a)
    response = client.post(
        reverse("scheduling:project-create", args=[department_a.slug]),
        {"name": "チャット推論", "slug": "", "guaranteed_gpus": 0, "over_quota_weight": "1"},
    )
    assert response.status_code == 400
    assert "no slug can be made from this name (it has no letters a-z or digits)" in response.content.decode()
