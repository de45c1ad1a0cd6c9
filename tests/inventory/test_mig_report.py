"""Tests for inventory.discovery.mig (pure Python, no Django needed).

Fixtures in fixtures/mig/ are a GB200 tray with GPU 0 in MIG mode (1g.23gb x2 + 2g.47gb + 3g.93gb) and GPUs
1-3 disabled; fixtures/mig/README.md says which public outputs each file follows. Inline outputs below
follow the same real layouts (narrow 535-era tables, R450 UUIDs, error lines).
"""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.discovery.mig import (
    GpuMig,
    MigInstance,
    MigMode,
    MigProfile,
    MigReportError,
    combine,
)
from inventory.discovery.nvidia_smi import ReportError

FIXTURES = Path(__file__).parent / "fixtures" / "mig"
XML = (FIXTURES / "gb200_mig.xml").read_text()
OUTPUTS = {key: (FIXTURES / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")}
GPU0 = "GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9"
GPU1 = "GPU-91e0f3a3-5c64-1d7b-8e2f-3a4b5c6d7e8f"
UUIDS = [
    GPU0,
    GPU1,
    "GPU-c7d2e9f3-0a83-6b4c-2d5e-9f0a1b2c3d4e",
    "GPU-2a5b8c10-e1f4-7a36-b9c2-d5e8f1a4b7c0",
]
MIG_UUID = "MIG-6f1a2b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b"


def outputs(**changes: str | None) -> dict[str, str]:
    """The fixture outputs with some replaced (None: left out)."""
    out = dict(OUTPUTS)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def refused(match: str, xml: str = XML, mig=None, **changes: str | None) -> None:
    with pytest.raises(MigReportError, match=match):
        combine(xml, outputs(**changes) if mig is None else mig)


# ------------------------------------------------------------------------------------- inline output builders


def render_xml(*gpus: dict) -> str:
    """A cut-down ``nvidia-smi -q -x``: per GPU ``uuid``, ``current``/``pending`` (None: no <mig_mode>) and
    ``devices`` [(index, gi, ci, sm, mib)] (None: no <mig_devices>; []: None)."""
    body = []
    for position, gpu in enumerate(gpus):
        parts = [f'<gpu id="0000000{position}:01:00.0">', "<product_name>NVIDIA GB200</product_name>"]
        if gpu.get("current", "Disabled") is not None:
            parts.append(
                f"<mig_mode><current_mig>{gpu.get('current', 'Disabled')}</current_mig>"
                f"<pending_mig>{gpu.get('pending', gpu.get('current', 'Disabled'))}</pending_mig></mig_mode>"
            )
        devices = gpu.get("devices", [])
        if devices is not None:
            rows = "".join(
                f"<mig_device><index>{index}</index><gpu_instance_id>{gi}</gpu_instance_id>"
                f"<compute_instance_id>{ci}</compute_instance_id><device_attributes><shared>"
                f"<multiprocessor_count>{sm}</multiprocessor_count></shared></device_attributes>"
                f"<fb_memory_usage><total>{mib}</total></fb_memory_usage></mig_device>"
                for index, gi, ci, sm, mib in devices
            )
            parts.append(f"<mig_devices>{rows or 'None'}</mig_devices>")
        parts.append(f"<uuid>{gpu.get('uuid', UUIDS[position])}</uuid></gpu>")
        body.append("".join(parts))
    head = f'<?xml version="1.0" ?>\n<nvidia_smi_log><attached_gpus>{len(gpus)}</attached_gpus>'
    return head + "".join(body) + "</nvidia_smi_log>"


def render_lgi(*rows: tuple[int, str, int, int, str]) -> str:
    """``nvidia-smi mig -lgi``, 535 layout (NVIDIA/DCGM#138): rows (gpu, name, profile ID, GI, start:size)."""
    border = "+" + "-" * 55 + "+"
    lines = [
        border,
        "| GPU instances:".ljust(56) + "|",
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
        "|" + "=" * 55 + "|",
    ]
    for gpu, name, profile_id, gi, placement in rows:
        lines += [f"|{gpu:>4}  MIG {name:<16}{profile_id:>2}{gi:>9}{placement:>13}     |", border]
    return "\n".join(lines) + "\n"


def render_lgip(*rows: tuple) -> str:
    """``nvidia-smi mig -lgip`` in the 535 layout: rows (gpu, name, ID, free, total, GiB, SM)."""
    border = "+" + "-" * 77 + "+"
    lines = [
        border,
        "| GPU instance profiles:".ljust(78) + "|",
        "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                              Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * 77 + "|",
    ]
    for gpu, name, profile_id, free, total, gib, sm in rows:
        lines += [
            f"|{gpu:>4}  MIG {name:<13} {profile_id:>2}    {free}/{total}        {gib:<11}No     "
            f"{sm:<7}1     0   |",
            f"|{'':60} 1     1     0   |",
            border,
        ]
    return "\n".join(lines) + "\n"


def render_list(gpus: list[str], devices: dict[int, list[tuple[str, int, str]]]) -> str:
    lines = []
    for index, uuid in enumerate(gpus):
        lines.append(f"GPU {index}: NVIDIA GB200 (UUID: {uuid})")
        lines += [f"  MIG {name:<11} Device {d:>2}: (UUID: {mig})" for name, d, mig in devices.get(index, [])]
    return "\n".join(lines) + "\n"


def mig_uuid(n: int) -> str:
    return f"MIG-{n:08x}-1111-5222-8333-444444444444"


ONE_GPU_3G = render_xml({"uuid": GPU0, "current": "Enabled", "devices": [(0, 2, 0, 66, "93696 MiB")]})
ONE_GPU_LGI = render_lgi((0, "3g.93gb", 9, 2, "4:4"))


# ------------------------------------------------------------------------------------------------ fixtures


def test_combine_reads_the_gb200_tray():
    result = combine(XML, OUTPUTS)
    assert list(result) == UUIDS  # every GPU of the XML, in XML order
    gpu0 = result[GPU0]
    assert (gpu0.current, gpu0.pending, gpu0.complete) == (MigMode.ENABLED, MigMode.ENABLED, True)
    assert [
        (
            i.gpu_instance_id,
            i.compute_instance_id,
            i.profile,
            i.profile_id,
            i.placement_start,
            i.placement_size,
        )
        for i in gpu0.instances
    ] == [
        (3, 0, "2g.47gb", 14, 0, 2),
        (9, 0, "1g.23gb", 19, 2, 1),
        (10, 0, "1g.23gb", 19, 3, 1),
        (2, 0, "3g.93gb", 9, 4, 4),
    ]
    three_g = gpu0.instances[-1]
    assert three_g.uuid == MIG_UUID
    assert (three_g.multiprocessors, three_g.memory_mib) == (66, 93696)
    for uuid in UUIDS[1:]:
        assert result[uuid] == GpuMig(
            uuid=uuid, current=MigMode.DISABLED, pending=MigMode.DISABLED, complete=True
        )


def test_lgip_and_lgipp_give_profiles_with_memory_in_mib_and_placements():
    profiles = {p.profile_id: p for p in combine(XML, OUTPUTS)[GPU0].profiles}
    assert [p.profile_id for p in combine(XML, OUTPUTS)[GPU0].profiles] == [0, 5, 9, 14, 15, 19, 20]
    assert profiles[19] == MigProfile(
        profile_id=19,
        name="1g.23gb",
        instances_free=0,
        instances_total=7,
        memory_mib=22528,  # 22.00 GiB
        p2p=False,
        multiprocessors=18,
        placements=tuple((start, 1) for start in range(7)),
    )
    assert profiles[20].name == "1g.23gb+me"
    assert profiles[14].memory_mib == 46592  # 45.50 GiB
    assert profiles[0].memory_mib == 189184  # 184.75 GiB
    assert profiles[9].placements == ((0, 4), (4, 4))
    assert profiles[5].placements == ((0, 4),)  # "Placement : {0}:4"
    assert profiles[0].placements == ((0, 8),)


def test_without_mig_outputs_only_the_mode_is_known():
    result = combine(XML, None)
    assert result[GPU0] == GpuMig(uuid=GPU0, current=MigMode.ENABLED, pending=MigMode.ENABLED, complete=False)
    assert result[GPU1].current is MigMode.DISABLED and not result[GPU1].complete


def test_profiles_without_lgi_are_kept_but_not_complete():
    gpu0 = combine(XML, {"lgip": OUTPUTS["lgip"]})[GPU0]
    assert not gpu0.complete and gpu0.instances == ()
    assert len(gpu0.profiles) == 7 and all(p.placements == () for p in gpu0.profiles)


def test_without_list_instances_have_no_uuid_and_the_gi_profile_name():
    gpu0 = combine(XML, outputs(list=None))[GPU0]
    assert gpu0.complete and [i.uuid for i in gpu0.instances] == [None] * 4
    assert [i.profile for i in gpu0.instances] == ["2g.47gb", "1g.23gb", "1g.23gb", "3g.93gb"]


def test_lgipp_without_lgip_is_checked_but_unused():
    gpu0 = combine(XML, {"lgipp": OUTPUTS["lgipp"]})[GPU0]
    assert gpu0.profiles == () and not gpu0.complete


def test_bytes_and_bom_are_accepted():
    result = combine(XML.encode(), {key: ("\ufeff" + text).encode() for key, text in OUTPUTS.items()})
    assert result == combine(XML, OUTPUTS)


# ------------------------------------------------------------------------------------------------ formats


@pytest.mark.parametrize(
    ("printed", "mode"),
    [
        ("Enabled", MigMode.ENABLED),
        ("Disabled", MigMode.DISABLED),
        ("N/A", MigMode.NOT_SUPPORTED),
        ("[N/A]", MigMode.NOT_SUPPORTED),
        ("disabled", MigMode.DISABLED),
    ],
)
def test_xml_mode_words(printed, mode):
    gpu = combine(render_xml({"current": printed, "pending": "Disabled", "devices": []}), None)[GPU0]
    assert (gpu.current, gpu.pending) == (mode, MigMode.DISABLED)


def test_xml_without_mig_mode_is_not_supported():
    gpu = combine(render_xml({"current": None, "devices": None}), None)[GPU0]
    assert (gpu.current, gpu.pending) == (MigMode.NOT_SUPPORTED, MigMode.NOT_SUPPORTED)


def test_xml_element_names_ignore_case_and_underscores():
    xml = ONE_GPU_3G.replace("mig_mode>", "MigMode>").replace("gpu_instance_id>", "gpuInstanceId>")
    assert combine(xml, {"lgi": ONE_GPU_LGI})[GPU0].instances[0].gpu_instance_id == 2


def test_xml_memory_and_multiprocessors_may_be_na():
    xml = render_xml({"current": "Enabled", "devices": [(0, 2, 0, "N/A", "N/A")]})
    instance = combine(xml, {"lgi": ONE_GPU_LGI})[GPU0].instances[0]
    assert (instance.multiprocessors, instance.memory_mib) == (None, None)


def test_lgip_narrow_layout_and_memory_rounding():
    lgip = render_lgip((0, "1g.10gb", 19, 7, 7, "9.75", 16), (0, "2g.20gb", 14, 3, 3, "19.62", 32))
    profiles = combine(render_xml({"current": "Enabled"}), {"lgip": lgip})[GPU0].profiles
    assert [(p.profile_id, p.name, p.memory_mib, p.multiprocessors) for p in profiles] == [
        (14, "2g.20gb", 20091, 32),  # 19.62 GiB * 1024 = 20090.88
        (19, "1g.10gb", 9984, 16),
    ]


def test_lgip_accepts_blackwell_rtx_pro_suffixes():
    lgip = render_lgip(
        (0, "1g.24gb+me.all", 65, 1, 1, "23.62", 46),
        (0, "1g.24gb-me", 67, 4, 4, "23.62", 46),
        (0, "1g.24gb+gfx", 47, 4, 4, "23.62", 46),
    )
    names = [p.name for p in combine(render_xml({"current": "Enabled"}), {"lgip": lgip})[GPU0].profiles]
    assert names == ["1g.24gb+gfx", "1g.24gb+me.all", "1g.24gb-me"]


@pytest.mark.parametrize(
    "line",
    [
        "GPU  0 Profile ID  9 Placements: {0,4}:4",
        "GPU 0 Profile ID 9 Placements:{0, 4}:4",
        "GPU  0 Profile ID  9 Placement : {0,4}:4",
    ],
)
def test_lgipp_spellings(line):
    lgip = render_lgip((0, "3g.93gb", 9, 2, 2, "91.75", 66))
    profiles = combine(render_xml({"current": "Enabled"}), {"lgip": lgip, "lgipp": line})[GPU0].profiles
    assert profiles[0].placements == ((0, 4), (4, 4))


def test_lgipp_empty_placement_set():
    lgip = render_lgip((0, "3g.93gb", 9, 2, 2, "91.75", 66))
    lgipp = "GPU  0 Profile ID  9 Placements: {}:4"
    assert (
        combine(render_xml({"current": "Enabled"}), {"lgip": lgip, "lgipp": lgipp})[GPU0]
        .profiles[0]
        .placements
        == ()
    )


def test_lgi_no_gpu_instances_found():
    gpu = combine(render_xml({"current": "Enabled"}), {"lgi": "No GPU instances found: Not Found\n"})[GPU0]
    assert gpu.complete and gpu.instances == ()


def test_no_mig_enabled_devices_is_empty_when_no_gpu_is_in_mig_mode():
    xml = render_xml({"current": "Disabled"})
    for key in ("lgip", "lgipp", "lgi"):
        assert combine(xml, {key: "No MIG-enabled devices found.\n"})[GPU0].instances == ()


def test_gpu_instance_without_compute_instance():
    gpu = combine(render_xml({"current": "Enabled"}), {"lgi": ONE_GPU_LGI})[GPU0]
    assert gpu.instances == (
        MigInstance(
            gpu_instance_id=2,
            compute_instance_id=None,
            profile="3g.93gb",
            profile_id=9,
            placement_start=4,
            placement_size=4,
            uuid=None,
        ),
    )
    assert gpu.as_dict()["instances"][0]["compute_instance_id"] is None


def test_split_gpu_instance_reports_each_compute_instance():
    xml = render_xml(
        {"current": "Enabled", "devices": [(0, 2, 0, 22, "31232 MiB"), (1, 2, 1, 22, "31232 MiB")]}
    )
    listing = render_list(UUIDS[:1], {0: [("1c.3g.93gb", 0, mig_uuid(1)), ("1c.3g.93gb", 1, mig_uuid(2))]})
    gpu = combine(xml, {"lgi": ONE_GPU_LGI, "list": listing})[GPU0]
    assert [(i.gpu_instance_id, i.compute_instance_id, i.profile, i.uuid) for i in gpu.instances] == [
        (2, 0, "1c.3g.93gb", mig_uuid(1)),
        (2, 1, "1c.3g.93gb", mig_uuid(2)),
    ]


def test_list_old_r450_uuids_are_checked_and_lower_cased():
    old = f"MIG-GPU-{GPU0[4:].upper()}/2/0"
    listing = f"GPU 0: A100-SXM4-40GB (UUID: {GPU0})\n  MIG 3g.93gb Device 0: (UUID: {old})\n"
    instance = combine(ONE_GPU_3G, {"lgi": ONE_GPU_LGI, "list": listing})[GPU0].instances[0]
    assert instance.uuid == f"MIG-{GPU0}/2/0"
    with pytest.raises(MigReportError, match=r"names GPU .* GPU instance 3"):
        combine(ONE_GPU_3G, {"lgi": ONE_GPU_LGI, "list": listing.replace("/2/0", "/3/0")})


def test_mig_uuids_are_lower_cased():
    listing = render_list(UUIDS[:1], {0: [("3g.93gb", 0, "MIG-" + MIG_UUID[4:].upper())]})
    assert combine(ONE_GPU_3G, {"lgi": ONE_GPU_LGI, "list": listing})[GPU0].instances[0].uuid == MIG_UUID


# ------------------------------------------------------------------------------------------------ refusals


def test_error_is_a_report_error():
    assert issubclass(MigReportError, ReportError)


def test_refuses_more_than_seven_instances():
    devices = [(n, n + 1, 0, 18, "22272 MiB") for n in range(8)]
    refused("more than 7 MIG devices", xml=render_xml({"current": "Enabled", "devices": devices}), mig={})
    rows = [(0, "1g.23gb", 19, n + 1, f"{n}:1") for n in range(8)]
    refused(
        "more than 7 GPU instances", xml=render_xml({"current": "Enabled"}), mig={"lgi": render_lgi(*rows)}
    )


@pytest.mark.parametrize("placement", ["6:4", "0:0", "8:1", "7:2"])
def test_refuses_placements_outside_eight_memory_slices(placement):
    lgi = render_lgi((0, "3g.93gb", 9, 2, placement))
    refused("memory slices", xml=render_xml({"current": "Enabled"}), mig={"lgi": lgi})


def test_refuses_lgipp_placement_outside_the_gpu():
    refused("does not fit the GPU's 8 memory slices", lgipp="GPU  0 Profile ID 19 Placements: {0,7}:2\n")


def test_refuses_overlapping_placements():
    lgi = render_lgi((0, "2g.47gb", 14, 3, "0:2"), (0, "1g.23gb", 19, 9, "1:1"))
    refused(
        r"GPU instances 3 .*0:2.* and 9 .*1:1.* overlap",
        xml=render_xml({"current": "Enabled"}),
        mig={"lgi": lgi},
    )


@pytest.mark.parametrize(
    ("devices", "lgi_gi", "match"),
    [
        ([], 64, "GPU instance ID 64 is out of range .0-63"),
        ([(0, 70, 0, 18, "1 MiB")], 2, "<gpu_instance_id> 70 is out of range .0-63"),
        ([(0, 2, 64, 18, "1 MiB")], 2, "<compute_instance_id> 64 is out of range .0-63"),
    ],
)
def test_refuses_instance_ids_outside_0_to_63(devices, lgi_gi, match):
    xml = render_xml({"current": "Enabled", "devices": devices})
    refused(match, xml=xml, mig={"lgi": render_lgi((0, "3g.93gb", 9, lgi_gi, "4:4"))})


@pytest.mark.parametrize("name", ["1g.23GB", "3g", "1g.23gb+foo", "x3g.93gb", "1g.23gb;rm"])
def test_refuses_bad_profile_names(name):
    xml = render_xml({"current": "Enabled"})
    refused(
        "is not a MIG GPU instance profile name", xml=xml, mig={"lgi": render_lgi((0, name, 9, 2, "4:4"))}
    )
    lgip = render_lgip((0, name, 9, 2, 2, "91.75", 66))
    refused("is not a MIG GPU instance profile name", xml=xml, mig={"lgip": lgip})


def test_refuses_bad_mig_uuid():
    listing = render_list(UUIDS[:1], {0: [("3g.93gb", 0, "MIG-not-a-uuid")]})
    refused("is not a MIG device UUID", xml=ONE_GPU_3G, mig={"lgi": ONE_GPU_LGI, "list": listing})


def test_refuses_a_mig_uuid_listed_twice():
    listing = render_list(UUIDS[:2], {0: [("3g.93gb", 0, MIG_UUID)], 1: [("3g.93gb", 0, MIG_UUID)]})
    gpus = [{"uuid": uuid, "current": "Enabled", "devices": [(0, 2, 0, 66, "1 MiB")]} for uuid in UUIDS[:2]]
    lgi = render_lgi((0, "3g.93gb", 9, 2, "4:4"), (1, "3g.93gb", 9, 2, "4:4"))
    refused(
        "MIG UUID .* is listed under both GPU 0", xml=render_xml(*gpus), mig={"lgi": lgi, "list": listing}
    )


def test_refuses_a_gpu_instance_of_the_xml_missing_from_lgi():
    lgi = OUTPUTS["lgi"].replace("|   0  MIG 3g.93gb          9        2          4:4     |\n", "")
    refused("lists GPU instance 2 .compute instance 0. but nvidia-smi mig -lgi has no row", lgi=lgi)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("lgip", OUTPUTS["lgip"].replace("|   0  MIG 1g.23gb+me", "|   7  MIG 1g.23gb+me")),
        ("lgipp", OUTPUTS["lgipp"] + "GPU  4 Profile ID  0 Placement : {0}:8\n"),
        ("lgi", OUTPUTS["lgi"].replace("|   0  MIG 2g.47gb", "|   5  MIG 2g.47gb")),
        ("list", OUTPUTS["list"] + "GPU 4: NVIDIA GB200 (UUID: GPU-00000000-1111-2222-3333-444444444444)\n"),
    ],
)
def test_refuses_gpu_indexes_the_xml_does_not_have(key, text):
    refused(r"GPU \d is not in the nvidia-smi -q -x output, which has GPU 0-3", **{key: text})


