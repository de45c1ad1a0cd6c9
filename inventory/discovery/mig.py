"""Read MIG (Multi-Instance GPU) state out of ``nvidia-smi`` output.

Pure Python (standard library, no Django) like :mod:`inventory.discovery.nvidia_smi`, whose XML helpers and
GPU UUID rule it shares. The one entry point is :func:`combine`; :meth:`GpuMig.from_dict` reads the same
state back from JSON (the structured report path, stored rows).

Five inputs are understood, exactly as the driver prints them:

``nvidia-smi -q -x`` (``xml``; always sent, already parsed elsewhere for fabric state)
    One ``<gpu id="...">`` per GPU, in NVML index order, each with ``<uuid>GPU-…</uuid>`` and::

        <mig_mode>
            <current_mig>Enabled</current_mig>      (Enabled | Disabled | N/A)
            <pending_mig>Enabled</pending_mig>
        </mig_mode>
        <mig_devices>
            <mig_device>                             (or the bare text "None")
                <index>0</index>
                <gpu_instance_id>2</gpu_instance_id>
                <compute_instance_id>0</compute_instance_id>
                <device_attributes><shared><multiprocessor_count>60</multiprocessor_count>…</shared>
                </device_attributes>
                <fb_memory_usage><total>94464 MiB</total>…</fb_memory_usage>
            </mig_device>
        </mig_devices>

    A MIG device is one compute instance (CI) of one GPU instance (GI). Element names are matched ignoring
    case and underscores, as in nvidia_smi.py. ``N/A`` (or no ``<mig_mode>``) means the GPU cannot do MIG.

``nvidia-smi mig -lgip`` (``mig["lgip"]``): one box table for every MIG-enabled GPU, two lines a profile::

    +-------------------------------------------------------------------------------+
    | GPU instance profiles:                                                        |
    | GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
    |                                Free/Total   GiB              CE    JPEG  OFA  |
    |===============================================================================|
    |   0  MIG 1g.23gb         19     7/7        22.00      No     18     1     0   |
    |                                                               2     1     0   |
    +-------------------------------------------------------------------------------+

    The column widths differ between drivers (the 570+ table is two characters wider), so rows are split on
    whitespace, never on columns. Memory is the GiB column times 1024, rounded to whole MiB. Names and
    memory are taken as printed, never derived from each other (GB200 printed ``1g.24gb`` on early drivers
    and ``1g.23gb`` later; the same profile printed 20.50 and 22.00 GiB on two drivers).

``nvidia-smi mig -lgipp`` (``mig["lgipp"]``): the possible placements of each profile, one line each::

    GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
    GPU  0 Profile ID  9 Placements: {0,4}:4
    GPU  0 Profile ID  0 Placement : {0}:8

    ``{starts}:size`` in memory slices. Both spellings (``Placements:`` and, for a single placement,
    ``Placement :``) are printed by real drivers and accepted, with any spacing around the colon; ``{}``
    (no placement) is accepted too. NVML returns every possible placement whatever is already created
    (``nvmlDeviceGetGpuInstancePossiblePlacements``), so a created GPU instance's placement must be one of
    them. Placements are attached to the ``-lgip`` profile of the same GPU and ID: a line for a profile
    ``-lgip`` does not list is refused, and without ``-lgip`` the lines are checked but not used.

``nvidia-smi mig -lgi`` (``mig["lgi"]``): the GPU instances, one line each::

    +-------------------------------------------------------+
    | GPU instances:                                        |
    | GPU   Name             Profile  Instance   Placement  |
    |                          ID       ID       Start:Size |
    |=======================================================|
    |   0  MIG 3g.93gb          9        2          4:4     |
    +-------------------------------------------------------+

    or ``No GPU instances found: Not Found``. ``No MIG-enabled devices found.`` (any of the three ``mig``
    commands on a node with no GPU in MIG mode) is read as "no rows", and refused when the XML says a GPU is
    in MIG mode.

``nvidia-smi -L`` (``mig["list"]``): every GPU, then its MIG devices indented under it::

    GPU 0: NVIDIA GB200 (UUID: GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9)
      MIG 3g.93gb     Device  0: (UUID: MIG-6f1a2b3c-4d5e-5f60-8a7b-9c0d1e2f3a4b)

    Drivers from R470 print ``MIG-<uuid>``; R450 printed ``MIG-GPU-<parent uuid>/<gi>/<ci>`` (with single
    spaces: ``MIG 1g.5gb Device 0:``). Both are accepted and stored as printed with the hex lower-cased; the
    old form must name its own parent GPU, GI and CI. A GPU instance split into several compute instances
    shows the compute-instance name (``MIG 1c.3g.93gb``).

How the five are joined:

* GPU index (the ``GPU`` column of the ``mig`` commands, ``GPU n:`` of ``-L``) is the position of the
  ``<gpu>`` in the XML: both are NVML's index order. When ``-L`` is sent it must list exactly the XML's GPUs,
  in that order with the same UUIDs, so a mismatch is refused rather than guessed at; without ``-L`` the
  position is trusted. An index the XML does not have is refused in every input.
* A MIG device (XML ``<mig_device>``) gets its GPU instance's profile ID and placement from the ``-lgi`` row
  with its GI ID (none: refused), its name and UUID from the ``-L`` line with its ``Device`` index (when
  ``-L`` is sent, every device must be on both sides), its multiprocessors and memory from the XML.
* A GPU instance ``-lgi`` lists with no MIG device (created without a compute instance) is reported as an
  instance with ``compute_instance_id`` None: it cannot run work but holds its memory slices.
* ``complete`` is True when ``-lgi`` was sent: the instances are then the node's full list. Without it
  (``mig`` not sent, or sent without ``lgi``) ``instances`` is empty and ``complete`` False: only the XML's
  mode (and ``-lgip``'s profiles, when sent) are known.

Refused (:class:`MigReportError`, naming the input, line or element and what was expected): more than 7
instances on a GPU; a placement outside the 8 memory slices or overlapping another GPU instance's; GI or
CI IDs outside 0-63; profile names other than ``<n>g.<n>gb`` with an optional ``+me``, ``+me.all``,
``-me`` or ``+gfx`` suffix (compute-instance form ``<n>c.<n>g.<n>gb``); malformed MIG UUIDs; MIG devices,
GPU instances or ``-L`` MIG lines on a GPU not in MIG mode; inputs over 1 MiB or lines over 512 characters.
"""

from __future__ import annotations

import enum
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from inventory.discovery.nvidia_smi import (
    MAX_MEMORY_MIB,
    ReportedGpu,
    ReportError,
    _short,
    _token,
    _xchild,
    _xtext,
    canonical_gpu_uuid,
    gpu_elements,
)

