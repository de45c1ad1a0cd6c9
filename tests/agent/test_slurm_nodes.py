"""The agent reporting as each node of the Slurm testbed (scripts/slurm-testbed.sh: 18 fake trays
gb-r01-t01..18, one NVL72 rack), with one rack token for the rack's agents, to the real portal.

The testbed's slurmd daemons run in a chroot that has no python3, so the agent runs beside them on the same
machine, one process per node (`--host`), as it runs on a node whose hostname is not the tray's name.
"""

from __future__ import annotations

import pytest

from inventory.models import ComputeTray, HealthEvent, Rack
from tests.agent.conftest import fake_nvidia_smi, issue_token, read_state, run_agent, tray_xml, xid_line
from tests.integration.conftest import slurm_testbed, slurm_testbed_session  # noqa: F401 (the testbed's fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_the_agent_reports_as_each_testbed_node(slurm_testbed, live_server, tmp_path):  # noqa: F811
    from inventory.demo import seed_datacenter

    seed_datacenter(racks=1)
    hosts = slurm_testbed.hostnames()
    trays = ComputeTray.objects.select_related("rack", "partition").order_by("slot")
    assert [t.hostname for t in trays] == hosts, "the demo rack's trays are the testbed's nodes"
    token = issue_token(tmp_path, rack=Rack.objects.get(name="gb-r01"))  # one token for the rack's agents
    application_fault = hosts[4]  # one node logs an XID 13 (an application fault: a warning, no drain)

    for tray in trays:
        folder = tmp_path / tray.hostname
        folder.mkdir()
        kernel_log = folder / "kern.log"
        kernel_log.write_text(
            xid_line(13, note="Graphics Exception") if tray.hostname == application_fault else ""
        )
        done = run_agent(
            "--portal", live_server.url,
            "--host", tray.hostname,
            "--token-file", str(token),
            "--nvidia-smi", str(fake_nvidia_smi(folder, tray_xml(tray))),
            "--kernel-log", str(kernel_log),
            "--state-file", str(folder / "state.json"),
            "--once",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"posted the report for {tray.hostname}: 200, 4 GPUs" in done.stderr, done.stderr
        assert read_state(folder / "state.json")["pending_xids"] == []

    reported = ComputeTray.objects.filter(rack__name="gb-r01", last_report_at__isnull=False)
    assert sorted(reported.values_list("hostname", flat=True)) == hosts
    assert not ComputeTray.objects.filter(rack__name="gb-r01").exclude(fabric_problems=[]).exists()
    assert list(HealthEvent.objects.values_list("tray__hostname", "xid")) == [(application_fault, 13)]