def test_refuses_list_naming_other_gpus_or_fewer():
    swapped = (
        OUTPUTS["list"].replace(UUIDS[2], "GPU-X").replace(UUIDS[3], UUIDS[2]).replace("GPU-X", UUIDS[3])
    )
    refused("GPU 2 is GPU-2a5b8c10.*but the XML's GPU 2 is GPU-c7d2e9f3", list=swapped)
    refused("nvidia-smi -L lists 3 GPUs but the XML has 4", list=OUTPUTS["list"].rsplit("GPU 3:", 1)[0])
    refused("GPU 2 where GPU 1 was expected", list=OUTPUTS["list"].replace("GPU 1:", "GPU 2:", 1))


def test_refuses_mig_state_on_a_gpu_not_in_mig_mode():
    xml = render_xml({"current": "Disabled", "devices": [(0, 2, 0, 66, "1 MiB")]})
    refused(
        "the XML lists 1 MIG device.s. but the GPU is not in MIG mode .current mode disabled", xml=xml, mig={}
    )
    refused(
        "lists GPU instance 2 on GPU 0 .* which is not in MIG mode",
        xml=render_xml({}),
        mig={"lgi": ONE_GPU_LGI},
    )
    listing = render_list(UUIDS[:1], {0: [("3g.93gb", 0, MIG_UUID)]})
    refused(
        "lists MIG devices under GPU 0 .* which is not in MIG mode", xml=render_xml({}), mig={"list": listing}
    )
    xml = render_xml({"current": "N/A"})
    refused(
        "does not support MIG .mode N/A. but MIG profiles are listed",
        xml=xml,
        mig={"lgip": render_lgip((0, "1g.10gb", 19, 7, 7, "9.75", 16))},
    )


