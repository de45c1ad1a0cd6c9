"""Demo tenants on top of the demo inventory: departments, leads and members (here), running, pending and
finished jobs (portal.demo.jobs), synthetic GPU telemetry and 30 days of quota history (portal.demo.history),
so `make run` shows live dashboards. The simulated agents that keep it reporting: portal.demo.agents.

Deterministic for a given seed. Scales with the inventory: guarantees are fractions of the schedulable
GPUs and about two thirds of them run jobs. The demo is a state the scheduler agrees with
(tests/portal/test_demo_truth.py):

* running jobs are placed by the scheduler's own placement engine, on schedulable GPUs of trays whose fabric
  is settled, each within its time limit; a department's oldest jobs hold its guarantee and the newer ones
  borrow (`tenancy.quota.in_quota_prefix`, the rule every pass applies), and only training borrows;
* partitions dedicated to a department hold only that department's jobs;
* every job was submitted before it was placed, placed before it started, and finished in the past;
  its name says its class (train-*, inference-*, build-*), never its state;
* pending jobs are ones the submission checks accept; the first pass (`manage.py seed_demo` runs it) starts
  those that fit and gives the others their true reason;
* the quota history ends with a snapshot taken by the real snapshot code.
"""

import random
import secrets
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.access import Role
from core.hardware import GPUS_PER_TRAY
from inventory.models import NVLinkPartition
from portal.demo.history import seed_history, seed_telemetry
from portal.demo.jobs import BUILD, INFERENCE, TRAIN, seed_jobs
from scheduling.choices import Topology
from tenancy.choices import PosixSource
from tenancy.models import DedicatedPartition, Department, Membership, PosixAccount, TenancySettings
from tenancy.services import save_department, schedulable_gpus


@dataclass(frozen=True)
class DemoDepartment:
    name: str
    slug: str
    share: float  # of schedulable GPUs, guaranteed
    weight: str
    limit_share: float | None
    priority: int
    lead: str
    members: tuple[str, ...]
    busy: float  # fraction of its guarantee its running jobs use (above 1 = borrowing)
    work: tuple[str, ...]  # classes of its in-quota jobs (repeats weigh); borrowed jobs are training
    queue: tuple[tuple[str, str, int, str], ...]  # pending jobs: (class, kind, GPUs, topology)


DEPARTMENTS = (
    DemoDepartment(
        "Research",
        "research",
        0.30,
        "2.00",
        None,
        1,
        "alice",
        ("bob", "erin"),
        1.35,
        (TRAIN, TRAIN, TRAIN, BUILD),
        (
            (TRAIN, "pretrain", 72, Topology.RACK),
            (TRAIN, "sweep", 8, Topology.PARTITION),
            (BUILD, "notebook", 1, Topology.ANY),
        ),
    ),
    DemoDepartment(
        "Inference",
        "inference",
        0.15,
        "1.00",
        0.25,
        3,
        "carol",
        ("frank",),
        0.85,
        (INFERENCE, INFERENCE, INFERENCE, BUILD),
        ((INFERENCE, "serve-chat", 16, Topology.PARTITION), (BUILD, "profile", 2, Topology.ANY)),
    ),
    DemoDepartment(
        "Vision",
        "vision",
        0.15,
        "1.00",
        0.30,
        2,
        "dave",
        ("grace",),
        0.70,
        (TRAIN, TRAIN, INFERENCE, BUILD),
        ((BUILD, "notebook", 1, Topology.ANY), (TRAIN, "finetune", 32, Topology.PARTITION)),
    ),
    DemoDepartment(
        "Platform",
        "platform",
        0.10,
        "0.50",
        0.15,
        0,
        "heidi",
        ("ivan",),
        0.40,
        (BUILD, BUILD, TRAIN),
        ((TRAIN, "burn-in", 72, Topology.RACK), (BUILD, "compile", 4, Topology.ANY)),
    ),
)


@dataclass(frozen=True)
class TenantSeedResult:
    departments: int
    users: dict[str, str]  # username -> role description
    password: str
    jobs: int


@transaction.atomic
def seed_tenants(seed: int = 7, password: str | None = None) -> TenantSeedResult:
    """Departments, people, jobs, telemetry and history on the seeded inventory. Expects no departments."""
    rng = random.Random(seed)
    now = timezone.now().replace(second=0, microsecond=0)
    TenancySettings.load()
    capacity = schedulable_gpus()
    password = password or secrets.token_urlsafe(12)
    users = {}
    departments = []
    for spec in DEPARTMENTS:
        guaranteed = int(capacity * spec.share) // 4 * 4
        department = save_department(
            Department(
                name=spec.name,
                slug=spec.slug,
                guaranteed_gpus=guaranteed,
                over_quota_weight=Decimal(spec.weight),
                limit_gpus=None
                if spec.limit_share is None
                else max(guaranteed, int(capacity * spec.limit_share)),
                priority=spec.priority,
            )
        )
        departments.append((spec, department))
        for username, role in [(spec.lead, Role.LEAD)] + [(member, Role.MEMBER) for member in spec.members]:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                user = get_user_model().objects.create_user(username, f"{username}@example.com", password)
            else:  # seeded again after --reset: the password written to the logins file is the one that works
                user.set_password(password)
                user.save(update_fields=["password"])
            Membership.objects.create(user=user, department=department, role=role)
            users[username] = f"{role.label.lower()} of {spec.name}"
            _give_posix_account(user)

    # Inference owns the carved rack's second partition as a dedicated service tier.
    inference = departments[1][1]
    tier = NVLinkPartition.objects.filter(name="p2").order_by("rack__name").first()
    if tier is not None and tier.trays.count() * GPUS_PER_TRAY <= inference.guaranteed_gpus:
        DedicatedPartition.objects.create(department=inference, partition=tier)

    jobs = seed_jobs(rng, now, departments)
    seed_telemetry(rng, now)
    seed_history(rng, now, departments)
    return TenantSeedResult(departments=len(departments), users=users, password=password, jobs=jobs)


DEMO_FIRST_UID = (
    20001  # demo people's uids and gids, in the order they are made (ids a site leaves to people)
)


def _give_posix_account(user) -> None:
    """A demo person's POSIX identity, as an administrator maps it (login name = username): their jobs run
    as it on a live backend, and the rendered job files show it."""
    if PosixAccount.objects.filter(user=user).exists():
        return
    number = max(PosixAccount.objects.aggregate(top=Max("uid"))["top"] or 0, DEMO_FIRST_UID - 1) + 1
    PosixAccount.objects.create(
        user=user, name=user.get_username(), uid=number, gid=number, groups=[], source=PosixSource.ADMIN
    )


def write_demo_logins(path: Path, result: TenantSeedResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{username} ({role}): {result.password}" for username, role in result.users.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
