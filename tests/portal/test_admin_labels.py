"""Django's admin in Japanese, every label (the second walkthrough found English left: the health events' and
config pushes' columns, the audit log's, a tray's change form, django-axes' section): each field the admin
shows has a translated verbose name, each computed column a translated description, and axes' app and
models read Japanese through the portal's catalogue (portal/admin.py, portal.admin_site.SignInLockoutConfig).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, label_for_field
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone, translation

from core.models import AuditEvent
from integrations.models import ConfigPush, ConfigTarget
from inventory.models import ComputeTray, HealthEvent
from portal.web.middleware import TIMEZONE_COOKIE
from tests.i18n_check import english_left_but

pytestmark = pytest.mark.django_db
JAPANESE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
# Names that are the same in Japanese: acronyms and protocol words (GPU, UUID, XID, URL, VLAN ID, P_Key...).
SAME_IN_JAPANESE = re.compile(r"(?:[A-Z][A-Z0-9_]*[A-Za-z]*\b ?)+")
# Django's own, not the portal's: the site's name and the search box's icon (alt text Django leaves English).
ALLOWED = ["Rackplane", "Search"]
# Form fields Django's user admin adds (its own words, translated by Django) and a form-only field.
FORM_ONLY = {"usable_password", "password1", "password2", "clear_credentials"}


def _shown(model_admin, request) -> list:
    names = [*getattr(model_admin, "list_display", ())]
    filters = getattr(model_admin, "list_filter", ())
    names += [f if isinstance(f, str) else f[0] for f in filters if isinstance(f, str | tuple)]
    names += flatten_fieldsets(model_admin.get_fieldsets(request, None))
    return [n for n in dict.fromkeys(names) if n not in FORM_ONLY and not (isinstance(n, str) and "__" in n)]


def _english_labels(model, model_admin, request) -> list[str]:
    left = []
    for name in _shown(model_admin, request):
        if name in ("action_checkbox", "pk", "id"):
            continue
        with translation.override("ja"):
            label = str(label_for_field(name, model, model_admin))
        if not JAPANESE.search(label) and not SAME_IN_JAPANESE.fullmatch(label):
            left.append(f"{model._meta.label}.{name}: {label!r}")
    return left


def test_every_label_the_admin_shows_is_japanese(admin_user):
    request = RequestFactory().get("/admin/")
    request.user = admin_user
    left = []
    for model, model_admin in admin.site._registry.items():
        left += _english_labels(model, model_admin, request)
        for inline in model_admin.get_inline_instances(request):
            left += _english_labels(inline.model, inline, request)
        with translation.override("ja"):
            for name in (model._meta.verbose_name_plural, model._meta.app_config.verbose_name):
                if not JAPANESE.search(str(name)) and not SAME_IN_JAPANESE.fullmatch(str(name)):
                    left.append(f"{model._meta.label}: {name!r}")
    assert not left, "\n".join(left)


def _page(client, url: str) -> str:
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja", follow=True)  # a one-row model: its change form
    assert response.status_code == 200, url
    assert response.headers["Content-Language"] == "ja"
    return response.content.decode()


def _columns(html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r'<th scope="col" class="[^"]*column-[^"]*"[^>]*>(.*?)</th>', html, re.S)
    ]


@pytest.fixture
def walkthrough_rows(admin_user, demo_inventory):
    tray = ComputeTray.objects.order_by("pk").first()
    now = timezone.now()
    HealthEvent.objects.create(
        tray=tray,
        source="agent",
        kind="xid",
        code="79",
        message="GPU fell off the bus",
        first_seen=now,
        last_seen=now,
    )
    target = ConfigTarget.objects.create(name="slurm-prod", kind="slurm")
    ConfigPush.objects.create(target=target, reason="department research added", payload={})
    AuditEvent.objects.create(
        actor=admin_user, actor_name="admin", source="web", action="change", object_type="x", object_repr="y"
    )
    return tray


def test_the_walkthrough_pages_are_japanese(admin_client_logged_in, walkthrough_rows):
    health = _page(admin_client_logged_in, reverse("admin:inventory_healthevent_changelist"))
    for english in ("Tray", "Source", "Kind", "Code", "Count", "First seen", "Last seen", "Drains"):
        assert english not in _columns(health), _columns(health)
    assert "初回検出日時" in _columns(health) and "最終検出日時" in _columns(health), _columns(health)
    pushes = _page(admin_client_logged_in, reverse("admin:integrations_configpush_changelist"))
    assert "Requested by" not in _columns(pushes) and "依頼者" in _columns(pushes), _columns(pushes)
    assert "status で絞り込む" not in pushes
    audit = _page(admin_client_logged_in, reverse("admin:core_auditevent_changelist"))
    assert {"実行者名", "部門 ID"} <= set(_columns(audit)), _columns(audit)
    assert not {"Actor name", "Object repr", "Department id"} & set(_columns(audit)), _columns(audit)
    tray_form = _page(
        admin_client_logged_in, reverse("admin:inventory_computetray_change", args=[walkthrough_rows.pk])
    )
    for english in ("Rack:", "Slot:", "State reason:", "Ib port guids:", "Last report at:", "Healthy since:"):
        assert english not in tray_form, english
    assert "状態の理由" in tray_form
    index = _page(admin_client_logged_in, reverse("admin:index"))
    assert "サインインのロックアウト" in index and "アクセス試行" in index and "Access attempts" not in index


# Identifiers in upper case with underscores (a DCGM field, a fabric manager's code: DRAIN_AND_RESET).
CODES = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")


@pytest.mark.slow(reason="renders every changelist of the Django admin")
def test_every_changelist_and_a_change_form_have_no_english(admin_client_logged_in, walkthrough_rows):
    pages = [(reverse("admin:index"), None)]
    for model in admin.site._registry:
        pages.append((reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"), model))
    for row in (walkthrough_rows, ConfigPush.objects.get()):
        url = reverse(f"admin:{row._meta.app_label}_{row._meta.model_name}_change", args=[row.pk])
        pages.append((url, type(row)))
    # Stored texts are data, as stored (English): a push's reason, a health event's message, and the example
    # of a help text (label matchers, as typed).
    stored = ["department research added", "GPU fell off the bus", 'cluster="gb-east",job="dcgm"']
    left = {}
    for url, model in pages:
        html = _page(admin_client_logged_in, url)
        # A row's name (its __str__) is data: kept in English on purpose (audit records keep it).
        shown = [str(row) for row in model._default_manager.all()[:100]] if model else []
        found = english_left_but(html, [*shown, *stored, *ALLOWED, CODES])  # the longest first
        if found:
            left[url] = found
    assert not left, "\n".join(f"{url}: {texts}" for url, texts in left.items())


# ---- times name their zone (the walkthrough: "2026年11月30日19:28", right in JST, but no zone said) ------
AT = datetime(2026, 11, 30, 10, 28, tzinfo=UTC)


@pytest.mark.parametrize(
    ("language", "zone", "shown"),
    [("ja", "Asia/Tokyo", "2026年11月30日19:28 JST"), ("en", "UTC", "Nov. 30, 2026, 10:28 a.m. UTC")],
)
def test_admin_times_name_their_zone(admin_client_logged_in, admin_user, language, zone, shown):
    event = AuditEvent.objects.create(
        actor=admin_user, actor_name="admin", source="web", action="change", object_type="x", object_repr="y"
    )
    AuditEvent.objects.filter(pk=event.pk).update(at=AT)
    admin_client_logged_in.cookies[TIMEZONE_COOKIE] = zone
    for url in (
        reverse("admin:core_auditevent_changelist"),
        reverse("admin:core_auditevent_change", args=[event.pk]),
    ):
        html = admin_client_logged_in.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert shown in html, url
