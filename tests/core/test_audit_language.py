"""The audit log is written in English whatever the language of the request that made the change: a name
built from translated words (a choice label, a role) would otherwise be stored in the viewer's language."""

import pytest
from django.utils import translation
from django.utils.translation import gettext

from core.models import AuditEvent
from tenancy.models import Department
from tests.factories import make_department


@pytest.mark.django_db
def test_a_change_made_in_japanese_is_recorded_in_english(monkeypatch):
    monkeypatch.setattr(Department, "__str__", lambda self: f"{self.name} ({gettext('Jobs')})")
    with translation.override("ja"):
        department = make_department("Alpha")
        shown = str(department)
    assert shown == "Alpha (ジョブ)"  # the name as a Japanese page would show it
    event = AuditEvent.objects.filter(object_type="tenancy.department", object_id=str(department.pk)).latest(
        "pk"
    )
    assert event.object_repr == "Alpha (Jobs)"
