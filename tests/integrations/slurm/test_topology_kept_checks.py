"""plan_topology keeps each block's host checks and numeric order by content (issue 32: a fleet's 20,000
blocks are checked again at every render; only a re-carved rack's changed). The errors, their order and the
plan are those of checking every host every time, for any blocks: invalid names, a node in two blocks, a node
listed twice, in any combination."""

import hostlist
from hypothesis import given, settings
from hypothesis import strategies as st

from integrations.slurm.topology import HOSTNAME, SlurmBlock, check_blocks, plan_topology

hosts = st.sampled_from(
    ["gb-r01-t01", "gb-r01-t02", "gb-r01-t10", "gb-r02-t01", "gb-r02-t03", "bad host", "-x"]
)
blocks = st.lists(
    st.tuples(st.sampled_from(["r01", "r02", "r03"]), st.lists(hosts, min_size=1, max_size=5)),
    min_size=1,
    max_size=5,
)


def reference_check(found: list[SlurmBlock]) -> None:
    """check_blocks' host checks as written before they were kept: every host, every time."""
    owner: dict[str, str] = {}
    for block in found:
        for host in block.hostnames:
            if not HOSTNAME.match(host):
                raise ValueError(f"block {block.name}: {host!r} is not a valid node name")
            if host in owner and owner[host] != block.name:
                raise ValueError(f"node {host} is in two blocks: {owner[host]} and {block.name}")
            owner[host] = block.name
        if len(set(block.hostnames)) != len(block.hostnames):
            raise ValueError(f"block {block.name} lists a node twice")


def outcome(check, found):
    try:
        check(found)
    except ValueError as error:
        return str(error)
    return None


@settings(max_examples=400, deadline=None)
@given(blocks)
def test_the_kept_checks_raise_what_checking_every_host_raises(drawn):
    found = [SlurmBlock(f"{domain}b{i}", domain, tuple(h)) for i, (domain, h) in enumerate(drawn)]
    assert outcome(check_blocks, found) == outcome(reference_check, found)
    assert outcome(check_blocks, found) == outcome(check_blocks, list(found))  # kept: the same again


def test_a_plan_orders_each_blocks_hosts_numerically_as_before():
    found = [
        SlurmBlock("r01", "gb-r01", tuple(f"gb-r01-t{n:02d}" for n in (10, 2, 1, 9, 3, 4, 8, 5, 7))),
        SlurmBlock("r02", "gb-r02", tuple(f"gb-r02-t{n}" for n in (10, 2, 1, 9, 3, 4, 8, 5, 7))),
    ]
    for _ in range(2):  # the second time from what was kept
        plan = plan_topology(found)
        for name, hosts, _partition in plan.blocks:
            block = next(b for b in found if b.name == name)
            assert list(hosts) == hostlist.numerically_sorted(list(block.hostnames))
