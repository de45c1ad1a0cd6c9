"""Device visibility comes only from the scheduler: POST /api/v1/jobs/ refuses a job whose
environment sets a variable the NVIDIA container runtime or CUDA reads to choose GPUs, MIG instances, IMEX
channels or driver capabilities (core.devices), in any case, with a 400 naming the variable, and makes no
job; ordinary variables are still taken."""

from __future__ import annotations

import pytest

from core import devices
from core.workloads import WorkError, register_work_validator, validate_work, work_rules
from scheduling.models import Job
from tests.factories import make_department, post_kubernetes_job

pytestmark = pytest.mark.django_db

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


def mixed_case(name: str) -> str:
    """nViDiA_vIsIbLe_dEvIcEs: neither the upper nor the lower spelling."""
    return "".join(c.lower() if i % 2 == 0 else c.upper() for i, c in enumerate(name))


DENIED = [*devices.DEVICE_VARIABLES, *(prefix + "CUDA" for prefix in devices.DEVICE_VARIABLE_PREFIXES)]
SPELLINGS = [(name, spelling) for name in DENIED for spelling in (name, name.lower(), mixed_case(name))]


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def post(api_as, member_a):
    def post(env):
        return post_kubernetes_job(api_as(member_a), {"image": IMAGE, "command": ["torchrun"], "env": env})

    return post


def test_the_list_has_what_the_nvidia_runtime_and_cuda_read():
    for name in (
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "NVIDIA_DISABLE_REQUIRE",
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_REQUIRE_CUDA",
        "NVIDIA_REQUIRE_ARCH",
        "NVIDIA_NVSWITCH",
        "NVIDIA_GDRCOPY",
        "NVIDIA_GDS",
        "NVIDIA_MOFED",
    ):
        assert devices.is_device_variable(name), name
    # Every entry says why.
    for why in [*devices.DEVICE_VARIABLES.values(), *devices.DEVICE_VARIABLE_PREFIXES.values()]:
        assert len(why) > 20


@pytest.mark.slow(reason="39 cases, each a full request through the stack")
@pytest.mark.parametrize(("name", "spelling"), SPELLINGS, ids=[s for _, s in SPELLINGS])
def test_a_device_variable_in_any_case_is_a_400_naming_it_and_makes_no_job(post, name, spelling):
    response = post({"NCCL_DEBUG": "INFO", spelling: "all"})
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert list(errors) == ["work"]
    (message,) = errors["work"]
    assert message.startswith(f'"env": "{spelling}" selects GPUs, MIG instances or driver capabilities')
    assert "the scheduler assigns each job its GPUs" in message
    assert "NCCL_DEBUG" not in message
    assert Job.objects.count() == 0


def test_every_device_variable_of_a_job_is_named_at_once(post):
    response = post({"NVIDIA_VISIBLE_DEVICES": "all", "EPOCHS": 3, "cuda_visible_devices": "0,1,2,3"})
    assert response.status_code == 400
    assert response.json()["work"] == [
        '"env": "NVIDIA_VISIBLE_DEVICES", "cuda_visible_devices" select GPUs, MIG instances or driver '
        "capabilities; the scheduler assigns each job its GPUs, so a job may not set them"
    ]
    assert Job.objects.count() == 0


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "env",
    [
        {"NCCL_DEBUG": "INFO"},
        {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"},
        # Near misses that select nothing: a framework switch, and names that only contain a listed one.
        {"NVIDIA_TF32_OVERRIDE": "0"},
        {"MY_NVIDIA_VISIBLE_DEVICES": "x", "NVIDIA_VISIBLE_DEVICES_NOTE": "x", "NVIDIA_REQUIRE": "x"},
    ],
)
def test_ordinary_variables_are_still_taken(post, env):
    # The same environment with one device variable more is refused; without it, it is a job.
    assert post({**env, "NVIDIA_VISIBLE_DEVICES": "all"}).status_code == 400
    assert Job.objects.count() == 0
    response = post(env)
    assert response.status_code == 201, response.json()
    assert response.json()["work"]["env"] == env
    assert Job.objects.count() == 1


def test_every_backend_refuses_a_job_environment_that_chooses_devices():
    """Kubernetes refuses the variable; Slurm work is a script only (its environment is Rackplane's own), so
    an `env` is an unknown key there (the script itself is policed by Slurm's device cgroup, not read)."""
    with pytest.raises(WorkError, match='"CUDA_VISIBLE_DEVICES" selects GPUs'):
        validate_work("kubernetes", {"image": IMAGE, "env": {"CUDA_VISIBLE_DEVICES": "0"}})
    with pytest.raises(WorkError, match='unknown keys for a Slurm job: "env"'):
        validate_work("slurm", {"script": "#!/bin/bash\nsrun true\n", "env": {"CUDA_VISIBLE_DEVICES": "0"}})


def test_the_shared_rule_covers_a_backend_whose_own_rule_forgets(monkeypatch):
    """core.workloads.validate_work checks the `env` of whatever a backend's rule returns."""
    from core import workloads

    monkeypatch.setattr(workloads, "_RULES", dict(workloads._RULES))
    register_work_validator("lenient", lambda work: dict(work))
    assert "lenient" in {rule.backend for rule in work_rules()}
    assert validate_work("lenient", {"env": {"OMP_NUM_THREADS": "8"}}) == {"env": {"OMP_NUM_THREADS": "8"}}
    with pytest.raises(WorkError, match='"Nvidia_Visible_Devices" selects GPUs'):
        validate_work("lenient", {"env": {"Nvidia_Visible_Devices": "all"}})
