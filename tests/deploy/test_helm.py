"""The Helm chart (deploy/helm/rackplane): `helm lint` and `helm template` with the default values and with
the production example (external PostgreSQL/Redis, OIDC, Ingress, ServiceMonitor), what the manifests say,
and the real API server of the testbed accepting them: a server-side dry run (dryRun=All,
fieldValidation=Strict) of every object, then a real create, read back and delete.

Helm is built from its Go module on first use (scripts/helm.sh; cached under ~/.cache/rackplane/helm/). The
ServiceMonitor and the PrometheusRule need prometheus-operator's CRDs, which nothing here installs (no
network): `helm lint` and the rendered objects' own checks cover them, and the server sees the rest.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "rackplane"
PRODUCTION = CHART / "ci" / "production-values.yaml"
WORKLOADS = ("Deployment", "Job")

pytestmark = pytest.mark.slow(reason="subprocesses; the first run builds Helm")


def helm_run(helm: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def render(helm: str, *extra: str, release: str = "rp", namespace: str = "rackplane") -> list[dict[str, Any]]:
    result = helm_run(helm, "template", release, str(CHART), "--namespace", namespace, *extra)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def pod_specs(docs):
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            yield doc, doc["spec"]["template"]["spec"]


@pytest.mark.parametrize("values", [[], ["-f", str(PRODUCTION)]], ids=["defaults", "production"])
def test_lint(helm, values):
    result = helm_run(helm, "lint", "--strict", str(CHART), *values)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_lint_fails_on_a_broken_template(helm, tmp_path):
    # The lint is a real check: a chart with a template error does not pass.
    broken = tmp_path / "rackplane"
    subprocess.run(["cp", "-r", str(CHART), str(broken)], check=True)
    (broken / "templates" / "service.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Values.nope.x }}\n"
    )
    result = helm_run(helm, "lint", "--strict", str(broken))
    assert result.returncode != 0
    assert "nil pointer" in result.stdout + result.stderr


@pytest.mark.parametrize("values", [[], ["-f", str(PRODUCTION)]], ids=["defaults", "production"])
def test_hardened_pods(helm, values):
    docs = render(helm, *values)
    seen = set()
    for doc, spec in pod_specs(docs):
        seen.add(doc["metadata"]["name"])
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 65532
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]]  # the only writable places are emptyDirs
            assert all("emptyDir" in volumes[name] for name in mounts.values())
            # Secrets by reference only: no secret value is ever in a manifest.
            env = {e["name"]: e for e in container["env"]}
            for name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL"):
                assert set(env[name]) == {"name", "valueFrom"} and "secretKeyRef" in env[name]["valueFrom"]
            assert env["DEBUG"]["value"] == "0"
    assert seen == {"rp-rackplane-web", "rp-rackplane-worker", "rp-rackplane-beat", "rp-rackplane-migrate-1"}
    assert not [doc for doc in docs if doc["kind"] in ("Secret", "ConfigMap")]


def test_components(helm):
    objects = by_kind(render(helm))
    web = objects[("Deployment", "rp-rackplane-web")]
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["serve"]
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["WEB_CONCURRENCY"], env["GUNICORN_THREADS"], env["GUNICORN_GRACEFUL_TIMEOUT"]) == (
        "2",
        "4",
        "30",
    )
    # SIGTERM leaves gunicorn its graceful timeout before the kubelet kills it.
    assert web["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > int(
        env["GUNICORN_GRACEFUL_TIMEOUT"]
    )
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0

    beat = objects[("Deployment", "rp-rackplane-beat")]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"] == {"type": "Recreate"}
    assert beat["spec"]["template"]["spec"]["containers"][0]["args"] == ["beat"]

    worker = objects[("Deployment", "rp-rackplane-worker")]
    assert worker["spec"]["template"]["spec"]["containers"][0]["args"] == ["worker"]
    assert "livenessProbe" not in worker["spec"]["template"]["spec"]["containers"][0]
    pdb = objects[("PodDisruptionBudget", "rp-rackplane-worker")]
    assert pdb["spec"]["selector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] == 1

    job = objects[("Job", "rp-rackplane-migrate-1")]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    job_container = job["spec"]["template"]["spec"]["containers"][0]
    assert job_container["args"] == ["migrate"]
    assert {e["name"]: e.get("value") for e in job_container["env"]}["RACKPLANE_DB_WAIT_TIMEOUT"] == "300"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert (
        "serviceAccountName" not in job["spec"]["template"]["spec"]
    )  # the release's account is not there yet

    service = objects[("Service", "rp-rackplane")]
    assert service["spec"]["selector"] == web["spec"]["selector"]["matchLabels"]
    for deployment in (web, worker):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        constraints = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in constraints} == {
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        }
        for constraint in constraints:
            assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
    assert not [key for key in objects if key[0] in ("Ingress", "ServiceMonitor", "PrometheusRule")]


def test_production_values(helm):
    objects = by_kind(render(helm, "-f", str(PRODUCTION)))
    web = objects[("Deployment", "rp-rackplane-web")]
    env = {e["name"]: e for e in web["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "rackplane-postgresql", "key": "url"}
    assert env["CELERY_BROKER_URL"]["valueFrom"]["secretKeyRef"] == {"name": "rackplane-redis", "key": "url"}
    assert env["SECRET_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "rackplane-app", "key": "SECRET_KEY"}
    assert env["OIDC_RP_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"]["name"] == "rackplane-oidc"
    assert env["ALLOWED_HOSTS"]["value"] == "rackplane.dc.example.org"
    assert (
        web["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.org/dc/rackplane:0.1.0"
    )
    ingress = objects[("Ingress", "rp-rackplane")]
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
        "name": "rp-rackplane",
        "port": {"name": "http"},
    }
    monitor = objects[("ServiceMonitor", "rp-rackplane")]
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    assert endpoint["authorization"]["credentials"] == {"name": "rackplane-metrics", "key": "token"}
    assert monitor["spec"]["selector"] == {
        "matchLabels": objects[("Service", "rp-rackplane")]["spec"]["selector"]
    }
    # The recording rules the telemetry cycle reads: deploy/prometheus/rackplane-rules.yml's, as they are.
    rules = objects[("PrometheusRule", "rp-rackplane")]
    assert rules["metadata"]["labels"]["release"] == "prometheus"
    shipped = yaml.safe_load((REPO / "deploy" / "prometheus" / "rackplane-rules.yml").read_text())
    assert rules["spec"]["groups"] == shipped["groups"]


def test_secret_name_is_required(helm):
    result = helm_run(helm, "template", "rp", str(CHART), "--set", "secrets.existingSecret=")
    assert result.returncode != 0
    assert "secrets.existingSecret: name the Secret holding SECRET_KEY" in result.stderr


# --- the real API server ----------------------------------------------------------------------------------


def collection_path(kube, api_version: str, kind: str, namespace: str) -> str:
    """The collection URL of `kind`, from the server's own discovery document."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    for resource in kube.ok("GET", base)["resources"]:
        if resource["kind"] == kind and "/" not in resource["name"]:
            prefix = f"{base}/namespaces/{namespace}" if resource["namespaced"] else base
            return f"{prefix}/{resource['name']}"
    raise AssertionError(f"the API server does not serve {api_version} {kind}")


