"""deploy/grafana/rackplane.json: every metric its queries use is one /metrics exposes (scraped from the
portal and parsed with prometheus_client's own parser), so the dashboard cannot drift from the code."""

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "rackplane.json"
TOKEN = "metrics-token-for-the-dashboard-test-0123"

# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "delta", "histogram_quantile", "time",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "label_values", "topk", "bottomk", "clamp_min", "clamp_max", "abs", "vector", "scalar",
}  # fmt: skip
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["query"])
    return queries


def metric_names(expr: str) -> set[str]:
    """The metric names in one PromQL expression (label matchers, strings, ranges and groupings removed)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"label_values\(([a-zA-Z_:][\w:]*),\s*\w+\)", r"\1", expr)
    words = set(re.findall(r"[a-zA-Z_:][\w:]*", expr))
    return {word for word in words if word not in PROMQL_WORDS and not re.fullmatch(r"\d\w*", word)}


def test_metric_names_are_found_in_queries():
    names = metric_names('histogram_quantile(0.95, sum by (le, view) (rate(x_bucket{job=~"$job"}[5m])))')
    assert names == {"x_bucket"}
    assert metric_names("label_values(rackplane_gpus, job)") == {"rackplane_gpus"}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_every_dashboard_metric_is_exposed(client, settings, demo_inventory, department_a):
    settings.RACKPLANE_METRICS_TOKEN = TOKEN
    from django.utils import timezone

    from scheduling.models import SchedulerState

    SchedulerState.objects.update_or_create(
        pk=1, defaults={"last_pass_at": timezone.now(), "last_pass_ms": 3.0}
    )
    assert client.get("/login/").status_code == 200  # so the request histograms have samples
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    exposed: set[str] = set()
    for family in text_string_to_metric_families(response.content.decode()):
        exposed.add(family.name)
        exposed.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        exposed.update(sample.name for sample in family.samples)

    used = set().union(*(metric_names(expr) for expr in dashboard_queries()))
    assert len(used) >= 20
    assert {name for name in used if name.startswith("rackplane_")} >= {
        "rackplane_gpus",
        "rackplane_department_guaranteed_gpus",
        "rackplane_jobs",
        "rackplane_scheduler_last_pass_duration_seconds",
        "rackplane_config_pushes_finished_total",
    }
    assert "django_http_requests_latency_seconds_by_view_method_bucket" in used  # HTTP p95
    assert used <= exposed, (
        f"the dashboard queries metrics /metrics does not expose: {sorted(used - exposed)}"
    )
