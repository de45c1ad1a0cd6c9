"""The portal's own pages in Japanese: every text of the home pages, search, API tokens, notifications, the
inbox, the audit log and the error pages is translated (tests.i18n_check), for an admin, a lead and a member;
messages and form errors come back in the viewer's language too; English stays the default."""

import pytest
from django.apps import apps
from django.urls import reverse

from core.audit import AUDITED
from core.models import AuditEvent, NotificationChannel, NotificationSubscription
from portal.pages.audit import changes_of
from tests.i18n_check import assert_japanese, english_left

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook(platform_admin):
    return NotificationSubscription.objects.create(
        name="on-call pager",
        channel=NotificationChannel.WEBHOOK,
        url="https://hooks.example.org/rackplane",
        secret="s" * 40,
        events=["tray_drained", "job_failed"],
        created_by=platform_admin,
    )


def english_of_portal_and_core(html: str, data: frozenset[str] = frozenset()) -> list[str]:
    """english_left(html), without the texts in `data` (stored values, shown as stored). Nothing else is let
    through: the other apps' words these pages show (a tray's state, the audited models' and fields' names)
    are translated too (an allow-list of them once hid the audit log's English model and field names)."""
    return [text for text in english_left(html) if text not in data]


def test_every_audited_name_the_audit_log_shows_is_japanese():
    """The audit log's object types and changed fields name the other apps' models and fields: each name
    Django made from Python (plain text) is in a catalogue (portal.pages.audit_names), and a lazy one is
    translated by its app's own; only identifiers ("ID") read the same in both languages."""
    from django.utils import translation
    from django.utils.functional import Promise

    untranslated = set()
    for label in AUDITED:
        model = apps.get_model(label)
        names = [model._meta.app_config.verbose_name, model._meta.verbose_name]
        names += [getattr(field, "verbose_name", None) for field in model._meta.get_fields()]
        for name in filter(None, names):
            with translation.override("en"):
                english = str(name)
            with translation.override("ja"):
                japanese = str(name) if isinstance(name, Promise) else translation.gettext(english)
            if japanese == english and english != "ID":
                untranslated.add(f"{label}: {english}")
    assert not untranslated, sorted(untranslated)


def japanese_page(client, url: str, data: frozenset[str] = frozenset()) -> str:
    """`url` in Japanese: a 200 whose texts of the portal and core are all translated (but `data`)."""
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 200, (url, response.status_code)
    assert response.headers["Content-Language"] == "ja"
    html = response.content.decode()
    left = english_of_portal_and_core(html, data)
    assert not left, f"{url} in Japanese still shows English: {left}"
    return html


def sign_in(client, person):
    """Signed in as `person`, renamed first: a persona's username ("lead-a") holds an English word the
    checker would find in the header (a name is data, shown as it is)."""
    person.username = f"sato-{person.pk}"
    person.save(update_fields=["username"])
    client.force_login(person)
    return person


def test_the_fleet_overview_is_japanese(client, platform_admin, demo_inventory):
    sign_in(client, platform_admin)
    html = japanese_page(client, reverse("home"))
    assert "フリートの概要" in html


@pytest.mark.parametrize("persona", ["lead_a", "member_a"])
def test_the_work_home_is_japanese(client, persona, request):
    sign_in(client, request.getfixturevalue(persona))
    html = assert_japanese(client, reverse("home"))
    assert "あなたの作業" in html


@pytest.mark.parametrize("persona", ["platform_admin", "lead_a", "member_a"])
def test_search_pages_are_japanese(client, persona, request, demo_inventory):
    sign_in(client, request.getfixturevalue(persona))
    assert_japanese(client, reverse("search"))
    assert_japanese(client, reverse("search") + "?q=zz-nothing-zz")
    html = assert_japanese(client, reverse("search") + "?q=gb-r0&all=1")
    assert "件" in html or "一致する" in html


@pytest.mark.parametrize("persona", ["platform_admin", "lead_a", "member_a"])
def test_account_pages_are_japanese(client, persona, request):
    sign_in(client, request.getfixturevalue(persona))
    html = assert_japanese(client, reverse("personal-tokens"))
    assert "あなたの API トークン" in html
    assert_japanese(client, reverse("api-token"))
    assert_japanese(client, reverse("my-notifications"))
    assert_japanese(client, reverse("my-inbox"))
    assert_japanese(client, reverse("my-inbox-bell"))


def test_a_new_token_and_its_list_are_japanese(client, member_a):
    sign_in(client, member_a)
    made = client.post(
        reverse("personal-tokens"), {"name": "laptop", "lifetime_days": "30"}, HTTP_ACCEPT_LANGUAGE="ja"
    )
    assert made.status_code == 303
    html = assert_japanese(client, made["Location"])
    assert "今すぐコピーしてください" in html
    assert_japanese(client, reverse("personal-tokens"))


@pytest.mark.parametrize("persona", ["platform_admin", "lead_a"])
def test_the_audit_log_is_japanese(client, persona, request, webhook):
    sign_in(client, request.getfixturevalue(persona))
    assert AuditEvent.objects.exists()
    # The recorded values are the audit log's data, shown as recorded (never translated).
    recorded = frozenset(
        " ".join(str(value).split())
        for event in AuditEvent.objects.all()
        for change in changes_of(event)
        for value in (change.before, change.after, change.before_title, change.after_title)
        if value
    )
    html = japanese_page(client, reverse("audit-list"), recorded)
    assert "監査ログ" in html
    japanese_page(client, reverse("audit-list") + "?actor=nobody-at-all")


