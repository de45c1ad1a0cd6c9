"""The pass places on the compute fabric it is given (issue 33): a two-rack job goes inside one scalable
unit, and its placed event and job page say which unit and why; without a fabric the pass places as
before (the largest free blocks first, across units).

On the demo inventory: gb-r01 (one default partition, a tray drained), gb-r02 (carved 2x9) and gb-r03 (one
partition). The fabric puts gb-r01 and gb-r02 in unit su-1 (33 whole free trays on the demo) and gb-r03
alone in su-2 (at most 18): a 24-tray job fits only su-1."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags

from core.fabric import Fabric
from core.moments import utc_words
from portal.web.middleware import TIMEZONE_COOKIE
from scheduling.choices import JobEventKind, JobState
from scheduling.engine.scheduler import Options
from scheduling.models import Job
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db

FABRIC = Fabric(racks={"gb-r01": ("a", "su-1"), "gb-r02": ("a", "su-1"), "gb-r03": ("a", "su-2")})


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=200)


TOKYO = ZoneInfo("Asia/Tokyo")


def racks_of(job) -> set[str]:
    return {host.rsplit("-t", 1)[0] for host in job.placement}


def test_a_two_rack_job_is_placed_inside_one_unit_and_its_page_says_which(department_a, member_a):
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any", submitted_by=member_a)
    run_pass(fabric=FABRIC)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.pending_reason
    assert racks_of(job) == {"gb-r01", "gb-r02"} and len(job.placement) == 24
    placed = job.events.get(kind=JobEventKind.PLACED)
    words = (
        "no rack had 24 free trays, so across 2 racks in scalable unit su-1, the unit with the fewest free "
        "trays that fit (33): larger units stay whole"
    )
    assert words in placed.message, placed.message
    client = Client()
    client.force_login(member_a)
    page = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert "in scalable unit su-1" in page


def test_without_a_fabric_the_pass_places_as_before(department_a):
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any")
    run_pass()
    job.refresh_from_db()
    assert job.state == JobState.STARTING
    assert "gb-r03" in racks_of(job)  # the largest free block first: gb-r03's 18 trays
    assert "scalable unit" not in job.events.get(kind=JobEventKind.PLACED).message


def test_a_pass_on_another_fabric_does_not_reuse_the_cluster_kept_for_the_last(department_a):
    """The pass keeps its cluster between passes (scheduling.pass_cache): one kept from a pass without the
    fabric must not place the next pass's job as if the fabric were still flat."""
    first = make_job(department_a, "small", JobState.PENDING, gpus=4)
    run_pass()  # keeps a cluster built without the fabric
    first.refresh_from_db()
    assert first.state == JobState.STARTING
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any")
    run_pass(fabric=FABRIC)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.pending_reason
    assert "gb-r03" not in racks_of(job)
    assert "in scalable unit su-1" in job.events.get(kind=JobEventKind.PLACED).message


def test_the_pass_places_on_the_fabric_the_inventory_has_in_use(department_a):
    """No fabric handed in: the pass reads the inventory's (a site file imported and put in use), so the
    two-rack job lands inside unit su-1, as with the fabric given."""
    from inventory import fabric_import
    from inventory.discovery.fabric.site_file import parse

    text = "spine_group,unit,rack\n" + "".join(f"{s},{u},{r}\n" for r, (s, u) in FABRIC.racks.items())
    fabric_import.apply(parse(text, "site.csv"), label="site", use=True)
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any")
    run_pass()
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.pending_reason
    assert racks_of(job) == {"gb-r01", "gb-r02"}
    assert "in scalable unit su-1" in job.events.get(kind=JobEventKind.PLACED).message


def test_the_pass_keeps_when_it_first_held_a_job_for_the_fabric_and_clears_it_when_the_job_starts(
    department_a, member_a
):
    """A 40-GPU rack job leaves su-1 fewer than 24 free trays; a two-rack job could start across units, so
    the pass holds it for one and stores since when (in its batched write); the next pass keeps that moment;
    once the fabric wait since then has run out it expands, and the moment is cleared."""
    first = make_job(department_a, "rack-job", JobState.PENDING, gpus=40, topology="rack")
    run_pass(fabric=FABRIC)
    first.refresh_from_db()
    assert first.state == JobState.STARTING and racks_of(first) <= {"gb-r01", "gb-r02"}
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any", submitted_by=member_a)
    before = timezone.now()
    run_pass(fabric=FABRIC)
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    held = job.fabric_held_since
    assert held is not None and before <= held <= timezone.now()
    ends = held + timedelta(seconds=Options.fabric_wait_s)
    assert job.pending_reason.endswith(
        f"waiting for one scalable unit (since {utc_words(held, seconds=False)}, until "
        f"{utc_words(ends, seconds=False)}: the fabric wait)"
    ), job.pending_reason
    client = Client()
    client.force_login(member_a)
    page = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert f"waiting for one scalable unit (since {utc_words(held, seconds=False)}, until" in strip_tags(page)
    # In Japanese in Tokyo: both moments in the viewer's zone, named, as the page's other times.
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    page = client.get(reverse("scheduling:job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="ja")
    why = strip_tags(re.search(r'data-why="pending">(.*?)</div>', page.content.decode(), re.S).group(1))
    since, until = (f"{moment.astimezone(TOKYO):%Y-%m-%d %H:%M} JST" for moment in (held, ends))
    assert f"1 つのスケーラブルユニットが空くのを待っています（{since} から {until} まで" in why, why  # noqa: RUF001
    assert "UTC" not in why, why
    run_pass(fabric=FABRIC)  # held still: the moment it was first held stays
    job.refresh_from_db()
    assert job.state == JobState.PENDING and job.fabric_held_since == held
    # Its wait since then has run out: it spans units, and the moment goes with its start.
    Job.objects.filter(pk=job.pk).update(fabric_held_since=held - timedelta(seconds=Options.fabric_wait_s))
    run_pass(fabric=FABRIC)
    job.refresh_from_db()
    assert job.state == JobState.STARTING, job.pending_reason
    assert job.fabric_held_since is None and "gb-r03" in racks_of(job)


def test_a_hold_the_engine_forgets_is_cleared_on_the_job(department_a):
    """`PassResult.fabric_held_since` None (Options.fabric_wait_again: its wait ran out while it could not
    start anywhere): the batched write clears the job's moment, so its next hold begins a new wait."""
    from scheduling.services.pass_writes import record_waiting_reasons

    held = timezone.now() - timedelta(hours=9)
    job = make_job(department_a, "pretrain", JobState.PENDING, gpus=96, topology="any")
    Job.objects.filter(pk=job.pk).update(fabric_held_since=held, pending_reason="waiting: before")
    record_waiting_reasons({job.pk: "waiting: before"}, {job.pk: ("waiting: before", held)}, {job.pk: None})
    job.refresh_from_db()
    assert job.fabric_held_since is None and job.pending_reason == "waiting: before"
    record_waiting_reasons({job.pk: "waiting: now"}, {job.pk: ("waiting: before", None)}, {})
    job.refresh_from_db()
    assert job.fabric_held_since is None and job.pending_reason == "waiting: now"
