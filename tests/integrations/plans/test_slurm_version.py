"""The wizard greys out layouts the fleet's Slurm cannot express, with the reason: topology/block (NVLink
partitions as Slurm blocks) needs Slurm 23.11. The version is what the Slurm target said when it was tested
(`scontrol --version`, kept in ConfigTarget.facts). The real testbed runs 24.11 and cannot be made to be
22.05: an old slurmctld is the stand-in scontrol below, the only thing a real one cannot be made to show."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations import push_history
from integrations.models import ConfigTarget
from integrations.plans import service as plans
from inventory.models import Rack
from inventory.planning import Level, preset_layout

pytestmark = pytest.mark.django_db


def slurm_target(tmp_path, version: str) -> ConfigTarget:
    conf = tmp_path / "etc-slurm"
    conf.mkdir()
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        "  ping) echo 'Slurmctld(primary) at ctl is UP' ;;\n"
        f"  --version) echo 'slurm {version}' ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    target = ConfigTarget.objects.create(
        name="hpc", kind="slurm", settings={"config_dir": str(conf), "scontrol": str(script)}
    )
    result = push_history.test_connection(target)
    assert result.ok and f"Slurm {version}" in result.summary
    target.refresh_from_db()
    assert target.facts["slurm_version"] == version
    return target


def test_old_slurm_greys_out_split_layouts_with_the_reason(
    tmp_path, demo_inventory, client_as, platform_admin
):
    slurm_target(tmp_path, "22.05.9")
    rack = Rack.objects.get(name="gb-r01")
    reason = plans.slurm_too_old()
    assert reason.startswith("Slurm 22.05.9 on target hpc cannot express NVLink partitions: topology/block")
    limits = plans.preset_limits(rack)
    # The version is said once, above the presets; each greyed preset says briefly why.
    assert set(limits.blocked) == {"2x9", "3x6", "6x3", "9x2", "18x1"} and limits.notes[0] == reason
    assert limits.blocked["2x9"] == "2 partitions need Slurm 23.11+ (topology/block)."
    refused = plans.check(rack, preset_layout("2x9"))
    assert not refused.ok and reason in [f.message for f in refused.findings if f.level == Level.ERROR]
    assert reason not in [f.message for f in plans.check(rack, preset_layout("1x18")).findings]

    page = (
        client_as(platform_admin).get(reverse("integrations:plan-layout", args=["gb-r01"])).content.decode()
    )
    assert 'id="preset-2x9" disabled aria-describedby="preset-2x9-why preset-notes"' in page
    assert 'id="preset-1x18" disabled' not in page
    assert page.count("topology/block needs Slurm 23.11 or later") == 1


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_current_slurm_greys_out_nothing_for_its_version(tmp_path, demo_inventory):
    slurm_target(tmp_path, "24.11.1")
    assert plans.slurm_too_old() == ""
    limits = plans.preset_limits(Rack.objects.get(name="gb-r01"))
    assert not any("Slurm 23.11" in reason for reason in [*limits.notes, *limits.blocked.values()])
