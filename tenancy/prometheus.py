"""Ask a Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics) for GPU utilization.

Pure Python (core.http, no Django), so the telemetry cycle, the charts, the benchmark and tests share it.

The HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/) this module relies on:

* ``POST /api/v1/query`` (form: ``query``, ``time``) and ``POST /api/v1/query_range`` (``query``, ``start``,
  ``end``, ``step``), form-encoded, so a long ``UUID=~"..."`` matcher never hits a URL length limit. Every
  Prometheus-compatible store accepts both.
* The answer is ``{"status": "success", "data": {"resultType": "vector"|"matrix", "result": [...]}}``; a
  vector item is ``{"metric": {labels}, "value": [unix_seconds, "text"]}``, a matrix item
  ``{"metric": {...}, "values": [[t, "v"], ...]}``. Values are strings ("NaN", "+Inf" included).
* An error is ``{"status": "error", "errorType": "bad_data", "error": "..."}`` with HTTP 400 (bad query),
  422 (cannot execute), 503 (timeout / overloaded); a proxy in front may answer HTML instead.
* Staleness: an instant selector only sees a series whose last sample is under 5 minutes old (and none after
  the target disappears: Prometheus writes a staleness marker). ``avg_over_time(m[5m])`` covers only the
  samples inside the window, so a GPU with no sample in the window has no result at all: "no data".

Queries are by GPU UUID (``max by (UUID)``): a GPU's series may be split by label churn (an exporter pod
restarted under a new name) or scraped twice (two Prometheus jobs); folding them with max keeps one value per
GPU and never makes a GPU look idler than it is, like tenancy.activity does for pushed samples.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from core.errors import ExternalError, Unreachable
from core.http import HttpClient

__all__ = [
    "PrometheusClient",
    "PrometheusError",
    "QueryConfig",
    "choose_step",
    "labels_error",
]

DEFAULT_TIMEOUT = 10.0
MAX_BYTES = 256 * 1024 * 1024  # 72,000 GPUs' instant vector is ~10 MB; a range query is bounded by the step
# Steps a chart may use, seconds; the smallest giving at most MAX_POINTS points over the range is chosen.
STEPS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_POINTS = 300
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
# One label matcher: name, operator, double-quoted value (backslash escapes allowed).
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


class PrometheusError(ExternalError):
    """The query API failed or refused; the message is what the admin reads on the metrics source."""


@dataclass(frozen=True)
class QueryConfig:
    """What to ask for: the metric and the label names of the site's exporters (MetricsSource)."""

    metric: str = "DCGM_FI_DEV_GPU_UTIL"
    uuid_label: str = "UUID"
    gpu_label: str = "gpu"
    hostname_label: str = "Hostname"
    selector: str = ""  # extra matchers, e.g. cluster="gb-east"

    def problems(self) -> list[str]:
        """What is wrong with the names, in words (empty when they can be used)."""
        out = []
        if not METRIC_NAME.match(self.metric):
            out.append(f"{self.metric!r} is not a metric name")
        for what, name in (("UUID", self.uuid_label), ("GPU index", self.gpu_label)):
            if not LABEL_NAME.match(name):
                out.append(f"the {what} label {name!r} is not a label name")
        if self.hostname_label and not LABEL_NAME.match(self.hostname_label):
            out.append(f"the host name label {self.hostname_label!r} is not a label name")
        if self.selector and _matchers(self.selector) is None:
            out.append(
                f"the extra selector {self.selector!r} is not a list of label matchers "
                'like cluster="a",job="b"'
            )
        return out

    def series(self, *extra: str) -> str:
        """The metric's selector: ``DCGM_FI_DEV_GPU_UTIL{cluster="a",UUID=~"..."}``."""
        matchers = [*(_matchers(self.selector) or []), *extra]
        return f"{self.metric}{{{','.join(matchers)}}}" if matchers else self.metric

    def uuid_matcher(self, uuids: Sequence[str]) -> str:
        """``UUID=~"GPU-a|GPU-b"`` (values escaped for a regular expression inside a PromQL string)."""
        pattern = "|".join(re.escape(uuid) for uuid in sorted(set(uuids)))
        return f"{self.uuid_label}=~{_quote(pattern)}"

    def utilization_now(self, window_seconds: int = 300) -> str:
        """Every GPU's mean utilization over the last `window_seconds`, one series per UUID."""
        return f"max by ({self.uuid_label}) (avg_over_time({self.series()}[{window_seconds}s]))"

    def low_for_window(self, idle_minutes: int, window_seconds: int = 300) -> str:
        """The highest utilization over the idle window, of GPUs that were reporting when it began.

        ``last_over_time(...[window] offset W)`` exists only for GPUs with a sample just before the idle
        window started, so a GPU that appeared during the window is not taken as low for all of it.
        """
        selector = self.series()
        by = f"max by ({self.uuid_label})"
        return (
            f"{by} (max_over_time({selector}[{idle_minutes}m])) "
            f"and {by} (last_over_time({selector}[{window_seconds}s] offset {idle_minutes}m))"
        )

    def history(self, uuids: Sequence[str], step_seconds: int) -> str:
        """Each of these GPUs' mean utilization over every step (a range query's points)."""
        selector = self.series(self.uuid_matcher(uuids))
        return f"max by ({self.uuid_label}) (avg_over_time({selector}[{step_seconds}s]))"

    def mean_history(self, uuids: Sequence[str], step_seconds: int) -> str:
        """These GPUs' mean utilization together over every step (a job's chart line)."""
        return f"avg({self.history(uuids, step_seconds)})"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _matchers(text: str) -> list[str] | None:
    """The matchers of ``a="x",b=~"y"`` (braces optional), each normalized; None when it is not that."""
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    out, position = [], 0
    while position < len(text):
        match = MATCHER.match(text, position)
        if match is None:
            return None
        out.append(f'{match.group(1)}{match.group(2)}"{match.group(3)}"')
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                return None
            position += 1
    return out


