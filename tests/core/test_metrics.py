"""/metrics content (core.metrics, portal.ops.metrics): Rackplane's gauges equal what the database holds, a
scrape
costs the same few queries whatever the number of departments, a failing source does not fail the scrape;
and the request id in logs, responses and Celery tasks (core.logs)."""

import json
import logging
import os
import secrets
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery, current_app
from django.db import connection
from django.db.models import Sum
from django.http import HttpResponse
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from core import logs
from core.enqueue import send_now
from core.metrics import ScrapeCollector, exposition, single
from core.models import Notification, NotificationChannel, NotificationEvent, NotificationStatus
from integrations.models import ConfigPush, PushStatus
from inventory.choices import GpuHealth, HealthKind, HealthSource, TrayState
from inventory.models import ComputeTray, Gpu, HealthEvent
from scheduling.choices import JobState
from scheduling.models import Allocation, Job, SchedulerState
from tests import factories

TOKEN = "metrics-token-for-tests-0123456789"
REPO = Path(__file__).resolve().parents[2]


def scrape(client, settings) -> dict[tuple[str, frozenset], float]:
    settings.RACKPLANE_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(samples, name, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def cluster(demo_inventory, department_a, department_b, local_target):
    """Demo racks, two departments with guarantees and jobs, pushes, notifications, health events, a pass."""
    department_a.guaranteed_gpus = 8
    department_a.save()
    department_b.guaranteed_gpus = 4
    department_b.save()
    trays = factories.free_trays(4)
    factories.make_job(department_a, "a-running", trays=trays[:2])
    factories.make_job(
        department_b, "b-running", trays=trays[2:4]
    )  # 8 GPUs on a guarantee of 4: the job borrows
    factories.make_job(department_a, "a-pending", state=JobState.PENDING, gpus=12)
    factories.make_job(department_b, "b-done", state=JobState.COMPLETED)
    ComputeTray.objects.filter(pk=trays[-1].pk + 1).update(fabric_problems=["GPU 2 has not started"])
    Gpu.objects.filter(pk__in=Gpu.objects.order_by("pk").values("pk")[:3]).update(health=GpuHealth.UNHEALTHY)
    for status in (PushStatus.SUCCEEDED, PushStatus.SUCCEEDED, PushStatus.FAILED, PushStatus.QUEUED):
        ConfigPush.objects.create(target=local_target, status=status)
    now = timezone.now()
    for status in (NotificationStatus.PENDING, NotificationStatus.FAILED, NotificationStatus.FAILED):
        Notification.objects.create(
            uuid=uuid.uuid4(),
            channel=NotificationChannel.EMAIL,
            destination="ops@example.org",
            event=NotificationEvent.values[0],
            subject="s",
            created_at=now,
            status=status,
        )
    tray = ComputeTray.objects.first()
    for kind, seen in (
        (HealthKind.XID, now),
        (HealthKind.XID, now),
        (HealthKind.FABRIC, now - timedelta(hours=2)),
    ):
        HealthEvent.objects.create(
            tray=tray, source=HealthSource.AGENT, kind=kind, code="79", first_seen=seen, last_seen=seen
        )
    SchedulerState.objects.update_or_create(
        pk=1,
        defaults={
            "last_pass_at": now,
            "last_pass_ms": 42.5,
            "last_summary": {"started": 2, "preempted": 1, "waiting": 1, "decisions": 4},
        },
    )
    return department_a, department_b


def test_rackplane_figures_equal_the_database(cluster, client, settings):
    department_a, department_b = cluster
    samples = scrape(client, settings)

    for state in TrayState.values:
        for health in GpuHealth.values:
            expected = Gpu.objects.filter(tray__state=state, health=health).count()
            assert value(samples, "rackplane_gpus", tray_state=state, health=health) == expected
    assert value(samples, "rackplane_gpus", tray_state=TrayState.DRAIN, health=GpuHealth.HEALTHY) > 0
    assert value(samples, "rackplane_gpus", tray_state=TrayState.UP, health=GpuHealth.UNHEALTHY) >= 3

    for department in (department_a, department_b):
        slug = department.slug
        held = Allocation.objects.filter(job__department=department, job__state=JobState.RUNNING)
        pending = Job.objects.filter(department=department, state=JobState.PENDING)
        assert (
            value(samples, "rackplane_department_guaranteed_gpus", department=slug)
            == department.guaranteed_gpus
        )
        assert value(samples, "rackplane_department_in_use_gpus", department=slug) == held.count()
        assert value(samples, "rackplane_department_borrowed_gpus", department=slug) == (
            held.filter(job__over_quota=True).count()
        )
        assert value(samples, "rackplane_department_pending_gpus", department=slug) == (
            pending.aggregate(n=Sum("gpus"))["n"] or 0
        )
        assert (
            value(samples, "rackplane_department_jobs", department=slug, state="pending") == pending.count()
        )
    assert value(samples, "rackplane_department_borrowed_gpus", department=department_b.slug) == 8
    assert value(samples, "rackplane_department_pending_gpus", department=department_a.slug) == 12

    for state in JobState.values:
        assert value(samples, "rackplane_jobs", state=state) == Job.objects.filter(state=state).count()

    assert value(samples, "rackplane_scheduler_last_pass_duration_seconds") == pytest.approx(0.0425)
    assert value(samples, "rackplane_scheduler_last_pass_decisions") == 4
    assert value(samples, "rackplane_scheduler_last_pass_jobs", outcome="preempted") == 1

    target = {"target": "local", "kind": "directory"}
    assert value(samples, "rackplane_config_pushes_finished_total", **target, outcome="succeeded") == 2
    assert value(samples, "rackplane_config_pushes_finished_total", **target, outcome="failed") == 1
    assert value(samples, "rackplane_config_pushes_active", **target, status="queued") == 1

    with_problems = [tray for tray in ComputeTray.objects.all() if tray.fabric_problems]
    assert value(samples, "rackplane_discovery_trays_with_problems") == len(with_problems) >= 1
    assert value(samples, "rackplane_discovery_trays_never_reported") == (
        ComputeTray.objects.filter(last_report_at__isnull=True).count()
    )
    from inventory.staleness import silent_policy, silent_q

    silent = ComputeTray.objects.filter(silent_q(timezone.now() - silent_policy().after)).count()
    assert value(samples, "rackplane_discovery_trays_silent") == silent
    for state in TrayState.values:
        assert (
            value(samples, "rackplane_trays", state=state) == ComputeTray.objects.filter(state=state).count()
        )
    assert value(samples, "rackplane_health_events_last_hour", kind=HealthKind.XID) == 2
    assert value(samples, "rackplane_health_events_last_hour", kind=HealthKind.FABRIC) == 0  # 2 h ago
    assert value(samples, "rackplane_notifications", status="failed") == 2
    assert value(samples, "rackplane_notifications", status="pending") == 1
    assert value(samples, "rackplane_scrape_errors", source="departments") == 0


def test_django_prometheus_request_and_database_metrics_are_exposed(cluster, client, settings):
    assert client.get("/login/").status_code == 200  # a page (the probes themselves are not counted)
    samples = scrape(client, settings)
    names = {name for name, _ in samples}
    assert "django_http_requests_total_by_method_total" in names
    assert "django_http_requests_latency_seconds_by_view_method_bucket" in names
    assert "django_db_execute_total" in names  # the database wrapper (ENGINE django_prometheus...)
    assert connection.settings_dict["ENGINE"].startswith("django_prometheus.db.backends.")


def test_a_scrape_costs_the_same_queries_whatever_the_number_of_departments(cluster, client, settings):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape(client, settings)
        return len(captured)

    before = queries()
    for n in range(4):
        department = factories.make_department(f"Extra {n}", slug=f"extra-{n}", guaranteed_gpus=2)
        factories.make_job(department, "p", state=JobState.PENDING)
        factories.make_job(department, "r", trays=factories.free_trays(1))
    assert queries() == before
    assert before <= 20


def test_a_failing_source_is_reported_and_the_others_still_arrive():
    def broken():
        raise RuntimeError("database gone")
        yield  # pragma: no cover

    def fine():
        yield single("rackplane_test_fine", "A figure that can be read.", 7)

    text = exposition([ScrapeCollector({"broken": broken, "fine": fine})]).decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("rackplane_scrape_errors", frozenset({("source", "broken")}))] == 1
    assert samples[("rackplane_scrape_errors", frozenset({("source", "fine")}))] == 0
    assert samples[("rackplane_test_fine", frozenset())] == 7