def test_refuses_no_mig_enabled_devices_when_the_xml_says_otherwise():
    refused(
        "nvidia-smi mig -lgi says no GPU is in MIG mode, but the XML has GPU 0",
        lgi="No MIG-enabled devices found.\n",
    )


def test_refuses_list_and_xml_disagreeing_on_mig_devices():
    missing = OUTPUTS["list"].replace(
        "  MIG 1g.23gb     Device  3: (UUID: MIG-5d4c3b2a-1f0e-5d9c-ab8e-7f6a5b4c3d2e)\n", ""
    )
    refused("MIG device 3 .* is in the XML but nvidia-smi -L lists no 'Device 3' under GPU 0", list=missing)
    extra = render_list(UUIDS[:1], {0: [("3g.93gb", 0, mig_uuid(1)), ("3g.93gb", 1, mig_uuid(2))]})
    refused(
        "MIG device 1 of GPU 0 is not in the XML", xml=ONE_GPU_3G, mig={"lgi": ONE_GPU_LGI, "list": extra}
    )
    wrong = render_list(UUIDS[:1], {0: [("2g.47gb", 0, mig_uuid(1))]})
    refused(
        "MIG device 0 is 2g.47gb but its GPU instance 2 is 3g.93gb",
        xml=ONE_GPU_3G,
        mig={"lgi": ONE_GPU_LGI, "list": wrong},
    )


