"""The cluster a process keeps between passes (scheduling.pass_cache) is always the one a cold read builds.

On PostgreSQL, where triggers (migration scheduling 0010) log every transaction that changes what the cluster
is built from. Each test compares the kept cluster with a cold read after changes of every kind: jobs
placed, ended, cancelled and preempted (caught up by the kept cluster), and inventory changes made behind
the ORM's back (a raw UPDATE: a cold read). On SQLite there is nothing to keep; only the column check runs.
"""

import dataclasses
import gc
import inspect
import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from core import apart as core_apart
from core.fabric import Fabric
from inventory.choices import FabricState, GpuHealth, TrayState
from inventory.fabric import current_fabric
from inventory.models import ComputeTray, Gpu, NVLinkPartition
from scheduling import pass_cache, pass_cluster, pass_inputs
from scheduling.choices import JobState, Topology
from scheduling.engine.cluster import Cluster, TrayColumns
from scheduling.models import Allocation, Job
from scheduling.services.actions import cancel_job, finish_job
from scheduling.services.passes import run_pass
from tenancy.models import Department
from tests.factories import free_trays, make_department, make_job

postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the kept cluster needs PostgreSQL's triggers"
)


def picture(state: pass_cluster.ClusterState) -> dict:
    """Everything a pass reads of a cluster state, comparable between two builds: every attribute of the
    engine's cluster (whatever the engine keeps there; dicts compare without their order) and the GPUs. The
    order in which partitions reached their buckets is history (a build and a kept cluster reach the same
    buckets by different moves): the buckets' insertion order, and the move counts the engine keeps beside it
    (`moves`, `part_moved`: unit packing's tie-break), are left out alike."""
    history = ("moves", "part_moved")
    return {
        "cluster": {name: value for name, value in vars(state.cluster).items() if name not in history},
        "tray_pk": state.tray_pk,
        "tray_gpus": state.tray_gpus,
        "gpu_tray": state.gpu_tray,
        "allocated": state.allocated,
        "held_unschedulable": state.held_unschedulable,
        "held": {pk: (h.placement, h.unschedulable, sorted(h.gpus)) for pk, h in state.held.items()},
    }


def kept_is_cold(expect_cold: bool | None = None):
    """Run a pass, then read the cluster as the next pass will (the kept one, caught up with what this
    pass wrote): it is the one a cold read builds now. `expect_cold`: whether the pass itself had to read
    cold (None: either)."""
    summary = run_pass()
    if expect_cold is not None:
        assert summary.cold is expect_cold
    with CaptureQueriesContext(connection) as queries:
        state = pass_cache.read()
    # Caught up with the pass's starts (noted by the pass: their allocations not read again) and preemptions:
    # one check, the rows of the jobs changed since, the allocations of those changed by hand (made here).
    assert state.cold is False and len(queries) <= 3, [query["sql"] for query in queries]
    assert state.changed_jobs is not None  # read from the job log, not every running job
    assert_as_cold(state)
    pass_cache.keep(state)
    return summary


def assert_as_cold(state: pass_cluster.ClusterState) -> None:
    """The kept cluster and running jobs are the ones a cold read gives now."""
    rows = {row[0]: row for row in pass_inputs.read_running()}
    assert state.running_rows == rows
    placed = {pk: row[-1] for pk, row in rows.items()}
    assert picture(state) == picture(pass_cluster.build(placed))


def pending(department, name: str, gpus: int, topology=Topology.ANY) -> Job:
    return Job.objects.create(department=department, name=name, gpus=gpus, topology=topology)


# --- the triggers watch what the cold read reads ------------------------------------------------------


def columns_read(sql: str) -> set[tuple[str, str]]:
    """("table", "column") of every column an SQL statement names, its aliases (U0, T4) resolved."""
    aliases = {alias: table for table, alias in re.findall(r'"(\w+)" (U\d+|T\d+)\b', sql)}
    found = set()
    for owner, column in re.findall(r'"?(\w+)"?\."(\w+)"', sql):
        found.add((aliases.get(owner, owner), column))
    return found


def test_the_cached_columns_are_every_column_the_cold_read_reads(db):
    read = set()
    for query in pass_cluster.INVENTORY_QUERIES:
        read |= columns_read(str(query().query))
    cached = {(table, column) for table, columns in pass_cache.CACHED_COLUMNS.items() for column in columns}
    # A row's id never changes; its insert and delete are logged whatever the columns.
    assert {(table, column) for table, column in read if column != "id"} <= cached, read
    assert {table for table, _ in read} == set(pass_cache.CACHED_COLUMNS), read


def test_a_rack_re_read_reads_the_rows_of_those_racks_only(db):
    """Every select of a re-read's queries (subqueries too) is limited to the racks read again: the
    unsettled-fabric check once looked at every GPU of the fleet (720,000 at 10,000 racks) for one rack."""
    for query in pass_cluster.INVENTORY_QUERIES:
        sql = str(query({5}).query)
        assert sql.count("SELECT") == sql.count('."rack_id" IN (5)') >= 1, (query.__name__, sql)


