"""The recording rules Rackplane ships (deploy/prometheus/rackplane-rules.yml): Prometheus's own promtool
accepts them (`check rules`) and its unit test of them passes (`test rules`: an hour of samples, the recorded
series equal to the cycle's raw queries GPU by GPU), and their names and expressions are the ones the
telemetry cycle asks for (tenancy.prometheus.QueryConfig with the metrics source's defaults)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tenancy.prometheus import QueryConfig

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
HOW_TO_INSTALL = (
    "promtool is not installed: `apt-get install -y --no-install-recommends prometheus` "
    "(scripts/system-deps.sh does it for `make test`)"
)


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail(HOW_TO_INSTALL, pytrace=False)
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def shipped_rules() -> dict[str, str]:
    groups = yaml.safe_load((RULES / "rackplane-rules.yml").read_text())["groups"]
    return {rule["record"]: " ".join(rule["expr"].split()) for group in groups for rule in group["rules"]}


def test_promtool_accepts_the_rules_and_their_unit_test_passes():
    checked = promtool("check", "rules", "rackplane-rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rules found" in checked.stdout
    tested = promtool("test", "rules", "rackplane-rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_unit_test_fails_on_a_rule_that_differs_from_the_query(tmp_path):
    """The unit test catches a rule that looks back the wrong time: it is not a test that always passes."""
    rules = (RULES / "rackplane-rules.yml").read_text()
    (tmp_path / "rackplane-rules.yml").write_text(rules.replace("[300s] offset 30m", "[300s] offset 20m"))
    (tmp_path / "rackplane-rules.test.yml").write_text((RULES / "rackplane-rules.test.yml").read_text())
    tested = promtool("test", "rules", "rackplane-rules.test.yml", cwd=tmp_path)
    assert tested.returncode != 0 and "FAILED" in tested.stdout + tested.stderr


def test_the_rules_record_the_cycles_queries_under_the_names_it_asks_for():
    config = QueryConfig()  # the metrics source's defaults: 300-second window; the idle window is 30 minutes
    assert shipped_rules() == {
        "UUID:DCGM_FI_DEV_GPU_UTIL:max_avg5m": config.utilization_now(300),
        "UUID:DCGM_FI_DEV_GPU_UTIL:max30m": config.low_for_window(30, 300),
    }
    assert config.recorded_now(300) == "UUID:DCGM_FI_DEV_GPU_UTIL:max_avg5m"
    assert config.recorded_low(30) == "UUID:DCGM_FI_DEV_GPU_UTIL:max30m"
    # Another site's names: its UUID label, metric and windows in the name, as the file's comment says.
    other = QueryConfig(metric="gpu_util", uuid_label="uuid")
    assert (other.recorded_now(120), other.recorded_low(60)) == (
        "uuid:gpu_util:max_avg2m",
        "uuid:gpu_util:max1h",
    )
    assert QueryConfig().recorded_now(45) == "UUID:DCGM_FI_DEV_GPU_UTIL:max_avg45s"