def test_refuses_profiles_that_disagree_with_instances():
    lgi = OUTPUTS["lgi"].replace("MIG 2g.47gb         14", "MIG 2g.47gb         15")
    refused("named 2g.47gb, but profile ID 15 is 1g.47gb", lgi=lgi)
    lgi = OUTPUTS["lgi"].replace("MIG 2g.47gb         14", "MIG 2g.47gb         99")
    refused("profile ID 99 is not among the GPU's profiles", lgi=lgi)
    lgipp = OUTPUTS["lgipp"].replace("{0,4}:4", "{0}:4")
    refused("placed at 4:4, which is not one of the possible placements of 3g.93gb .0:4.", lgipp=lgipp)
    refused(
        "GPU 0 profile ID 33 is not in the nvidia-smi mig -lgip output",
        lgipp="GPU  0 Profile ID 33 Placements: {0}:1",
    )


def test_refuses_enabled_gpu_without_mig_devices_element():
    refused(
        "no <mig_devices> element",
        xml=render_xml({"current": "Enabled", "devices": None}),
        mig={"lgi": ONE_GPU_LGI},
    )


@pytest.mark.parametrize(
    ("mig", "match"),
    [
        ({"lgix": "x"}, "unknown MIG output 'lgix' .expected lgip, lgipp, lgi, list"),
        ({"lgi": 5}, "expected the command's output as text, got int"),
        ({"lgi": b"\xff"}, "is not UTF-8"),
        (["lgi"], "must be an object keyed lgip, lgipp, lgi, list"),
        ({"lgi": "x" * ((1 << 20) + 1)}, "longer than 1048576 characters"),
        ({"lgi": "|" + "x" * 600 + "|"}, "line 1 is longer than 512 characters"),
    ],
)
def test_refuses_malformed_mig_argument(mig, match):
    refused(match, mig=mig)


