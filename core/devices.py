"""Device visibility comes only from the scheduler: the environment variables a job may not set.

The scheduler gives a job its GPUs (Kubernetes: the device plugin's `nvidia.com/gpu` and the DRA driver's
IMEX channel claim; Slurm: gres and its device cgroup). On a node with the NVIDIA Container Toolkit, some
variables of a container's environment are *requests to the runtime*: with its default settings
(`accept-nvidia-visible-devices-envvar-when-unprivileged = true`) the runtime hands a container whatever
`NVIDIA_VISIBLE_DEVICES` names, so a 1-GPU job that sets it to `all` gets every GPU of its node, on top of
what the scheduler counted. Others widen what the driver exposes (capabilities, MIG management, NVSwitch,
GPUDirect devices), switch off its checks, or pick an IMEX channel the job was not given.

`DEVICE_VARIABLES` is the one list (names and prefixes, each with why); `device_variables(names)` finds
the ones a job names, case-insensitively, and `refusal(found)` says why in words a user can act on. Why any
case: Linux itself is case-sensitive, so `nvidia_visible_devices` is not read by today's runtime, but a list
that a change of case slips past is a list nobody can reason about, and no ordinary program needs such a
name. `core.workloads.refuse_device_variables` (a WorkError) is what every backend's work rule calls, and
`core.workloads.validate_work` checks every `env` a rule returns as well. Pure: no Django.

Sources: the NVIDIA Container Toolkit's image settings (internal/config/image: NVIDIA_VISIBLE_DEVICES,
NVIDIA_DRIVER_CAPABILITIES, NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_MIG_MONITOR_DEVICES, NVIDIA_IMEX_CHANNELS,
NVIDIA_REQUIRE_*, NVIDIA_DISABLE_REQUIRE), its feature-gated devices (NVIDIA_GDS, NVIDIA_MOFED,
NVIDIA_NVSWITCH, NVIDIA_GDRCOPY, NVIDIA_ALLOW_ADDITIONAL_GIDS) and the CUDA runtime (CUDA_VISIBLE_DEVICES).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

# name -> why a job may not set it. Matched case-insensitively.
DEVICE_VARIABLES: dict[str, str] = {
    "NVIDIA_VISIBLE_DEVICES": "the GPUs the NVIDIA container runtime mounts into the container ('all' is "
    "every GPU of the node)",
    "NVIDIA_DRIVER_CAPABILITIES": "which driver features (compute, utility, video, graphics, display, ...) "
    "the runtime exposes",
    "NVIDIA_MIG_CONFIG_DEVICES": "MIG configuration rights (create and destroy MIG instances) on the named "
    "GPUs",
    "NVIDIA_MIG_MONITOR_DEVICES": "MIG monitoring rights (the capabilities of every MIG instance) on the "
    "named GPUs",
    "NVIDIA_IMEX_CHANNELS": "the IMEX channels mounted into the container; a job's channel comes from its "
    "ComputeDomain (Kubernetes) or the job's IMEX domain (Slurm)",
    "NVIDIA_DISABLE_REQUIRE": "switches off the runtime's driver and CUDA compatibility checks",
    "NVIDIA_GDS": "'enabled' mounts the GPUDirect Storage devices (/dev/nvidia-fs*)",
    "NVIDIA_MOFED": "'enabled' mounts the InfiniBand devices (/dev/infiniband), bypassing the network's "
    "assignment",
    "NVIDIA_NVSWITCH": "'enabled' mounts the NVSwitch devices (/dev/nvidia-nvswitch*) of the node",
    "NVIDIA_GDRCOPY": "'enabled' mounts the GDRCopy device (/dev/gdrdrv)",
    "NVIDIA_ALLOW_ADDITIONAL_GIDS": "lets the runtime add the device nodes' groups to the container's "
    "processes",
    "CUDA_VISIBLE_DEVICES": "which of the container's GPUs CUDA uses; the scheduler sets it (Slurm gres) or "
    "the runtime's mount decides it (Kubernetes)",
}
# prefix -> why. Every variable whose name starts with it is refused.
DEVICE_VARIABLE_PREFIXES: dict[str, str] = {
    "NVIDIA_REQUIRE_": "constraints the runtime checks against the driver and GPUs (NVIDIA_REQUIRE_CUDA, "
    "NVIDIA_REQUIRE_ARCH, ...): the image's, not the job's",
}


def is_device_variable(name: object) -> TypeGuard[str]:
    """Whether `name` is (case-insensitively) a variable the scheduler alone decides."""
    if not isinstance(name, str):
        return False
    upper = name.upper()
    return upper in DEVICE_VARIABLES or any(upper.startswith(p) for p in DEVICE_VARIABLE_PREFIXES)


def device_variables(names: Iterable[object]) -> list[str]:
    """The names among `names` that select devices, MIG instances or driver capabilities, in their order."""
    return [name for name in names if is_device_variable(name)]


def refusal(found: list[str], where: str = '"env"') -> str:
    """The words for refusing the variables `found` (as the job spelt them)."""
    listed = ", ".join(f'"{name}"' for name in found)
    verb, pronoun = ("selects", "it") if len(found) == 1 else ("select", "them")
    return (
        f"{where}: {listed} {verb} GPUs, MIG instances or driver capabilities; the scheduler assigns "
        f"each job its GPUs, so a job may not set {pronoun}"
    )
