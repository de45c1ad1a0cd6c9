"""Stranded NVLink capacity in /metrics (portal.ops.metrics.stranded_figures): the fleet figures the last
scheduling pass kept, no per-rack series; a signed-in member without the metrics token gets none of it."""

import pytest

from scheduling.models import SchedulerState
from scheduling.services.passes import run_pass
from tests.core.test_metrics import TOKEN, scrape, value
from tests.scheduling.test_stranded_portal import department_a, stranding  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_fleet_figures_of_the_last_pass_are_exported(stranding, client, settings):  # noqa: F811
    samples = scrape(client, settings)
    assert value(samples, "rackplane_stranded_free_gpus") == 174
    assert value(samples, "rackplane_stranded_gpus", cause="fragments") == 72
    assert value(samples, "rackplane_stranded_gpus", cause="unavailable") == 66
    assert value(samples, "rackplane_stranded_gpus", cause="running") == 36
    assert value(samples, "rackplane_stranded_gpus", cause="dedicated") == 0
    assert value(samples, "rackplane_largest_gang_gpus", scope="partition") == 60
    assert value(samples, "rackplane_largest_gang_gpus", scope="rack") == 72
    assert value(samples, "rackplane_stranded_racks") == 3
    # Fleet gauges only: no series carries a rack label (10,000 racks would be 40,000 series).
    racked = [name for name, labels in samples if name.startswith("rackplane_") and "rack" in dict(labels)]
    assert not racked


def test_nothing_is_exported_before_a_pass_has_computed_it(department_a, client, settings):  # noqa: F811
    assert not SchedulerState.objects.exists()
    samples = scrape(client, settings)
    assert not [name for name, _ in samples if name.startswith(("rackplane_stranded", "rackplane_largest"))]
    run_pass()
    assert value(scrape(client, settings), "rackplane_stranded_gpus", cause="fragments") == 0  # nothing waits


def test_a_member_without_the_token_is_refused(stranding, client_as, settings):  # noqa: F811
    settings.RACKPLANE_METRICS_TOKEN = TOKEN
    response = client_as("member_a").get("/metrics")
    assert response.status_code == 401
    assert b"rackplane_stranded" not in response.content
