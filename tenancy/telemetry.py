"""Read GPU utilization out of an NVIDIA DCGM exporter's ``/metrics`` page.

Pure Python (prometheus-client's parser, no Django) so the scrape task, the push endpoint and tests share it.

What dcgm-exporter serves is the Prometheus text format (0.0.4): one ``# HELP`` and ``# TYPE`` pair per
field, then one line per GPU::

    # HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
    # TYPE DCGM_FI_DEV_GPU_UTIL gauge
    DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-4b8c...",pci_bus_id="00000008:01:00.0",device="nvidia0",
        modelName="NVIDIA GB200",Hostname="gb-r01-t01",DCGM_FI_DRIVER_VERSION="580.82.07"} 87

Facts about that output this module relies on:

* ``UUID`` is the GPU UUID exactly as nvidia-smi prints it (``GPU-...``), the one stable identity; ``gpu``
  is the NVML index on the node. Older exporters (2.x) print fewer labels (``gpu``, ``UUID``, ``device``,
  ``modelName``, ``Hostname``), even just ``gpu`` and ``UUID``; newer ones add ``pci_bus_id`` and
  ``DCGM_FI_DRIVER_VERSION``; under Kubernetes ``container``/``namespace``/``pod`` follow (empty when no pod
  holds the GPU). Only ``UUID``, ``Hostname`` and ``gpu`` are read; some builds spell them lower case.
* ``Hostname`` is the node name on bare metal, but the exporter *pod's* name under Kubernetes unless
  ``NODE_NAME`` is set, so GPUs are matched by UUID, never by host.
* DCGM marks a field it could not read with a "blank" sentinel near 2**63 (e.g. ``9223372036854775794``);
  such values, NaN and anything outside 0-100 % are skipped, not recorded.
* ``DCGM_FI_DEV_GPU_UTIL`` is not in every exporter's default counters (2.3.0 dropped it) and is not
  reported for MIG instances, so a page without it is valid Prometheus text that just has nothing for us.

Health fields (inventory.discovery.faults.DCGM_FIELDS: the last XID, the exporter's XID counts per ``xid``
label, the fabric health mask, NVLink/NVSwitch/ECC error counters) are read too, into ``Samples.health``, for
the health rules (inventory.health.ingest.record_dcgm). dcgm-exporter ships most of them commented out of its
default counters: docs/dcgm-counters.csv is the counters file Rackplane needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from core.errors import RackplaneError
from inventory.discovery.faults import DCGM_FIELDS, DCGM_XID_COUNT

UTILIZATION_METRIC = "DCGM_FI_DEV_GPU_UTIL"
UUID_LABELS = ("UUID", "uuid")
HOSTNAME_LABELS = ("Hostname", "hostname")
INDEX_LABEL = "gpu"

__all__ = ["UTILIZATION_METRIC", "DcgmParseError", "HealthSample", "Sample", "Samples", "parse_dcgm"]
HEALTH_METRICS = frozenset(DCGM_FIELDS)


class DcgmParseError(RackplaneError, ValueError):
    """The text is not Prometheus exposition format; the message says where and why, in plain words. The
    API answers it 400, `{"detail": message}`."""

    client_error = True


@dataclass(frozen=True)
class Sample:
    """One GPU's utilization, in percent (0-100), as one exporter line reported it."""

    uuid: str
    hostname: str
    gpu_index: int | None
    value: float


@dataclass(frozen=True)
class HealthSample:
    """One GPU's value of a DCGM health field (`xid`: the label of DCGM_EXP_XID_ERRORS_COUNT lines)."""

    uuid: str
    field: str
    value: float
    xid: int | None = None


class Samples(list):
    """The utilization samples of one page (a list of :class:`Sample`), with what was left out.

    ``skipped`` counts utilization lines that could not be used (no UUID label, or a blank or out-of-range
    value); ``metrics`` names every metric family on the page, so a caller can tell "no GPU reported" from
    "utilization is not collected by this exporter".
    """

    def __init__(
        self,
        samples=(),
        skipped: int = 0,
        metrics: frozenset[str] = frozenset(),
        health: tuple[HealthSample, ...] = (),
    ):
        super().__init__(samples)
        self.skipped = skipped
        self.metrics = metrics
        self.health = health

    @property
    def has_utilization(self) -> bool:
        return UTILIZATION_METRIC in self.metrics


def _label(labels: dict[str, str], names: tuple[str, ...]) -> str:
    for name in names:
        value = labels.get(name, "").strip()
        if value:
            return value
    return ""


def _index(labels: dict[str, str]) -> int | None:
    value = labels.get(INDEX_LABEL, "").strip()
    return int(value) if value.isdigit() else None


def _where(text: str) -> str:
    """Find the first line the parser rejects on its own, to name it in the error."""
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            list(text_string_to_metric_families(line + "\n"))
        except Exception:  # the parser raises ValueError, but also IndexError/KeyError on odd input
            shown = line.strip()
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            return f"line {number}: {shown!r}"
    return "the text as a whole"


def parse_dcgm(text: str) -> Samples:
    """Parse a DCGM exporter page into utilization samples; other metrics are ignored.

    Raises DcgmParseError (a ValueError) when the text is not Prometheus text at all, e.g. an HTML error
    page or a body cut off mid-line.
    """
    if not isinstance(text, str):
        raise DcgmParseError(f"expected the exporter's text, got {type(text).__name__}")
    if "\x00" in text:
        raise DcgmParseError("not Prometheus text: the body is binary")
    if text and not text.endswith("\n"):
        text += "\n"  # the exposition format ends every line with a newline; tolerate a missing last one
    samples, skipped, metrics, health = [], 0, set(), []
    try:
        # The parser is lazy: errors surface while iterating, so everything is consumed inside the try.
        for family in text_string_to_metric_families(text):
            metrics.add(family.name)
            if family.name in HEALTH_METRICS:
                health.extend(_health_samples(family))
                continue
            if family.name != UTILIZATION_METRIC:
                continue
            for line in family.samples:
                if line.name != UTILIZATION_METRIC:
                    continue
                uuid = _label(line.labels, UUID_LABELS)
                value = float(line.value)
                if not uuid or not math.isfinite(value) or not 0.0 <= value <= 100.0:
                    skipped += 1
                    continue
                samples.append(
                    Sample(
                        uuid=uuid,
                        hostname=_label(line.labels, HOSTNAME_LABELS),
                        gpu_index=_index(line.labels),
                        value=value,
                    )
                )
    except Exception as error:  # the parser raises ValueError, but also IndexError/KeyError on odd input
        raise DcgmParseError(f"not Prometheus text: {_where(text)} cannot be read ({error})") from error
    return Samples(samples, skipped=skipped, metrics=frozenset(metrics), health=tuple(health))


def _health_samples(family) -> list[HealthSample]:
    """A health field's lines with a GPU UUID and a finite value (blank sentinels are dropped later, per
    field, by inventory.health)."""
    out = []
    # prometheus-client names a counter's samples <family>_total (the family itself keeps the exporter's
    # name, e.g. DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL): both are the field's value.
    names = (family.name, f"{family.name}_total")
    for line in family.samples:
        if line.name not in names:
            continue
        uuid = _label(line.labels, UUID_LABELS)
        value = float(line.value)
        if not uuid or not math.isfinite(value):
            continue
        xid = None
        if family.name == DCGM_XID_COUNT:
            label = line.labels.get("xid", "").strip()
            if not label.isdigit() or len(label) > 3:
                continue
            xid = int(label)
        out.append(HealthSample(uuid=uuid, field=family.name, value=value, xid=xid))
    return out