LGIP, LGIPP, LGI, LIST = (OUTPUTS[key] for key in ("lgip", "lgipp", "lgi", "list"))
FIRST_CE_LINE = "|" + " " * 63 + "2     1     0   |\n"  # under the 1g.23gb row


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"lgip": LGI}, "expected the table title 'GPU instance profiles:', got 'GPU instances:'"),
        (
            {"lgi": "Failed to display GPU instances: Insufficient Permissions\n"},
            "line 1: 'Failed to display GPU instances",
        ),
        ({"lgi": ""}, "no 'GPU instances:' table found"),
        ({"lgipp": ""}, "no placement lines found"),
        ({"list": ""}, "no 'GPU n: … .UUID: GPU-….' lines found"),
        (
            {"lgip": LGIP.replace(FIRST_CE_LINE, "", 1)},
            "line 6: the profile row is not followed by its CE/JPEG/OFA",
        ),
        ({"lgip": LGIP.replace("0/7", "9/7")}, "free instances 9 is out of range .0-7: at most the total"),
        ({"lgip": LGIP.replace("0/7", "0/8")}, "total instances 8 is out of range .0-7 on one GPU"),
        ({"lgip": LGIP.replace("No     18", "Maybe  18", 1)}, "P2P 'Maybe' is not Yes or No"),
        (
            {"lgip": "\n".join(LGIP.splitlines()[:1] + LGIP.splitlines()[4:])},
            "the table has no 'GPU instance profiles:' title above its heading",
        ),
        (
            {"lgip": LGIP.replace("| GPU instance profiles:", "| GPU instance types:   ")},
            "expected the table title 'GPU instance profiles:', got 'GPU instance types:'",
        ),
        ({"lgipp": "GPU  0 Profile ID 19 Placements: {0,1}\n"}, "line 1: .* is not a placement line"),
        ({"lgipp": LGIPP + LGIPP.splitlines()[0]}, "GPU 0 profile ID 19 is listed twice"),
        ({"lgipp": "GPU  0 Profile ID 19 Placements: {1,1}:1"}, "placement 1:1 is listed twice"),
        ({"lgi": LGI.replace("2:1", "2-1")}, "is not a GPU instance row"),
        ({"lgi": LGI.replace("19       10", "19        9")}, "GPU 0 GPU instance 9 is listed twice"),
        ({"list": LIST.replace("Device  3", "Device  2")}, "MIG device 2 of GPU 0 is listed twice"),
        (
            {"list": f"  MIG 1g.23gb Device 0: (UUID: {MIG_UUID})\n"},
            "a MIG device line before any 'GPU n: …' line",
        ),
        ({"list": LIST + "No devices were found\n"}, "is neither a 'GPU 0: NVIDIA GB200"),
        ({"list": LIST.replace(GPU0, "GPU-zz")}, "'GPU-zz' is not a GPU UUID"),
    ],
)
def test_refuses_malformed_outputs(changes, match):
    refused(match, **changes)


