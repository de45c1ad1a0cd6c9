"""The broker is down: requests still succeed (the row is committed, the message is logged as not sent) and
what the beat runs picks the work up once the broker is back.

Celery is configured as in production (not eager) with a Redis URL on a local port that refuses
connections. "The broker is back" is eager Celery again (standing for a worker that takes messages), or,
when CELERY_TEST_BROKER_URL names a real Redis (scripts/test.sh starts one), that Redis: the messages are
read from its queue and run the way a worker runs them. Transactional tests: commits are real, so the
on-commit sends happen inside the request, as in production.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time

import pytest
import redis
from django.db.models import F
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.access import Role
from core.enqueue import send_now
from integrations import push_runs, pushes
from integrations.dispatch import LOST_AFTER
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from portal.celery import app as celery_app
from scheduling.choices import JobState
from scheduling.models import Job, SchedulingRequest
from scheduling.tasks import schedule_jobs, schedule_jobs_periodically
from tenancy.models import Department, Membership
from tenancy.services import save_department
from tests.core.test_enqueue import broker_down, use_broker  # noqa: F401 (fixture)

# Every test starts with the broker down.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("broker_down")]

BODY = {"department": "research", "name": "train-llm", "gpus": 8, "work": {"script": "#!/bin/bash\nsrun x\n"}}
REAL_BROKER = os.environ.get("CELERY_TEST_BROKER_URL", "")


@pytest.fixture
def member(demo_inventory, django_user_model) -> APIClient:
    """An API client with the token of a member of `research` (guaranteed 96 GPUs)."""
    research = save_department(Department(name="Research", slug="research", guaranteed_gpus=96))
    user = django_user_model.objects.create_user("member-r")
    Membership.objects.create(user=user, department=research, role=Role.MEMBER)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return api


def submit_while_down(member: APIClient, caplog) -> Job:
    """POST a job with the broker down: 201 at once, the job pending, the pass request kept."""
    with caplog.at_level(logging.WARNING, logger="core.enqueue"):
        started = time.monotonic()
        response = member.post("/api/v1/jobs/", BODY, format="json")
        elapsed = time.monotonic() - started
    assert response.status_code == 201, response.content
    assert elapsed < 5, f"the request took {elapsed:.1f} s with the broker down"
    assert "scheduling.tasks.schedule_jobs() not sent, the task queue could not be reached" in caplog.text
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.PENDING
    assert SchedulingRequest.objects.exists()
    return job


def assert_running_in_render_dir(job: Job, render_dir) -> None:
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.backend_message
    assert job.backend_id == f"rendered/rp-{job.pk}"
    assert list((render_dir / "jobs").glob(f"rp-{job.pk}.*"))


def test_a_job_submitted_while_the_broker_is_down_runs_once_it_is_back(member, caplog, settings):
    job = submit_while_down(member, caplog)

    with use_broker(None):  # back: what the beat sends, a worker runs
        assert send_now("scheduling.tasks.schedule_jobs_periodically")
        assert send_now("integrations.tasks.sync_jobs")

    assert_running_in_render_dir(job, settings.RACKPLANE_RENDER_DIR)
    assert not SchedulingRequest.objects.exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_job_placed_while_the_broker_is_down_is_dispatched_by_the_sync(member, caplog, settings):
    job = submit_while_down(member, caplog)
    # A worker runs a pass (its message got through before the broker went): the job is placed, and the
    # message that would dispatch it is lost.
    with caplog.at_level(logging.WARNING, logger="core.enqueue"):
        schedule_jobs()
    job.refresh_from_db()
    assert job.state == JobState.STARTING
    assert f"integrations.tasks.dispatch_job({job.pk},) not sent" in caplog.text

    with use_broker(None):
        sync = celery_app.tasks["integrations.tasks.sync_jobs"]
        # Placed a moment ago: its message may still be on its way, the sync leaves it.
        assert sync.delay().get()["dispatched"] == []
        Job.objects.filter(pk=job.pk).update(placed_at=F("placed_at") - LOST_AFTER)
        assert sync.delay().get()["dispatched"] == [job.pk]

    assert_running_in_render_dir(job, settings.RACKPLANE_RENDER_DIR)


def test_a_push_queued_while_the_broker_is_down_is_sent_by_the_beat(demo_inventory, settings):
    ConfigTarget.objects.get_or_create(
        name="local", defaults={"kind": "directory", "settings": {"path": "", "keep": 5}}
    )

    [push] = pushes.queue_pushes(reason="broker down")  # commits: the message is tried on commit

    assert push.status == PushStatus.QUEUED
    push.refresh_from_db()
    assert push.status == PushStatus.QUEUED and push.attempts == 0
    assert "could not reach the task queue" in push.log
    assert push_runs.due_pushes() == [push.pk]  # due at the beat's next run, not LOST_QUEUED later

    with use_broker(None):
        result = celery_app.tasks["integrations.tasks.retry_stale_pushes"].delay().get()

    assert result["sent"] == [push.pk]
    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED, push.log
    assert (settings.RACKPLANE_RENDER_DIR / "current").is_dir()
    assert ConfigPush.objects.filter(status=PushStatus.QUEUED).count() == 0


# --- with a real Redis ----------------------------------------------------------------------------------


def take(queue: redis.Redis) -> tuple[str, list, dict]:
    """The oldest message in Celery's default queue, removed: (task name, args, kwargs)."""
    raw = queue.rpop("celery")
    assert raw is not None, "no message in the queue"
    message = json.loads(raw)
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    return message["headers"]["task"], args, kwargs


@pytest.mark.integration
@pytest.mark.skipif(
    not REAL_BROKER,
    reason="CELERY_TEST_BROKER_URL is not set: no real Redis (scripts/test.sh starts one and sets it)",
)
def test_with_a_real_redis_the_work_waits_in_its_queue_once_the_broker_is_back(member, caplog, settings):
    job = submit_while_down(member, caplog)
    queue = redis.Redis.from_url(REAL_BROKER)
    queue.delete("celery")

    with use_broker(REAL_BROKER):
        # The beat's message reached a worker, which runs it: the pass request is sent to Redis.
        schedule_jobs_periodically()
        assert queue.llen("celery") == 1
        name, args, kwargs = take(queue)
        assert (name, args, kwargs) == ("scheduling.tasks.schedule_jobs", [], {})

        celery_app.tasks[name].apply(args, kwargs)  # a worker takes it: the job is placed
        job.refresh_from_db()
        assert job.state == JobState.STARTING
        name, args, kwargs = take(queue)
        assert (name, args) == ("integrations.tasks.dispatch_job", [job.pk])

        celery_app.tasks[name].apply(args, kwargs)
        assert queue.llen("celery") == 0

    assert_running_in_render_dir(job, settings.RACKPLANE_RENDER_DIR)
