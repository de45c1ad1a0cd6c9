"""Many clients submitting at once on PostgreSQL: no GPU is ever given twice and no job is lost.

Each submission commits its job and a scheduling request, then (Celery eager, on commit) runs a pass and
dispatches what it placed, all in the submitting thread. Passes contend for the SchedulerState row lock
with SKIP LOCKED, so most of them find it taken and leave their request to the pass that holds it.
"""

import threading

import pytest
from django.db import connection, connections
from django.db.models import Count, Sum

from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Allocation, Job, SchedulingRequest
from scheduling.services.admission import submit_job
from scheduling.services.passes import run_pass
from tenancy.models import Department
from tenancy.services import save_department

SCRIPT = "#!/bin/bash\nsrun true\n"
THREADS = 12
PER_THREAD = 8
SIZES = [1, 2, 4, 8, 8, 16, 36, 20]


@pytest.mark.django_db(transaction=True)
def test_concurrent_submitters_never_share_a_gpu_and_lose_no_job(demo_inventory, django_user_model):
    if connection.vendor != "postgresql":
        pytest.skip(
            f"needs PostgreSQL row locks and concurrent connections ({connection.vendor} serializes "
            "writers); scripts/test.sh runs it"
        )
    departments = [
        save_department(Department(name="Alpha", slug="alpha", guaranteed_gpus=80)),
        save_department(Department(name="Beta", slug="beta", guaranteed_gpus=80)),
    ]
    users = [django_user_model.objects.create_user(f"u{n}", is_staff=True) for n in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    accepted: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(PER_THREAD):
                gpus = SIZES[(number + i) % len(SIZES)]
                key = f"t{number}-{i}"
                for _attempt in range(2 if i % 3 == 0 else 1):  # some clients retry with the same key
                    job, _created = submit_job(
                        user=users[number],
                        department=departments[number % 2],
                        name=f"job-{number}-{i}",
                        gpus=gpus,
                        topology="partition" if gpus > 4 else "any",
                        priority_class="train",
                        backend="slurm",
                        work={"script": SCRIPT},
                        time_limit_minutes=30,
                        idempotency_key=key,
                    )
                    with lock:
                        accepted.append(job.pk)
        except BaseException as error:  # reported to the test thread
            with lock:
                errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not any(thread.is_alive() for thread in threads), "a submitter is stuck"
    assert errors == []

    run_pass()  # whatever requests are left (none, if the lock holders looped as they should)
    assert not SchedulingRequest.objects.exists()

    # Nothing lost: every acknowledged submission is one job, retries did not make a second one.
    assert set(accepted) == set(Job.objects.values_list("pk", flat=True))
    assert Job.objects.count() == THREADS * PER_THREAD
    # Never a GPU twice, and every holding job holds exactly its GPUs on its placement.
    assert not Allocation.objects.values("gpu").annotate(n=Count("pk")).filter(n__gt=1).exists()
    holding = Job.objects.filter(state__in=HOLDING_STATES)
    assert holding.exists()
    for job in holding:
        gpus = Allocation.objects.filter(job=job)
        assert gpus.count() == job.gpus
        assert {a.gpu.tray.hostname for a in gpus.select_related("gpu__tray")} == set(job.placement)
    assert not Allocation.objects.exclude(job__state__in=HOLDING_STATES).exists()
    # The cluster is full or the rest really does not fit: every pending job says why.
    for job in Job.objects.filter(state=JobState.PENDING):
        assert job.pending_reason.startswith("waiting: "), job.pending_reason
    used = Job.objects.filter(state__in=HOLDING_STATES).aggregate(total=Sum("gpus"))["total"]
    assert used == Allocation.objects.count()
