"""The running jobs' figures read from the running-jobs index alone (scheduling.models.Job's
`scheduling_job_running_idx`, which includes the columns they read): the decayed usage of every running job
(scheduling.usage.decayed_usage) and a department's projects panel (scheduling.project_changes.
running_figures), on every department page. At 10,000 racks the running jobs' rows lie on as many heap pages
as there are jobs (47,700): read from the index, 59 -> 33 ms. A column read by either and missing from the
index makes PostgreSQL visit the table again: these plans would say "Index Scan", not "Index Only Scan"."""

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import project_changes, usage
from tests.factories import make_job

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="index-only scans are PostgreSQL's"),
    pytest.mark.django_db(transaction=True),  # committed, so that VACUUM can mark the pages all-visible
]


def plan_of(read, *marks: str) -> str:
    """The plan of the one statement `read` makes whose SQL holds each of `marks`, with the table's pages
    all-visible (as autovacuum keeps a site's) and every other way to the rows turned off."""
    with CaptureQueriesContext(connection) as captured:
        read()
    [sql] = [q["sql"] for q in captured.captured_queries if all(mark in q["sql"] for mark in marks)]
    with connection.cursor() as cursor:
        cursor.execute("VACUUM scheduling_job")
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("SET enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET ALL")
    return plan


@pytest.mark.parametrize("reader", ["decayed usage", "projects panel"])
def test_the_running_jobs_figures_are_read_from_the_index_alone(department_a, department_b, reader):
    for department in (department_a, department_b):
        for n in range(3):
            make_job(department, f"train-{n}", gpus=8)
    make_job(department_a, "done", state="completed", finished_at=timezone.now())
    if reader == "decayed usage":
        half_life_s = settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S
        plan = plan_of(lambda: usage.decayed_usage(timezone.now(), half_life_s), "EXP(", '"state" IN')
    else:
        plan = plan_of(
            lambda: project_changes.running_figures(department_a), "SELECT project_id, default_leaf"
        )
    assert "Index Only Scan using scheduling_job_running_idx" in plan, plan