def choose_step(start: datetime, end: datetime, min_step: int = 15, max_points: int = MAX_POINTS) -> int:
    """The step (seconds) of a range query over start..end: at most `max_points` points, never under
    `min_step` (the scrape interval: a shorter step only repeats samples)."""
    seconds = max(1.0, (end - start).total_seconds())
    for step in STEPS:
        if step >= min_step and seconds / step <= max_points:
            return step
    return max(STEPS[-1], math.ceil(seconds / max_points))


def labels_error(config: QueryConfig, labels: Iterable[str]) -> str:
    """The bad-label-config message: what is missing and the labels the exporter's series do carry."""
    shown = ", ".join(sorted(set(labels) - {"__name__"})) or "none"
    return (
        f"no series of {config.metric} with label {config.uuid_label}; the exporter's labels are {shown}: "
        "set the UUID label name of the metrics source to the one holding the GPU UUID"
    )


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _timestamp(at: datetime | float) -> str:
    """Unix seconds to the millisecond, rounded down (never a point after the `end` asked for)."""
    seconds = at.timestamp() if isinstance(at, datetime) else float(at)
    return f"{math.floor(round(seconds * 1000, 3)) / 1000:.3f}"


class PrometheusClient:
    """One Prometheus-compatible query API: instant and range queries, errors in plain words."""

    def __init__(
        self,
        url: str,
        *,
        bearer_token: str = "",
        basic_auth: tuple[str, str] | None = None,
        ca_file: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        allow_private: bool = True,
    ):
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PrometheusError(
                f"{url!r} is not an http:// or https:// address", "fix the metrics source URL"
            )
        self.url = url.strip().rstrip("/")
        self.address = parts.netloc
        self._http = HttpClient(
            self.url,
            headers={"Accept": "application/json", "User-Agent": "rackplane-metrics/1"},
            bearer_token=bearer_token,
            basic_auth=basic_auth,
            ca_file=ca_file,
            timeout=timeout,
            max_bytes=MAX_BYTES,
            allow_private=allow_private,  # the metrics source's outbound allowance (core.outbound)
        )

    def _call(self, path: str, form: dict[str, str]) -> dict:
        body = urllib.parse.urlencode(form).encode()
        try:
            response = self._http.request(
                "POST", path, body, headers={"Content-Type": "application/x-www-form-urlencoded"}
            )
        except Unreachable as error:
            raise PrometheusError(
                f"the Prometheus query API at {self.address} cannot be reached: {error}",
                "check the metrics source URL and that Prometheus is running",
                transient=True,
            ) from error
        except ExternalError as error:
            raise PrometheusError(f"the Prometheus query API at {self.address}: {error}") from error
        answer = response.json_or_text()
        if not response.ok:
            if isinstance(answer, dict) and answer.get("error"):
                said = f"{answer.get('errorType') or 'error'}: {answer['error']}"
            else:
                text = " ".join(str(answer or "").split())
                said = text[:200] + ("..." if len(text) > 200 else "") or "no explanation"
            advice = {
                401: "check the metrics source's token or user name and password",
                403: "the account may not query this Prometheus: check its permissions",
                404: "check the URL: it should be the address Prometheus's /api/v1/query is under",
            }.get(response.status)
            raise PrometheusError(
                f"the Prometheus query API at {self.address} answered HTTP {response.status} "
                f"{response.reason}: {said}",
                advice,
                transient=response.transient_failure,
            )
        if not isinstance(answer, dict) or answer.get("status") != "success" or "data" not in answer:
            raise PrometheusError(
                f"{self.address} did not answer like a Prometheus query API (no JSON status/data)",
                "check the URL: it should be the address Prometheus's /api/v1/query is under",
            )
        return answer["data"]

    def query(self, promql: str, at: datetime | float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query: (labels, value) per series; NaN and infinite values are left out."""
        form = {"query": promql}
        if at is not None:
            form["time"] = _timestamp(at)
        data = self._call("/api/v1/query", form)
        if data.get("resultType") == "scalar":
            value = _number(data["result"][1])
            return [] if value is None else [({}, value)]
        out = []
        for item in data.get("result") or []:
            value = _number((item.get("value") or [None, None])[1])
            if value is not None:
                out.append((item.get("metric") or {}, value))
        return out

    def query_range(
        self, promql: str, start: datetime, end: datetime, step: int
    ) -> list[tuple[dict[str, str], list[tuple[datetime, float]]]]:
        """A range query: (labels, [(time, value), ...]) per series, in time order, gaps left out."""
        data = self._call(
            "/api/v1/query_range",
            {"query": promql, "start": _timestamp(start), "end": _timestamp(end), "step": f"{int(step)}s"},
        )
        out = []
        for item in data.get("result") or []:
            points = []
            for at, text in item.get("values") or []:
                value = _number(text)
                if value is not None:
                    points.append((datetime.fromtimestamp(float(at), tz=UTC), value))
            out.append((item.get("metric") or {}, points))
        return out

    def sample_labels(self, config: QueryConfig) -> list[dict[str, str]] | None:
        """The labels of up to 3 current series of the metric; None when Prometheus has none."""
        rows = self.query(f"topk(3, {config.series()})")
        return [labels for labels, _ in rows] or None