def enabled_xml(*devices) -> str:
    return render_xml({"current": "Enabled", "devices": list(devices)})


@pytest.mark.parametrize(
    ("xml", "match"),
    [
        ("", "the nvidia-smi -q -x output is empty"),
        ("<nvidia_smi_log><gpu>", "the XML is malformed at line 1"),
        ("<other/>", "root element is <other>, expected <nvidia_smi_log>"),
        ("<nvidia_smi_log></nvidia_smi_log>", "has no <gpu> elements"),
        ('<!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log/>', "declares entities"),
        (render_xml({"uuid": "GPU-bad"}), "GPU 0 .*'GPU-bad' is not a GPU UUID"),
        (render_xml({}, {"uuid": GPU0}), "UUID GPU-4b8c.* is also GPU 0's"),
        (
            render_xml({"current": "Maybe"}),
            "<current_mig>: MIG mode 'Maybe' is not one of Enabled, Disabled or N/A",
        ),
        (enabled_xml((0, 2, 0, 18, "lots")), "memory total 'lots' is not '<n> MiB'"),
        (enabled_xml((0, 2, 0, "x", "1 MiB")), "multiprocessor count 'x' is not a whole number"),
        (enabled_xml((0, 2, 0, 1, "1 MiB"), (0, 3, 0, 1, "1 MiB")), "MIG device index 0 is listed twice"),
        (
            enabled_xml((0, 2, 0, 1, "1 MiB"), (1, 2, 0, 1, "1 MiB")),
            "GPU instance 2 / compute instance 0 is listed twice",
        ),
        (enabled_xml().replace("None", "Something"), "<mig_devices> holds 'something'"),
    ],
)
def test_refuses_malformed_xml(xml, match):
    refused(match, xml=xml, mig={})


