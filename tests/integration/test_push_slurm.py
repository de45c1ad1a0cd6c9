"""A configuration push to the real Slurm 24.11 testbed, through the push task (integrations.pushes).

The inventory is the demo seed's first rack, gb-r01, whose trays gb-r01-t01..t18 are the testbed's nodes;
it is carved 2x9 and pushed to a Slurm target pointing at the testbed's configuration directory and
scontrol wrapper. Each test leaves the testbed as it found it (fixture `slurm_baseline`).
"""

from __future__ import annotations

import subprocess

import pytest
from django.utils import timezone

from integrations import pushes, tasks
from integrations.contents import payload_of
from integrations.models import ConfigPush, PushStatus
from integrations.slurm.target import RACKPLANE_CONF, TOPOLOGY_CONF
from integrations.slurm.topology import parse_show_topology
from tests.integration.conftest import carve

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def show_topology(testbed) -> list[tuple]:
    out = subprocess.run([testbed.scontrol, "show", "topology"], capture_output=True, text=True, check=True)
    return [(b["name"], b["nodes"], b["size"], b["aggregated"]) for b in parse_show_topology(out.stdout)]


def files(testbed) -> dict[str, str]:
    return {name: (testbed.conf_dir / name).read_text() for name in (RACKPLANE_CONF, TOPOLOGY_CONF)}


def test_a_2x9_carving_is_pushed_and_retried_while_slurmctld_is_down(
    slurm_testbed, testbed_target, django_capture_on_commit_callbacks
):
    carve([9, 9])
    with django_capture_on_commit_callbacks(execute=True):
        [push] = pushes.queue_pushes(reason="carve gb-r01 2x9")
    push.refresh_from_db()

    assert push.status == PushStatus.SUCCEEDED, push.error
    assert show_topology(slurm_testbed) == [
        ("r01p1", "gb-r01-t[01-09]", 9, False),
        ("r01p2", "gb-r01-t[10-18]", 9, False),
        ("r01p[1-2]", "gb-r01-t[01-18]", 18, True),
    ]
    assert "slurmctld runs 2 blocks: r01p1=gb-r01-t[01-09], r01p2=gb-r01-t[10-18]" in push.log
    assert files(slurm_testbed) == payload_of(push.payload)["files"]
    partitions = subprocess.run(
        [slurm_testbed.scontrol, "show", "partition", "gpu", "--oneliner"], capture_output=True, text=True
    ).stdout
    assert "Nodes=gb-r01-t[01-18]" in partitions

    # slurmctld stops; the rack is carved back to one partition: the push is queued for a retry and the
    # files slurmctld will start with are still the 2x9 ones.
    pushed = files(slurm_testbed)
    slurm_testbed.control("stop-ctld")
    carve([18])
    with django_capture_on_commit_callbacks(execute=True):
        [retried] = pushes.queue_pushes(reason="back to one partition")
    retried.refresh_from_db()

    assert retried.status == PushStatus.QUEUED
    assert retried.attempts == 1
    assert "slurmctld does not answer" in retried.error and "retrying" in retried.error
    assert retried.next_attempt_at is not None
    assert files(slurm_testbed) == pushed

    # slurmctld is back; the retry (beat's retry_stale_pushes) applies it.
    slurm_testbed.control("start-ctld")
    ConfigPush.objects.filter(pk=retried.pk).update(next_attempt_at=timezone.now())
    assert tasks.retry_stale_pushes()["sent"] == [retried.pk]
    retried.refresh_from_db()
    assert retried.status == PushStatus.SUCCEEDED, retried.error
    assert retried.attempts == 2
    assert show_topology(slurm_testbed) == [("r01p1", "gb-r01-t[01-18]", 18, False)]
