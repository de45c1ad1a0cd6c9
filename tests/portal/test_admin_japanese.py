"""Django's admin in Japanese (issue 31, "every user-visible string ... in the users' language"): the apps'
and models' names on the admin index, and a changelist's title, filters and column labels, come from
translated verbose names (the admin's own words are Django's, translated by it)."""

import pytest
from django.urls import reverse

from tests.factories import make_department, make_job
from tests.i18n_check import english_left_but

pytestmark = pytest.mark.django_db
# Data and Django's own: the site's name, and the search box's icon, whose alt text Django's
# admin/search_form.html writes in English without marking it for translation.
ALLOWED = ["Rackplane", "Search"]


def english_on(client, url: str) -> list[str]:
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 200, url
    assert response.headers["Content-Language"] == "ja"
    return english_left_but(response.content.decode(), ALLOWED)


def test_the_admin_index_is_japanese(admin_client_logged_in):
    html = admin_client_logged_in.get(reverse("admin:index"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert not english_on(admin_client_logged_in, reverse("admin:index"))
    names = ("ジョブ", "部門", "ラック", "監査イベント", "計画の適用期間", "スケジューリング", "外部連携")
    assert all(name in html for name in names), [name for name in names if name not in html]


@pytest.mark.parametrize("changelist", ["scheduling_job", "tenancy_department"])
def test_a_changelist_is_japanese(admin_client_logged_in, changelist):
    make_job(make_department("Ops"), name="train-ops")
    left = english_on(admin_client_logged_in, reverse(f"admin:{changelist}_changelist"))
    assert not left, left


def test_stored_reasons_stay_english_when_a_japanese_admin_changes_a_model(admin_client_logged_in):
    from scheduling.models import SchedulingRequest

    department = make_department("Ops")
    admin_client_logged_in.post(
        reverse("admin:tenancy_department_delete", args=[department.pk]),
        {"post": "yes"},
        HTTP_ACCEPT_LANGUAGE="ja",
    )
    reasons = list(SchedulingRequest.objects.values_list("reason", flat=True))
    assert "department Ops deleted" in reasons, reasons


def test_a_change_form_with_dates_says_their_zone(admin_client_logged_in):
    """The admin writes dates and times without their zone: a change form of a model holding some names the
    viewer's (the portal's time zone cookie), in the viewer's language; one without says nothing."""
    from portal.web.middleware import TIMEZONE_COOKIE

    job = make_job(make_department("Ops"), name="train-ops")
    admin_client_logged_in.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    url = reverse("admin:scheduling_job_change", args=[job.pk])
    html = admin_client_logged_in.get(url).content.decode()
    assert "Dates and times on this page are in Asia/Tokyo." in html
    japanese = admin_client_logged_in.get(url, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "この画面の日時は Asia/Tokyo の時刻です。" in japanese
    del admin_client_logged_in.cookies[TIMEZONE_COOKIE]
    assert "Dates and times on this page are in UTC." in admin_client_logged_in.get(url).content.decode()
    from inventory.models import HealthRule

    rule = HealthRule.objects.first() or HealthRule.objects.create(name="r", kind="xid", codes="79")
    html = admin_client_logged_in.get(reverse("admin:inventory_healthrule_change", args=[rule.pk]))
    assert html.status_code == 200 and "admin-time-zone" not in html.content.decode()  # a rule holds no date
