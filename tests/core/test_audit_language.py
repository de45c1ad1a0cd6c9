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


@pytest.mark.django_db
def test_the_audit_log_shows_a_changes_moments_in_the_viewers_zone_and_choices_by_their_label(client_as):
    """The fourth walkthrough's /audit/ in Tokyo: "finished at: — → 2026-11-30 14:35:21.621925+00:00" and
    "pending → cancelled" beside a header saying times are in Asia/Tokyo. The record keeps UTC and the
    value."""
    import re
    from datetime import UTC, datetime

    from portal.web.middleware import TIMEZONE_COOKIE
    from scheduling.choices import JobState
    from scheduling.models import Job
    from tests.factories import make_job

    job = make_job(make_department("Ops"), "train-ops", JobState.PENDING)
    job.state, job.finished_at = JobState.CANCELLED, datetime(2026, 11, 30, 14, 35, 21, 621925, tzinfo=UTC)
    job.save()
    event = AuditEvent.objects.filter(object_type="scheduling.job", object_id=str(job.pk)).latest("pk")
    assert event.after["finished_at"].startswith("2026-11-30 14:35:21")  # recorded as it was, in UTC
    client = client_as("platform_admin")
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    for language in ("en", "ja"):
        with translation.override(language):
            cancelled = str(JobState.CANCELLED.label)
        url = "/audit/?object_type=scheduling.job"
        page = client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
        text = " ".join(re.sub(r"<[^>]+>", " ", page).split())
        assert "2026-11-30 23:35:21 JST" in text and "+00:00" not in text, language
        assert f"→ {cancelled}" in text and "pending →" not in text, language
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
