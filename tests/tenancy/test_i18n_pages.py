"""Tenancy in Japanese: the admin's forms for tenancy, the department form, the services' and projects' errors
(on forms and in API answers), the sign-in messages; English stays the default and what is stored.

Tenancy has no page of its own outside the Django admin: its text reaches people through the admin's forms
(platform admins), the department and project pages' forms and errors (scheduling's templates, which
another catalogue translates), the API's answers, and the login page's messages.
"""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import translation
from django.utils.text import capfirst

from tenancy.forms import DepartmentForm
from tenancy.identity import SignInRefused, account_for
from tenancy.labels import FIELD_LABELS, labels_for
from tenancy.models import Department, MetricsSource, TenancySettings
from tenancy.projects import create_project, set_project_member
from tenancy.services import save_department
from tests import factories
from tests.i18n_check import english_left, english_left_but

pytestmark = pytest.mark.django_db

# Configuration and identifiers quoted in help texts (escaped text: no element can mark them translate="no"):
# the selector example of MetricsSource.selector (PromQL label matchers) and the names a slug may not take.
DATA_IN_HELP = (
    'cluster="gb-east",job="dcgm"',  # a PromQL label matcher: "job" is Prometheus's label name
    "default、kube-…、root、gpu、all",  # the names a slug may not take: identifiers, "all" among them
)


def words_left(html: str) -> list[str]:
    """english_left, the configuration the help texts quote (DATA_IN_HELP) taken out first."""
    return english_left_but(html, DATA_IN_HELP)


def admin_form(html: str) -> str:
    """The change form of a Django admin page: the fields, labels, help texts, errors and buttons tenancy
    gives it (the page around it names the models and the other apps: not tenancy's words)."""
    found = re.search(r'<form[^>]*id="\w+_form".*?</form>', html, re.S)
    assert found, "no admin change form on the page"
    return found.group(0)