MAX_INPUT_CHARS = 1 << 20  # each of the four mig outputs; a 4-GPU tray's -q -x is ~25 KB
# The -q -x listing itself is bounded where it arrives (the request body), as it was before MIG was read.
MAX_XML_CHARS = 64 << 20
MAX_LINE_CHARS = 512  # the longest real line is ~85 characters; bounds every regex below
MAX_INSTANCES = 7  # per GPU: 7 compute slices, at most 7 GPU instances (MIG User Guide, operations.md 1.1)
MEMORY_SLICES = 8  # placements are start:size in these units
# GI and CI IDs: the driver numbers GPU instances 1-14 and compute instances 0-7 (the nvidia-caps mig-minors
# table, /proc/driver/nvidia/capabilities/gpuN/mig/giX/ciY). 0-63 leaves headroom for a larger part yet
# refuses garbage, since these IDs end up in device paths (giX/ciY) and in Slurm and Kubernetes names.
MAX_INSTANCE_ID = 63
# Profile IDs are the driver's (-cgi IDs): 0-20 on A100-B300, up to 67 on RTX PRO 6000 Blackwell.
MAX_PROFILE_ID = 255
MAX_PROFILES = 64  # per GPU; GB200 lists 7, RTX PRO 6000 Blackwell ~16
MAX_MULTIPROCESSORS = 1024
MAX_DEVICE_INDEX = 63
MAX_GPU_INDEX = 1023
MAX_MEMORY_GIB = MAX_MEMORY_MIB // 1024

KEYS = ("lgip", "lgipp", "lgi", "list")