@postgresql
def test_the_installed_triggers_watch_the_cached_columns(db):
    # What the migrations installed (a change to the columns read needs a migration that re-creates them).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgname, t.tgargs FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname LIKE 'scheduling_inventory_changed%%'"
        )
        rows = cursor.fetchall()
    watched = {
        table: tuple(bytes(arguments).decode().split("\x00")[:-1])
        for table, name, arguments in rows
        if name.endswith("_update")
    }
    assert watched == pass_cache.CACHED_COLUMNS | pass_cache.ALLOCATION_COLUMNS | pass_cache.FABRIC_COLUMNS
    assert {table for table, name, _ in rows if name.endswith("_rows")} == set(
        pass_cache.CACHED_COLUMNS | pass_cache.FABRIC_COLUMNS
    )


def test_the_fabric_columns_are_every_column_the_fabric_read_reads(db):
    """The fabric in use (inventory.fabric.current_fabric) is read with a cold read only: the triggers of
    migration scheduling 0030 must watch every column its query reads (a rack's name: the cached columns)."""
    from inventory.models import RackPlace

    sql = str(  # its order (the model's) is not what it reads: a Fabric is a mapping
        RackPlace.objects.filter(fabric__in_use=True)
        .order_by()
        .values_list("rack__name", "unit__parent__name", "unit__name")
        .query
    )
    watched = {
        (table, column)
        for table, columns in (pass_cache.FABRIC_COLUMNS | pass_cache.CACHED_COLUMNS).items()
        for column in columns
    }
    read = {(table, column) for table, column in columns_read(sql) if column != "id"}
    assert read <= watched, read
    # The same query as the seam's (a change there needs this list and the migration changed too).
    assert inspect.getsource(current_fabric).count('"rack__name", "unit__parent__name", "unit__name"') == 1


@postgresql
def test_a_change_to_a_cached_column_is_logged_and_others_are_not(demo_inventory):
    def logged() -> int | None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT seq FROM scheduling_inventorychange WHERE xid = txid_current_if_assigned()"
            )
            row = cursor.fetchone()
        return row[0] if row else None

    tray = ComputeTray.objects.order_by("pk").first()
    gpu = Gpu.objects.filter(tray=tray).order_by("pk").first()
    before = logged()
    ComputeTray.objects.filter(pk=tray.pk).update(last_report_at=timezone.now(), state_reason="noted")
    Gpu.objects.filter(pk=gpu.pk).update(last_report_at=timezone.now(), serial="1650924060001")
    tray.save()  # every column written, none changed
    assert logged() == before
    for model, pk, values in (
        (ComputeTray, tray.pk, {"state": TrayState.DRAIN, "state_reason": "XID 79"}),
        (ComputeTray, tray.pk, {"fabric_problems": ["GPU 1 is registering"]}),
        (Gpu, gpu.pk, {"health": GpuHealth.UNHEALTHY}),
        (Gpu, gpu.pk, {"reported_clique_id": 4242}),
    ):
        seen = logged()
        model.objects.filter(pk=pk).update(**values)
        assert logged() is not None and logged() != seen, values


# --- the kept cluster is the cold one ----------------------------------------------------------------


@postgresql
def test_a_kept_cluster_catches_up_with_jobs_and_rereads_a_changed_inventory(demo_inventory):
    research = make_department("Research", guaranteed_gpus=64)
    vision = make_department("Vision", guaranteed_gpus=0)
    # Vision borrows every whole tray but the first twelve.
    trays = free_trays(100)
    borrowers = [
        make_job(vision, f"borrower-{n}", trays=[tray], over_quota=True) for n, tray in enumerate(trays[12:])
    ]
    for n in range(4):
        pending(research, f"small-{n}", 1 + n)
    pending(research, "gang", 16, Topology.PARTITION)
    pass_cache.forget()
    kept_is_cold(expect_cold=True)

    # Jobs come and go: the kept cluster catches up, no cold read.
    for n in range(3):
        pending(research, f"more-{n}", 4)
    kept_is_cold(expect_cold=False)
    running = list(Job.objects.filter(department=research, state=JobState.STARTING).order_by("pk"))
    finish_job(running[0], JobState.COMPLETED, "done")
    cancel_job(running[1])
    kept_is_cold(expect_cold=False)

    # A running job's GPU turns unhealthy behind the ORM's back: the inventory changed, a cold read (this
    # test is one transaction, whose inserts were logged for every rack: test_a_rack_re_read_* below reads
    # only the rack); the GPU still counts for the job holding it, and stops counting when that job ends.
    holder = running[2]
    [gpu] = Allocation.objects.filter(job=holder).values_list("gpu_id", flat=True)[:1]
    Gpu.objects.filter(pk=gpu).update(health=GpuHealth.UNHEALTHY)
    kept_is_cold(expect_cold=True)
    assert gpu in pass_cache.kept().allocated and gpu not in pass_cache.kept().gpu_tray
    finish_job(Job.objects.get(pk=holder.pk), JobState.FAILED, "XID 79")
    kept_is_cold(expect_cold=False)

    # In-quota work reclaims borrowed trays (the twelve hold Research's ~30 GPUs): preempted jobs leave.
    pending(research, "reclaim", 24, Topology.ANY)
    summary = kept_is_cold(expect_cold=False)
    assert summary.preempted >= 1
    assert Job.objects.filter(pk__in=[b.pk for b in borrowers], state=JobState.PENDING).exists()

    # A drained tray: an inventory change, a cold read (one transaction, as above).
    ComputeTray.objects.filter(pk=trays[-1].pk).update(state=TrayState.DRAIN, state_reason="XID 79")
    kept_is_cold(expect_cold=True)
    kept_is_cold(expect_cold=False)
    Job.objects.filter(pk=running[3].pk).update(placed_at=timezone.now() - timedelta(minutes=5))
    kept_is_cold(expect_cold=False)  # placed again (a new version): its allocations read again

    # Allocations changed by hand (the admin may): one moved to a free GPU, one deleted. Cold reads.
    moved = Allocation.objects.filter(job__state=JobState.STARTING).order_by("pk").first()
    free = (
        Gpu.objects.filter(tray__state=TrayState.UP, allocations__isnull=True)
        .exclude(health=GpuHealth.UNHEALTHY)
        .order_by("pk")
        .first()
    )
    Allocation.objects.filter(pk=moved.pk).update(gpu=free)
    kept_is_cold(expect_cold=True)
    Allocation.objects.filter(pk=moved.pk).delete()  # logged by job: its allocations read again
    kept_is_cold(expect_cold=False)
    kept_is_cold(expect_cold=False)


@postgresql
def test_a_change_rolled_back_after_the_read_is_not_kept(demo_inventory):
    tray = free_trays(1)[0]
    run_pass()
    with transaction.atomic():
        ComputeTray.objects.filter(pk=tray.pk).update(state=TrayState.DOWN, state_reason="no heartbeat")
        run_pass()  # reads the tray down
        index = pass_cache.kept().tray_index[tray.pk]
        assert pass_cache.kept().cluster.tray_cap[index] == 0
        transaction.set_rollback(True)
    kept_is_cold(expect_cold=True)  # what it had read was rolled back
    assert pass_cache.kept().cluster.tray_cap[index] == 4


@postgresql
def test_pruning_the_log_keeps_the_cluster_read_after_it(demo_inventory, monkeypatch):
    monkeypatch.setattr(pass_cache, "PRUNE_AT", 0)
    ComputeTray.objects.filter(pk=free_trays(1)[0].pk).update(state=TrayState.DRAIN, state_reason="XID 79")
    pass_cache.forget()
    kept_is_cold(expect_cold=True)  # prunes while reading cold
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq FROM scheduling_inventorychange WHERE xid = 0")
        assert cursor.fetchone() is not None
    kept_is_cold(expect_cold=False)


@postgresql
@pytest.mark.django_db(transaction=True)
def test_changes_committed_between_passes_are_read(demo_inventory):
    """Real commits (no test transaction around): the pass's own commit, then another transaction's."""
    research = make_department("Research", guaranteed_gpus=16)
    pending(research, "small", 2)
    pass_cache.forget()
    assert run_pass().cold is True
    assert run_pass().cold is False
    ComputeTray.objects.filter(pk=free_trays(1)[0].pk).update(last_report_at=timezone.now())
    assert run_pass().cold is False  # not a column the cluster reads
    tray = free_trays(1)[0]
    ComputeTray.objects.filter(pk=tray.pk).update(state=TrayState.DRAIN, state_reason="XID 79")  # committed
    assert kept_is_cold(expect_cold=False).reread == 1  # its rack read again, not the cluster
    assert pass_cache.kept().cluster.tray_cap[pass_cache.kept().tray_index[tray.pk]] == 0
    pending(research, "more", 4)
    assert kept_is_cold().cold is False


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_cluster_read_cold_is_frozen_out_of_the_collectors_reach_and_makes_no_cycles(demo_inventory):
    """A cold read to be kept freezes what lives once it is read (pass_cache.read): the kept cluster is no
    longer walked by the cyclic collector; a warm read freezes nothing. Safe only because the read makes no
    reference cycles and the kept state holds none: unfrozen and dropped, nothing is left to collect."""
    research = make_department("Research", guaranteed_gpus=16)
    pending(research, "small", 2)
    pass_cache.forget()
    gc.unfreeze()  # what earlier freezes in this process (a render's) moved away
    try:
        assert run_pass().cold is True
        cluster = pass_cache.kept().cluster
        assert gc.get_freeze_count() > 0
        assert not any(obj is cluster for obj in gc.get_objects())  # in the permanent generation
        after_cold = gc.get_freeze_count()
        pending(research, "more", 4)
        assert run_pass().cold is False
        assert gc.get_freeze_count() <= after_cold  # nothing frozen (some freed: the rows it replaced)
        gc.collect()  # the passes' own garbage, never frozen
    finally:
        gc.unfreeze()
    del cluster
    pass_cache.forget()
    assert gc.collect() == 0


# --- a cold read at once (core.apart) ------------------------------------------------------------------


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_cold_read_apart_builds_the_cluster_a_read_here_builds(demo_inventory, monkeypatch):
    """The inventory read on other connections while the allocations are read here builds what reading all
    of it here does, a running job's GPU turned unhealthy (held anyway: counted in its tray's capacity)
    too."""
    research = make_department("Research", guaranteed_gpus=16)
    one, two, three = free_trays(3)
    make_job(research, "small", trays=[one])
    make_job(research, "wide", trays=[two, three])  # committed: running jobs with allocations
    held_gpu = Allocation.objects.order_by("pk").first().gpu
    Gpu.objects.filter(pk=held_gpu.pk).update(health=GpuHealth.UNHEALTHY)
    placed = {pk: row[-1] for pk, row in {row[0]: row for row in pass_inputs.read_running()}.items()}
    apart_reads = []
    read_apart = core_apart._read_apart  # spied on, not replaced
    monkeypatch.setattr(core_apart, "_read_apart", lambda *args: apart_reads.append(1) or read_apart(*args))
    with transaction.atomic():
        mark = pass_cache._mark()
        assert mark.own_seq is None  # no inventory change of its own: may go apart
        apart = pass_cluster.build(placed, mark, apart=True)
        assert len(apart_reads) == 2  # both inventory groups on other connections
        here = pass_cluster.build(placed, mark, apart=False)
        assert len(apart_reads) == 2
    assert picture(apart) == picture(here)
    t = apart.tray_index[held_gpu.tray_id]
    assert apart.held_unschedulable[t] == 1
    assert apart.cluster.tray_cap == [apart.capacity(t) for t in range(len(apart.tray_pk))]
    assert len(apart.held) == 2


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_cold_reads_allocations_by_job_are_the_ones_joined_to_their_gpus(demo_inventory):
    """PostgreSQL's cold read reads the running jobs' allocations a row per job and finds each GPU's tray
    in the inventory it read (pass_cluster.group_job_allocations), not by the database's join to 720,000
    GPUs: the placements, the GPUs held off the schedulable ones (an unhealthy GPU under its job, a tray
    drained under its job) and the GPUs on no tray of the cluster (a tray taken out of its partition) are
    the ones the join gives (pass_cluster.group_allocations over allocation_rows)."""
    research = make_department("Research", guaranteed_gpus=16)
    one, two, three, four, five = free_trays(5)
    make_job(research, "small", trays=[one])
    make_job(research, "wide", trays=[two, three])
    make_job(research, "drained", trays=[four])
    make_job(research, "gone", trays=[five])
    unhealthy = Allocation.objects.filter(job__name="wide").order_by("pk").first().gpu
    Gpu.objects.filter(pk=unhealthy.pk).update(health=GpuHealth.UNHEALTHY)
    ComputeTray.objects.filter(pk=four.pk).update(state=TrayState.DRAIN, state_reason="XID 79")
    ComputeTray.objects.filter(pk=five.pk).update(partition=None)
    with transaction.atomic():
        state = pass_cluster.build({}, pass_cache._mark())
        joined = pass_cluster.group_allocations(pass_cluster.allocation_rows(), state, state.tray_index)

    def held(job_id):
        placement, unschedulable, gpus, last = joined[job_id]
        return (placement, unschedulable, sorted(gpus), last)

    by_job = {
        job_id: (h.placement, h.unschedulable, sorted(h.gpus), h.last) for job_id, h in state.held.items()
    }
    assert by_job == {job_id: held(job_id) for job_id in joined}
    jobs = {job.name: job.pk for job in Job.objects.filter(department=research)}
    index = state.tray_index
    assert by_job[jobs["wide"]][:2] == (
        ((index[two.pk], 4), (index[three.pk], 4)),
        ((index[unhealthy.tray_id], 1),),
    )
    assert by_job[jobs["drained"]][:2] == (((index[four.pk], 4),), ((index[four.pk], 4),))
    assert five.pk not in index and by_job[jobs["gone"]][:2] == ((), ()) and len(by_job[jobs["gone"]][2]) == 4


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_cold_read_after_its_own_transactions_inventory_change_reads_it(demo_inventory):
    """Other connections would not see the change (an exported snapshot leaves out the exporter's own):
    the pass's change log says there is one, and the inventory is read on the pass's own connection."""
    pass_cache.forget()
    tray = free_trays(1)[0]
    with transaction.atomic():
        ComputeTray.objects.filter(pk=tray.pk).update(state=TrayState.DRAIN, state_reason="XID 79")
        state = pass_cache.read()
        assert state.cold is True and state.mark.own_seq is not None
        assert state.cluster.tray_cap[state.tray_index[tray.pk]] == 0
        transaction.set_rollback(True)
    pass_cache.forget()


# --- the fabric in use is read with a cold read only (migration scheduling 0030) -----------------------


def _use_fabric(racks: dict[str, tuple[str, str]], label: str = "site") -> None:
    from inventory import fabric_import
    from inventory.discovery.fabric.site_file import parse

    text = "spine_group,unit,rack\n" + "".join(f"{s},{u},{r}\n" for r, (s, u) in racks.items())
    fabric_import.apply(parse(text, f"{label}.csv"), label=label, use=True)


def _fabric_queries(queries) -> list[str]:
    return [query["sql"] for query in queries if "inventory_rackplace" in query["sql"]]


@postgresql
def test_a_kept_cluster_keeps_the_fabric_in_use_until_the_fabric_changes(demo_inventory):
    """A warm pass reads no fabric (a row per placed rack: 10,000 at 10,000 racks) and still decides on the
    one in use: an import, a switch of the source in use and a placed rack's rename each make the next pass
    read cold, with the fabric as it is then."""
    from inventory.models import FabricImport, Rack

    research = make_department("Research", guaranteed_gpus=64)
    _use_fabric({"gb-r01": ("a", "su-1"), "gb-r02": ("a", "su-1"), "gb-r03": ("a", "su-2")})
    pass_cache.forget()
    assert run_pass().cold is True
    assert pass_cache.kept().cluster.fabric == current_fabric() != Fabric()
    pending(research, "small", 2)
    with CaptureQueriesContext(connection) as queries:
        assert run_pass().cold is False
    assert _fabric_queries(queries) == [], _fabric_queries(queries)
    assert pass_cache.kept().cluster.fabric == current_fabric()

    # Another import in use: the next pass reads cold, on the new fabric.
    _use_fabric({"gb-r01": ("b", "su-9"), "gb-r02": ("b", "su-8"), "gb-r03": ("b", "su-8")}, "other")
    with CaptureQueriesContext(connection) as queries:
        assert run_pass().cold is True
    assert len(_fabric_queries(queries)) == 1
    assert pass_cache.kept().cluster.fabric.racks["gb-r01"] == ("b", "su-9")
    assert run_pass().cold is False

    # The source in use switched off: no fabric (flat).
    FabricImport.objects.update(in_use=False)
    assert run_pass().cold is True
    assert pass_cache.kept().cluster.fabric == Fabric() == current_fabric()
    FabricImport.objects.filter(label="other").update(in_use=True)
    assert run_pass().cold is True and pass_cache.kept().cluster.fabric == current_fabric() != Fabric()

    # A placed rack renamed: the fabric names it anew.
    Rack.objects.filter(name="gb-r03").update(name="gb-r33")
    assert run_pass().cold is True
    assert pass_cache.kept().cluster.fabric.racks.get("gb-r33") == ("b", "su-8")
    assert pass_cache.kept().cluster.fabric == current_fabric()


@postgresql
def test_a_cluster_kept_on_a_given_fabric_is_not_taken_for_the_one_in_use(demo_inventory):
    """run_pass(fabric=...) (a test's, a what-if's) keeps a cluster on that fabric; the next pass on the
    inventory's must not take it for the one in use, even when the given fabric equals it."""
    pass_cache.forget()
    assert run_pass(fabric=Fabric(racks={"gb-r01": ("a", "su-1")})).cold is True
    assert run_pass().cold is True
    assert pass_cache.kept().cluster.fabric == Fabric()
    assert run_pass().cold is False
    assert run_pass(fabric=Fabric()).cold is False  # the same fabric given: the kept cluster serves it


# --- only the racks that changed are read again (migration scheduling 0027) ----------------------------


def _gpu_health(rng, trays):
    gpu = rng.choice(list(Gpu.objects.filter(tray__in=trays).values_list("pk", flat=True)))
    Gpu.objects.filter(pk=gpu).update(health=rng.choice([GpuHealth.UNHEALTHY, GpuHealth.HEALTHY]))


def _gpu_fabric(rng, trays):
    gpu = rng.choice(list(Gpu.objects.filter(tray__in=trays).values_list("pk", flat=True)))
    Gpu.objects.filter(pk=gpu).update(
        fabric_state=rng.choice([FabricState.IN_PROGRESS, FabricState.COMPLETED])
    )


def _held_gpu_unhealthy(rng, trays):
    # A GPU a running job holds turns unschedulable: the job keeps it, off the cluster's free GPUs (the
    # re-read finds such holders apart from the tray's job index).
    held = list(
        Allocation.objects.filter(job__state__in=[JobState.STARTING, JobState.RUNNING])
        .order_by("gpu_id")
        .values_list("gpu_id", flat=True)
    )
    if held:
        Gpu.objects.filter(pk=rng.choice(held)).update(health=GpuHealth.UNHEALTHY)


def _tray_state(rng, trays):
    tray = rng.choice(trays)
    state = rng.choice([TrayState.DRAIN, TrayState.UP, TrayState.DOWN])
    ComputeTray.objects.filter(pk=tray.pk).update(
        state=state, state_reason="" if state == TrayState.UP else "XID"
    )


def _tray_fabric(rng, trays):
    tray = rng.choice(trays)
    problems = rng.choice([[], ["drift: the node reports clique 9"]])
    ComputeTray.objects.filter(pk=tray.pk).update(fabric_problems=problems)


def _partition_degraded(rng, trays):
    tray = rng.choice(trays)
    NVLinkPartition.objects.filter(pk=tray.partition_id).update(
        degraded_reason=rng.choice(["", "NVLink fault on a switch tray"])
    )


def _several_racks(rng, trays):
    for change in rng.sample(RACK_CHANGES, 2):
        change(rng, trays)


def _job_ends(rng, trays):
    running = list(Job.objects.filter(state__in=[JobState.STARTING, JobState.RUNNING]).order_by("pk"))
    if running:
        finish_job(rng.choice(running), JobState.COMPLETED, "done")


def _rename_department(rng, trays):  # a change the log puts on no rack: a cold read
    Department.objects.filter(slug="vision").update(slug="vision2")
    Department.objects.filter(slug="vision2").update(slug="vision")


RACK_CHANGES = [_gpu_health, _held_gpu_unhealthy, _gpu_fabric, _tray_state, _tray_fabric, _partition_degraded]
CHANGES = [*RACK_CHANGES, _several_racks, _job_ends, _rename_department]


@postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seed", range(3))
def test_a_rack_re_read_decides_what_a_cold_read_decides(demo_inventory, seed):
    """Random inventory changes on random racks (GPU health and fabric, tray state and fabric problems,
    degraded partitions, several at once), jobs starting, ending and being preempted, and now and then a
    change the log cannot place on a rack, each committed: after each, the cluster a pass reads from the
    kept one, its changed racks read again, is the one a cold read builds, and so is the one it keeps."""
    import random

    rng = random.Random(seed)
    research = make_department("Research", guaranteed_gpus=48)
    vision = make_department("Vision", guaranteed_gpus=0)
    trays = list(ComputeTray.objects.filter(partition__isnull=False).order_by("pk"))
    for n in range(8):
        pending(rng.choice([research, vision]), f"start-{n}", rng.choice([1, 2, 4, 8, 16]))
    pass_cache.forget()
    kept_is_cold(expect_cold=True)
    reread = cold = 0
    for step in range(16):
        rng.choice(CHANGES)(rng, trays)
        if rng.random() < 0.5:
            pending(rng.choice([research, vision]), f"more-{step}", rng.choice([1, 2, 4, 8]))
        state = pass_cache.read()  # what the pass would decide from
        assert_as_cold(state)
        reread += bool(state.reread)
        cold += state.cold
        pass_cache.keep(state)
        kept_is_cold()  # a pass decides from it, then the kept cluster is the cold one too
    assert reread >= 4 and cold >= 1  # both ways were taken


# --- only the running jobs that changed are read again (migration scheduling 0033) ---------------------


def _job_log() -> set[int]:
    """The jobs the job log names for this (the test's) transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT job_id FROM {pass_cache.JOB_LOG} WHERE xid = txid_current_if_assigned() AND xid > 0"
        )
        return {row[0] for row in cursor.fetchall()}


def test_the_job_columns_are_every_column_a_pass_reads_of_a_running_job(db):
    sql = str(pass_cluster.running_query().query)
    read = {column for table, column in columns_read(sql) if table == "scheduling_job" and column != "id"}
    assert read <= set(pass_cache.JOB_COLUMNS), read
    assert {"state", "mig_slices", "placed_at", "started_at", "over_quota"} <= read


@postgresql
def test_the_installed_job_triggers_watch_the_job_columns(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'scheduling_job_changed_update'")
        [source] = cursor.fetchone()
        cursor.execute(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname LIKE 'scheduling_job_changed%%'"
        )
        triggers = set(cursor.fetchall())
    compared = set(re.findall(r"\bo\.(\w+)", source)) - {"id"}  # the join's
    assert compared == set(pass_cache.JOB_COLUMNS), compared
    assert {name for table, name in triggers if table == "scheduling_job"} == {
        f"scheduling_job_changed_{event}" for event in ("insert", "update", "delete", "truncate")
    }
    assert {name for table, name in triggers if table == "scheduling_allocation"} == {
        f"scheduling_job_changed_{event}" for event in ("insert", "delete", "truncate")
    }


@postgresql
def test_a_change_a_pass_reads_is_logged_by_job_and_others_are_not(demo_inventory):
    research = make_department("Research", guaranteed_gpus=8)
    job = make_job(research, "held", trays=free_trays(1))
    waiting = pending(research, "waiting", 4)
    assert {job.pk, waiting.pk, -job.pk} <= _job_log()  # inserted; its allocations inserted
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {pass_cache.JOB_LOG}")
    Job.objects.filter(pk__in=[job.pk, waiting.pk]).update(
        pending_reason="waiting: for the scheduler", backend_message="running", qos="high"
    )
    assert _job_log() == set()  # nothing a pass reads of a running job
    for values in (
        {"over_quota": True},
        {"time_limit_minutes": 240},
        {"placed_at": timezone.now()},
        {"state": JobState.STARTING},
        {"priority_class": "serve"},
    ):
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {pass_cache.JOB_LOG}")
        Job.objects.filter(pk=job.pk).update(**values)
        assert _job_log() == {job.pk}, values
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {pass_cache.JOB_LOG}")
    Allocation.objects.filter(job=job).delete()
    assert _job_log() == {-job.pk}  # its allocations, not its row


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_warm_pass_reads_only_the_jobs_that_changed(demo_inventory):
    research = make_department("Research", guaranteed_gpus=24)
    vision = make_department("Vision", guaranteed_gpus=0)
    trays = free_trays(30)
    held = [make_job(vision, f"borrower-{n}", trays=[tray], over_quota=True) for n, tray in enumerate(trays)]
    pending(research, "small", 2)
    pass_cache.forget()
    kept_is_cold(expect_cold=True)
    # Behind the ORM's back (finish_job would run a pass: Celery is eager here), one running job's time
    # limit changes and one ends: those two rows are read again, and the allocations of the one that ended.
    Job.objects.filter(pk=held[3].pk).update(time_limit_minutes=480)
    with transaction.atomic():
        Job.objects.filter(pk=held[4].pk).update(state=JobState.COMPLETED, finished_at=timezone.now())
        Allocation.objects.filter(job_id=held[4].pk).delete()
    with CaptureQueriesContext(connection) as queries:
        state = pass_cache.read()
    assert {held[3].pk, held[4].pk, -held[4].pk} <= state.changed_jobs
    assert held[0].pk not in state.changed_jobs and -held[3].pk not in state.changed_jobs
    assert state.running_rows[held[3].pk][3] == 480 and held[4].pk not in state.running_rows
    reads = [query["sql"] for query in queries if 'FROM "scheduling_job"' in query["sql"]]
    assert len(reads) == 1 and "IN (" in reads[0], reads  # the changed rows only
    assert_as_cold(state)
    pass_cache.keep(state)
    kept_is_cold(expect_cold=False)


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_read_of_changes_rolled_back_since_reads_them_again(demo_inventory):
    """A pass that read a job's change its own transaction made, then rolled back (the whole transaction, or
    only a savepoint of one that commits): the next pass reads the job as it is, not as it was read."""
    research = make_department("Research", guaranteed_gpus=24)
    job = make_job(research, "held", trays=free_trays(1))
    pass_cache.forget()
    kept_is_cold(expect_cold=True)
    limit = Job.objects.get(pk=job.pk).time_limit_minutes
    with transaction.atomic():  # committed, with a savepoint inside rolled back
        with transaction.atomic():
            Job.objects.filter(pk=job.pk).update(time_limit_minutes=999)
            run_pass()
            assert pass_cache.kept().running_rows[job.pk][3] == 999
            transaction.set_rollback(True)
        pending(research, "small", 1)
    state = pass_cache.read()
    assert state.running_rows[job.pk][3] == limit
    assert_as_cold(state)
    pass_cache.keep(state)
    with transaction.atomic():  # the whole transaction rolled back
        Job.objects.filter(pk=job.pk).update(time_limit_minutes=998)
        run_pass()
        assert pass_cache.kept().running_rows[job.pk][3] == 998
        transaction.set_rollback(True)
    state = pass_cache.read()
    assert state.changed_jobs is None and state.running_rows[job.pk][3] == limit
    assert_as_cold(state)
    pass_cache.keep(state)


@postgresql
def test_pruning_the_job_log_makes_older_reads_read_every_job(demo_inventory, monkeypatch):
    research = make_department("Research", guaranteed_gpus=24)
    make_job(research, "held", trays=free_trays(1))
    pass_cache.forget()
    kept_is_cold(expect_cold=True)
    older = pass_cache.kept().job_mark
    monkeypatch.setattr(pass_cache, "JOB_PRUNE_AT", 0)
    run_pass()  # prunes the log up to its own mark
    monkeypatch.undo()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT max(job_id) FROM {pass_cache.JOB_LOG} WHERE xid = 0")
        assert cursor.fetchone()[0] is not None
    state = pass_cache.read()
    assert state.changed_jobs is not None  # read after the horizon: still from the log
    assert_as_cold(state)
    pass_cache.keep(state)
    pass_cache.kept().job_mark = dataclasses.replace(older, xmin=1)  # a read from before the horizon
    state = pass_cache.read()
    assert state.changed_jobs is None  # every running job read again
    assert_as_cold(state)
    pass_cache.keep(state)


def _outcome() -> dict:
    """Every job's state, standing and GPUs: what a pass decided."""
    gpus: dict[int, list[int]] = {}
    for job_id, gpu_id in Allocation.objects.order_by("gpu_id").values_list("job_id", "gpu_id"):
        gpus.setdefault(job_id, []).append(gpu_id)
    return {
        job.name: (job.state, job.over_quota, job.pending_reason, gpus.get(job.pk, []))
        for job in Job.objects.order_by("pk")
    }


@postgresql
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seed", range(3))
def test_a_warm_pass_after_a_mixed_change_decides_what_a_cold_pass_decides(demo_inventory, seed):
    """Jobs end, are cancelled, get a new time limit or standing by hand, new ones wait, a GPU fails: the
    pass that reads only what changed since its last one starts, preempts and stands the same jobs, with
    the same GPUs and words, as a pass that reads everything cold."""
    import random

    rng = random.Random(seed)
    research = make_department("Research", guaranteed_gpus=48)
    vision = make_department("Vision", guaranteed_gpus=8)
    trays = free_trays(40)
    for n, tray in enumerate(trays[: rng.randint(16, 30)]):
        make_job(rng.choice([research, vision]), f"running-{n}", trays=[tray])
    for n in range(6):
        pending(rng.choice([research, vision]), f"first-{n}", rng.choice([1, 2, 4, 8]))
    pass_cache.forget()
    kept_is_cold(expect_cold=True)
    running = list(Job.objects.filter(state__in=[JobState.STARTING, JobState.RUNNING]).order_by("pk"))
    for job in rng.sample(running, 3):
        finish_job(Job.objects.get(pk=job.pk), JobState.COMPLETED, "done")
    cancel_job(rng.choice([job for job in running if Job.objects.get(pk=job.pk).state != "completed"]))
    left = list(Job.objects.filter(state__in=[JobState.STARTING, JobState.RUNNING]).order_by("pk"))
    Job.objects.filter(pk=rng.choice(left).pk).update(time_limit_minutes=rng.choice([30, 600]))
    Job.objects.filter(pk=rng.choice(left).pk).update(over_quota=rng.random() < 0.5)
    for n in range(rng.randint(2, 6)):
        pending(rng.choice([research, vision]), f"then-{n}", rng.choice([1, 2, 4, 8, 16]))
    if rng.random() < 0.5:
        _gpu_health(rng, trays)
    outcomes = []
    for forget in (False, True):  # rolled back before the dispatch its commit would send
        with transaction.atomic():
            if forget:
                pass_cache.forget()
            summary = run_pass()
            outcomes.append((summary.cold, summary.started, summary.preempted, summary.waiting, _outcome()))
            transaction.set_rollback(True)
    warm, cold = outcomes
    assert (warm[0], cold[0]) == (False, True)
    assert warm[1:] == cold[1:]


@postgresql
@pytest.mark.django_db(transaction=True)
def test_the_job_log_pruned_after_a_bulk_load_leaves_passes_right(demo_inventory):
    """A bulk load of jobs (a benchmark's year of history: its passes roll back and never prune) pruned at
    once (prune_job_log): the log keeps no row older than its horizon, and passes after it decide and keep
    what a cold read gives."""
    research = make_department("Research", guaranteed_gpus=16)
    pass_cache.forget()
    run_pass()
    loaded = Job.objects.bulk_create(Job(department=research, name=f"loaded-{n}", gpus=4) for n in range(30))
    ids = [job.pk for job in loaded]

    def logged(below: int | None = None) -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM scheduling_jobchange WHERE xid > 0 AND job_id = ANY(%s) AND xid < %s",
                [ids, below if below is not None else 2**62],
            )
            return cursor.fetchone()[0]

    assert logged() == len(ids)
    pass_cache.prune_job_log()
    with connection.cursor() as cursor:
        cursor.execute("SELECT max(job_id) FROM scheduling_jobchange WHERE xid = 0")
        (horizon,) = cursor.fetchone()
    assert horizon is not None  # pruned now, whatever the log's size
    # Every row below the horizon is gone; the load's are below it unless another database's transaction on
    # the same server (a parallel test run) was older than the load and held the horizon back.
    assert logged(below=horizon) == 0
    kept_is_cold()  # the pass reads every job (its mark is older than the horizon), then keeps them
    pending(research, "new", 4)
    kept_is_cold(expect_cold=False)


@given(
    racks=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), max_size=12),
    asked=st.sets(st.integers(0, 14)),
)
def test_a_re_read_finds_the_trays_of_its_racks_by_their_pks(racks, asked):
    """pass_cache._trays_of_racks: the indexes of the rows of the racks asked for (pks; unknown ones find
    nothing), in order, found through the kept cluster's racks and partitions (racks in name order, not pk
    order, as the cold read gives them)."""
    rows = []
    for number, partitions in sorted(enumerate(racks), key=lambda pair: f"rack-{pair[0] * 7 % 13:02d}"):
        for clique, trays in enumerate(partitions):
            for _slot in range(trays):
                n = len(rows)
                rows.append((n, f"h{n}", f"rack-{number * 7 % 13:02d}", f"p{clique}", None, number))
    columns = TrayColumns(
        [row[1] for row in rows],
        [row[2] for row in rows],
        [row[3] for row in rows],
        [4] * len(rows),
        [None] * len(rows),
        [True] * len(rows),
    )
    state = pass_cluster.ClusterState(
        cluster=Cluster(columns),
        tray_pk=[row[0] for row in rows],
        tray_index={},
        tray_gpus=[],
        gpu_tray={},
        held_unschedulable=[],
        held={},
        tray_row=rows,
    )
    expected = [t for t, row in enumerate(rows) if row[pass_cluster.RACK_PK] in asked]
    assert pass_cache._trays_of_racks(state, asked) == expected
    assert pass_cache._trays_of_racks(state, asked) == expected  # from the index made by the first