@pytest.mark.parametrize(
    "url_name",
    [
        "admin:tenancy_department_add",
        "admin:tenancy_externalidentity_add",
        "admin:tenancy_posixaccount_add",
        "admin:tenancy_exporterendpoint_add",
        "admin:tenancy_tenancysettings_change",
        "admin:tenancy_metricssource_change",
    ],
)
def test_the_admins_forms_for_tenancy_are_japanese(admin_client, url_name):
    args = {
        "admin:tenancy_tenancysettings_change": [TenancySettings.load().pk],
        "admin:tenancy_metricssource_change": [MetricsSource.load().pk],
    }.get(url_name, [])
    response = admin_client.get(reverse(url_name, args=args), HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 200 and response.headers["Content-Language"] == "ja"
    left = words_left(admin_form(response.content.decode()))
    assert not left, f"{url_name} in Japanese still shows English: {left}"


def test_the_metrics_source_form_names_its_sections_fields_and_button_in_japanese(admin_client):
    url = reverse("admin:tenancy_metricssource_change", args=[MetricsSource.load().pk])
    form = admin_form(admin_client.get(url, HTTP_ACCEPT_LANGUAGE="ja").content.decode())
    for words in (
        "Prometheus クエリ API",
        "問い合わせ内容",
        "前回のサイクル",
        "保存済みの認証情報",
        "保存して接続をテスト",
    ):
        assert words in form
    english = admin_form(admin_client.get(url).content.decode())
    assert "What to ask for" in english and 'value="Save and test connection"' in english


def test_a_department_the_admin_cannot_fit_is_refused_in_japanese_on_the_admins_form(admin_client):
    """No GPU is schedulable here: any guarantee passes the capacity, and the service says so on the field."""
    data = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 8, "over_quota_weight": "1", "priority": 0}
    response = admin_client.post(
        reverse("admin:tenancy_department_add"),
        {**data, "_save": "1", **inline_management()},
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    assert response.status_code == 200
    form = admin_form(response.content.decode())
    assert "保証の合計が 8 GPU になりますが、スケジュール可能な正常 GPU は 0 しかありません" in form
    assert not words_left(form), words_left(form)
    assert not Department.objects.filter(slug="gamma").exists()


def inline_management() -> dict:
    """The management forms of the department admin's two inlines (memberships, dedicated partitions)."""
    data = {}
    for prefix in ("memberships", "dedicated_partitions"):
        data |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
    return data


def test_the_department_forms_labels_help_and_service_errors_read_in_japanese(department_a):
    """The form the department pages show (their templates are scheduling's): every label and help text, and
    an error from tenancy.services put on its field."""
    with translation.override("ja"):
        form = DepartmentForm(instance=department_a)
        rendered = str(form)
        assert not words_left(rendered), words_left(rendered)
        assert "保証 GPU" in rendered and "空欄の場合は /exports/tenants/<slug> を割り当てます" in rendered
        form = DepartmentForm(
            {
                "name": "Alpha",
                "slug": "alpha",
                "guaranteed_gpus": 4,
                "limit_gpus": 2,
                "over_quota_weight": "1",
                "priority": 0,
            },
            instance=department_a,
        )
        assert form.is_valid()
        with pytest.raises(ValidationError) as refused:
            save_department(form.instance)
        form.add_service_errors(refused.value)
        assert form.errors["limit_gpus"] == ["上限（2）を保証（4）より小さくすることはできません"]  # noqa: RUF001
    with translation.override("en"):
        assert str(DepartmentForm(instance=department_a)["guaranteed_gpus"].label) == "Guaranteed GPUs"


def test_a_leads_project_that_does_not_fit_is_refused_in_the_clients_language(api_as, lead_a, department_a):
    Department.objects.filter(pk=department_a.pk).update(guaranteed_gpus=0)
    body = {"department": "alpha", "name": "Vision", "guaranteed_gpus": 8}
    japanese = api_as(lead_a).post("/api/v1/projects/", body, format="json", HTTP_ACCEPT_LANGUAGE="ja")
    assert japanese.status_code == 400
    assert japanese.json()["guaranteed_gpus"] == [
        "Alpha のプロジェクトの保証が合計 8 GPU になりますが、部門の保証は 0 です: "
        "このプロジェクトには最大 0 までです"
    ]
    english = api_as(lead_a).post("/api/v1/projects/", body, format="json")
    assert english.json()["guaranteed_gpus"] == [
        "Alpha's projects would be guaranteed 8 GPUs but the department is guaranteed 0: at most 0 for this "
        "project"
    ]


def test_a_lead_adding_an_unknown_account_is_answered_in_japanese(api_as, lead_a, department_a):
    answer = api_as(lead_a).post(
        "/api/v1/departments/alpha/members/",
        {"username": "nobody-here"},
        format="json",
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    assert answer.status_code == 400
    assert answer.json()["username"] == [
        "'nobody-here' という名前のユーザーを Alpha に追加することはできません: リードが追加できるのは、"
        "プラットフォーム管理者ではない有効なアカウントです"
    ]


def test_a_members_job_without_a_project_is_answered_in_japanese(
    api_as, platform_admin, member_a, department_a
):
    # In two named projects (in one, or none, the job goes to it, or to the default project).
    for name in ("Vision", "Speech"):
        set_project_member(platform_admin, create_project(platform_admin, department_a, name=name), member_a)
    body = {
        "department": "alpha",
        "name": "train-llm",
        "gpus": 4,
        "work": {"script": "#!/bin/bash\nsrun python train.py"},
    }
    answer = api_as(member_a).post("/api/v1/jobs/", body, format="json", HTTP_ACCEPT_LANGUAGE="ja")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["project"] == [
        "alpha は GPU をプロジェクトで分け合っています: "
        "あなたのプロジェクトのひとつを選んでください（speech, vision）"  # noqa: RUF001
    ]


def test_a_refused_single_sign_on_comes_back_to_the_login_page_with_a_japanese_message(client, settings):
    """The login page itself is the portal's (its catalogue); the message on it is tenancy's."""
    settings.OIDC_RP_CLIENT_ID = "rackplane"
    settings.OIDC_PROVIDER_NAME = "Example SSO"
    response = client.get("/oidc/callback/?error=access_denied", HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 302 and response["Location"] == reverse("login")
    page = client.get(reverse("login"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    messages = re.findall(r'<div class="message error"[^>]*>(.*?)</div>', page, re.S)
    assert messages == [
        "Example SSO でのサインインに失敗しました: ID プロバイダーの応答は &#x27;access_denied&#x27; でした。"
        "もう一度お試しいただくか、ローカルアカウントでサインインしてください。"
    ]
    assert not english_left(messages[0])


def test_a_sign_in_refusal_reads_in_the_persons_language_and_logs_in_english(department_a):
    factories.make_user("hedy")
    with pytest.raises(SignInRefused) as refused:
        account_for("oidc", "subject-1", "hedy")
    with translation.override("ja"):
        assert str(refused.value) == (
            "Rackplane アカウント 'hedy' はすでに存在し、あなたのシングルサインオンの ID に紐付いていません: "
            "プラットフォーム管理者に紐付けを依頼してください（Django 管理画面の「外部 ID」）。"  # noqa: RUF001
        )
        assert refused.value.english.startswith("A Rackplane account named 'hedy' already exists")


def test_stored_names_stay_english_in_a_japanese_request(department_a, lead_a):
    """A membership's and the metrics source's names read in the viewer's language (the admin's titles), and
    audit records keep them in English, whoever made the change (core.audit)."""
    from core.models import AuditEvent

    membership = lead_a.memberships.get()
    with translation.override("ja"):
        assert str(membership) == "lead-a（部門リード、Alpha）"  # noqa: RUF001
        assert not str(MetricsSource.load()).startswith("Direct:")
        membership.save()
        source = MetricsSource.load()
        source.save()
    assert str(membership) == "lead-a (Department lead, Alpha)"
    recorded = AuditEvent.objects.filter(object_type="tenancy.membership", object_id=str(membership.pk))
    assert {event.object_repr for event in recorded} == {"lead-a (Department lead, Alpha)"}
    source_events = AuditEvent.objects.filter(object_type="tenancy.metricssource")
    assert all(event.object_repr.startswith("Direct:") for event in source_events)


def test_every_field_label_is_the_english_django_would_make_and_is_translated():
    """The admin's forms take their labels from tenancy.labels: each is the label Django makes from the
    field's name (the English does not change), and none is missing from the Japanese catalogue."""
    from django.apps import apps

    for model in apps.get_app_config("tenancy").get_models():
        for name, label in labels_for(model).items():
            field = model._meta.get_field(name)
            with translation.override("en"):
                assert str(label) == capfirst(field.verbose_name), (model.__name__, name)
            with translation.override("ja"):
                assert str(label) != capfirst(field.verbose_name), name
    assert set(FIELD_LABELS) >= {"guaranteed_gpus", "created_at", "export_root"}