def make_namespace(kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.ok(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def server_objects(docs):
    # No prometheus-operator CRD on the testbed (nothing is installed from the network): helm lint and
    # test_production_values check the ServiceMonitor and the PrometheusRule.
    return [doc for doc in docs if doc["kind"] not in ("ServiceMonitor", "PrometheusRule")]


@pytest.mark.integration
@pytest.mark.parametrize("values", [[], ["-f", str(PRODUCTION)]], ids=["defaults", "production"])
def test_server_dry_run_accepts_every_object(helm, kube, values):
    namespace = make_namespace(kube, "chart-dry-run")
    docs = server_objects(render(helm, *values, namespace=namespace))
    kinds = sorted({doc["kind"] for doc in docs})
    expected = ["Deployment", "Job", "PodDisruptionBudget", "Service", "ServiceAccount"]
    assert kinds == sorted(expected + (["Ingress"] if values else []))
    for doc in docs:
        path = collection_path(kube, doc["apiVersion"], doc["kind"], namespace)
        status, answer = kube.request("POST", path, doc, dryRun="All", fieldValidation="Strict")
        assert status == 201, f"{doc['kind']} {doc['metadata']['name']}: {status} {answer}"
        assert answer["metadata"]["name"] == doc["metadata"]["name"]
    # A dry run writes nothing.
    for doc in docs:
        path = collection_path(kube, doc["apiVersion"], doc["kind"], namespace)
        status, _ = kube.request("GET", f"{path}/{doc['metadata']['name']}")
        assert status == 404


@pytest.mark.integration
def test_server_refuses_a_field_it_does_not_know(helm, kube):
    # The dry run is a real check: Strict field validation refuses a misspelt field.
    namespace = make_namespace(kube, "chart-strict")
    web = by_kind(render(helm, namespace=namespace))[("Deployment", "rp-rackplane-web")]
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {
        "httpGet": {"path": "/readyz", "port": 8000}
    }
    path = collection_path(kube, "apps/v1", "Deployment", namespace)
    status, answer = kube.request("POST", path, web, dryRun="All", fieldValidation="Strict")
    assert status == 400
    assert 'unknown field "spec.template.spec.containers[0].readinesProbe"' in answer["message"]


@pytest.mark.integration
def test_apply_for_real_read_back_and_delete(helm, kube):
    namespace = make_namespace(kube, "chart-apply")
    docs = server_objects(render(helm, "-f", str(PRODUCTION), namespace=namespace))
    created = []
    try:
        for doc in docs:
            path = collection_path(kube, doc["apiVersion"], doc["kind"], namespace)
            kube.ok("POST", path, doc, fieldValidation="Strict", fieldManager="helm")
            created.append(f"{path}/{doc['metadata']['name']}")
        live = {
            doc["kind"]: kube.ok("GET", p)
            for doc, p in zip(docs, created, strict=True)
            if doc["kind"] != "Deployment"
        }
        web = kube.ok("GET", f"{collection_path(kube, 'apps/v1', 'Deployment', namespace)}/rp-rackplane-web")
        beat = kube.ok(
            "GET", f"{collection_path(kube, 'apps/v1', 'Deployment', namespace)}/rp-rackplane-beat"
        )
        spec = web["spec"]["template"]["spec"]
        # What the server stored is what the chart says (defaults filled in, nothing dropped).
        assert spec["securityContext"]["runAsNonRoot"] is True
        container = spec["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 5
        assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
        assert live["Job"]["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert live["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"][
            "app.kubernetes.io/component"
        ] in (
            "web",
            "worker",
        )
        assert live["Ingress"]["spec"]["tls"][0]["secretName"] == "rackplane-tls"
    finally:
        for path in reversed(created):
            status, answer = kube.request("DELETE", path, propagationPolicy="Background")
            assert status in (200, 202), answer
    for path in created:
        status, _ = kube.request("GET", path)
        assert status == 404, path