# --- request ids and JSON logs ----------------------------------------------------------------------------


@pytest.fixture
def json_lines():
    """The JSON lines written through a handler set up as settings.LOGGING's console with LOG_FORMAT=json."""
    lines: list[dict] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(json.loads(self.format(record)))

    handler = Collect()
    handler.addFilter(logs.RequestContextFilter())
    handler.addFilter(logs.ClientErrorFilter())
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield lines
    root.removeHandler(handler)


@pytest.mark.django_db
def test_access_lines_carry_the_request_id_and_echo_it(client, user, settings, json_lines):
    settings.RACKPLANE_ACCESS_LOG = True
    client.force_login(user)
    response = client.get("/", HTTP_X_REQUEST_ID="lb-7f3a.42:abc")
    assert response["X-Request-ID"] == "lb-7f3a.42:abc"
    access = [line for line in json_lines if line["logger"] == "rackplane.requests"]
    assert len(access) == 1
    line = access[0]
    assert line["request_id"] == "lb-7f3a.42:abc"
    assert (line["method"], line["path"], line["status"], line["user_id"]) == ("GET", "/", 200, user.pk)
    assert line["duration_ms"] >= 0 and line["level"] == "INFO"
    assert line["time"].endswith("+00:00")


@pytest.mark.django_db
@pytest.mark.parametrize("sent", ["", "has space", "x" * 129, "new\nline", "ünï"])
def test_an_unfit_request_id_is_replaced(client, sent):
    response = client.get("/login/", HTTP_X_REQUEST_ID=sent)
    echoed = response["X-Request-ID"]
    assert echoed != sent and len(echoed) == 32 and int(echoed, 16) >= 0


