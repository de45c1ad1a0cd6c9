"""Historical fair share in the portal: decayed usage from the job history in one aggregate query
(scheduling.usage.decayed_usage), into the pass's inputs when the setting asks for it, and on the department
page for its leads and admins only."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduling import pass_inputs
from scheduling.choices import JobState
from scheduling.models import Job, UsageRollup
from scheduling.tasks import snapshot_quotas
from scheduling.usage import decayed_usage, roll_up_usage
from tenancy.models import Project
from tenancy.usage_decay import DEFAULT_HALF_LIFE_S, interval_usage
from tests.factories import make_job

DAY = 86400.0


def ran(department, gpus, start_days_ago, end_days_ago=None, now=None, **fields):
    """A job that held `gpus` GPUs from `start_days_ago` until `end_days_ago` (None: still running)."""
    now = now or timezone.now()
    state = JobState.RUNNING if end_days_ago is None else JobState.COMPLETED
    finished = None if end_days_ago is None else now - timedelta(days=end_days_ago)
    return make_job(
        department,
        state=state,
        gpus=gpus,
        started_at=now - timedelta(days=start_days_ago),
        finished_at=finished,
        over_quota=False,
        **fields,
    )


def expected(now, *runs):
    at = now.timestamp()
    return sum(
        interval_usage(gpus, at - start * DAY, at - (end or 0) * DAY, at, DEFAULT_HALF_LIFE_S)
        for gpus, start, end in runs
    )


def test_decayed_usage_sums_each_run_decayed_in_one_aggregate(
    department_a, department_b, django_assert_num_queries
):
    now = timezone.now()
    vision = Project.objects.create(department=department_a, name="Vision", slug="vision")
    ran(department_a, 8, 10, 3, now)  # ended three days ago
    ran(department_a, 4, 2, None, now)  # still running
    ran(department_a, 16, 1, 0.5, now, project=vision)
    ran(department_b, 8, 1, 0, now)
    ran(department_b, 64, 400, 300, now)  # 300 days ago: beyond 20 half-lives, not read
    make_job(department_b, state=JobState.PENDING, gpus=72)  # never ran: nothing
    with django_assert_num_queries(3):  # the rollup (none yet), the running jobs, the ended ones
        usage = decayed_usage(now, DEFAULT_HALF_LIFE_S)
    assert usage[(department_a.pk, None)] == pytest.approx(expected(now, (8, 10, 3), (4, 2, None)), rel=1e-6)
    assert usage[(department_a.pk, vision.pk)] == pytest.approx(expected(now, (16, 1, 0.5)), rel=1e-6)
    assert usage[(department_b.pk, None)] == pytest.approx(expected(now, (8, 1, 0)), rel=1e-6)
    # Halve the half-life: older use weighs less (a's run of three days ago most).
    short = decayed_usage(now, DEFAULT_HALF_LIFE_S / 2)
    assert short[(department_a.pk, None)] < usage[(department_a.pk, None)]


def test_the_beats_rollup_gives_the_same_usage_reading_only_the_jobs_since(
    department_a, department_b, settings, django_assert_num_queries
):
    """roll_up_usage (the beat, every five minutes) keeps the finished jobs' decayed usage at its moment;
    decayed_usage then decays those rows to its own moment and adds, in one aggregate, the jobs running and
    those finished since: the same figures as summing every job, without reading the year before."""
    settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S = DEFAULT_HALF_LIFE_S
    vision = Project.objects.create(department=department_a, name="Vision", slug="vision")
    rolled_at = timezone.now() - timedelta(days=1)
    ran(department_a, 8, 10, 3)  # ended before the rollup
    ran(department_a, 16, 4, 2, project=vision)
    ran(department_b, 64, 400, 300)  # beyond 20 half-lives: not rolled up
    ran(department_a, 4, 2, None)  # still running: never in a rollup
    assert roll_up_usage(rolled_at) == 2
    rolled = {(r.department_id, r.project_id): r.usage for r in UsageRollup.objects.all()}
    assert set(rolled) == {(department_a.pk, None), (department_a.pk, vision.pk)}
    ran(department_b, 8, 2, 0.5)  # finished after the rollup: read as one of the jobs since
    ran(department_a, 2, 1.5, 0.25)
    now = timezone.now()
    with django_assert_num_queries(3):  # the rollup's rows, the running jobs, the jobs ended since
        usage = decayed_usage(now, DEFAULT_HALF_LIFE_S)
    assert usage[(department_a.pk, None)] == pytest.approx(
        expected(now, (8, 10, 3), (4, 2, None), (2, 1.5, 0.25)), rel=1e-6
    )
    assert usage[(department_a.pk, vision.pk)] == pytest.approx(expected(now, (16, 4, 2)), rel=1e-6)
    assert usage[(department_b.pk, None)] == pytest.approx(expected(now, (8, 2, 0.5)), rel=1e-6)
    # The jobs since are read by their end (the index on finished_at): a job that ended before the rollup
    # is not read again; changed behind its back, it counts from the next rollup on.
    Job.objects.filter(department=department_b, gpus=8).update(gpus=800)
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S)[(department_b.pk, None)] > usage[(department_b.pk, None)]
    Job.objects.filter(department=department_a, gpus=8).update(gpus=800)  # ended before the rollup
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S)[(department_a.pk, None)] == pytest.approx(
        usage[(department_a.pk, None)], rel=1e-6
    )
    assert roll_up_usage(now) == 3
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S)[(department_a.pk, None)] > usage[(department_a.pk, None)]
    # A rollup made with another half-life is not used: every job is summed again.
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S / 2) == pytest.approx(
        _every_job(now, DEFAULT_HALF_LIFE_S / 2), rel=1e-6
    )
    # The half-life setting off: the beat removes the rows.
    settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S = None
    assert roll_up_usage(now) == 0 and not UsageRollup.objects.exists()


def test_a_holding_job_with_an_end_written_counts_once_by_its_end(department_a):
    """The running jobs' aggregate reads every job in a holding state and sums only those not finished; a
    job still holding whose end is written already is summed once, as a run that ended (the aggregate of
    the ended jobs), with or without a rollup."""
    now = timezone.now()
    ended = ran(department_a, 8, 2, 0.5, now)
    Job.objects.filter(pk=ended.pk).update(state=JobState.RUNNING)  # its end written before its state
    ran(department_a, 4, 1, None, now)
    want = expected(now, (8, 2, 0.5), (4, 1, None))
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S)[(department_a.pk, None)] == pytest.approx(want, rel=1e-6)
    roll_up_usage(now - timedelta(days=1))  # before its end: it is one of the jobs ended since
    assert decayed_usage(now, DEFAULT_HALF_LIFE_S)[(department_a.pk, None)] == pytest.approx(want, rel=1e-6)


def _every_job(now, half_life_s):
    UsageRollup.objects.all().delete()
    return decayed_usage(now, half_life_s)


def test_the_snapshot_task_rolls_the_usage_up(department_a, settings):
    settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S = DEFAULT_HALF_LIFE_S
    ran(department_a, 8, 10, 3)
    snapshot_quotas()
    [row] = UsageRollup.objects.all()
    assert (row.department_id, row.project_id, row.half_life_s) == (
        department_a.pk,
        None,
        DEFAULT_HALF_LIFE_S,
    )
    assert row.usage == pytest.approx(expected(row.through, (8, 10, 3)), rel=1e-6)


def test_a_slice_jobs_usage_counts_its_gpu_equivalents(department_a, department_b):
    """Fair share counts MIG slices as the quotas do (scheduling.slices: g/7 a slice): two 3g slices for a
    day weigh 6/7 of a GPU for a day; a 1g slice job beside a whole-GPU job adds its 1/7."""
    now = timezone.now()
    ran(department_a, 0, 2, 1, now, mig_profile="3g.93gb", mig_slices=2, mig_compute_slices=3)
    ran(department_b, 4, 2, 1, now)
    ran(department_b, 0, 2, 1, now, mig_profile="1g.23gb", mig_slices=1, mig_compute_slices=1)
    usage = decayed_usage(now, DEFAULT_HALF_LIFE_S)
    assert usage[(department_a.pk, None)] == pytest.approx(expected(now, (6 / 7, 2, 1)), rel=1e-6)
    assert usage[(department_b.pk, None)] == pytest.approx(expected(now, (4 + 1 / 7, 2, 1)), rel=1e-6)


def test_the_pass_reads_usage_only_when_it_orders_borrowers_by_it(department_a, settings):
    ran(department_a, 8, 2, 1)
    settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS = False
    inputs = pass_inputs.gather(kept=False)
    assert inputs.usage is None and inputs.options == {}
    assert pass_inputs.engine_departments(inputs.departments, inputs.project_rows)[0].decayed_usage is None
    settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS = True
    inputs = pass_inputs.gather(kept=False)
    assert inputs.options == {"half_life_s": DEFAULT_HALF_LIFE_S}
    (department,) = inputs.engine_args(timezone.now())[1]
    assert department.decayed_usage == pytest.approx(expected(timezone.now(), (8, 2, 1)), rel=1e-3)


def page(client, user, department):
    client.force_login(user)
    return client.get(reverse("scheduling:department-detail", args=[department.slug]))


@pytest.mark.parametrize("persona", ["lead_a", "platform_admin"])
def test_leads_and_admins_see_the_departments_decayed_usage_and_rank(
    client, request, persona, department_a, department_b
):
    user = request.getfixturevalue(persona)
    ran(department_a, 8, 30, 0)  # 8 GPUs for a month: about 7.6 on average over a week's half-life
    ran(department_b, 1, 30, 0)
    count = Job.objects.count()
    response = page(client, user, department_a)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Historical fair share" in body
    assert 'data-figure="borrower-rank">2 of 2<' in body  # b held less beyond its guarantee: b first
    figure = response.context["history"]
    assert figure.gpu_hours == pytest.approx(expected(timezone.now(), (8, 30, 0)) / 3600, rel=1e-3)
    assert f"{figure.gpu_hours:,.0f} GPU-hours" in body
    assert Job.objects.count() == count  # a GET writes nothing


@pytest.mark.parametrize("persona", ["member_a", "lead_b", "member_b"])
def test_others_see_nothing_of_it(client, request, persona, department_a, department_b):
    user = request.getfixturevalue(persona)
    ran(department_a, 8, 30, 0)
    response = page(client, user, department_a)
    assert "Historical fair share" not in response.content.decode()
    if persona != "member_a":
        assert response.status_code == 404  # another department's page is not theirs to see at all


def test_the_setting_off_shows_nothing(client, lead_a, department_a, settings):
    settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S = None
    assert "Historical fair share" not in page(client, lead_a, department_a).content.decode()
