"""The metrics source's secrets in the audit log: a change of only the bearer token or the password is an
entry saying the secret was set, changed or removed, never its value (core.audit.SECRETS)."""

import json

import pytest
from django.urls import reverse

from core.models import AuditAction, AuditEvent
from tenancy.models import MetricsSource
from tests.tenancy.prometheus_server import admin_form

pytestmark = pytest.mark.django_db

TOKEN, OTHER_TOKEN, PASSWORD, OTHER_PASSWORD = (
    "tok-first-1234",
    "tok-second-5678",
    "pw-first-1",
    "pw-second-2",
)


def events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(object_type="tenancy.metricssource").order_by("pk"))


def nowhere_in_the_log(*secrets: str) -> bool:
    text = json.dumps(list(AuditEvent.objects.values("before", "after", "labels", "object_repr")))
    return not any(secret in text for secret in secrets)


@pytest.fixture
def form() -> dict:
    return admin_form()


def test_changing_only_the_bearer_token_in_the_admin_is_audited_without_its_value(admin_client, form):
    url = reverse("admin:tenancy_metricssource_change", args=[MetricsSource.load().pk])
    assert admin_client.post(url, {**form, "bearer_token": TOKEN}).status_code == 302
    first = len(events())

    assert admin_client.post(url, {**form, "bearer_token": OTHER_TOKEN}).status_code == 302
    assert MetricsSource.load().bearer_token == OTHER_TOKEN
    change = events()[first:]
    assert len(change) == 1, [(e.before, e.after) for e in change]
    assert change[0].action == AuditAction.UPDATE and change[0].actor_name == "admin"
    assert (change[0].before, change[0].after) == ({"bearer_token": "set"}, {"bearer_token": "changed"})

    admin_client.post(url, {**form})  # left empty: the saved token stays, nothing changed, no entry
    assert len(events()) == first + 1

    admin_client.post(url, {**form, "clear_credentials": "on"})
    assert events()[-1].after == {"bearer_token": "removed"}
    assert nowhere_in_the_log(TOKEN, OTHER_TOKEN)


def test_changing_only_the_password_is_audited_without_its_value(form):
    source = MetricsSource.load()
    source.kind, source.url = "prometheus", form["url"]
    source.username, source.password = "reader", PASSWORD
    source.save()
    set_up = events()[-1]
    assert set_up.after.get("password") == "set" and set_up.after.get("username") == "reader"

    source.password = OTHER_PASSWORD
    source.save()
    last = events()[-1]
    assert (last.before, last.after) == ({"password": "set"}, {"password": "changed"})
    assert nowhere_in_the_log(PASSWORD, OTHER_PASSWORD)


def test_the_same_secret_saved_again_leaves_no_entry():
    source = MetricsSource.load()
    source.kind, source.url, source.bearer_token = "prometheus", "http://127.0.0.1:9", TOKEN
    source.save()
    count = len(events())
    source = MetricsSource.objects.get(pk=source.pk)
    source.bearer_token = TOKEN
    source.save()
    assert len(events()) == count