@current_app.task(name="tests.core.test_metrics.log_from_task")
def log_from_task(word):
    logging.getLogger("rackplane.test_task").warning("task says %s", word)


@pytest.mark.django_db
def test_an_eager_task_sent_during_a_request_logs_its_request_id(json_lines):
    def view(request):
        send_now("tests.core.test_metrics.log_from_task", "hello")
        return HttpResponse("ok")

    response = logs.RequestIdMiddleware(view)(RequestFactory().get("/x", HTTP_X_REQUEST_ID="req-eager-1"))
    assert response["X-Request-ID"] == "req-eager-1"
    [line] = [line for line in json_lines if line["logger"] == "rackplane.test_task"]
    assert line["message"] == "task says hello"
    assert line["request_id"] == "req-eager-1"
    assert line["task"] == "tests.core.test_metrics.log_from_task" and line["task_id"]
    assert logs.current_request_id.get() is None  # reset after the request


def test_a_task_sent_through_a_broker_carries_the_id_to_the_worker(json_lines):
    """The real publish path (kombu's in-memory transport) and the worker's request handling."""
    from celery.worker.request import Request

    app = Celery("request-id-test", broker="memory://", set_as_current=False)
    app.conf.task_always_eager = False

    @app.task(name="request_id_test.log")
    def log(word):
        logging.getLogger("rackplane.test_task").warning("worker says %s", word)

    token = logs.current_request_id.set("req-through-broker")
    try:
        log.apply_async(("hi",))
    finally:
        logs.current_request_id.reset(token)
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue("celery")
        message = queue.get(timeout=2)
        assert message.headers[logs.REQUEST_ID_TASK_HEADER] == "req-through-broker"
        assert logs.current_request_id.get() is None  # nothing left over in this process
        Request(message, app=app, task=log).execute()
        message.ack()
        queue.close()
    [line] = [line for line in json_lines if line["logger"] == "rackplane.test_task"]
    assert line["request_id"] == "req-through-broker"
    assert logs.current_request_id.get() is None  # reset after the task


@pytest.mark.slow(reason="subprocesses")
def test_log_format_json_makes_every_line_a_json_object(tmp_path):
    env = {
        **os.environ,
        "LOG_FORMAT": "json",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "1",
        "RACKPLANE_DEV_ENV": "0",
    }
    script = "import django, logging; django.setup(); logging.getLogger('rackplane.x').warning('hello %s', 1)"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    [line] = [json.loads(text) for text in result.stderr.splitlines() if text.strip()]
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "rackplane.x", "hello 1")
    assert line["request_id"] is None


@pytest.mark.django_db
def test_a_refused_request_is_one_line_without_a_traceback(client_as, json_lines, member_a):
    response = client_as("member_a").get("/tenancy/dashboard/")
    assert response.status_code == 403
    [line] = [line for line in json_lines if line["logger"] == "django.request"]
    assert (
        line["level"] == "WARNING"
        and "Forbidden" in line["message"]
        and "/tenancy/dashboard/" in line["message"]
    )
    assert "exception" not in line


@pytest.mark.slow(reason="a subprocess")
def test_a_wrong_host_header_is_one_line_without_a_traceback_in_production():
    """Production settings (DEBUG off, a real key, ALLOWED_HOSTS): a request naming another host is a 400
    logged by django.security.DisallowedHost in one line, through the settings' own logging."""
    env = {
        **os.environ,
        "LOG_FORMAT": "json",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),  # made for this run, as the deployment docs say
        "ALLOWED_HOSTS": "rackplane.example",
        "RACKPLANE_DEV_ENV": "0",
    }
    script = (
        "import django; django.setup(); from django.test import Client; "
        "print(Client().get('/accounts/login/', HTTP_HOST='evil.example').status_code); "
        "print(Client().get('/accounts/login/', HTTP_HOST='e' * 5000 + '.example').status_code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["400", "400"]
    lines = [json.loads(text) for text in result.stderr.splitlines() if text.strip().startswith("{")]
    wrong, huge = [line for line in lines if line["logger"] == "django.security.DisallowedHost"]
    assert "evil.example" in wrong["message"] and "exception" not in wrong
    # A client's mistake is a warning (Django logs it at ERROR), and a 5,000-character Host is cut.
    assert wrong["level"] == huge["level"] == "WARNING"
    assert len(huge["message"]) <= logs.CLIENT_ERROR_CHARS + 3
    assert "Traceback" not in result.stderr


def test_a_server_error_keeps_its_traceback():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        exc_info = sys.exc_info()
    for status, kept in ((500, True), (403, False), (404, False)):
        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "x", (), exc_info)
        record.status_code = status
        assert logs.ClientErrorFilter().filter(record) is True
        assert (record.exc_info is not None) is kept