class MigMode(enum.StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    NOT_SUPPORTED = "not_supported"


class MigReportError(ReportError):
    """MIG output could not be understood, or describes an impossible layout; the message says what, where."""


@dataclass(frozen=True)
class MigProfile:
    profile_id: int
    name: str  # as printed without "MIG ": "1g.23gb", "1g.23gb+me"
    instances_free: int
    instances_total: int
    memory_mib: int  # -lgip's GiB column * 1024, rounded
    p2p: bool
    multiprocessors: int
    placements: tuple[
        tuple[int, int], ...
    ] = ()  # (start, size) in memory slices, from -lgipp; () when not sent

    def as_dict(self) -> dict:
        return {
            "profile_id": self.profile_id,
            "name": self.name,
            "instances_free": self.instances_free,
            "instances_total": self.instances_total,
            "memory_mib": self.memory_mib,
            "p2p": self.p2p,
            "multiprocessors": self.multiprocessors,
            "placements": [[start, size] for start, size in sorted(self.placements)],
        }


@dataclass(frozen=True)
class MigInstance:
    gpu_instance_id: int
    # None: a GPU instance with no compute instance yet (listed by -lgi, no MIG device); it holds its slices.
    compute_instance_id: int | None
    profile: str  # the MIG device's name as -L prints it ("1c.3g.93gb" when split), else the GI profile's
    profile_id: int  # the GPU instance profile ID (-lgi)
    placement_start: int
    placement_size: int
    uuid: str | None  # "MIG-…" from -L; None when -L was not sent or there is no compute instance
    multiprocessors: int | None = None  # from the XML's <mig_device>
    memory_mib: int | None = None

    def as_dict(self) -> dict:
        return {
            "gpu_instance_id": self.gpu_instance_id,
            "compute_instance_id": self.compute_instance_id,
            "profile": self.profile,
            "profile_id": self.profile_id,
            "placement_start": self.placement_start,
            "placement_size": self.placement_size,
            "uuid": self.uuid,
            "multiprocessors": self.multiprocessors,
            "memory_mib": self.memory_mib,
        }


def _instance_order(instance: MigInstance) -> tuple[int, int, int]:
    ci = -1 if instance.compute_instance_id is None else instance.compute_instance_id
    return (instance.placement_start, instance.gpu_instance_id, ci)


@dataclass(frozen=True)
class GpuMig:
    uuid: str  # the parent GPU's canonical UUID
    current: MigMode
    pending: MigMode
    instances: tuple[MigInstance, ...] = ()
    profiles: tuple[MigProfile, ...] = ()
    # True: the node sent `nvidia-smi mig -lgi`, instances are its full list. False: only the XML's mode
    # (and -lgip's profiles, when sent) were known; instances is then empty.
    complete: bool = False

    def as_dict(self) -> dict:
        """JSON-able; instances ordered by placement, GI and CI ID, profiles by ID (stable for hashing)."""
        return {
            "uuid": self.uuid,
            "current": str(self.current.value),
            "pending": str(self.pending.value),
            "complete": self.complete,
            "instances": [instance.as_dict() for instance in sorted(self.instances, key=_instance_order)],
            "profiles": [profile.as_dict() for profile in sorted(self.profiles, key=lambda p: p.profile_id)],
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "mig") -> GpuMig:
        """The :meth:`as_dict` shape, strictly: every key present, no other key, exact types (no bool for a
        number), numbers in range, names and UUIDs well formed, and the layout rules :func:`combine`
        enforces (MigReportError naming the field)."""
        _keys(data, _GPU_KEYS, where)
        uuid = _gpu_uuid(_typed(data, "uuid", str, where), f"{where}.uuid")
        current = _mode_value(data["current"], f"{where}.current")
        pending = _mode_value(data["pending"], f"{where}.pending")
        complete = _typed(data, "complete", bool, where)
        profiles = tuple(
            _profile_from_dict(item, f"{where}.profiles[{i}]")
            for i, item in enumerate(_items(data, "profiles", MAX_PROFILES, where))
        )
        instances = tuple(
            _instance_from_dict(item, uuid, f"{where}.instances[{i}]")
            for i, item in enumerate(_items(data, "instances", MAX_INSTANCES, where))
        )
        gpu = cls(
            uuid=uuid,
            current=current,
            pending=pending,
            instances=tuple(sorted(instances, key=_instance_order)),
            profiles=tuple(sorted(profiles, key=lambda p: p.profile_id)),
            complete=complete,
        )
        _check_gpu(gpu, where)
        return gpu


# --------------------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------------------

_HEX_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_GI_NAME = r"[0-9]{1,2}g\.[0-9]{1,4}gb(?:\+me\.all|\+me|-me|\+gfx)?"
_GI_NAME_RE = re.compile(rf"{_GI_NAME}", re.ASCII)
_CI_NAME_RE = re.compile(rf"[0-9]{{1,2}}c\.(?P<gi>{_GI_NAME})", re.ASCII)
_MIG_UUID_RE = re.compile(rf"MIG-(?P<uuid>{_HEX_UUID})", re.ASCII | re.IGNORECASE)
_OLD_MIG_UUID_RE = re.compile(
    rf"MIG-GPU-(?P<parent>{_HEX_UUID})/(?P<gi>[0-9]{{1,3}})/(?P<ci>[0-9]{{1,3}})", re.ASCII | re.IGNORECASE
)
_MIB_RE = re.compile(r"([0-9]{1,12})\s*MiB", re.ASCII | re.IGNORECASE)

_MODES = {
    "enabled": MigMode.ENABLED,
    "disabled": MigMode.DISABLED,
    "n/a": MigMode.NOT_SUPPORTED,
    "not supported": MigMode.NOT_SUPPORTED,
    "": MigMode.NOT_SUPPORTED,
}


def _gpu_uuid(raw: str | None, where: str) -> str:
    try:
        return canonical_gpu_uuid(raw, where)
    except MigReportError:
        raise
    except ReportError as exc:
        raise MigReportError(str(exc)) from None


def _number(text: str, where: str, what: str, high: int, low: int = 0, why: str = "") -> int:
    """A whole number printed by nvidia-smi, within low-high (``why`` explains the range)."""
    text = text.strip()
    if not text or not text.isascii() or not text.isdigit():
        raise MigReportError(f"{where}: {what} {_short(text)!r} is not a whole number")
    if len(text.lstrip("0")) > len(str(high)) or not low <= int(text) <= high:
        raise MigReportError(f"{where}: {what} {_short(text, 20)} is out of range ({low}-{high}{why})")
    return int(text)


_ID_WHY = ": the driver numbers GPU instances 1-14 and compute instances 0-7 on today's parts"


def _check_range(value: int, where: str, what: str, high: int, low: int = 0, why: str = "") -> int:
    if not low <= value <= high:
        raise MigReportError(f"{where}: {what} {value} is out of range ({low}-{high}{why})")
    return value


def _gi_name(name: str, where: str, what: str = "profile name") -> str:
    if not _GI_NAME_RE.fullmatch(name):
        raise MigReportError(
            f"{where}: {what} {_short(name)!r} is not a MIG GPU instance profile name "
            "(expected e.g. 1g.23gb, 3g.93gb or 1g.23gb+me: <slices>g.<memory>gb "
            "with an optional +me, +me.all, -me or +gfx)"
        )
    return name


def _device_name(name: str, where: str) -> str:
    """A MIG device's name: a GPU instance profile name or the compute-instance form ``1c.3g.93gb``."""
    if _GI_NAME_RE.fullmatch(name) or _CI_NAME_RE.fullmatch(name):
        return name
    raise MigReportError(
        f"{where}: profile name {_short(name)!r} is not a MIG profile name "
        "(expected e.g. 1g.23gb, 1g.23gb+me or, for a compute instance of a split GPU instance, "
        "1c.3g.93gb)"
    )


def is_gi_profile_name(name: str) -> bool:
    """A GPU instance profile's name as nvidia-smi prints it (1g.23gb, 3g.93gb, 1g.23gb+me)."""
    return bool(_GI_NAME_RE.fullmatch(name))


def gi_profile(name: str) -> str:
    """``1c.3g.93gb`` -> ``3g.93gb``; a GPU instance profile name is returned as is."""
    match = _CI_NAME_RE.fullmatch(name)
    return match.group("gi") if match else name


def _placement(start: int, size: int, where: str) -> tuple[int, int]:
    if start < 0 or size < 1 or start + size > MEMORY_SLICES:
        raise MigReportError(
            f"{where}: placement {start}:{size} does not fit the GPU's {MEMORY_SLICES} memory slices "
            f"(start 0-{MEMORY_SLICES - 1}, size at least 1, start + size at most {MEMORY_SLICES})"
        )
    return (start, size)


def _mig_uuid(raw: str, parent: str, gi: int | None, ci: int | None, where: str) -> str:
    """``MIG-<uuid>`` or the R450 form ``MIG-GPU-<parent>/<gi>/<ci>``, hex lower-cased; the old form must
    name this device's parent GPU, GPU instance and compute instance."""
    text = raw.strip()
    if match := _MIG_UUID_RE.fullmatch(text):
        return "MIG-" + match.group("uuid").lower()
    if match := _OLD_MIG_UUID_RE.fullmatch(text):
        named = "GPU-" + match.group("parent").lower()
        old_gi, old_ci = int(match.group("gi")), int(match.group("ci"))
        if named != parent or (gi, ci) != (old_gi, old_ci):
            raise MigReportError(
                f"{where}: MIG UUID {_short(text)} names GPU {named}, GPU instance {old_gi}, "
                f"compute instance {old_ci}, but the device is GPU instance {gi}, "
                f"compute instance {ci} of {parent}"
            )
        return f"MIG-{named}/{old_gi}/{old_ci}"
    raise MigReportError(
        f"{where}: {_short(text)!r} is not a MIG device UUID "
        "(expected MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, "
        "or the R450 form MIG-GPU-<GPU UUID>/<GPU instance>/<compute instance>)"
    )


def _mode(raw: str | None, where: str) -> MigMode:
    if raw is None:
        return MigMode.NOT_SUPPORTED
    key = _token(raw)
    if key not in _MODES:
        raise MigReportError(f"{where}: MIG mode {_short(raw)!r} is not one of Enabled, Disabled or N/A")
    return _MODES[key]


def _memory_mib(gib: str) -> int:
    return int((Decimal(gib) * 1024).quantize(Decimal(1), rounding=ROUND_HALF_UP))


# --------------------------------------------------------------------------------------------------------
# The layout rules, for combine and from_dict alike
# --------------------------------------------------------------------------------------------------------


def _label(instance: MigInstance) -> str:
    if instance.compute_instance_id is None:
        return f"GPU instance {instance.gpu_instance_id} (no compute instance)"
    return f"GPU instance {instance.gpu_instance_id} / compute instance {instance.compute_instance_id}"


def _check_profile(profile: MigProfile, where: str) -> None:
    _check_range(profile.profile_id, where, "profile ID", MAX_PROFILE_ID)
    _gi_name(profile.name, where)
    _check_range(profile.instances_total, where, "total instances", MAX_INSTANCES, why=" on one GPU")
    _check_range(
        profile.instances_free, where, "free instances", profile.instances_total, why=": at most total"
    )
    _check_range(profile.memory_mib, where, "memory (MiB)", MAX_MEMORY_MIB)
    _check_range(profile.multiprocessors, where, "multiprocessor count", MAX_MULTIPROCESSORS)
    if len(profile.placements) > MEMORY_SLICES:
        raise MigReportError(f"{where}: more than {MEMORY_SLICES} placements")
    seen: set[tuple[int, int]] = set()
    for start, size in profile.placements:
        _placement(start, size, where)
        if (start, size) in seen:
            raise MigReportError(f"{where}: placement {start}:{size} is listed twice")
        seen.add((start, size))


def _check_instance(instance: MigInstance, parent: str, where: str) -> None:
    gi, ci = instance.gpu_instance_id, instance.compute_instance_id
    _check_range(gi, where, "GPU instance ID", MAX_INSTANCE_ID, why=_ID_WHY)
    if ci is not None:
        _check_range(ci, where, "compute instance ID", MAX_INSTANCE_ID, why=_ID_WHY)
    _device_name(instance.profile, where)
    _check_range(instance.profile_id, where, "profile ID", MAX_PROFILE_ID)
    _placement(instance.placement_start, instance.placement_size, where)
    if instance.uuid is not None:
        if ci is None:
            raise MigReportError(f"{where}: a GPU instance with no compute instance has no MIG device UUID")
        _mig_uuid(instance.uuid, parent, gi, ci, where)
    if instance.multiprocessors is not None:
        _check_range(instance.multiprocessors, where, "multiprocessor count", MAX_MULTIPROCESSORS)
    if instance.memory_mib is not None:
        _check_range(instance.memory_mib, where, "memory (MiB)", MAX_MEMORY_MIB)


def _check_against_profile(instance: MigInstance, by_id: dict[int, MigProfile], where: str) -> None:
    """An instance's profile ID is one of the GPU's profiles, with its name and one of its placements."""
    profile = by_id.get(instance.profile_id)
    if profile is None:
        known = ", ".join(str(profile_id) for profile_id in sorted(by_id))
        raise MigReportError(
            f"{where}: profile ID {instance.profile_id} is not among the GPU's profiles ({known})"
        )
    if gi_profile(instance.profile) != profile.name:
        raise MigReportError(
            f"{where}: named {instance.profile}, but profile ID {instance.profile_id} is {profile.name}"
        )
    placement = (instance.placement_start, instance.placement_size)
    if profile.placements and placement not in profile.placements:
        possible = ", ".join(f"{start}:{size}" for start, size in sorted(profile.placements))
        raise MigReportError(
            f"{where}: placed at {placement[0]}:{placement[1]}, which is not one of the possible placements "
            f"of {profile.name} ({possible})"
        )


def _check_gpu(gpu: GpuMig, where: str) -> None:
    """Rules across one GPU's instances and profiles (each value is checked where it is read)."""
    for profile in gpu.profiles:
        _check_profile(profile, f"{where}: profile {profile.profile_id}")
    for instance in gpu.instances:
        _check_instance(instance, gpu.uuid, f"{where}: {_label(instance)}")
    if gpu.profiles and gpu.current is MigMode.NOT_SUPPORTED:
        raise MigReportError(f"{where}: the GPU does not support MIG (mode N/A) but MIG profiles are listed")
    if gpu.instances and gpu.current is not MigMode.ENABLED:
        raise MigReportError(
            f"{where}: the GPU is not in MIG mode (current mode {gpu.current.value}) but lists "
            f"{len(gpu.instances)} MIG instance(s)"
        )
    if gpu.instances and not gpu.complete:
        raise MigReportError(f"{where}: instances are listed but complete is false; send both or neither")
    if len(gpu.instances) > MAX_INSTANCES:
        raise MigReportError(
            f"{where}: {len(gpu.instances)} MIG instances, but a GPU holds at most {MAX_INSTANCES}"
        )
    by_id: dict[int, MigProfile] = {}
    names: set[str] = set()
    for profile in gpu.profiles:
        if profile.profile_id in by_id:
            raise MigReportError(f"{where}: profile ID {profile.profile_id} is listed twice")
        if profile.name in names:
            raise MigReportError(f"{where}: profile name {profile.name} is listed twice")
        by_id[profile.profile_id] = profile
        names.add(profile.name)

    gis: dict[int, MigInstance] = {}
    pairs: set[tuple[int, int | None]] = set()
    uuids: set[str] = set()
    for instance in gpu.instances:
        gi, label = instance.gpu_instance_id, _label(instance)
        if (gi, instance.compute_instance_id) in pairs:
            raise MigReportError(f"{where}: {label} is listed twice")
        pairs.add((gi, instance.compute_instance_id))
        if instance.uuid is not None:
            if instance.uuid in uuids:
                raise MigReportError(f"{where}: MIG UUID {instance.uuid} is listed twice")
            uuids.add(instance.uuid)
        first = gis.setdefault(gi, instance)
        if first is not instance:
            if instance.compute_instance_id is None or first.compute_instance_id is None:
                raise MigReportError(
                    f"{where}: GPU instance {gi} is listed both with and without compute instances"
                )
            if (first.profile_id, first.placement_start, first.placement_size) != (
                instance.profile_id,
                instance.placement_start,
                instance.placement_size,
            ) or gi_profile(first.profile) != gi_profile(instance.profile):
                raise MigReportError(
                    f"{where}: the compute instances of GPU instance {gi} disagree on its profile or "
                    f"placement ({first.profile} ID {first.profile_id} at "
                    f"{first.placement_start}:{first.placement_size} "
                    f"vs {instance.profile} ID {instance.profile_id} at "
                    f"{instance.placement_start}:{instance.placement_size})"
                )
        if by_id:
            _check_against_profile(instance, by_id, f"{where}: {label}")
    previous: MigInstance | None = None
    for instance in sorted(gis.values(), key=_instance_order):
        if (
            previous is not None
            and previous.placement_start + previous.placement_size > instance.placement_start
        ):
            raise MigReportError(
                f"{where}: GPU instances {previous.gpu_instance_id} (memory slices "
                f"{previous.placement_start}:{previous.placement_size}) and {instance.gpu_instance_id} "
                f"({instance.placement_start}:{instance.placement_size}) overlap"
            )
        previous = instance


# --------------------------------------------------------------------------------------------------------
# from_dict
# --------------------------------------------------------------------------------------------------------

_GPU_KEYS = ("uuid", "current", "pending", "complete", "instances", "profiles")
_PROFILE_KEYS = tuple(MigProfile.__dataclass_fields__)
_INSTANCE_KEYS = tuple(MigInstance.__dataclass_fields__)


def _keys(data: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(data, dict):
        raise MigReportError(
            f"{where}: expected an object with keys {', '.join(keys)}, got {type(data).__name__}"
        )
    unknown = [key for key in data if key not in keys]
    if unknown:
        shown = ", ".join(repr(_short(str(key), 40)) for key in unknown[:5])
        raise MigReportError(f"{where}: unknown key(s) {shown} (expected {', '.join(keys)})")
    missing = [key for key in keys if key not in data]
    if missing:
        raise MigReportError(f"{where}: missing key(s) {', '.join(missing)}")


_TYPE_WORDS = {str: "a string", bool: "true or false", int: "a whole number", list: "a list"}


def _typed(data: dict, key: str, kind: type, where: str, optional: bool = False) -> Any:
    value = data[key]
    if value is None and optional:
        return None
    # bool is an int to Python, never to this format
    if type(value) is not kind:
        expected = _TYPE_WORDS[kind] + (" or null" if optional else "")
        raise MigReportError(f"{where}.{key}: expected {expected}, got {type(value).__name__}")
    return value


def _items(data: dict, key: str, limit: int, where: str) -> list:
    value = _typed(data, key, list, where)
    if len(value) > limit:
        raise MigReportError(f"{where}.{key}: {len(value)} entries, at most {limit} are possible")
    return value


def _mode_value(value: Any, where: str) -> MigMode:
    if type(value) is not str or value not in {mode.value for mode in MigMode}:
        shown = _short(value, 40) if isinstance(value, str) else type(value).__name__
        raise MigReportError(f"{where}: {shown!r} is not a MIG mode (enabled, disabled or not_supported)")
    return MigMode(value)


def _profile_from_dict(data: Any, where: str) -> MigProfile:
    _keys(data, _PROFILE_KEYS, where)
    placements = []
    for i, item in enumerate(_items(data, "placements", MEMORY_SLICES, where)):
        if type(item) is not list or len(item) != 2 or any(type(n) is not int for n in item):
            raise MigReportError(f"{where}.placements[{i}]: expected [start, size], two whole numbers")
        placements.append(_placement(item[0], item[1], f"{where}.placements[{i}]"))
    profile = MigProfile(
        profile_id=_typed(data, "profile_id", int, where),
        name=_typed(data, "name", str, where),
        instances_free=_typed(data, "instances_free", int, where),
        instances_total=_typed(data, "instances_total", int, where),
        memory_mib=_typed(data, "memory_mib", int, where),
        p2p=_typed(data, "p2p", bool, where),
        multiprocessors=_typed(data, "multiprocessors", int, where),
        placements=tuple(sorted(placements)),
    )
    _check_profile(profile, where)
    return profile


def _instance_from_dict(data: Any, parent: str, where: str) -> MigInstance:
    _keys(data, _INSTANCE_KEYS, where)
    gi = _typed(data, "gpu_instance_id", int, where)
    ci = _typed(data, "compute_instance_id", int, where, optional=True)
    raw_uuid = _typed(data, "uuid", str, where, optional=True)
    instance = MigInstance(
        gpu_instance_id=gi,
        compute_instance_id=ci,
        profile=_typed(data, "profile", str, where),
        profile_id=_typed(data, "profile_id", int, where),
        placement_start=_typed(data, "placement_start", int, where),
        placement_size=_typed(data, "placement_size", int, where),
        uuid=None,
        multiprocessors=_typed(data, "multiprocessors", int, where, optional=True),
        memory_mib=_typed(data, "memory_mib", int, where, optional=True),
    )
    _check_instance(instance, parent, where)
    if raw_uuid is None:
        return instance
    if ci is None:
        raise MigReportError(f"{where}.uuid: a GPU instance with no compute instance has no MIG device UUID")
    return replace(instance, uuid=_mig_uuid(raw_uuid, parent, gi, ci, f"{where}.uuid"))


# --------------------------------------------------------------------------------------------------------
# Reading the inputs
# --------------------------------------------------------------------------------------------------------


def _text(value: Any, what: str, limit: int = MAX_INPUT_CHARS) -> str:
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MigReportError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(value, str):
        raise MigReportError(f"{what}: expected the command's output as text, got {type(value).__name__}")
    if len(value) > limit:
        raise MigReportError(f"{what} is longer than {limit} characters; that is not nvidia-smi output")
    return value.lstrip("\ufeff")


def _lines(text: str, command: str) -> list[tuple[int, str]]:
    """(line number, stripped line) for every non-blank line; over-long lines refused."""
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE_CHARS:
            raise MigReportError(f"{command} line {number} is longer than {MAX_LINE_CHARS} characters")
        out.append((number, line))
    return out


_NO_MIG = ("no mig-enabled devices found", "no mig-supported devices found")
_NO_INSTANCES = "no gpu instances found"


@dataclass(frozen=True)
class _Table:
    rows: list[tuple[int, str]]  # (line number, text inside the | |)
    no_mig: bool  # "No MIG-enabled devices found."


def _table(text: str, command: str, title: str, empty_ok: tuple[str, ...]) -> _Table:
    """The data rows of one of nvidia-smi's box tables (borders, title and column headings dropped)."""
    rows: list[tuple[int, str]] = []
    titled = separated = no_mig = empty = False
    for number, line in _lines(text, command):
        where = f"{command} line {number}"
        if line.startswith("+") and set(line) <= set("+-="):
            continue
        if len(line) >= 2 and line.startswith("|") and line.endswith("|"):
            inner = line[1:-1].strip()
            if inner and set(inner) == {"="}:
                if not titled:
                    raise MigReportError(f"{where}: the table has no {title!r} title above its heading")
                separated = True
            elif separated:
                rows.append((number, inner))
            elif not titled:
                if _token(inner) != _token(title):
                    raise MigReportError(
                        f"{where}: expected the table title {title!r}, got {_short(inner)!r}; is this the "
                        f"output of {command}?"
                    )
                titled = True
            continue  # a column heading
        lowered = _token(line)
        if lowered.startswith(_NO_MIG):
            no_mig = True
            continue
        if lowered.startswith(empty_ok):
            empty = True
            continue
        raise MigReportError(
            f"{where}: {_short(line)!r} is not part of {command}'s {title!r} table "
            "(nvidia-smi may have printed an error instead of its output)"
        )
    if titled and not separated:
        raise MigReportError(
            f"{command}: the {title!r} table has no ==== line under its heading; is it cut short?"
        )
    if not titled and not no_mig and not empty:
        raise MigReportError(f"{command}: no {title!r} table found (is the output empty?)")
    return _Table(rows=rows, no_mig=no_mig)


_LGIP_ROW_RE = re.compile(
    r"(?P<gpu>[0-9]{1,4})\s+MIG\s+(?P<name>\S{1,40})\s+(?P<id>[0-9]{1,4})\s+"
    r"(?P<free>[0-9]{1,3})/(?P<total>[0-9]{1,3})\s+(?P<mem>[0-9]{1,7}(?:\.[0-9]{1,4})?)\s+"
    r"(?P<p2p>\S{1,5})\s+(?P<sm>[0-9]{1,5})\s+(?P<dec>[0-9]{1,3})\s+(?P<enc>[0-9]{1,3})",
    re.ASCII,
)
_LGIP_MORE_RE = re.compile(r"[0-9]{1,3}\s+[0-9]{1,3}\s+[0-9]{1,3}", re.ASCII)


@dataclass(frozen=True)
class _ProfileRow:
    line: int
    gpu: int
    profile: MigProfile


def _parse_lgip(text: str) -> tuple[list[_ProfileRow], bool]:
    command = "nvidia-smi mig -lgip"
    table = _table(text, command, "GPU instance profiles:", ())
    out: list[_ProfileRow] = []
    pending: tuple[int, re.Match[str]] | None = None
    for number, inner in table.rows:
        where = f"{command} line {number}"
        if match := _LGIP_ROW_RE.fullmatch(inner):
            if pending is not None:
                raise MigReportError(
                    f"{command} line {pending[0]}: the profile row is not followed by its CE/JPEG/OFA line"
                )
            pending = (number, match)
            continue
        if _LGIP_MORE_RE.fullmatch(inner) and pending is not None:
            row_number, row = pending
            pending = None
            out.append(_profile_row(row_number, row, f"{command} line {row_number}"))
            continue
        raise MigReportError(
            f"{where}: {_short(inner)!r} is not a profile row "
            "(expected e.g. '0  MIG 1g.23gb  19  7/7  22.00  No  18  1  0' "
            "then its CE / JPEG / OFA line '2  1  0')"
        )
    if pending is not None:
        raise MigReportError(
            f"{command} line {pending[0]}: the profile row is not followed by its CE/JPEG/OFA line"
        )
    return out, table.no_mig


def _profile_row(number: int, row: re.Match[str], where: str) -> _ProfileRow:
    p2p = _token(row["p2p"])
    if p2p not in ("yes", "no"):
        raise MigReportError(f"{where}: P2P {row['p2p']!r} is not Yes or No")
    gib = Decimal(row["mem"])
    if gib > MAX_MEMORY_GIB:
        raise MigReportError(f"{where}: memory {row['mem']} GiB is larger than any GPU's")
    total = _number(row["total"], where, "total instances", MAX_INSTANCES, why=" on one GPU")
    profile = MigProfile(
        profile_id=_number(row["id"], where, "profile ID", MAX_PROFILE_ID),
        name=_gi_name(row["name"], where),
        instances_free=_number(row["free"], where, "free instances", total, why=": at most the total"),
        instances_total=total,
        memory_mib=_memory_mib(row["mem"]),
        p2p=p2p == "yes",
        multiprocessors=_number(row["sm"], where, "multiprocessor count", MAX_MULTIPROCESSORS),
    )
    return _ProfileRow(
        line=number, gpu=_number(row["gpu"], where, "GPU index", MAX_GPU_INDEX), profile=profile
    )


_LGIPP_RE = re.compile(
    r"GPU\s+(?P<gpu>[0-9]{1,4})\s+Profile\s+ID\s+(?P<id>[0-9]{1,4})\s+Placements?\s*:\s*"
    r"\{(?P<starts>[0-9,\s]{0,64})\}\s*:\s*(?P<size>[0-9]{1,2})",
    re.ASCII | re.IGNORECASE,
)


@dataclass(frozen=True)
class _PlacementLine:
    line: int
    gpu: int
    profile_id: int
    placements: tuple[tuple[int, int], ...]


def _parse_lgipp(text: str) -> tuple[list[_PlacementLine], bool]:
    command = "nvidia-smi mig -lgipp"
    out: list[_PlacementLine] = []
    no_mig = False
    for number, line in _lines(text, command):
        where = f"{command} line {number}"
        if _token(line).startswith(_NO_MIG):
            no_mig = True
            continue
        match = _LGIPP_RE.fullmatch(line)
        if match is None:
            raise MigReportError(
                f"{where}: {_short(line)!r} is not a placement line (expected e.g. "
                "'GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1')"
            )
        size = _number(match["size"], where, "placement size", MEMORY_SLICES, low=1, why=" memory slices")
        starts = [part.strip() for part in match["starts"].split(",")] if match["starts"].strip() else []
        if len(starts) > MEMORY_SLICES:
            raise MigReportError(f"{where}: more than {MEMORY_SLICES} placements")
        placements: list[tuple[int, int]] = []
        for part in starts:
            start = _number(part, where, "placement start", MEMORY_SLICES - 1, why=" memory slices")
            placement = _placement(start, size, where)
            if placement in placements:
                raise MigReportError(f"{where}: placement {start}:{size} is listed twice")
            placements.append(placement)
        out.append(
            _PlacementLine(
                line=number,
                gpu=_number(match["gpu"], where, "GPU index", MAX_GPU_INDEX),
                profile_id=_number(match["id"], where, "profile ID", MAX_PROFILE_ID),
                placements=tuple(sorted(placements)),
            )
        )
    if not out and not no_mig:
        raise MigReportError(f"{command}: no placement lines found (is the output empty?)")
    return out, no_mig


_LGI_ROW_RE = re.compile(
    r"(?P<gpu>[0-9]{1,4})\s+MIG\s+(?P<name>\S{1,40})\s+(?P<id>[0-9]{1,4})\s+(?P<gi>[0-9]{1,4})\s+"
    r"(?P<start>[0-9]{1,2})\s*:\s*(?P<size>[0-9]{1,2})",
    re.ASCII,
)


@dataclass(frozen=True)
class _GiRow:
    line: int
    gpu: int
    name: str
    profile_id: int
    gi: int
    start: int
    size: int


def _parse_lgi(text: str) -> tuple[list[_GiRow], bool]:
    command = "nvidia-smi mig -lgi"
    table = _table(text, command, "GPU instances:", (_NO_INSTANCES,))
    out = []
    for number, inner in table.rows:
        where = f"{command} line {number}"
        match = _LGI_ROW_RE.fullmatch(inner)
        if match is None:
            raise MigReportError(
                f"{where}: {_short(inner)!r} is not a GPU instance row (expected e.g. "
                "'0  MIG 3g.93gb  9  2  4:4': GPU, name, profile ID, instance ID, placement start:size)"
            )
        start = _number(match["start"], where, "placement start", MEMORY_SLICES - 1, why=" memory slices")
        size = _number(match["size"], where, "placement size", MEMORY_SLICES, low=1, why=" memory slices")
        _placement(start, size, where)
        out.append(
            _GiRow(
                line=number,
                gpu=_number(match["gpu"], where, "GPU index", MAX_GPU_INDEX),
                name=_gi_name(match["name"], where),
                profile_id=_number(match["id"], where, "profile ID", MAX_PROFILE_ID),
                gi=_number(match["gi"], where, "GPU instance ID", MAX_INSTANCE_ID, why=_ID_WHY),
                start=start,
                size=size,
            )
        )
    return out, table.no_mig


_LIST_GPU_RE = re.compile(r"GPU\s+(?P<index>[0-9]{1,4}):\s*(?P<name>.*?)\s*\(UUID:\s*(?P<uuid>[^()\s]+)\s*\)")
_LIST_MIG_RE = re.compile(
    r"MIG\s+(?P<name>\S{1,40})\s+Device\s+(?P<index>[0-9]{1,4}):\s*\(UUID:\s*(?P<uuid>[^()\s]+)\s*\)"
)


@dataclass(frozen=True)
class _ListedDevice:
    line: int
    index: int
    name: str
    uuid: str  # as printed, checked once the device's GI/CI are known


@dataclass(frozen=True)
class _ListedGpu:
    line: int
    index: int
    uuid: str
    devices: dict[int, _ListedDevice]


def _parse_list(text: str) -> list[_ListedGpu]:
    command = "nvidia-smi -L"
    gpus: list[_ListedGpu] = []
    for number, line in _lines(text, command):
        where = f"{command} line {number}"
        if match := _LIST_GPU_RE.fullmatch(line):
            index = _number(match["index"], where, "GPU index", MAX_GPU_INDEX)
            if index != len(gpus):
                raise MigReportError(
                    f"{where}: GPU {index} where GPU {len(gpus)} was expected (nvidia-smi -L lists every GPU "
                    "in index order)"
                )
            gpus.append(_ListedGpu(number, index, _gpu_uuid(match["uuid"], where), {}))
            continue
        if match := _LIST_MIG_RE.fullmatch(line):
            if not gpus:
                raise MigReportError(f"{where}: a MIG device line before any 'GPU n: …' line")
            device = _number(match["index"], where, "MIG device index", MAX_DEVICE_INDEX)
            devices = gpus[-1].devices
            if device in devices:
                raise MigReportError(f"{where}: MIG device {device} of GPU {gpus[-1].index} is listed twice")
            if len(devices) >= MAX_INSTANCES:
                raise MigReportError(
                    f"{where}: GPU {gpus[-1].index} lists more than {MAX_INSTANCES} MIG devices, but a GPU "
                    f"holds at most {MAX_INSTANCES}"
                )
            devices[device] = _ListedDevice(number, device, _device_name(match["name"], where), match["uuid"])
            continue
        raise MigReportError(
            f"{where}: {_short(line)!r} is neither a 'GPU 0: NVIDIA GB200 (UUID: GPU-…)' line nor a "
            "'MIG 1g.23gb Device 0: (UUID: MIG-…)' line"
        )
    if not gpus:
        raise MigReportError(f"{command}: no 'GPU n: … (UUID: GPU-…)' lines found")
    return gpus


@dataclass(frozen=True)
class _XmlDevice:
    index: int
    gi: int
    ci: int
    multiprocessors: int | None
    memory_mib: int | None


@dataclass(frozen=True)
class _XmlGpu:
    position: int
    uuid: str
    where: str
    current: MigMode
    pending: MigMode
    has_devices: bool  # a <mig_devices> element was printed
    devices: tuple[_XmlDevice, ...]


def _optional_number(raw: str | None, where: str, what: str, high: int) -> int | None:
    if raw is None or _token(raw) in ("", "n/a", "not supported"):
        return None
    return _number(raw, where, what, high)


def _xml_memory(raw: str | None, where: str) -> int | None:
    if raw is None or _token(raw) in ("", "n/a", "not supported"):
        return None
    match = _MIB_RE.fullmatch(raw.strip())
    if match is None:
        raise MigReportError(f"{where}: memory total {_short(raw)!r} is not '<n> MiB'")
    return _number(match.group(1), where, "memory total (MiB)", MAX_MEMORY_MIB)


def _xml_devices(element: ET.Element | None, where: str) -> tuple[_XmlDevice, ...]:
    if element is None:
        return ()
    children = [child for child in element if isinstance(child.tag, str)]
    if not children:
        text = _token(element.text or "")
        if text not in ("", "none", "n/a"):
            raise MigReportError(
                f"{where}: <mig_devices> holds {_short(text)!r}, expected <mig_device> or None"
            )
        return ()
    devices: list[_XmlDevice] = []
    indexes: set[int] = set()
    pairs: set[tuple[int, int]] = set()
    for position, child in enumerate(children):
        spot = f"{where} <mig_devices> entry {position}"
        if re.sub(r"[^0-9a-z]", "", child.tag.lower()) != "migdevice":
            raise MigReportError(f"{spot}: <{_short(child.tag, 40)}> is not a <mig_device>")
        if len(devices) >= MAX_INSTANCES:
            raise MigReportError(
                f"{where}: more than {MAX_INSTANCES} MIG devices, but a GPU holds at most {MAX_INSTANCES}"
            )
        index = _number(_xtext(child, "index") or "", spot, "<index>", MAX_DEVICE_INDEX)
        spot = f"{where} MIG device {index}"
        gi = _number(
            _xtext(child, "gpu_instance_id") or "", spot, "<gpu_instance_id>", MAX_INSTANCE_ID, why=_ID_WHY
        )
        ci = _number(
            _xtext(child, "compute_instance_id") or "",
            spot,
            "<compute_instance_id>",
            MAX_INSTANCE_ID,
            why=_ID_WHY,
        )
        if index in indexes:
            raise MigReportError(f"{spot}: MIG device index {index} is listed twice")
        if (gi, ci) in pairs:
            raise MigReportError(f"{spot}: GPU instance {gi} / compute instance {ci} is listed twice")
        indexes.add(index)
        pairs.add((gi, ci))
        devices.append(
            _XmlDevice(
                index=index,
                gi=gi,
                ci=ci,
                multiprocessors=_optional_number(
                    _xtext(child, "device_attributes", "shared", "multiprocessor_count"),
                    spot,
                    "multiprocessor count",
                    MAX_MULTIPROCESSORS,
                ),
                memory_mib=_xml_memory(_xtext(child, "fb_memory_usage", "total"), spot),
            )
        )
    return tuple(devices)


def _parse_xml(text: str) -> list[_XmlGpu]:
    _, elements = gpu_elements(text, MigReportError)
    gpus = []
    seen: dict[str, int] = {}
    for position, element in enumerate(elements):
        where = f'GPU {position} (<gpu id="{_short(element.get("id", "?"), 40)}">)'
        uuid = _gpu_uuid(_xtext(element, "uuid"), where)
        if uuid in seen:
            raise MigReportError(f"{where}: UUID {uuid} is also GPU {seen[uuid]}'s")
        seen[uuid] = position
        where = f"GPU {position} ({uuid})"
        mode = _xchild(element, "mig_mode")
        devices_element = _xchild(element, "mig_devices")
        gpus.append(
            _XmlGpu(
                position=position,
                uuid=uuid,
                where=where,
                current=_mode(_xtext(mode, "current_mig"), f"{where} <current_mig>"),
                pending=_mode(_xtext(mode, "pending_mig"), f"{where} <pending_mig>"),
                has_devices=devices_element is not None,
                devices=_xml_devices(devices_element, where),
            )
        )
    return gpus


# --------------------------------------------------------------------------------------------------------
# combine
# --------------------------------------------------------------------------------------------------------


def _outputs(mig: Mapping[str, Any] | None) -> dict[str, str]:
    if mig is None:
        return {}
    if not isinstance(mig, Mapping):
        raise MigReportError(
            f"the MIG outputs must be an object keyed {', '.join(KEYS)}, got {type(mig).__name__}"
        )
    out = {}
    for key, value in mig.items():
        if key not in KEYS:
            raise MigReportError(
                f"unknown MIG output {_short(str(key), 40)!r} (expected {', '.join(KEYS)}: the outputs of "
                "nvidia-smi mig -lgip, mig -lgipp, mig -lgi and -L)"
            )
        if value is not None:
            out[key] = _text(value, f"the {key!r} output")
    return out


def _not_in_xml(index: int, count: int, where: str) -> MigReportError:
    return MigReportError(
        f"{where}: GPU {index} is not in the nvidia-smi -q -x output, which has GPU 0-{count - 1}"
    )


def _refuse_no_mig(no_mig: bool, command: str, gpus: list[_XmlGpu]) -> None:
    enabled = next((gpu for gpu in gpus if gpu.current is MigMode.ENABLED), None)
    if no_mig and enabled is not None:
        raise MigReportError(
            f"{command} says no GPU is in MIG mode, but the XML has {enabled.where} in MIG mode; "
            "were the outputs taken at different times?"
        )


def _profiles(outputs: dict[str, str], gpus: list[_XmlGpu]) -> dict[int, list[MigProfile]]:
    """-lgip's profiles by GPU index, with -lgipp's placements."""
    command = "nvidia-smi mig -lgip"
    rows, no_mig = _parse_lgip(outputs["lgip"]) if "lgip" in outputs else ([], False)
    _refuse_no_mig(no_mig, command, gpus)
    by_key: dict[tuple[int, int], _ProfileRow] = {}
    counts: dict[int, int] = {}
    for row in rows:
        where = f"{command} line {row.line}"
        if row.gpu >= len(gpus):
            raise _not_in_xml(row.gpu, len(gpus), where)
        key = (row.gpu, row.profile.profile_id)
        if key in by_key:
            raise MigReportError(f"{where}: GPU {row.gpu} profile ID {key[1]} is listed twice")
        counts[row.gpu] = counts.get(row.gpu, 0) + 1
        if counts[row.gpu] > MAX_PROFILES:
            raise MigReportError(f"{where}: GPU {row.gpu} lists more than {MAX_PROFILES} profiles")
        by_key[key] = row
    placements: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
    if "lgipp" in outputs:
        command = "nvidia-smi mig -lgipp"
        lines, no_mig = _parse_lgipp(outputs["lgipp"])
        _refuse_no_mig(no_mig, command, gpus)
        for line in lines:
            where = f"{command} line {line.line}"
            if line.gpu >= len(gpus):
                raise _not_in_xml(line.gpu, len(gpus), where)
            key = (line.gpu, line.profile_id)
            if key in placements:
                raise MigReportError(f"{where}: GPU {line.gpu} profile ID {line.profile_id} is listed twice")
            if "lgip" in outputs and key not in by_key:
                raise MigReportError(
                    f"{where}: GPU {line.gpu} profile ID {line.profile_id} is not in the "
                    "nvidia-smi mig -lgip output"
                )
            placements[key] = line.placements
    out: dict[int, list[MigProfile]] = {}
    for key, row in by_key.items():
        out.setdefault(row.gpu, []).append(replace(row.profile, placements=placements.get(key, ())))
    return out


def _gpu_instances(text: str, gpus: list[_XmlGpu]) -> dict[int, list[_GiRow]]:
    """-lgi's GPU instances by GPU index."""
    command = "nvidia-smi mig -lgi"
    rows, no_mig = _parse_lgi(text)
    _refuse_no_mig(no_mig, command, gpus)
    out: dict[int, list[_GiRow]] = {}
    for row in rows:
        where = f"{command} line {row.line}"
        if row.gpu >= len(gpus):
            raise _not_in_xml(row.gpu, len(gpus), where)
        gpu = gpus[row.gpu]
        if gpu.current is not MigMode.ENABLED:
            raise MigReportError(
                f"{where}: lists GPU instance {row.gi} on {gpu.where}, which is not in MIG mode "
                f"(current mode {gpu.current.value})"
            )
        same_gpu = out.setdefault(row.gpu, [])
        if any(other.gi == row.gi for other in same_gpu):
            raise MigReportError(f"{where}: GPU {row.gpu} GPU instance {row.gi} is listed twice")
        if len(same_gpu) >= MAX_INSTANCES:
            raise MigReportError(
                f"{where}: GPU {row.gpu} has more than {MAX_INSTANCES} GPU instances, "
                f"but a GPU holds at most {MAX_INSTANCES}"
            )
        same_gpu.append(row)
    return out


def _listing(text: str, gpus: list[_XmlGpu]) -> list[_ListedGpu]:
    """-L's GPUs, checked against the XML's: the same GPUs in the same order."""
    listing = _parse_list(text)
    for listed in listing:
        where = f"nvidia-smi -L line {listed.line}"
        if listed.index >= len(gpus):
            raise _not_in_xml(listed.index, len(gpus), where)
        gpu = gpus[listed.index]
        if listed.uuid != gpu.uuid:
            raise MigReportError(
                f"{where}: GPU {listed.index} is {listed.uuid}, "
                f"but the XML's GPU {listed.index} is {gpu.uuid}; "
                "the GPU index is the position in the XML"
            )
        if listed.devices and gpu.current is not MigMode.ENABLED:
            raise MigReportError(
                f"{where}: lists MIG devices under {gpu.where}, which is not in MIG mode "
                f"(current mode {gpu.current.value})"
            )
    if len(listing) != len(gpus):
        raise MigReportError(
            f"nvidia-smi -L lists {len(listing)} GPUs but the XML has {len(gpus)}; "
            "send the full output of each"
        )
    return listing


def combine(xml: str, mig: Mapping[str, str] | None) -> dict[str, GpuMig]:
    """Every GPU of the ``nvidia-smi -q -x`` output with its MIG state, keyed by canonical GPU UUID (in XML
    order). ``mig`` holds the raw outputs of ``nvidia-smi mig -lgip`` / ``mig -lgipp`` / ``mig -lgi`` / ``-L``
    under ``lgip`` / ``lgipp`` / ``lgi`` / ``list`` (each optional; None: not sent). MigReportError, in plain
    words, for anything that cannot be read or describes an impossible layout (module docstring)."""
    gpus = _parse_xml(_text(xml, "the nvidia-smi -q -x output", MAX_XML_CHARS))
    outputs = _outputs(mig)
    profiles = _profiles(outputs, gpus)
    complete = "lgi" in outputs
    gi_rows = _gpu_instances(outputs["lgi"], gpus) if complete else {}
    listing = _listing(outputs["list"], gpus) if "list" in outputs else None

    mig_uuids: dict[str, str] = {}
    result: dict[str, GpuMig] = {}
    for gpu in gpus:
        if gpu.devices and gpu.current is not MigMode.ENABLED:
            raise MigReportError(
                f"{gpu.where}: the XML lists {len(gpu.devices)} MIG device(s) but the GPU is not in MIG mode "
                f"(current mode {gpu.current.value})"
            )
        instances: tuple[MigInstance, ...] = ()
        if complete and gpu.current is MigMode.ENABLED:
            listed = listing[gpu.position].devices if listing is not None else None
            instances = _instances(gpu, gi_rows.get(gpu.position, []), listed)
        state = GpuMig(
            uuid=gpu.uuid,
            current=gpu.current,
            pending=gpu.pending,
            instances=tuple(sorted(instances, key=_instance_order)),
            profiles=tuple(sorted(profiles.get(gpu.position, []), key=lambda p: p.profile_id)),
            complete=complete,
        )
        _check_gpu(state, gpu.where)
        for instance in state.instances:
            if instance.uuid is None:
                continue
            if instance.uuid in mig_uuids:
                raise MigReportError(
                    f"MIG UUID {instance.uuid} is listed under both {mig_uuids[instance.uuid]} "
                    f"and {gpu.where}"
                )
            mig_uuids[instance.uuid] = gpu.where
        result[gpu.uuid] = state
    return result


def _instances(
    gpu: _XmlGpu, gi_rows: list[_GiRow], listed: dict[int, _ListedDevice] | None
) -> tuple[MigInstance, ...]:
    """One MIG-mode GPU's instances from its XML MIG devices, -lgi rows and (when sent) -L lines."""
    if not gpu.has_devices:
        raise MigReportError(
            f"{gpu.where}: the GPU is in MIG mode but the XML has no <mig_devices> element (expected its MIG "
            "devices, or None); cannot tell which GPU instances have compute instances"
        )
    by_gi = {row.gi: row for row in gi_rows}
    remaining = dict(listed) if listed is not None else None
    out: list[MigInstance] = []
    used: set[int] = set()
    for device in gpu.devices:
        where = f"{gpu.where} MIG device {device.index}"
        row = by_gi.get(device.gi)
        if row is None:
            raise MigReportError(
                f"{where}: the XML lists GPU instance {device.gi} (compute instance {device.ci}) "
                "but nvidia-smi mig -lgi has no row for it; were the outputs taken at different times?"
            )
        name, uuid = row.name, None
        if remaining is not None:
            line = remaining.pop(device.index, None)
            if line is None:
                raise MigReportError(
                    f"{where} (GPU instance {device.gi}, compute instance {device.ci}) is in the XML but "
                    f"nvidia-smi -L lists no 'Device {device.index}' under GPU {gpu.position}"
                )
            spot = f"nvidia-smi -L line {line.line}"
            if gi_profile(line.name) != row.name:
                raise MigReportError(
                    f"{spot}: MIG device {device.index} is {line.name} but its GPU instance {device.gi} is "
                    f"{row.name} in nvidia-smi mig -lgi"
                )
            name, uuid = line.name, _mig_uuid(line.uuid, gpu.uuid, device.gi, device.ci, spot)
        used.add(device.gi)
        out.append(
            MigInstance(
                gpu_instance_id=device.gi,
                compute_instance_id=device.ci,
                profile=name,
                profile_id=row.profile_id,
                placement_start=row.start,
                placement_size=row.size,
                uuid=uuid,
                multiprocessors=device.multiprocessors,
                memory_mib=device.memory_mib,
            )
        )
    if remaining:
        extra = min(remaining.values(), key=lambda line: line.line)
        raise MigReportError(
            f"nvidia-smi -L line {extra.line}: MIG device {extra.index} of GPU {gpu.position} is not in the "
            "XML's <mig_devices>"
        )
    for row in gi_rows:
        if row.gi not in used:
            out.append(
                MigInstance(
                    gpu_instance_id=row.gi,
                    compute_instance_id=None,
                    profile=row.name,
                    profile_id=row.profile_id,
                    placement_start=row.start,
                    placement_size=row.size,
                    uuid=None,
                )
            )
    return tuple(out)


def with_mig(gpus: list[ReportedGpu], xml: str, mig: Mapping[str, str] | None) -> list[ReportedGpu]:
    """The GPUs parsed from a ``-q -x`` listing, each with its MIG state (:func:`combine` over the same
    listing and the node's ``nvidia-smi mig`` outputs): what a report of that listing says."""
    states = combine(xml, mig)
    return [replace(gpu, mig=states.get(gpu.uuid)) for gpu in gpus]
