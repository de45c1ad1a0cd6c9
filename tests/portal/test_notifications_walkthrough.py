"""Notifications, defects a walkthrough found: the admin's page and the bell shared one name; a member was
asked for the idle-GPU threshold (a lead's department event); one owner could add two webhooks to one
address; a webhook address without a scheme was saved as https; /account/tokens/new/ opened directly showed
the "shown once" page. Each refused or fixed, nothing written where something is refused."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from core.models import AuditEvent, NotificationSubscription, PersonalToken

pytestmark = pytest.mark.django_db

MINE = "/account/notifications/"
NAV = re.compile(r'<nav aria-label="Main">(.*?)</nav>', re.S)


@pytest.fixture
def allow_private(settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True


def test_the_admins_page_is_named_apart_from_the_bell(client_as, platform_admin):
    html = client_as(platform_admin).get(reverse("notification-list")).content.decode()
    nav = NAV.search(html).group(1)
    assert ">Webhooks &amp; email</a>" in nav and ">Notifications</a>" not in nav
    assert (
        "<title>Webhooks &amp; email · Rackplane</title>" in html and "<h1>Webhooks &amp; email</h1>" in html
    )
    # The bell keeps "Notifications": one name, one thing.
    assert 'class="visually-hidden">Notifications:</span>' in html
    form = client_as(platform_admin).get(reverse("notification-new", args=["email"])).content.decode()
    assert f'<a href="{reverse("notification-list")}">Webhooks &amp; email</a>' in form  # the breadcrumb


def test_a_member_is_not_asked_for_the_idle_gpu_threshold(client_as, member_a):
    client = client_as(member_a)
    page = client.get(MINE).content.decode()
    assert 'name="threshold"' not in page and "Idle GPUs above" not in page
    # Posted anyway (a crafted form): refused in words, nothing saved.
    response = client.post(
        MINE,
        {"channel": "portal", "events": ["job_finished"], "scope": f"user:{member_a.pk}", "threshold": "4"},
    )
    assert response.status_code == 400
    assert "The idle GPU threshold applies to the idle GPUs event only" in response.content.decode()
    assert not NotificationSubscription.objects.exists()


def test_a_lead_gives_the_threshold_only_with_the_idle_gpu_event(client_as, lead_a, department_a):
    client = client_as(lead_a)
    assert 'name="threshold"' in client.get(MINE).content.decode()
    scope = f"department:{department_a.slug}"
    response = client.post(
        MINE, {"channel": "portal", "events": ["guarantee_short"], "scope": scope, "threshold": "4"}
    )
    assert response.status_code == 400
    assert (
        "applies to the idle GPUs event only: leave it empty or choose that event."
        in response.content.decode()
    )
    assert not NotificationSubscription.objects.exists()
    response = client.post(
        MINE, {"channel": "portal", "events": ["idle_gpus"], "scope": scope, "threshold": "4"}
    )
    assert response.status_code == 302
    assert NotificationSubscription.objects.get(owner=lead_a).threshold == 4


def test_a_webhook_address_without_a_scheme_is_refused_on_the_members_page(
    client_as, member_a, allow_private
):
    client = client_as(member_a)
    data = {"channel": "webhook", "events": ["job_finished"], "scope": f"user:{member_a.pk}"}
    response = client.post(MINE, {**data, "url": "127.0.0.1:8799/hook"})
    assert response.status_code == 400
    assert "Write the address with its scheme: http://… or https://…" in response.content.decode()
    assert not NotificationSubscription.objects.exists() and not AuditEvent.objects.filter(
        object_type="core.notificationsubscription"
    )
    assert client.post(MINE, {**data, "url": "http://127.0.0.1:8799/hook"}).status_code == 200  # secret shown
    assert NotificationSubscription.objects.get().url == "http://127.0.0.1:8799/hook"


def test_one_owner_gets_one_webhook_per_address_whatever_the_scope(
    client_as, lead_a, department_a, allow_private
):
    client = client_as(lead_a)
    first = {"channel": "webhook", "events": ["job_finished"], "scope": f"user:{lead_a.pk}"}
    url = "http://127.0.0.1:8799/hook"
    assert client.post(MINE, {**first, "url": url}).status_code == 200
    again = {"channel": "webhook", "events": ["guarantee_short"], "scope": f"department:{department_a.slug}"}
    response = client.post(MINE, {**again, "url": url})
    assert response.status_code == 400
    assert "already sends to this address" in response.content.decode()
    assert NotificationSubscription.objects.filter(owner=lead_a).count() == 1


def test_the_admin_page_refuses_a_second_webhook_to_one_address_in_another_scope(
    client_as, platform_admin, demo_inventory, allow_private
):
    client = client_as(platform_admin)
    new = reverse("notification-new", args=["webhook"])
    body = {"name": "pager", "url": "http://127.0.0.1:8799/hook", "events": ["tray_drained"], "enabled": "on"}
    assert client.post(new, body).status_code == 303
    response = client.post(new, {**body, "name": "pager r01", "scope": "rack:gb-r01"})
    assert response.status_code == 400
    assert "“pager” already sends to this address" in response.content.decode()
    assert NotificationSubscription.objects.count() == 1


def test_the_new_token_page_opened_directly_leads_to_the_token_list(client_as, member_a):
    client = client_as(member_a)
    response = client.get("/account/tokens/new/")
    assert response.status_code == 303 and response["Location"] == reverse("personal-tokens")
    page = client.get(response["Location"]).content.decode()
    assert "There is no new token to show" in page and 'id="make-token"' in page
    assert "Copy it now" not in page and not PersonalToken.objects.exists()


def test_a_second_token_with_the_same_name_is_a_form_error(client_as, member_a):
    client = client_as(member_a)
    assert client.post("/account/tokens/", {"name": "laptop", "lifetime_days": "30"}).status_code == 303
    response = client.post("/account/tokens/", {"name": "  LAPTOP ", "lifetime_days": "30"})
    assert response.status_code == 400
    assert "You already have an active token named &#x27;LAPTOP&#x27;" in response.content.decode()
    assert PersonalToken.objects.filter(user=member_a).count() == 1
