"""The segment size a placed job is dispatched with (integrations.dispatch.segment_size): all its trays when
they share one NVLink partition, else the size that splits each partition's share into whole segments.
Which Slurm takes it for several segments: tests/integrations/slurm/test_jobs.py and, on both testbed
releases, tests/integration/test_slurm_jobs.py."""

import pytest

from integrations import dispatch
from integrations.dispatch import segment_size
from scheduling.choices import JobState
from tests.factories import make_job


def trays(*shares: int) -> tuple[list[str], dict[str, dict]]:
    hosts, rows = [], {}
    for partition, count in enumerate(shares, start=1):
        for slot in range(count):
            host = f"gb-r{partition:02d}-t{slot + 1:02d}"
            hosts.append(host)
            rows[host] = {"partition_id": partition}
    return hosts, rows


@pytest.mark.parametrize(
    ("shares", "size"),
    [
        ((9,), 9),
        ((2,), 2),
        ((1,), None),
        ((9, 9), 9),
        ((8, 4), 4),
        ((6, 6, 6), 6),
        ((9, 7), None),
        ((4, 6), 2),
    ],
)
def test_the_segment_splits_every_partitions_share_into_whole_segments(shares, size):
    assert segment_size(*trays(*shares)) == size


def test_a_tray_outside_any_partition_or_unknown_gives_no_segment():
    hosts, rows = trays(4, 4)
    rows[hosts[0]] = {"partition_id": None}
    assert segment_size(hosts, rows) is None
    hosts, rows = trays(4, 4)
    del rows[hosts[-1]]
    assert segment_size(hosts, rows) is None


@pytest.mark.django_db
def test_a_job_across_the_demos_two_partitions_of_a_rack_is_dispatched_in_segments(
    demo_inventory, department_a
):
    # The demo's gb-r02 is carved 2x9: slots 1-9 and 10-18.
    placed = [f"gb-r02-t{s:02d}" for s in (1, 2, 3, 4, 10, 11, 12, 13)]
    job = make_job(department_a, trays=placed, state=JobState.STARTING)
    request = dispatch.dispatch_request(job, {})
    assert (request.hostnames, request.segment, request.clique) == (tuple(placed), 4, "")
    one = make_job(department_a, trays=[f"gb-r02-t{s:02d}" for s in (5, 6)], state=JobState.STARTING)
    assert dispatch.dispatch_request(one, {}).segment == 2