# ------------------------------------------------------------------------------------------------ from_dict


def test_as_dict_shape_and_round_trip():
    result = combine(XML, OUTPUTS)
    data = result[GPU0].as_dict()
    assert list(data) == ["uuid", "current", "pending", "complete", "instances", "profiles"]
    assert data["instances"][-1] == {
        "gpu_instance_id": 2,
        "compute_instance_id": 0,
        "profile": "3g.93gb",
        "profile_id": 9,
        "placement_start": 4,
        "placement_size": 4,
        "uuid": MIG_UUID,
        "multiprocessors": 66,
        "memory_mib": 93696,
    }
    assert data["profiles"][2] == {
        "profile_id": 9,
        "name": "3g.93gb",
        "instances_free": 0,
        "instances_total": 2,
        "memory_mib": 93952,
        "p2p": False,
        "multiprocessors": 66,
        "placements": [[0, 4], [4, 4]],
    }
    for gpu in result.values():
        stored = json.loads(json.dumps(gpu.as_dict()))
        assert GpuMig.from_dict(stored) == gpu
        assert GpuMig.from_dict(stored).as_dict() == gpu.as_dict()


def test_as_dict_order_is_stable_whatever_the_tuple_order():
    gpu = combine(XML, OUTPUTS)[GPU0]
    shuffled = GpuMig(
        uuid=gpu.uuid,
        current=gpu.current,
        pending=gpu.pending,
        instances=gpu.instances[::-1],
        profiles=gpu.profiles[::-1],
        complete=True,
    )
    assert json.dumps(shuffled.as_dict()) == json.dumps(gpu.as_dict())


def stored() -> dict:
    return json.loads(json.dumps(combine(XML, OUTPUTS)[GPU0].as_dict()))


def change(path: str, value) -> dict:
    """The stored GPU 0 with the value at a dotted path ('instances.0.uuid') replaced (... deletes it)."""
    data = stored()
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("extra", 1, r"mig: unknown key\(s\) 'extra'"),
        ("complete", ..., r"mig: missing key\(s\) complete"),
        ("instances.0.colour", "red", r"mig.instances\[0\]: unknown key\(s\) 'colour'"),
        ("profiles.0.placements", ..., r"mig.profiles\[0\]: missing key\(s\) placements"),
        ("uuid", "GPU-1", "mig.uuid: 'GPU-1' is not a GPU UUID"),
        ("current", "on", "mig.current: 'on' is not a MIG mode"),
        ("complete", 1, "mig.complete: expected true or false, got int"),
        ("instances", {}, "mig.instances: expected a list, got dict"),
        (
            "instances.0.gpu_instance_id",
            True,
            r"mig.instances\[0\].gpu_instance_id: expected a whole number, got bool",
        ),
        ("instances.0.profile_id", "14", r"mig.instances\[0\].profile_id: expected a whole number, got str"),
        ("instances.0.gpu_instance_id", 64, "GPU instance ID 64 is out of range .0-63"),
        ("instances.0.compute_instance_id", -1, "compute instance ID -1 is out of range .0-63"),
        ("instances.0.placement_size", 9, "placement 0:9 does not fit the GPU's 8 memory slices"),
        ("instances.0.profile", "2g.47gb; drop", "is not a MIG profile name"),
        ("instances.0.uuid", "MIG-123", "is not a MIG device UUID"),
        ("instances.0.uuid", f"MIG-GPU-{GPU1[4:]}/3/0", "names GPU GPU-91e0f3a3"),
        ("instances.0.memory_mib", 2**31, r"memory \(MiB\) 2147483648 is out of range"),
        ("instances.1.uuid", "MIG-0b9c8d7e-6f5a-5b4c-9d3e-2f1a0b9c8d7e", "MIG UUID .* is listed twice"),
        ("profiles.0.name", "seven", "profile name 'seven' is not a MIG GPU instance profile name"),
        ("profiles.0.instances_total", 8, "total instances 8 is out of range .0-7 on one GPU"),
        ("profiles.0.instances_free", 2, "free instances 2 is out of range .0-1: at most total"),
        ("profiles.0.p2p", "No", r"mig.profiles\[0\].p2p: expected true or false, got str"),
        (
            "profiles.0.placements",
            [[0, 8, 1]],
            r"mig.profiles\[0\].placements\[0\]: expected \[start, size\]",
        ),
        ("profiles.0.placements", [[4, 8]], "placement 4:8 does not fit"),
        ("profiles.0.placements", [[0, 8], [0, 8]], "placement 0:8 is listed twice"),
        ("profiles.1.profile_id", 0, "profile ID 0 is listed twice"),
        ("profiles.2.placements", [[0, 4]], "placed at 4:4, which is not one of the possible placements"),
    ],
)
def test_from_dict_refuses(path, value, match):
    with pytest.raises(MigReportError, match=match):
        GpuMig.from_dict(change(path, value))


