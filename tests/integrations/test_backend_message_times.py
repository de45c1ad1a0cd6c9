"""A job's backend message in the viewer's zone (issue 31, "times in the viewer's zone with the zone shown"):
the moments Rackplane writes into it (the embedded backend's time limit, when a backend was unreachable) are
stored in UTC, named (core.moments.utc_words), and a page shows them in the viewer's zone; an outside
system's own words stay as written and are labelled as its own, with the zone of their times."""

import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from core.moments import utc_words
from core.sentences import CLAUSES, say
from integrations.words import (
    BACKEND_STATE_SAYING,
    BACKEND_UNREACHABLE,
    EMBEDDED_RAN_UNTIL,
    EMBEDDED_RENDERED_UNTIL,
    STATE_NOT_UPDATED,
)
from scheduling.choices import Backend
from tests.factories import make_department, make_job
from tests.i18n_check import assert_japanese

pytestmark = pytest.mark.django_db
AT = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)  # 10:02:03 in Tokyo


def message_on_the_page(client, job) -> str:
    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    start = html.index('<p class="backend-message">')
    return html[start : html.index("</p>", start)]


@pytest.fixture
def tokyo(admin_client_logged_in):
    admin_client_logged_in.cookies["rackplane_tz"] = "Asia/Tokyo"
    return admin_client_logged_in


def job_saying(message: str, backend=Backend.SLURM):
    return make_job(make_department("Ops"), backend=backend, backend_message=message)


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            say(
                EMBEDDED_RENDERED_UNTIL,
                rendered_file="t.sh",
                backend_kind="slurm",
                ends_at=utc_words(AT, False),
            ),
            "2026-11-30 10:02 JST",
        ),
        (say(EMBEDDED_RAN_UNTIL, ends_at=utc_words(AT, seconds=False)), "2026-11-30 10:02 JST"),
        (
            CLAUSES.join(
                [
                    say(BACKEND_UNREACHABLE, backend="Slurm (prod)", at=utc_words(AT), error="refused"),
                    STATE_NOT_UPDATED,
                ]
            ),
            "2026-11-30 10:02:03 JST",
        ),
    ],
)
def test_a_tokyo_viewer_reads_rackplanes_moments_in_jst(tokyo, message, shown):
    job = job_saying(message)
    assert "2026-11-30 01:02" in message and "UTC" in message  # stored in UTC, named
    html = message_on_the_page(tokyo, job)
    assert f">{shown}</time>" in html and "01:02" not in re.sub(r"<[^>]*>", "", html)
    assert 'datetime="2026-11-30T01:02' in html
    assert "data-outside-words" not in html  # Rackplane's own words: not labelled as the backend's
    japanese = tokyo.get(reverse("scheduling:job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="ja")
    assert f">{shown}</time>" in japanese.content.decode()


def test_without_a_zone_the_moment_reads_utc(admin_client_logged_in):
    job = job_saying(say(EMBEDDED_RAN_UNTIL, ends_at=utc_words(AT, seconds=False)))
    assert ">2026-11-30 01:02 UTC</time>" in message_on_the_page(admin_client_logged_in, job)


def test_a_time_without_its_date_an_older_release_wrote_is_shown_as_written(tokyo):
    old = "rendered to t.sh: no live slurm backend is configured, and it ends at its time limit, 07:24 UTC"
    html = message_on_the_page(tokyo, job_saying(old))
    assert "07:24 UTC" in html and "<time" not in html


@pytest.mark.parametrize(
    ("backend", "label"),
    [
        (
            Backend.SLURM,
            "(In parentheses: Slurm's own words, as written; its times are in its controller's time zone.)",
        ),
        (Backend.KUBERNETES, "(In parentheses: Kubernetes's own words, as written; its times are in UTC.)"),
    ],
)
def test_a_backends_own_words_stay_verbatim_and_are_labelled_with_their_zone(tokyo, backend, label):
    words = "BeginTime: begins at 2026-11-30T09:00:00"
    message = say(BACKEND_STATE_SAYING, backend="Slurm (prod)", backend_state="pending", message=words)
    job = job_saying(message, backend)
    html = message_on_the_page(tokyo, job)
    assert words in re.sub(r"<[^>]*>", "", html)  # as written
    assert label in html
    assert_japanese(tokyo, reverse("scheduling:job-detail", args=[job.pk]))
