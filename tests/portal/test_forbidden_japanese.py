"""A page refused (403) in Japanese says what was refused in Japanese (issue 31): the "what" a view passes to
the access rules (core.access.require_admin and the others) is marked for translation, never plain English
put inside a Japanese sentence ("the capacity dashboard はプラットフォーム管理者のみが利用できます。")."""

import ast
from pathlib import Path

import pytest
from django.urls import reverse

from tests.i18n_check import english_left

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
RULES = {"require_admin": 1, "require_lead": 2, "require_project_manager": 2}  # the index of `what`
APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")


def test_a_lead_refused_the_capacity_dashboard_reads_why_in_japanese(client, lead_a):
    client.force_login(lead_a)
    response = client.get(reverse("scheduling:admin-dashboard"), HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 403
    html = response.content.decode()
    assert "キャパシティダッシュボード はプラットフォーム管理者のみが利用できます。" in html
    assert not english_left(html), english_left(html)


def _plain_whats(path: Path) -> list[str]:
    """The calls of an access rule in `path` whose `what` is a plain string (English in every language)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in RULES:
            index = RULES[node.func.id]
            what = node.args[index] if len(node.args) > index else None
            what = next((k.value for k in node.keywords if k.arg == "what"), what)
            if isinstance(what, ast.Constant) and isinstance(what.value, str):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        named = isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WHAT" for t in node.targets)
        if named and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} (WHAT)")
    return found


@pytest.mark.slow(reason="parses every module of the six apps")
def test_every_what_given_to_an_access_rule_is_marked_for_translation():
    plain = [
        where for app in APPS for path in sorted((ROOT / app).rglob("*.py")) for where in _plain_whats(path)
    ]
    assert not plain, plain
