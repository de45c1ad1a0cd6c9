"""The person on every job row of a person's home (issue 31): the running and pending tables name who
submitted each job, "(yours)" for the viewer's own, and show why a job waits in the viewer's language; on a
phone the department column is left out (the jobs list does the same), not scrolled off the side."""

import re

import pytest
from django.urls import reverse

from core.access import Role
from tenancy.models import Membership
from tests.factories import make_job

pytestmark = pytest.mark.django_db


def rows(html: str, section: str) -> dict[str, str]:
    """Each row's text (tags dropped) of the home's `section` ("work-running", "work-pending"), by job."""
    part = html.split(f'aria-labelledby="{section}"', 1)[1].split("</section>", 1)[0]
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", part, re.S)[1:]:
        text = " ".join(re.sub(r"<[^>]+>", " ", row).split())
        found[text.split()[0]] = text
    return found


def test_every_job_row_on_the_home_names_its_submitter(client_as, department_a, member_a, lead_a):
    make_job(department_a, "theirs-running", state="running", submitted_by=lead_a)
    make_job(department_a, "mine-running", state="running", submitted_by=member_a)
    make_job(
        department_a,
        "theirs-waiting",
        state="pending",
        submitted_by=lead_a,
        pending_reason="waiting: no rack has 18 free trays (the most in one rack is 16)",
    )
    make_job(department_a, "mine-waiting", state="pending", submitted_by=member_a)
    html = client_as("member_a").get(reverse("home")).content.decode()
    running, pending = rows(html, "work-running"), rows(html, "work-pending")
    assert "by lead-a" in running["theirs-running"] and "(yours)" not in running["theirs-running"]
    assert "(yours)" in running["mine-running"] and "by " not in running["mine-running"]
    assert "by lead-a" in pending["theirs-waiting"] and "(yours)" in pending["mine-waiting"]
    # A member of one department is not told its name on every row (it squeezed the names and reasons).
    assert ">Department</th>" not in html.split('id="work-running"', 1)[1]

    ja = client_as("member_a").get(reverse("home"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    pending = rows(ja, "work-pending")
    assert "投入者 lead-a" in pending["theirs-waiting"] and "あなたのジョブ" in pending["mine-waiting"]
    assert "no rack has" not in pending["theirs-waiting"]  # the engine's reason, read in Japanese


def test_a_member_of_two_departments_sees_each_jobs_department_but_not_on_a_phone(
    client_as, department_a, department_b, member_a
):
    Membership.objects.create(user=member_a, department=department_b, role=Role.MEMBER)
    make_job(department_b, "beta-running", state="running", submitted_by=member_a)
    make_job(department_a, "alpha-waiting", state="pending", submitted_by=member_a)
    html = client_as("member_a").get(reverse("home")).content.decode()
    assert "Beta" in rows(html, "work-running")["beta-running"]
    assert department_a.name in rows(html, "work-pending")["alpha-waiting"]
    # The column is one a phone leaves out (the jobs list does the same).
    assert html.count('<th scope="col" class="phone-hide">Department</th>') == 2


def test_the_homes_idle_gpus_name_the_person_longest_idle_first(
    client_as, demo_inventory, department_a, department_b, member_a, lead_a
):
    """The walkthrough's carol and frank: their home's idle GPUs had no person and no order, while the
    department page and the admin dashboard name the person, longest idle first (one table for all three)."""
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import healthy_gpus, run_job, set_activity

    gpus = healthy_gpus(8)
    started = timezone.now() - timedelta(hours=5)
    run_job(department_a, gpus[:4], "lead-notebook", submitted_by=lead_a, started_at=started)
    run_job(department_a, gpus[4:], "member-notebook", submitted_by=member_a, started_at=started)
    set_activity(gpus[:4], 1.0, timedelta(minutes=30))  # idle for half an hour
    set_activity(gpus[4:], 1.0, timedelta(hours=3))  # idle for three hours: listed first
    html = client_as("member_a").get(reverse("home")).content.decode()
    panel = html.split('aria-labelledby="work-idle"', 1)[1].split("</section>", 1)[0]
    assert '<th scope="col">Person</th>' in panel and "Longest idle first." in panel
    people = re.findall(r'<td class="person">([^<]*)</td>', panel)
    assert people == ["member-a"] * 4 + ["lead-a"] * 4
    # Their department is named on no row while they have one (as in the job tables above), on each once two.
    assert ">Department</th>" not in panel
    Membership.objects.create(user=member_a, department=department_b, role=Role.MEMBER)
    html = client_as("member_a").get(reverse("home")).content.decode()
    panel = html.split('aria-labelledby="work-idle"', 1)[1].split("</section>", 1)[0]
    assert ">Department</th>" in panel and panel.count(f"<td>{department_a.name}</td>") == 8