def test_the_notification_pages_are_japanese(client, platform_admin, webhook):
    sign_in(client, platform_admin)
    html = assert_japanese(client, reverse("notification-list"))
    assert "エンドポイントと受信者" in html
    assert_japanese(client, reverse("notification-new", args=["webhook"]))
    assert_japanese(client, reverse("notification-new", args=["email"]))
    assert_japanese(client, reverse("notification-edit", args=[webhook.pk]))
    assert_japanese(client, reverse("notification-delete", args=[webhook.pk]))
    assert_japanese(client, reverse("notification-secret", args=[webhook.pk]))


def test_a_form_error_is_japanese(client, platform_admin):
    sign_in(client, platform_admin)
    response = client.post(
        reverse("notification-new", args=["webhook"]),
        {"name": "", "url": "hooks.example.org/x", "events": []},
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert not english_of_portal_and_core(html), english_of_portal_and_core(html)
    assert "受け取る人またはものの名前を付けてください。" in html
    assert "イベントを 1 つ以上選んでください。" in html
    assert "アドレスはスキーム付きで入力してください" in html


def test_a_message_is_japanese_and_english_stays_the_default(client, member_a):
    sign_in(client, member_a)
    response = client.post(reverse("my-inbox-read"), {"all": "1"}, HTTP_ACCEPT_LANGUAGE="ja", follow=True)
    assert "0 件の通知を既読にしました。" in response.content.decode()
    response = client.post(reverse("my-inbox-read"), {"all": "1"}, follow=True)
    assert "0 notifications marked read." in response.content.decode()


def test_refusals_are_japanese(client, member_a):
    sign_in(client, member_a)
    response = client.get(reverse("notification-list"), HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 403
    html = response.content.decode()
    assert not english_of_portal_and_core(html), english_of_portal_and_core(html)
    assert "通知の設定 はプラットフォーム管理者のみが利用できます。" in html
    response = client.get(reverse("audit-list"), HTTP_ACCEPT_LANGUAGE="ja")
    assert (
        response.status_code == 403
        and "監査ログ はプラットフォーム管理者と部門リードのみ" in response.content.decode()
    )


def test_the_error_pages_are_japanese(client, member_a):
    sign_in(client, member_a)
    response = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 404
    html = response.content.decode()
    assert not english_of_portal_and_core(html), english_of_portal_and_core(html)
    assert "見つかりません" in html


def test_the_locked_out_page_is_japanese(rf):
    from django.template.loader import render_to_string
    from django.utils import translation

    with translation.override("ja"):
        html = render_to_string("registration/locked_out.html", {"username": "ann", "cooloff_minutes": 15})
    assert not english_of_portal_and_core(html), english_of_portal_and_core(html)
    assert "15 分間" in html


def test_a_text_rule_refusal_is_japanese(client, member_a):
    sign_in(client, member_a)
    response = client.post(
        reverse("personal-tokens"),
        {"name": "bad\u202ename", "lifetime_days": "30"},
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "U+202E" in html and "双方向制御文字" in html


def test_the_shared_pieces_of_list_pages_are_japanese(rf):
    """The pager, the table tools, the filter buttons and the banners (templates/), as lists show them."""
    import datetime
    from types import SimpleNamespace

    from django.core.paginator import Paginator
    from django.template.loader import render_to_string
    from django.utils import translation

    request = rf.get("/inventory/racks/?page=2")
    page = Paginator(range(100), 10).page(2)
    table = SimpleNamespace(
        name="racks",
        kept_params=[],
        size_choices=[(10, True), (50, False)],
        export_urls={"csv": "?export=csv", "json": "?export=json"},
    )
    removal = SimpleNamespace(
        what="slurmrestd v0.0.40",
        removed_in="Slurm 25.05",
        due=datetime.date(2026, 5, 1),
        what_to_do="v0.0.42",
    )
    pieces = {
        "_pager.html": {"page": page, "noun": "ラック"},
        "_table_tools.html": {"table": table, "noun": "ラック"},
        "_filter_actions.html": {"filtered": True, "clear_url": "/inventory/racks/"},
        "_capacity_banner.html": {
            "capacity_status": SimpleNamespace(
                shortfall=8, capacity=64, guaranteed=72, affected=["Alpha", "Beta"]
            )
        },
        "_removals_banner.html": {"removals_ahead": [("slurm-main", SimpleNamespace(removal=removal))]},
    }
    with translation.override("ja"):
        for template, context in pieces.items():
            html = render_to_string(template, context, request=request)
            assert not english_left(html), (template, english_left(html))
            assert html.strip(), template
        pager = render_to_string("_pager.html", pieces["_pager.html"], request=request)
    assert "10 ページ中 2 ページ目" in pager and "ラック 11\u201320" in pager
    with translation.override("en"):
        pager = render_to_string("_pager.html", {"page": page, "noun": "racks"}, request=request)
    assert "Page 2 of 10 · racks 11\u201320" in pager


@pytest.mark.parametrize("ldap", [True, False])
def test_the_sign_in_page_with_single_sign_on_is_japanese(rf, ldap):
    from django.contrib.auth.forms import AuthenticationForm
    from django.contrib.auth.models import AnonymousUser
    from django.template.loader import render_to_string
    from django.utils import translation

    request = rf.get("/login/")
    request.user = AnonymousUser()
    context = {"form": AuthenticationForm(), "oidc_enabled": True, "oidc_provider_name": "Keycloak"}
    with translation.override("ja"):
        html = render_to_string("registration/login.html", {**context, "ldap_enabled": ldap}, request=request)
    assert not english_left(html), english_left(html)
    assert "Keycloak でサインイン" in html
