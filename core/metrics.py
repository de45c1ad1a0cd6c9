"""Prometheus exposition for /metrics: django-prometheus's request and database metrics plus Rackplane's own
gauges, computed when Prometheus scrapes (docs/metrics.md).

Two kinds of figures, two ways to stay right under gunicorn's several worker processes:

* Rackplane's own figures (GPUs, quotas, jobs, pushes...) are read from the database at scrape time by a
  `ScrapeCollector`: whichever worker answers, the numbers are the same. Nothing about them is kept in a
  process.
* django-prometheus counts requests and queries in each process. With PROMETHEUS_MULTIPROC_DIR set (the
  production entry point sets it to an empty folder per container, before prometheus_client is imported,
  and gunicorn's child_exit hook calls `prometheus_client.multiprocess.mark_process_dead`), every worker
  writes its counters there and `exposition()` adds them up across workers; without it (`make run`, one
  process) they come from the process's own registry.

A source that fails (the database is down) does not fail the scrape: its figures are left out and
`rackplane_scrape_errors{source}` says which, so the request metrics still arrive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

import prometheus_client
from django.conf import settings
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

Source = Callable[[], Iterable[Metric]]


def gauge(name: str, documentation: str, labels: Iterable[str], values: Mapping[tuple, float]) -> Metric:
    """A gauge family with one sample per label-value tuple in `values`."""
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for label_values, value in values.items():
        family.add_metric([str(v) for v in label_values], value)
    return family


def counter(name: str, documentation: str, labels: Iterable[str], values: Mapping[tuple, float]) -> Metric:
    """A counter family (`name` without `_total`; the exposition adds it)."""
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    for label_values, value in values.items():
        family.add_metric([str(v) for v in label_values], value)
    return family


def single(name: str, documentation: str, value: float) -> Metric:
    return GaugeMetricFamily(name, documentation, value=value)


class ScrapeCollector(Collector):
    """Runs each named source at scrape time; one that raises is logged and reported, not fatal."""

    def __init__(self, sources: Mapping[str, Source]):
        self.sources = dict(sources)

    def collect(self) -> Iterable[Metric]:
        started = time.perf_counter()
        errors = {}
        for name, source in self.sources.items():
            try:
                families = list(source())
            except Exception:
                log.exception("metrics: the %s figures could not be read; left out of this scrape", name)
                errors[(name,)] = 1
                continue
            errors[(name,)] = 0
            yield from families
        yield gauge(
            "rackplane_scrape_errors",
            "1 when a group of Rackplane's figures could not be read in this scrape (see the portal's log).",
            ["source"],
            errors,
        )
        yield single(
            "rackplane_scrape_duration_seconds",
            "Time spent reading Rackplane's own figures from the database for this scrape.",
            time.perf_counter() - started,
        )


def multiprocess_dir() -> str | None:
    return settings.PROMETHEUS_MULTIPROC_DIR


def process_registry() -> CollectorRegistry:
    """The registry holding the request and database metrics: summed over gunicorn's workers in
    multiprocess mode, this process's own otherwise."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return prometheus_client.REGISTRY


def exposition(collectors: Iterable[Collector]) -> bytes:
    """The text exposition of the process (or all workers') metrics followed by `collectors`' figures."""
    own = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        own.register(collector)
    return prometheus_client.generate_latest(process_registry()) + prometheus_client.generate_latest(own)


CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST
