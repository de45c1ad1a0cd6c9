"""Slurm accounting for real: Rackplane's push writes department QOS, the account tree and who may submit into
the testbed's slurmdbd (MariaDB) through slurmrestd's /slurmdb/ endpoints (at the API version the job backend
negotiated: v0.0.42 on 24.11, v0.0.45 on 26.05), and slurmctld enforces them
(AccountingStorageEnforce=associations,limits,qos; scripts/slurm-testbed.sh).

The portal's side (fixture `site`): department `optics<n>` (guarantee 4: its QOS GrpTRES=gres/gpu=4;
limit 8: its account's GrpTRES, which holds the jobs of its `optics<n>--borrowed` QOS, a QOS without a GPU
limit) with project `lens`; ada is a member of both, grace leads `photonics<n>` only; eve is a Unix user of
the nodes in no department. Jobs here go through the job backend directly, as the portal's dispatch sends
them (integrations.dispatch.job_qos picks the QOS, tests/integrations/test_dispatch_qos.py), because
Rackplane's own admission never dispatches a job over the guarantee or the limit: the point is that Slurm
holds it by itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import pytest

from integrations.jobs import BackendJobState, BackendRejected, DispatchRequest
from integrations.slurm.jobs import SlurmJobBackend
from tests.integration.conftest import carve_and_run_jobs, give_identity, tenant_people

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

_ids = iter(range(int(time.time()) % 100_000 * 1000 + 700_000_000, 10**9))


def sacctmgr(testbed, *args: str) -> list[str]:
    done = subprocess.run(
        [str(testbed.bin / "sacctmgr"), "-n", "-P", *args], capture_output=True, text=True, check=True
    )
    return sorted(line for line in done.stdout.splitlines() if line)


def associations(testbed, *accounts: str) -> list[str]:
    """`account|user|parent|QOS|default QOS|GrpTRES` of the accounts' associations, as sacctmgr shows them."""
    rows = sacctmgr(testbed, "show", "assoc", "format=account,user,parentname,qos,defaultqos,grptres")
    return [row for row in rows if row.split("|")[0] in accounts]


def fairshares(testbed, *accounts: str) -> dict[str, str]:
    """Account -> its association's Fairshare (raw shares), as sacctmgr shows them."""
    rows = sacctmgr(testbed, "show", "assoc", "format=account,user,fairshare")
    return {a: share for a, user, share in (row.split("|") for row in rows) if a in accounts and not user}


def qos(testbed, name: str) -> list[str]:
    return sacctmgr(testbed, "show", "qos", f"name={name}", "format=name,grptres")


def slurmdbd_snapshot(testbed) -> tuple[list[str], ...]:
    return (
        sacctmgr(testbed, "show", "qos", "format=name,grptres,description"),
        sacctmgr(testbed, "show", "account", "format=account,description,organization"),
        sacctmgr(testbed, "show", "user", "format=user,defaultaccount"),
        sacctmgr(
            testbed,
            "show",
            "assoc",
            "format=cluster,account,user,parentname,qos,defaultqos,grptres,fairshare",
        ),
    )


def push(capture, reason: str, *, force: bool = False, testbed=None):
    """One push to the testbed target, run at once; it must succeed. With `testbed`, a push that finds
    slurmctld's process gone (the 24.11.5 crash after a reconfigure that registers the MIG profiles' TRES:
    SlurmTestbed.restart_dead_controller) starts it once and pushes again."""
    from integrations import pushes
    from integrations.models import PushStatus

    for attempt in (1, 2):
        with capture(execute=True):
            [done] = pushes.queue_pushes(reason=reason, force=force)
        done.refresh_from_db()
        if done.status == PushStatus.SUCCEEDED or attempt == 2 or testbed is None:
            break
        if "Unable to contact slurm controller" not in done.error or not testbed.restart_dead_controller():
            break
    assert done.status == PushStatus.SUCCEEDED, done.error
    return done


@dataclass(frozen=True)
class Site:
    push: Any  # the first push, which wrote the accounting
    department: Any  # the Department of D
    d: str  # optics<n>: the department (account and QOS), guarantee 4, limit 8
    p: str  # optics<n>--lens: its project's account, GPU limit 4
    g: str  # photonics<n>: grace's department


@pytest.fixture
def site(slurm_testbed, testbed_target, django_capture_on_commit_callbacks):
    """gb-r01 carved 2x9 and pushed, the target with slurmrestd; department optics<n> (4 to 8) with project
    lens and ada in both, photonics<n> led by grace; then one push, which writes the accounting. slurmdbd
    outlives each test's database: every test names its departments afresh, so its first push starts from
    nothing."""
    from core.access import Role
    from tenancy.projects import create_project, set_project_member
    from tests.factories import make_department, make_member, make_user

    carve_and_run_jobs(testbed_target, django_capture_on_commit_callbacks)
    n = next(_ids) % 1_000_000
    people = tenant_people()
    admin = make_user("platform-admin", staff=True, posix=False)
    optics = make_department(f"Optics {n}", slug=f"optics{n}", guaranteed_gpus=4, limit_gpus=8)
    photonics = make_department(f"Photonics {n}", slug=f"photonics{n}", guaranteed_gpus=8)
    lens = create_project(admin, optics, name="Lens", slug="lens", guaranteed_gpus=4, limit_gpus=4)
    ada = make_member("ada-portal", optics)
    give_identity(ada, people["ada"])
    set_project_member(admin, lens, ada)
    grace = make_member("grace-portal", photonics, role=Role.LEAD)
    give_identity(grace, people["grace"])
    first = push(django_capture_on_commit_callbacks, "accounting for optics", force=True)
    yield Site(first, optics, optics.slug, f"{optics.slug}--lens", photonics.slug)
    # Whatever a test left running (as root: any user's).
    accounts = f"{optics.slug},{optics.slug}--lens,{photonics.slug}"
    subprocess.run([str(slurm_testbed.bin / "scancel"), "-A", accounts], check=False)


def backend() -> SlurmJobBackend:
    return SlurmJobBackend(
        os.environ["RACKPLANE_SLURMRESTD_URL"],
        os.environ.get("RACKPLANE_SLURM_REST_USER", "slurm"),
        jwt_key_file=os.environ["RACKPLANE_SLURM_JWT_KEY"],
        accounting=True,  # the department's account and QOS, as a target with `accounting` ticked sends them
        timeout=40,
    )


def request(person, host: str, department: str, project: str = "", qos: str = "") -> DispatchRequest:
    return DispatchRequest(
        job_id=next(_ids),
        name="accounting",
        department=department,
        project=project,
        priority_class="train",
        hostnames=(host,),
        gpus_per_tray=4,
        time_limit_minutes=5,
        work={"script": "#!/bin/bash\nsleep 300\n"},
        service_tier="gpu",
        run_as=person,
        qos=qos,
    )


def squeue(testbed, backend_id: str) -> tuple[str, str, str, str]:
    """(state, reason, account, QOS) as slurmctld shows the job."""
    out = subprocess.run(
        [str(testbed.bin / "squeue"), "-h", "-t", "all", "-j", backend_id, "-o", "%T|%r|%a|%q"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    state, reason, account, qos_name = out.split("|")
    return state, reason, account, qos_name


def wait_state(testbed, backend_id: str, state: str, timeout: float = 60) -> tuple[str, str, str, str]:
    deadline = time.monotonic() + timeout
    while (shown := squeue(testbed, backend_id))[0] != state:
        assert time.monotonic() < deadline, f"job {backend_id}: {shown}"
        time.sleep(0.5)
    return shown


def test_a_push_writes_the_account_tree_and_a_second_push_changes_nothing(
    slurm_testbed, site, django_capture_on_commit_callbacks
):
    d, p, g = site.d, site.p, site.g
    # Two QOS a department: its own at the guarantee, the borrowed one without a GPU limit of its own.
    assert qos(slurm_testbed, d) == [f"{d}|gres/gpu=4"]
    assert qos(slurm_testbed, f"{d}--borrowed") == [f"{d}--borrowed|"]
    assert qos(slurm_testbed, g) == [f"{g}|gres/gpu=8"]
    assert qos(slurm_testbed, f"{g}--borrowed") == [f"{g}--borrowed|"]
    both, g_both = f"{d},{d}--borrowed", f"{g},{g}--borrowed"
    assert associations(slurm_testbed, d, p, g) == sorted(
        [
            f"{p}|ada||{both}|{d}|",
            f"{p}||{d}|{both}|{d}|gres/gpu=4",
            f"{d}|ada||{both}|{d}|",
            f"{d}||root|{both}|{d}|gres/gpu=8",
            f"{g}|grace||{g_both}|{g}|",
            f"{g}||root|{g_both}|{g}|",
        ]
    )
    for line in (
        f"slurmdbd: QOS {d}: added, GrpTRES=gres/gpu=4",
        f"slurmdbd: QOS {d}--borrowed: added, GrpTRES=gres/gpu=none",
        f"slurmdbd: account {d}: added under root, QOS {both}, GrpTRES=gres/gpu=8, fairshare 4",
        f"slurmdbd: account {p}: added under {d}, QOS {both}, GrpTRES=gres/gpu=4, fairshare 4",
        f"slurmdbd: user ada: may submit under {p}",
        f"slurmdbd: user grace: may submit under {g}",
    ):
        assert line in site.push.log
    # Each account's fairshare is its guarantee in GPUs: Slurm's priority weighs usage against it.
    assert fairshares(slurm_testbed, d, p, g) == {d: "4", p: "4", g: "8"}

    before = slurmdbd_snapshot(slurm_testbed)
    again = push(django_capture_on_commit_callbacks, "the same again", force=True)
    assert "slurmdbd already holds the 4 QOS, 3 accounts and 3 user associations" in again.log
    assert "slurmdbd unchanged" in again.log
    assert not [line for line in again.log.splitlines() if "slurmdbd: " in line]
    assert slurmdbd_snapshot(slurm_testbed) == before


def held(testbed, backend_id: str) -> tuple[str, str, str, str]:
    """The job as slurmctld shows it once a scheduling pass has looked at it (its reason is set)."""
    deadline = time.monotonic() + 60
    while (shown := squeue(testbed, backend_id))[1] == "None":
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    return shown


def test_a_job_over_its_departments_guarantee_qos_or_its_limit_is_held_by_slurm(slurm_testbed, site):
    ada = tenant_people()["ada"]
    slurm = backend()
    d, borrowed = site.d, f"{site.d}--borrowed"
    first = slurm.submit(request(ada, "gb-r01-t01", d))
    assert wait_state(slurm_testbed, first, "RUNNING")[2:] == (d, d)
    # The project's job runs under the project's account, and the department's QOS (its guarantee, 4 GPUs)
    # holds them both.
    second = slurm.submit(request(ada, "gb-r01-t02", d, project="lens"))
    state, reason, account, qos_name = held(slurm_testbed, second)
    assert (state, account, qos_name) == ("PENDING", site.p, d)
    assert reason.startswith("QOSGrpGRES"), reason
    assert slurm.status([second], run_as=ada)[second].state == BackendJobState.PENDING
    # Beyond the guarantee the department borrows under its borrowed QOS, up to its limit (8 GPUs): that
    # QOS sets no GPU limit, so its account's association holds it, counting all the department's jobs.
    third = slurm.submit(request(ada, "gb-r01-t03", d, qos=borrowed))
    assert wait_state(slurm_testbed, third, "RUNNING")[2:] == (d, borrowed)
    fourth = slurm.submit(request(ada, "gb-r01-t04", d, qos=borrowed))
    state, reason, account, qos_name = held(slurm_testbed, fourth)
    assert (state, account, qos_name) == ("PENDING", d, borrowed)
    assert reason.startswith("AssocGrpGRES"), reason

    slurm.cancel(fourth, run_as=ada)
    slurm.cancel(first, run_as=ada)  # 4 GPUs free again under the QOS: Slurm starts the held one
    wait_state(slurm_testbed, second, "RUNNING")
    slurm.cancel(second, run_as=ada)
    slurm.cancel(third, run_as=ada)


def test_a_person_without_an_association_is_refused_by_slurm(slurm_testbed, site):
    people = tenant_people()
    slurm = backend()
    # grace may submit under her department, not under optics: slurmctld refuses her job there.
    with pytest.raises(BackendRejected, match="Invalid account"):
        slurm.submit(request(people["grace"], "gb-r01-t03", site.d))
    # eve is a Unix user of the nodes whom no department lets submit: refused under any account.
    eve = people["eve"]
    assert not sacctmgr(slurm_testbed, "show", "assoc", "user=eve", "format=account")
    for department in (site.d, site.g):
        with pytest.raises(BackendRejected, match="Invalid account"):
            slurm.submit(request(eve, "gb-r01-t04", department))


def test_a_guarantee_and_limit_change_and_a_member_leaving_reach_slurmdbd_with_the_next_push(
    slurm_testbed, site, django_capture_on_commit_callbacks
):
    from tenancy.models import Department, Membership
    from tenancy.services import save_department

    d, p = site.d, site.p
    department = Department.objects.get(pk=site.department.pk)
    department.guaranteed_gpus, department.limit_gpus = 8, 12
    with django_capture_on_commit_callbacks(execute=True):
        save_department(department)  # integrations.signals: a rendered field changed, a push follows
    assert qos(slurm_testbed, d) == [f"{d}|gres/gpu=8"]  # the new guarantee
    assert qos(slurm_testbed, f"{d}--borrowed") == [f"{d}--borrowed|"]
    assert f"{d}||root|{d},{d}--borrowed|{d}|gres/gpu=12" in associations(slurm_testbed, d)
    assert fairshares(slurm_testbed, d)[d] == "8"  # the new guarantee

    # ada leaves the department (and so may no longer use lens): the next push takes her associations there
    # away. Her default account stays the testbed's (conftest.ensure_testbed_people).
    Membership.objects.filter(user__username="ada-portal").delete()
    done = push(django_capture_on_commit_callbacks, "ada left", force=True)
    assert f"slurmdbd: user ada: may no longer submit under {p}" in done.log
    assert f"slurmdbd: user ada: may no longer submit under {d}" in done.log
    assert [row for row in associations(slurm_testbed, d, p) if "|ada|" in row] == []
    with pytest.raises(BackendRejected, match="Invalid account"):
        backend().submit(request(tenant_people()["ada"], "gb-r01-t05", d))


def test_a_partition_dedicated_to_a_new_department_allows_its_qos_from_the_first_push(
    slurm_testbed, site, django_capture_on_commit_callbacks
):
    """One push makes the department's two QOS and dedicates a partition to it (`AllowQos=<its QOS>`). The
    QOS are written to slurmdbd before the files: slurmctld drops an AllowQos value it does not know when it
    loads the file ("Ignoring invalid Allow/DenyQOS value"), which would leave the partition open to any QOS
    until the next reconfigure."""
    from inventory.models import NVLinkPartition
    from tenancy.services import dedicate_partition
    from tests.factories import make_department

    n = next(_ids) % 1_000_000
    owner = make_department(f"Metrology {n}", slug=f"metrology{n}", guaranteed_gpus=36, limit_gpus=36)
    partition = NVLinkPartition.objects.filter(rack__name="gb-r01").order_by("clique_id").first()
    log = slurm_testbed.log_dir / "slurmctld.log"
    offset = log.stat().st_size
    dedicate_partition(owner, partition)
    done = push(django_capture_on_commit_callbacks, "dedicate a partition", force=True)
    shown = subprocess.run(
        [slurm_testbed.scontrol, "-o", "show", "partitions"], capture_output=True, text=True, check=True
    ).stdout
    [line] = [row for row in shown.splitlines() if f"AllowQos={owner.slug},{owner.slug}--borrowed " in row]
    with log.open("rb") as handle:
        handle.seek(offset)
        written = handle.read().decode(errors="replace")
    assert f"Ignoring invalid Allow/DenyQOS value: {owner.slug}" not in written, line  # either of them
    assert f"slurmdbd: QOS {owner.slug}: added, GrpTRES=gres/gpu=36" in done.log
    assert done.log.index("slurmdbd: QOS") < done.log.index("reconfiguring slurmctld")


# --- MIG slices (issue 30) ------------------------------------------------------------------------------


def tres_set(row: str) -> set[str]:
    """The TRES of a sacctmgr `name|grptres` row, as a set (slurmdbd orders them by TRES id)."""
    return set(row.split("|")[1].split(","))


def test_slurmdbd_takes_a_limit_per_mig_profile_and_a_slice_job_within_it_runs(
    slurm_testbed, testbed_target, django_capture_on_commit_callbacks
):
    """A department guaranteed 1 GPU (limit 3) on a fleet with one all-balanced tray (8 x 1g.23gb,
    4 x 2g.47gb, 4 x 3g.93gb): the push writes its QOS GrpTRES gres/gpu:<profile> at the guarantee in each
    profile's slices (7, 3 and 2: integrations.state.slurm_gpu_limits) and its account's at the limit (the
    tray's 8, 4 and 4), slurmdbd stores them and a second push sends nothing. The profiles' typed TRES
    exist because slurm.conf lists them in AccountingStorageTRES (scripts/slurm-testbed.sh), as the account
    script tells a site. A slice job borrowing under the department's borrowed QOS runs: its account's
    limits hold it. It runs in the tray's MIG partition (`gpu--mig`, OverSubscribe=NO), charged its two
    slices only (in the whole-tray partitions Slurm charged it every GRES of the node: 16 gres/gpu)."""
    from tenancy.models import Department
    from tenancy.services import save_department
    from tests.factories import make_member, mig_tray
    from tests.integration.test_slurm_mig import _mig_gres_conf, _wait_idle, _wait_schedulable

    hosts = slurm_testbed.hostnames()
    n = next(_ids) % 1_000_000
    d = f"slices{n}"
    department = save_department(Department(name=f"Slices {n}", slug=d, guaranteed_gpus=1, limit_gpus=3))
    person = tenant_people()["ada"]
    give_identity(make_member("ada-portal", department), person)
    mig_host = "gb-r01-t07"
    mig_tray(mig_host)
    started: list[str] = []
    slurm = backend()
    with _mig_gres_conf(slurm_testbed, mig_host, hosts):
        carve_and_run_jobs(testbed_target, django_capture_on_commit_callbacks)  # node lines, QOS (sacctmgr)
        assert "gpu:3g.93gb:4" in _wait_idle(slurm_testbed, mig_host)
        first = push(
            django_capture_on_commit_callbacks,
            "accounting through slurmrestd",
            force=True,
            testbed=slurm_testbed,
        )
        assert f"account {d}: added under root" in first.log
        (own,) = qos(slurm_testbed, d)
        assert tres_set(own) == {
            "gres/gpu=13",  # 1 GPU + the 12 slices below: Slurm counts a MIG device as a gres/gpu too
            "gres/gpu:1g.23gb=7",
            "gres/gpu:2g.47gb=3",
            "gres/gpu:3g.93gb=2",
        }
        (account,) = [row for row in associations(slurm_testbed, d) if row.split("|")[1] == ""]
        assert set(account.split("|")[5].split(",")) == {
            "gres/gpu=19",  # 3 GPUs + 16 slices
            "gres/gpu:1g.23gb=8",
            "gres/gpu:2g.47gb=4",
            "gres/gpu:3g.93gb=4",
        }
        again = push(django_capture_on_commit_callbacks, "the same again", force=True, testbed=slurm_testbed)
        assert not [line for line in again.log.splitlines() if f" {d}" in line and "slurmdbd: " in line]
        _wait_schedulable(slurm_testbed, mig_host, "gpu--mig", "gpu:3g.93gb:2")

        slices = dataclasses.replace(
            request(person, mig_host, d, qos=f"{d}--borrowed"),
            service_tier="gpu--mig",
            gpus_per_tray=0,
            mig_profile="3g.93gb",
            mig_slices=2,
        )
        try:
            started.append(slurm.submit(slices))
            assert wait_state(slurm_testbed, started[0], "RUNNING")[2:] == (d, f"{d}--borrowed")
            shown = subprocess.run(
                [slurm_testbed.scontrol, "show", "job", started[0]],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            alloc = set(re.search(r"AllocTRES=(\S+)", shown).group(1).split(","))
            assert {"gres/gpu=2", "gres/gpu:3g.93gb=2"} <= alloc, shown
            assert not any(t.startswith("gres/gpu:1g") for t in alloc), shown
        finally:
            for backend_id in started:
                slurm.cancel(backend_id, run_as=person)