def test_from_dict_layout_rules():
    data = stored()
    overlapping = [{**data["instances"][0], "placement_start": 1}, *data["instances"][1:]]
    with pytest.raises(MigReportError, match=r"GPU instances 3 .memory slices 1:2. and 9 .2:1. overlap"):
        GpuMig.from_dict({**data, "instances": overlapping, "profiles": []})
    with pytest.raises(
        MigReportError, match=r"not in MIG mode .current mode disabled. but lists 4 MIG instance"
    ):
        GpuMig.from_dict({**data, "current": "disabled"})
    with pytest.raises(MigReportError, match="instances are listed but complete is false"):
        GpuMig.from_dict({**data, "complete": False})
    with pytest.raises(MigReportError, match=r"does not support MIG .mode N/A. but MIG profiles are listed"):
        GpuMig.from_dict({**data, "current": "not_supported", "instances": []})
    eight = [
        {**data["instances"][1], "gpu_instance_id": n + 1, "placement_start": n, "uuid": None}
        for n in range(8)
    ]
    with pytest.raises(MigReportError, match=r"mig.instances: 8 entries, at most 7"):
        GpuMig.from_dict({**data, "instances": eight, "profiles": []})
    split = [{**data["instances"][3], "compute_instance_id": None, "uuid": None}, data["instances"][3]]
    with pytest.raises(
        MigReportError, match="GPU instance 2 is listed both with and without compute instances"
    ):
        GpuMig.from_dict({**data, "instances": split})
    with pytest.raises(MigReportError, match="mig: expected an object"):
        GpuMig.from_dict([data])
    with pytest.raises(MigReportError, match=r"stored\[3\].current"):
        GpuMig.from_dict({**data, "current": 3}, where="stored[3]")


def test_from_dict_accepts_gpu_instances_without_compute_instances_and_upper_case_uuids():
    data = stored()
    data["uuid"] = "GPU-" + GPU0[4:].upper()
    data["instances"][0].update(compute_instance_id=None, uuid=None, multiprocessors=None, memory_mib=None)
    data["instances"][1]["uuid"] = data["instances"][1]["uuid"].upper()
    gpu = GpuMig.from_dict(data)
    assert gpu.uuid == GPU0 and gpu.instances[0].compute_instance_id is None
    assert gpu.instances[1].uuid == "MIG-a1b2c3d4-e5f6-5a7b-8c9d-0e1f2a3b4c5d"


# ------------------------------------------------------------------------------------------------ properties

INPUTS = ("xml", "lgip", "lgipp", "lgi", "list")


def _mutate(text: str, how: str, position: int, junk: str) -> str:
    lines = text.splitlines(keepends=True)
    at = position % (len(lines) or 1)
    if how == "replace":
        return junk
    if how == "insert":
        cut = position % (len(text) + 1)
        return text[:cut] + junk + text[cut:]
    if how == "drop_line":
        return "".join(lines[:at] + lines[at + 1 :])
    if how == "dup_line":
        return "".join(lines[: at + 1] + lines[at:])
    if how == "digits":
        return "".join(
            str((int(c) + len(junk) + 1) % 10) if c.isdigit() and i % 7 == position % 7 else c
            for i, c in enumerate(text)
        )
    return text + junk


@settings(deadline=None, max_examples=50)
@given(
    target=st.sampled_from(INPUTS),
    how=st.sampled_from(["replace", "insert", "drop_line", "dup_line", "digits", "append"]),
    position=st.integers(min_value=0, max_value=30_000),
    junk=st.text(max_size=80)
    | st.sampled_from(["|", "|=|", "<mig_device>", "MIG ", " 0:9 ", "{0,,1}:", "\n+--+\n"]),
)
def test_garbage_in_any_input_parses_or_is_refused(target, how, position, junk):
    texts = {"xml": XML, **OUTPUTS}
    texts[target] = _mutate(texts[target], how, position, junk)
    try:
        result = combine(texts["xml"], {key: texts[key] for key in OUTPUTS})
    except MigReportError:
        return
    for gpu in result.values():  # whatever parses is a valid stored row
        assert GpuMig.from_dict(json.loads(json.dumps(gpu.as_dict()))) == gpu


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(deadline=None, max_examples=50)
@given(
    path=st.sampled_from(
        [
            "uuid",
            "current",
            "instances",
            "instances.0",
            "instances.2.placement_start",
            "instances.1.uuid",
            "profiles.3",
            "profiles.4.placements",
            "profiles.0.name",
        ]
    ),
    value=json_values,
)
def test_from_dict_garbage_is_refused_or_valid(path, value):
    try:
        gpu = GpuMig.from_dict(change(path, value))
    except MigReportError:
        return
    assert GpuMig.from_dict(gpu.as_dict()) == gpu
