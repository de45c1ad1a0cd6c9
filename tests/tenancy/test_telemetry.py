"""tenancy.telemetry: DCGM exporter pages (Prometheus text) into utilization samples. Pure: no database."""

import subprocess
import sys
from pathlib import Path

import pytest

from tenancy.telemetry import UTILIZATION_METRIC, DcgmParseError, Sample, parse_dcgm

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
TRAY_UUIDS = [
    "GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9",
    "GPU-91e0f3a3-5c64-1d7b-8e2f-3a4b5c6d7e8f",
    "GPU-c7d2e9f3-0a83-6b4c-2d5e-9f0a1b2c3d4e",
    "GPU-2a5b8c10-e1f4-7a36-b9c2-d5e8f1a4b7c0",
]
HEADER = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def util(labels: str, value: str) -> str:
    return f"{HEADER}DCGM_FI_DEV_GPU_UTIL{{{labels}}} {value}\n"


def test_a_bare_metal_gb200_tray_gives_one_sample_per_gpu():
    samples = parse_dcgm(fixture("gb200_node.txt"))
    assert samples == [
        Sample(uuid=TRAY_UUIDS[0], hostname="gb-r01-t01", gpu_index=0, value=87.0),
        Sample(uuid=TRAY_UUIDS[1], hostname="gb-r01-t01", gpu_index=1, value=91.0),
        Sample(uuid=TRAY_UUIDS[2], hostname="gb-r01-t01", gpu_index=2, value=0.0),
        Sample(uuid=TRAY_UUIDS[3], hostname="gb-r01-t01", gpu_index=3, value=3.0),
    ]
    assert samples.skipped == 0 and samples.has_utilization
    # Every other field of the default counters was read as Prometheus text, and ignored.
    assert len(samples.metrics) == 19 and "DCGM_FI_DEV_FB_USED" in samples.metrics


def test_extra_metrics_and_kubernetes_pod_labels_are_ignored():
    samples = parse_dcgm(fixture("gb200_node_k8s_dcp.txt"))
    assert [(s.uuid, s.gpu_index, s.value) for s in samples] == [
        (TRAY_UUIDS[0], 0, 0.0),
        (TRAY_UUIDS[1], 1, 96.0),
        (TRAY_UUIDS[2], 2, 94.0),
        (TRAY_UUIDS[3], 3, 2.0),
    ]
    # Under Kubernetes the Hostname label is the exporter pod's name: GPUs are matched by UUID, not host.
    assert {s.hostname for s in samples} == {"nvidia-dcgm-exporter-x7k2p"}
    assert {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_RESERVED"} <= samples.metrics


def test_a_page_cut_off_mid_line_is_a_plain_error_naming_the_line():
    with pytest.raises(DcgmParseError) as caught:
        parse_dcgm(fixture("truncated.txt"))
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith('not Prometheus text: line 47: \'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID=')
    assert "cannot be read" in message


@pytest.mark.parametrize(
    "text",
    [
        "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n",
        '{"status": "ok"}\n',
        "Not Found\n",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} eighty\n',
        "\x00\x01binary",
    ],
    ids=["html", "json", "404-text", "bad-value", "binary"],
)
def test_what_is_not_prometheus_text_is_refused(text):
    with pytest.raises(DcgmParseError, match=r"^not Prometheus text: "):
        parse_dcgm(text)


def test_old_exporters_label_set_is_read():
    # dcgm-exporter 2.x README: only gpu and UUID, with a space after the comma.
    samples = parse_dcgm(util('gpu="0", UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"', "42"))
    assert samples == [Sample("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "", 0, 42.0)]


def test_lower_case_label_spellings_are_read():
    samples = parse_dcgm(util('gpu="1",uuid="GPU-abc",hostname="dcgm-exporter-wwwjh"', "7"))
    assert samples == [Sample("GPU-abc", "dcgm-exporter-wwwjh", 1, 7.0)]


def test_lines_without_uuid_are_skipped_and_counted():
    text = util('gpu="0",UUID="GPU-a"', "10") + 'DCGM_FI_DEV_GPU_UTIL{gpu="1"} 20\n'
    text += 'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID=""} 30\n'
    samples = parse_dcgm(text)
    assert [s.uuid for s in samples] == ["GPU-a"] and samples.skipped == 2


@pytest.mark.parametrize(
    "value",
    ["9223372036854775794", "NaN", "+Inf", "-1", "100.5"],
    ids=["dcgm-blank", "nan", "inf", "neg", "over"],
)
def test_blank_and_out_of_range_values_are_skipped(value):
    samples = parse_dcgm(util('gpu="0",UUID="GPU-a"', value))
    assert samples == [] and samples.skipped == 1


def test_float_values_and_bounds_are_kept():
    text = util('gpu="0",UUID="GPU-a"', "37.500000") + 'DCGM_FI_DEV_GPU_UTIL{gpu="x",UUID="GPU-b"} 100\n'
    text += 'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c"} 0 1735689600000\n'  # with a timestamp
    samples = parse_dcgm(text)
    assert [(s.uuid, s.gpu_index, s.value) for s in samples] == [
        ("GPU-a", 0, 37.5),
        ("GPU-b", None, 100.0),
        ("GPU-c", 2, 0.0),
    ]


def test_a_missing_final_newline_is_tolerated():
    assert len(parse_dcgm(util('gpu="0",UUID="GPU-a"', "5").rstrip("\n"))) == 1


def test_a_page_without_utilization_is_valid_but_says_so():
    # Some exporter versions leave DCGM_FI_DEV_GPU_UTIL out of their default counters; MIG never has it.
    text = "".join(
        line for line in fixture("gb200_node.txt").splitlines(True) if UTILIZATION_METRIC not in line
    )
    samples = parse_dcgm(text)
    assert samples == [] and samples.skipped == 0 and not samples.has_utilization and samples.metrics
    empty = parse_dcgm("")
    assert empty == [] and not empty.metrics


def test_not_a_string_is_refused():
    with pytest.raises(DcgmParseError, match="expected the exporter's text"):
        parse_dcgm(b"DCGM_FI_DEV_GPU_UTIL 1\n")


def test_the_parser_module_does_not_import_django():
    code = (
        "import sys, tenancy.telemetry; "
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')); "
        "print(bad); raise SystemExit(1 if bad else 0)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert run.returncode == 0, run.stdout + run.stderr
