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

The telemetry cycle's two fleet-wide figures are read one of three ways (`Way`, `fleet_now`, `fleet_low`):

* **recorded**: the site's Prometheus evaluates them as recording rules
  (deploy/prometheus/rackplane-rules.yml; names from `QueryConfig.recorded_now`/`recorded_low`,
  ``UUID:DCGM_FI_DEV_GPU_UTIL:max_avg5m`` and ``UUID:DCGM_FI_DEV_GPU_UTIL:max30m``, Prometheus's
  ``level:metric:operations``), and the cycle reads one sample per GPU. Used when the recorded series
  answer (the first query is the check: nothing else is asked when they do).
* **chunked**: the raw expression, one query per GPU index (``gpu="0"`` ... ``gpu="3"``: an NVL72 tray has
  four) and one for every other series (``gpu!~"0|1|2|3"``, which also holds series without the label), so
  no query reads the whole fleet's series; the answers are merged by UUID with max (`max by (UUID)` over the
  whole fleet is the max of the shards' maxima, and the low figure's ``and`` is applied after merging both
  of its halves), so the result is the one query's.
* **single**: the raw expression in one query for the whole fleet (the benchmark's baseline).
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from core.errors import ExternalError, Unreachable
from core.http import HttpClient

__all__ = [
    "PrometheusClient",
    "PrometheusError",
    "QueryConfig",
    "Way",
    "choose_step",
    "fleet_low",
    "fleet_now",
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
# The GPU indexes the chunked queries ask for one by one (an NVL72 compute tray has four GPUs); every other
# series (another index, or none) is read by one more query.
SHARD_INDEXES = ("0", "1", "2", "3")


class Way(StrEnum):
    """How the cycle read a fleet-wide figure (see the module docstring)."""

    RECORDED = "recorded"
    CHUNKED = "chunked"
    SINGLE = "single"


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

    def series(self, *extra: str, metric: str = "") -> str:
        """The metric's selector: ``DCGM_FI_DEV_GPU_UTIL{cluster="a",UUID=~"..."}`` (`metric`: another
        name, a recorded series', with the same matchers)."""
        metric = metric or self.metric
        matchers = [*(_matchers(self.selector) or []), *[matcher for matcher in extra if matcher]]
        return f"{metric}{{{','.join(matchers)}}}" if matchers else metric

    def shards(self) -> list[str]:
        """The chunked queries' matchers: one per GPU index, then every other series; each series matches
        exactly one (a series without the label has the empty value, which only the last matches)."""
        label = self.gpu_label
        return [f'{label}="{index}"' for index in SHARD_INDEXES] + [f'{label}!~"{"|".join(SHARD_INDEXES)}"']

    def recorded_now(self, window_seconds: int = 300) -> str:
        """The recording rule's name for `utilization_now`: ``UUID:DCGM_FI_DEV_GPU_UTIL:max_avg5m``
        (level:metric:operations, newest operation first)."""
        return f"{self.uuid_label}:{self.metric}:max_avg{_duration(window_seconds)}"

    def recorded_low(self, idle_minutes: int) -> str:
        """The recording rule's name for `low_for_window`: ``UUID:DCGM_FI_DEV_GPU_UTIL:max30m`` (max of max
        is max)."""
        return f"{self.uuid_label}:{self.metric}:max{_duration(idle_minutes * 60)}"

    def recorded(self, name: str) -> str:
        """Read a recorded series, with the source's extra matchers (a site whose rule keeps `cluster` in its
        ``by`` clause can select on it), folded to one value per UUID."""
        return f"max by ({self.uuid_label}) ({self.series(metric=name)})"

    def uuid_matcher(self, uuids: Sequence[str]) -> str:
        """``UUID=~"GPU-a|GPU-b"`` (values escaped for a regular expression inside a PromQL string)."""
        pattern = "|".join(re.escape(uuid) for uuid in sorted(set(uuids)))
        return f"{self.uuid_label}=~{_quote(pattern)}"

    def utilization_now(self, window_seconds: int = 300, shard: str = "") -> str:
        """Every GPU's mean utilization over the last `window_seconds`, one series per UUID (`shard`: one of
        `shards()`, to read only those series)."""
        return f"max by ({self.uuid_label}) (avg_over_time({self.series(shard)}[{window_seconds}s]))"

    def low_for_window(self, idle_minutes: int, window_seconds: int = 300) -> str:
        """The highest utilization over the idle window, of GPUs that were reporting when it began.

        ``last_over_time(...[window] offset W)`` exists only for GPUs with a sample just before the idle
        window started, so a GPU that appeared during the window is not taken as low for all of it.
        """
        highest, reporting = self.low_parts(idle_minutes, window_seconds)
        return f"{highest} and {reporting}"

    def low_parts(self, idle_minutes: int, window_seconds: int = 300, shard: str = "") -> tuple[str, str]:
        """`low_for_window`'s two sides: the highest value over the window, and the GPUs reporting when it
        began."""
        selector = self.series(shard)
        by = f"max by ({self.uuid_label})"
        return (
            f"{by} (max_over_time({selector}[{idle_minutes}m]))",
            f"{by} (last_over_time({selector}[{window_seconds}s] offset {idle_minutes}m))",
        )

    def history(self, uuids: Sequence[str], step_seconds: int) -> str:
        """Each of these GPUs' mean utilization over every step (a range query's points)."""
        selector = self.series(self.uuid_matcher(uuids))
        return f"max by ({self.uuid_label}) (avg_over_time({selector}[{step_seconds}s]))"

    def mean_history(self, uuids: Sequence[str], step_seconds: int) -> str:
        """These GPUs' mean utilization together over every step (a job's chart line)."""
        return f"avg({self.history(uuids, step_seconds)})"


def _duration(seconds: int) -> str:
    """A duration as a recording rule's name spells it: 5m, 30m, 2h, 45s."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


Rows = list[tuple[dict[str, str], float]]


def _by_uuid(config: QueryConfig, answers: Iterable[Rows]) -> Rows:
    """The shards' answers as one: a UUID answered by several shards keeps its highest value (what
    ``max by (UUID)`` over the whole fleet gives)."""
    merged: dict[str, tuple[dict[str, str], float]] = {}
    for rows in answers:
        for labels, value in rows:
            key = labels.get(config.uuid_label, "")
            if key not in merged or value > merged[key][1]:
                merged[key] = (labels, value)
    return list(merged.values())


def fleet_now(
    client: PrometheusClient, config: QueryConfig, at: datetime, window_seconds: int, way: Way | None = None
) -> tuple[Rows, Way, int]:
    """Every GPU's utilization now: (rows, the way it was read, queries made). `way` None: recorded when
    the recording rule answers, else chunked."""
    queries = 0
    if way in (None, Way.RECORDED):
        rows = client.query(config.recorded(config.recorded_now(window_seconds)), at=at)
        queries += 1
        if rows or way is Way.RECORDED:
            return rows, Way.RECORDED, queries
    if way is Way.SINGLE:
        return client.query(config.utilization_now(window_seconds), at=at), Way.SINGLE, queries + 1
    shards = config.shards()
    answers = [client.query(config.utilization_now(window_seconds, shard), at=at) for shard in shards]
    return _by_uuid(config, answers), Way.CHUNKED, queries + len(shards)


def fleet_low(
    client: PrometheusClient,
    config: QueryConfig,
    at: datetime,
    idle_minutes: int,
    window_seconds: int,
    way: Way | None = None,
) -> tuple[dict[str, float], Way, int]:
    """UUID -> the highest utilization over the idle window, of GPUs reporting when it began
    (`low_for_window`), read like `fleet_now`."""
    queries = 0
    uuid = config.uuid_label
    if way in (None, Way.RECORDED):
        rows = client.query(config.recorded(config.recorded_low(idle_minutes)), at=at)
        queries += 1
        if rows or way is Way.RECORDED:
            return {labels.get(uuid, ""): value for labels, value in rows}, Way.RECORDED, queries
    if way is Way.SINGLE:
        rows = client.query(config.low_for_window(idle_minutes, window_seconds), at=at)
        return {labels.get(uuid, ""): value for labels, value in rows}, Way.SINGLE, queries + 1
    highest: list[Rows] = []
    reporting: list[Rows] = []
    for shard in config.shards():
        high, report = config.low_parts(idle_minutes, window_seconds, shard)
        highest.append(client.query(high, at=at))
        reporting.append(client.query(report, at=at))
    started = {labels.get(uuid, "") for labels, _ in _by_uuid(config, reporting)}
    low = {labels.get(uuid, ""): value for labels, value in _by_uuid(config, highest)}
    # PromQL's `and`: the left side's values, for the label sets (here: the UUID) the right side has.
    return (
        {key: value for key, value in low.items() if key in started},
        Way.CHUNKED,
        queries + 2 * len(highest),
    )


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
