"""manage.py render_configs and push_configs."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from integrations import state as configstate
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from tests.factories import make_department
from tests.integrations.test_configstate import EXPECTED_FILES

pytestmark = pytest.mark.django_db


@pytest.fixture
def departments(demo_inventory, local_target):
    make_department("Research", guaranteed_gpus=16)


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def files_under(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_render_configs_writes_exactly_the_listed_files(departments, tmp_path):
    out = tmp_path / "out"
    printed = run("render_configs", "--out", str(out))

    assert files_under(out) == EXPECTED_FILES
    expected = configstate.render_files(configstate.build_state())
    for name, text in expected.items():
        assert (out / name).read_text() == text
    assert "Rendered 14 files for 3 racks" in printed
    assert ConfigPush.objects.count() == 0


def test_render_configs_can_write_the_slurm_25_05_topology_yaml(departments, tmp_path):
    import yaml

    out = tmp_path / "out"
    run("render_configs", "--out", str(out), "--topology-format", "yaml")
    assert not (out / "slurm/topology.conf").exists()
    (topology,) = yaml.safe_load((out / "slurm/topology.yaml").read_text())
    blocks = {b["block"]: b["nodes"] for b in topology["block"]["blocks"]}
    assert blocks["r02p1"] == "gb-r02-t[01-09]" and blocks["r02p2"] == "gb-r02-t[10-18]"


def test_push_configs_dry_run_changes_nothing(departments, render_dir):
    printed = run("push_configs", "--dry-run")

    assert "== local" in printed
    assert "+++ rendered/slurm/topology.conf" in printed
    assert "+BlockName=r02p1 Nodes=gb-r02-t[01-09]" in printed
    assert printed.rstrip().endswith("Dry run: nothing was pushed.")
    assert ConfigPush.objects.count() == 0
    assert not render_dir.exists()


def test_push_configs_to_the_local_directory_target(departments, render_dir):
    printed = run("push_configs")

    push = ConfigPush.objects.get()
    assert push.target.name == "local"
    assert push.status == PushStatus.SUCCEEDED
    assert push.reason == "manage.py push_configs"
    assert f"local: push #{push.pk} succeeded: 14 files in" in printed
    assert files_under(render_dir / "current") == EXPECTED_FILES

    # Nothing changed since: recorded as unchanged, nothing written; the dry run agrees.
    again = run("push_configs", "--target", "local")
    assert "unchanged" in again
    assert len(list((render_dir / "versions").iterdir())) == 1
    assert "no changes" in run("push_configs", "--dry-run")


def test_push_configs_reports_a_failure(departments, tmp_path):
    ConfigTarget.objects.filter(name="local").update(enabled=False)
    ConfigTarget.objects.create(
        name="slurm",
        kind="slurm",
        settings={"config_dir": str(tmp_path / "missing"), "scontrol": "/bin/false"},
    )
    with pytest.raises(CommandError, match="some pushes failed"):
        run("push_configs")
    push = ConfigPush.objects.get()
    assert push.status == PushStatus.FAILED
    assert "does not exist" in push.error and "What to do:" in push.error


def test_push_configs_target_must_exist_and_be_enabled(departments, render_dir):
    with pytest.raises(CommandError, match="no target named 'nope'"):
        run("push_configs", "--target", "nope")
    ConfigTarget.objects.filter(name="local").update(enabled=False)
    with pytest.raises(CommandError, match="disabled"):
        run("push_configs", "--target", "local")
    with pytest.raises(CommandError, match="no enabled targets"):
        run("push_configs")
