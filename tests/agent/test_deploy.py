"""The agent's systemd unit and DaemonSet manifest: checked by the tools that read them (systemd-analyze, the
real Kubernetes API server of the testbed) and against the agent's own command line, so an option the agent
does not take, a token file outside the Secret's mount or a state file outside the kept folder fails here."""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import AGENT, REPO
from tests.integrations.kube_testbed import kube_testbed  # noqa: F401 (the testbed's fixture)

UNIT = REPO / "agent" / "rackplane-agent.service"
DAEMONSET = REPO / "agent" / "daemonset.yaml"


@pytest.fixture(scope="module")
def agent():
    spec = importlib.util.spec_from_file_location("rackplane_agent_deploy", AGENT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line.strip() and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_systemd_reads_the_unit_without_a_complaint():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze (package systemd) is needed to check agent/rackplane-agent.service")
    done = subprocess.run([analyze, "verify", str(UNIT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_unit_runs_the_agent_with_options_it_takes(agent):
    unit = unit_settings()
    [exec_start] = unit["ExecStart"]
    python, script, *options = shlex.split(exec_start)
    assert python == "/usr/bin/python3" and script.endswith("/rackplane_agent.py")
    # Settings come from the EnvironmentFile as RACKPLANE_AGENT_* variables, as its comment shows them.
    environ = {
        "RACKPLANE_AGENT_PORTAL": "https://rackplane.example.com",
        "RACKPLANE_AGENT_CHECK_COMMAND": "dcgmi diag -r 2",
    }
    args = agent.parse_args(options, environ)
    assert args.portal == "https://rackplane.example.com" and args.check_command == "dcgmi diag -r 2"
    assert args.token_file == "/etc/rackplane/agent.token" and not args.once and not args.dry_run
    assert Path(args.state_file).parent == Path("/var/lib") / unit["StateDirectory"][0]
    # Root for /dev/kmsg and the journal, bounded: CAP_SYSLOG for kmsg, nothing hiding the kernel log or GPUs.
    assert unit["User"] == ["root"] and unit["DynamicUser"] == ["no"]
    assert "CAP_SYSLOG" in unit["CapabilityBoundingSet"][0].split()
    assert unit["ProtectKernelLogs"] == ["no"] and unit["PrivateDevices"] == ["no"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["ProtectSystem"] == ["strict"]
    assert unit["KillSignal"] == ["SIGTERM"] and unit["Restart"] == ["always"]


def daemonset() -> dict:
    [document] = list(yaml.safe_load_all(DAEMONSET.read_text()))
    return document


def test_the_daemonset_runs_the_agent_with_options_it_takes(agent):
    manifest = daemonset()
    pod = manifest["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "valueFrom" in e] == [
        "spec.nodeName"
    ]
    environ = {k: v for k, v in env.items() if v is not None} | {"RACKPLANE_AGENT_HOST": "gb-r01-t01"}
    _, script = container["command"]
    args = agent.parse_args(container["args"], environ)
    assert args.host == "gb-r01-t01" and args.portal.startswith("https://")
    # The kernel log: the host's kern.log through a read-only /var/log; root with one capability to read it.
    assert args.kernel_log == "/host/var/log/kern.log"

    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    def volume(path: str) -> dict:
        return volumes[mounts[path]["name"]]

    assert volume(str(Path(script).parent))["configMap"]["name"] == "rackplane-agent"
    token = volume(str(Path(args.token_file).parent))["secret"]
    assert Path(args.token_file).name == "token" and token["defaultMode"] == 0o400  # no warning about 0600
    assert volume(str(Path(args.state_file).parent))["hostPath"] == {
        "path": "/var/lib/rackplane-agent",
        "type": "DirectoryOrCreate",
    }
    assert volume("/host/var/log")["hostPath"] == {"path": "/var/log", "type": "Directory"}
    assert mounts["/host/var/log"]["readOnly"] is True
    security = container["securityContext"]
    assert not security.get("privileged") and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]}

    # GPU nodes of one rack; staying on trays Rackplane drained (its own taint), with bounded resources.
    rack = manifest["metadata"]["labels"]["rackplane.io/rack"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "rackplane.io/rack": rack}
    assert token["secretName"] == f"rackplane-agent-token-{rack}" and manifest["metadata"]["name"].endswith(
        rack
    )
    assert {"key": "rackplane.io/gpu-fault", "operator": "Exists"} in pod["tolerations"]
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert (
        not pod.get("hostPID") and not pod.get("hostNetwork") and pod["automountServiceAccountToken"] is False
    )


def test_the_daemonset_for_another_rack_is_the_same_with_its_name():
    other = yaml.safe_load(DAEMONSET.read_text().replace("gb-r01", "gb-r02"))
    pod = other["spec"]["template"]["spec"]
    assert other["spec"]["selector"]["matchLabels"]["rackplane.io/rack"] == "gb-r02"
    assert other["spec"]["template"]["metadata"]["labels"]["rackplane.io/rack"] == "gb-r02"
    assert pod["nodeSelector"]["rackplane.io/rack"] == "gb-r02"
    assert {v["name"]: v for v in pod["volumes"]}["token"]["secret"][
        "secretName"
    ] == "rackplane-agent-token-gb-r02"


@pytest.mark.integration
def test_the_kubernetes_api_server_takes_the_daemonset_its_configmap_and_secret(kube_testbed):  # noqa: F811
    """Server-side dry runs (validated and admitted, nothing stored) with strict field validation, in the
    namespace the manifest names (the testbed's `rackplane`)."""
    from tests.integrations.kube_testbed import KubeAdmin

    admin = KubeAdmin(kube_testbed)
    manifest = daemonset()
    namespace = manifest["metadata"]["namespace"]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "rackplane-agent", "namespace": namespace},
        "data": {"rackplane_agent.py": AGENT.read_text()},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "rackplane-agent-token-gb-r01", "namespace": namespace},
        "stringData": {"token": "rpa_" + "x" * 43},
    }
    for path, body in (
        (f"/api/v1/namespaces/{namespace}/configmaps", config_map),
        (f"/api/v1/namespaces/{namespace}/secrets", secret),
        (f"/apis/apps/v1/namespaces/{namespace}/daemonsets", manifest),
    ):
        status, answer = admin.request("POST", path, body, dryRun="All", fieldValidation="Strict")
        assert status == 201, (path, status, answer)
    created = answer
    assert (
        created["spec"]["template"]["spec"]["tolerations"]
        == manifest["spec"]["template"]["spec"]["tolerations"]
    )
    assert admin.get("Pod", "x", namespace) is None  # sanity: the dry runs stored nothing
    status, _ = admin.request(
        "GET", f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{manifest['metadata']['name']}"
    )
    assert status == 404
