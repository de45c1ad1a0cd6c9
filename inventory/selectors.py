"""Read-side queries for the inventory screens (overview, rack list, rack view, details).

Every function starts from `Model.objects.visible_to(user)` (the one visibility rule) and aggregates in
SQL: the number of queries a screen makes is fixed, whatever the number of racks, trays or GPUs, and every
list is bounded. Views only call these and render.
"""

from dataclasses import dataclass, field

from django.core.paginator import Page, Paginator
from django.db.models import (
    BooleanField,
    CharField,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from core.hardware import GPUS_PER_TRAY
from inventory.choices import OPEN_SERVICE, FabricState, GpuHealth, ServiceStatus, TrayState
from inventory.discovery.mig import GpuMig, MigReportError
from inventory.filters import RackFilter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack, ServiceRecord

# How many rows the overview lists at most; the rest is summarised as "N more".
OVERVIEW_LIST_LIMIT = 15
RACKS_PER_PAGE = 50
# Distinct partition colours (CSS classes part-0 .. part-11). Red and amber are kept for health.
PARTITION_COLOURS = 12

# Health that needs an operator's attention. `RackFilter.has_problems` additionally counts "unknown"
# (never reported) as a problem; the rack list's problem count follows the filter so the two agree.
DEGRADED_HEALTH = (GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY)
NOT_A_PROBLEM_HEALTH = (GpuHealth.HEALTHY, GpuHealth.NOT_SUPPORTED)
NOT_UP_STATES = (TrayState.DRAIN, TrayState.DOWN, TrayState.MAINTENANCE, TrayState.NEEDS_SERVICE)

HAS_FABRIC_PROBLEMS = ~Q(fabric_problems=[])


def tray_state_counts() -> dict:
    """The one count of trays by state, as aggregate expressions ({state value: Count}; `.aggregate(**...)`
    of a tray query set): every state its own, so a health drain ("Drain"), an admin's planned maintenance
    ("Maintenance", inventory.health.actions.drain_tray) and a repeat offender ("Needs service") are never
    counted as one another. The home page's breakdown and list of trays out of service read it, and so do
    the metrics (portal.ops.metrics)."""
    return {state.value: Count("pk", filter=Q(state=state)) for state in TrayState}


# Drift: the GPU reports a clique other than the one its tray's partition intends. A GPU that has not
# reported a clique yet (or whose tray has no partition) is not drift, just unknown.
GPU_DRIFT = Q(reported_clique_id__isnull=False, tray__partition__isnull=False) & ~Q(
    reported_clique_id=F("tray__partition__clique_id")
)


def clique_drift(gpu: Gpu, partition: NVLinkPartition | None) -> bool:
    """Python twin of GPU_DRIFT, for GPUs already loaded with their tray's partition."""
    return (
        gpu.reported_clique_id is not None
        and partition is not None
        and gpu.reported_clique_id != partition.clique_id
    )


# A GPU whose fabric is unsettled: it reports another clique than its partition's (GPU_DRIFT), or a fabric
# registration that has not completed.
GPU_FABRIC_UNSETTLED = GPU_DRIFT | Q(fabric_state__in=(FabricState.IN_PROGRESS, FabricState.NOT_STARTED))


def unsettled_fabric_trays() -> QuerySet[ComputeTray]:
    """Trays a job spanning trays cannot trust its NVLink partition on (scheduling places only single-tray
    jobs there): a GPU with unsettled fabric, or fabric problems in the node's last report."""
    return ComputeTray.objects.filter(
        HAS_FABRIC_PROBLEMS | Q(pk__in=Gpu.objects.filter(GPU_FABRIC_UNSETTLED).values("tray_id"))
    )


# ---------------------------------------------------------------------------------------------- overview


@dataclass
class Overview:
    racks: int
    racks_with_problems: int
    partitions: int
    trays: dict
    gpus: dict
    fabric_problem_trays: list
    not_up_trays: list
    degraded_gpus: list
    open_service_marks: int = 0  # Service & RMA's list: trays with an open mark, whatever their state
    limit: int = OVERVIEW_LIST_LIMIT
    tray_states: list = field(default_factory=list)
    gpu_health: list = field(default_factory=list)

    @property
    def trays_not_up(self) -> int:
        return sum(self.trays[state.value] for state in NOT_UP_STATES)

    @property
    def not_up_counts(self) -> list[dict]:
        """The trays out of service by state, each counted and labelled on its own (those with any)."""
        return [
            {"value": state.value, "label": state.label, "count": self.trays[state.value]}
            for state in NOT_UP_STATES
            if self.trays[state.value]
        ]

    @property
    def gpus_degraded(self) -> int:
        return sum(self.gpus[health.value] for health in DEGRADED_HEALTH)

    @property
    def fabric_problem_trays_more(self) -> int:
        return max(0, self.trays["fabric_problems"] - len(self.fabric_problem_trays))

    @property
    def not_up_trays_more(self) -> int:
        return max(0, self.trays_not_up - len(self.not_up_trays))

    @property
    def degraded_gpus_more(self) -> int:
        return max(0, self.gpus_degraded - len(self.degraded_gpus))


def _breakdown(choice, counts: dict) -> dict:
    """One bar segment: the choice, its count and its share of the total (percent, for the bar width)."""
    count, total = counts[choice.value], counts["total"]
    share = 100 * count / total if total else 0.0
    # Never round a few bad trays to "0.0%" or a fleet with problems to "100.0%".
    if 0 < share < 0.1:
        label = "<0.1%"
    elif 99.9 < share < 100:
        label = ">99.9%"
    else:
        label = f"{share:.1f}%"
    return {
        "value": choice.value,
        "label": choice.label,
        "count": count,
        "share": round(share, 3),
        "share_label": label,
    }


def overview_counts(user) -> dict:
    """The overview's fleet-wide counts of what `user` may see, in five aggregate queries: racks, racks with
    problems, partitions, trays by state and problem, GPUs by health and fabric. Every one reads only
    inventory columns the change log of migration scheduling 0010 watches, so a page may keep them while
    the inventory is unchanged (scheduling.fleet_counts.overview_counts)."""
    racks = Rack.objects.visible_to(user)
    installed = Q(tray__isnull=False)
    return {
        "racks": racks.count(),
        "racks_with_problems": RackFilter({"has_problems": True}, queryset=racks).qs.count(),
        "partitions": NVLinkPartition.objects.visible_to(user).count(),
        "trays": ComputeTray.objects.visible_to(user).aggregate(
            total=Count("pk"),
            fabric_problems=Count("pk", filter=HAS_FABRIC_PROBLEMS),
            **tray_state_counts(),
        ),
        "gpus": Gpu.objects.visible_to(user).aggregate(
            total=Count("pk", filter=installed),
            removed=Count("pk", filter=Q(tray__isnull=True)),
            drift=Count("pk", filter=installed & GPU_DRIFT),
            fabric_incomplete=Count(
                "pk",
                filter=installed & Q(fabric_state__in=[FabricState.IN_PROGRESS, FabricState.NOT_STARTED]),
            ),
            **{health.value: Count("pk", filter=installed & Q(health=health)) for health in GpuHealth},
        ),
    }


def overview(user, limit: int = OVERVIEW_LIST_LIMIT, counts: dict | None = None) -> Overview:
    """Everything the home page shows, in nine queries whatever the size of the fleet (four when `counts`,
    `overview_counts(user)`, is given: kept by the caller)."""
    if counts is None:
        counts = overview_counts(user)
    trays = ComputeTray.objects.visible_to(user)
    gpus = Gpu.objects.visible_to(user)
    tray_counts, gpu_counts = counts["trays"], counts["gpus"]

    fabric_problem_trays = list(
        trays.filter(HAS_FABRIC_PROBLEMS)
        .select_related("rack", "partition")
        .order_by("rack__name", "slot")[:limit]
    )
    # Each with its service mark's step when it has an open one (a tray drained for another owner's
    # reason keeps its state under a mark: the list says so, as Service & RMA does).
    newest_mark = ServiceRecord.objects.filter(tray=OuterRef("pk")).order_by("-pk").values("status")[:1]
    not_up_trays = list(
        trays.filter(state__in=NOT_UP_STATES)
        .annotate(service_step=Subquery(newest_mark))
        .select_related("rack")
        .order_by("rack__name", "slot")[:limit]
    )
    for tray in not_up_trays:
        tray.open_service_mark = (
            ServiceStatus(tray.service_step).label if tray.service_step in OPEN_SERVICE else ""
        )
    degraded_gpus = list(
        gpus.filter(health__in=DEGRADED_HEALTH, tray__isnull=False)
        .select_related("tray__rack")
        .order_by("tray__rack__name", "tray__slot", "index")[:limit]
    )

    result = Overview(
        racks=counts["racks"],
        racks_with_problems=counts["racks_with_problems"],
        partitions=counts["partitions"],
        trays=tray_counts,
        gpus=gpu_counts,
        fabric_problem_trays=fabric_problem_trays,
        not_up_trays=not_up_trays,
        degraded_gpus=degraded_gpus,
        open_service_marks=open_service_marks(user),
        limit=limit,
    )
    result.tray_states = [_breakdown(state, tray_counts) for state in TrayState]
    result.gpu_health = [_breakdown(health, gpu_counts) for health in GpuHealth]
    return result


def open_service_marks(user) -> int:
    """How many trays `user` may see have an open service mark (needs service, sent for RMA): each tray's
    newest record: the health centre's list, counted)."""
    from inventory.health.service import open_marks  # (it reads the health events, which read this module)

    return open_marks(user).count()


# --------------------------------------------------------------------------------------------- rack list


def _count_per_rack(queryset: QuerySet, rack_path: str) -> Coalesce:
    """A correlated COUNT(*) of `queryset` rows belonging to the outer rack, 0 when there are none."""
    counted = (
        queryset.filter(**{rack_path: OuterRef("pk")})
        .order_by()
        .values(rack_path)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def _rack_figures(user) -> dict:
    """Each per-rack figure as a correlated COUNT subquery over what `user` may see."""
    trays = ComputeTray.objects.visible_to(user)
    gpus = Gpu.objects.visible_to(user)
    partitions = NVLinkPartition.objects.visible_to(user)
    return {
        "trays_total": _count_per_rack(trays, "rack"),
        "trays_up": _count_per_rack(trays.filter(state=TrayState.UP), "rack"),
        "trays_with_problems": _count_per_rack(trays.filter(HAS_FABRIC_PROBLEMS), "rack"),
        "gpus_total": _count_per_rack(gpus, "tray__rack"),
        "gpus_healthy": _count_per_rack(gpus.filter(health=GpuHealth.HEALTHY), "tray__rack"),
        "gpus_with_problems": _count_per_rack(gpus.exclude(health__in=NOT_A_PROBLEM_HEALTH), "tray__rack"),
        "partitions_total": _count_per_rack(partitions, "rack"),
    }


# The figures the rack list can sort by, with the figures each is computed from.
RACK_FIGURES = {
    "trays_total": (),
    "trays_up": (),
    "trays_with_problems": (),
    "gpus_total": (),
    "gpus_healthy": (),
    "gpus_with_problems": (),
    "partitions_total": (),
    "problems": ("trays_with_problems", "gpus_with_problems"),
}


def annotate_rack_summary(racks: QuerySet, user, only=None) -> QuerySet:
    """Per-rack figures as subqueries (no join fan-out, no query per row). `only`: just these figures
    (names of RACK_FIGURES) and what they are computed from, e.g. the ones a sort needs; default all."""
    wanted = set(RACK_FIGURES if only is None else only)
    wanted |= {base for name in list(wanted) for base in RACK_FIGURES[name]}
    figures = {name: expression for name, expression in _rack_figures(user).items() if name in wanted}
    racks = racks.annotate(**figures)
    if "problems" in wanted:
        racks = racks.annotate(problems=F("trays_with_problems") + F("gpus_with_problems"))
    return racks


def sorted_figures(ordering) -> set[str]:
    """The RACK_FIGURES an ordering (order_by expressions) refers to."""
    return {field.removeprefix("-") for field in ordering} & set(RACK_FIGURES)


def rack_list(
    user, params, page_number=1, per_page: int = RACKS_PER_PAGE, ordering=("name",)
) -> tuple[RackFilter, Page]:
    """The filter (bound to the request's GET parameters) and one page of filtered racks with their figures,
    in `ordering` (order_by expressions on Rack or RACK_FIGURES; the rack list's sortable columns).

    Two queries: the count and the page. The figures are annotated on the page's racks only: subqueries
    in the SELECT list run for every row the database produces, including the rows OFFSET skips, so
    annotating before slicing would make page 20 twenty times dearer than page 1. A sort by a figure needs
    that figure for every filtered rack, so only the figures the sort names are computed for all of them
    (inside the page query, which then annotates the page's racks with the rest).
    """
    filterset = RackFilter(params, queryset=Rack.objects.visible_to(user))
    ordered = filterset.qs
    sort_figures = sorted_figures(ordering)
    if sort_figures:
        ordered = annotate_rack_summary(ordered, user, only=sort_figures)
    page = Paginator(ordered.order_by(*ordering), per_page).get_page(page_number)
    page_racks = Rack.objects.visible_to(user).filter(pk__in=page.object_list.values("pk"))
    page.object_list = list(annotate_rack_summary(page_racks, user).order_by(*ordering))
    return filterset, page


# --------------------------------------------------------------------------------------------- rack view


def racks(user) -> QuerySet:
    return Rack.objects.visible_to(user)


@dataclass
class GpuCell:
    gpu: Gpu
    drift: bool
    job_gpu: bool = False  # held by the job the page highlights (`?job=`)
    slices: list = field(default_factory=list)  # its MIG devices and who holds each (the page sets them)


@dataclass
class HeldBy:
    """An active job holding GPUs of a tray. A job the viewer may not see is shown without name or link."""

    job_id: int | None  # None when the viewer may not see the job
    name: str
    department: str
    gpus: int = 0
    submitter: str = ""  # the username of whoever submitted it ("" for a job the viewer may not see)


@dataclass
class TrayRow:
    tray: ComputeTray
    colour: int | None  # index into the partition palette; None when the tray has no partition
    cells: list  # GpuCell per index 0..3, None where no GPU is recorded
    jobs: list = field(default_factory=list)  # HeldBy per active job holding GPUs of this tray
    job_tray: bool = False  # one of the trays of the job the page highlights (`?job=`)
    slice_holders: list = field(default_factory=list)  # the jobs holding its MIG devices (the page sets them)
    idle_slices: str = ""  # its MIG devices no job holds, by profile (the page sets them)

    @property
    def degraded(self) -> int:
        return sum(1 for cell in self.cells if cell and cell.gpu.health in DEGRADED_HEALTH)


@dataclass
class RackLayout:
    rack: Rack
    partitions: list  # NVLinkPartition, annotated with tray_count and colour
    rows: list  # TrayRow per tray, by slot
    unassigned_trays: int
    trays_up: int
    gpus_total: int
    gpus_healthy: int
    gpus_degraded: int
    drift: int
    fabric_problem_trays: int
    gpus_held: int = 0  # GPUs allocated to active jobs


# Without the scheduling layer's annotations: nobody holds anything.
NO_HOLDERS = {
    "held_job_id": Value(None, output_field=IntegerField()),
    "held_job_name": Value("", output_field=CharField()),
    "held_job_department": Value("", output_field=CharField()),
    "held_job_submitter": Value("", output_field=CharField()),
    "held_job_visible": Value(False, output_field=BooleanField()),
}


def _tray_jobs(gpus: list) -> list[HeldBy]:
    """The jobs holding a tray's GPUs (annotated by `_held_by`), in GPU order."""
    jobs: dict[int, HeldBy] = {}
    for gpu in gpus:
        if gpu is None or gpu.held_job_id is None:
            continue
        if gpu.held_job_id not in jobs:
            jobs[gpu.held_job_id] = (
                HeldBy(
                    gpu.held_job_id,
                    gpu.held_job_name,
                    gpu.held_job_department,
                    submitter=gpu.held_job_submitter or "",
                )
                if gpu.held_job_visible
                else HeldBy(None, "", "")
            )
        jobs[gpu.held_job_id].gpus += 1
    return list(jobs.values())


def gpu_health_counts(healths) -> dict[str, int]:
    """GPUs in all, healthy ones and degraded ones (DEGRADED_HEALTH), from their health values: the one count
    of a rack's GPU health (the rack page and the partition wizard)."""
    healths = list(healths)
    return {
        "gpus_total": len(healths),
        "gpus_healthy": sum(1 for health in healths if health == GpuHealth.HEALTHY),
        "gpus_degraded": sum(1 for health in healths if health in DEGRADED_HEALTH),
    }


def rack_layout(user, rack: Rack, holders: dict | None = None) -> RackLayout:
    """The rack's trays and GPUs as a grid, coloured by partition: three queries. `holders` are GPU
    annotations naming the active job holding each GPU (scheduling.usage.holder_annotations, given by the
    page: inventory knows nothing of jobs); without them no GPU is shown as held."""
    partitions = list(
        NVLinkPartition.objects.visible_to(user)
        .filter(rack=rack)
        .annotate(tray_count=Count("trays"))
        .order_by("clique_id")
    )
    colour_of = {}
    for position, partition in enumerate(partitions):
        partition.colour = position % PARTITION_COLOURS
        colour_of[partition.pk] = partition.colour
    partition_by_pk = {partition.pk: partition for partition in partitions}

    trays = list(ComputeTray.objects.visible_to(user).filter(rack=rack).order_by("slot"))
    gpus_by_tray: dict[int, list] = {tray.pk: [None] * GPUS_PER_TRAY for tray in trays}
    gpus_in_rack = Gpu.objects.visible_to(user).filter(tray__rack=rack).annotate(**(holders or NO_HOLDERS))
    for gpu in gpus_in_rack.order_by("tray_id", "index"):
        if gpu.tray_id in gpus_by_tray and gpu.index is not None and 0 <= gpu.index < GPUS_PER_TRAY:
            gpus_by_tray[gpu.tray_id][gpu.index] = gpu

    rows = []
    for tray in trays:
        partition = partition_by_pk.get(tray.partition_id)
        tray.rack = rack  # already loaded: no query per row for templates that touch tray.rack
        tray.partition = partition
        cells = []
        for gpu in gpus_by_tray[tray.pk]:
            if gpu is not None:
                gpu.tray = tray
            cells.append(GpuCell(gpu=gpu, drift=clique_drift(gpu, partition)) if gpu else None)
        rows.append(
            TrayRow(
                tray=tray,
                colour=colour_of.get(tray.partition_id),
                cells=cells,
                jobs=_tray_jobs(gpus_by_tray[tray.pk]),
            )
        )

    gpus = [cell.gpu for row in rows for cell in row.cells if cell]
    return RackLayout(
        rack=rack,
        partitions=partitions,
        rows=rows,
        unassigned_trays=sum(1 for tray in trays if tray.partition_id is None),
        trays_up=sum(1 for tray in trays if tray.state == TrayState.UP),
        **gpu_health_counts(gpu.health for gpu in gpus),
        drift=sum(1 for row in rows for cell in row.cells if cell and cell.drift),
        fabric_problem_trays=sum(1 for tray in trays if tray.fabric_problems),
        gpus_held=sum(1 for gpu in gpus if gpu.held_job_id is not None),
    )


# ------------------------------------------------------------------------------------------------ details


def gpus_for_detail(user) -> QuerySet:
    return Gpu.objects.visible_to(user).select_related("tray__rack", "tray__partition")


def gpu_context(gpu: Gpu) -> dict:
    """What the GPU detail shows besides the GPU itself: intended vs reported, and the drift verdict."""
    tray = gpu.tray
    partition = tray.partition if tray else None
    rack = tray.rack if tray else None
    return {
        "gpu": gpu,
        "tray": tray,
        "rack": rack,
        "partition": partition,
        "drift": clique_drift(gpu, partition),
        "cluster_mismatch": bool(
            rack
            and rack.cluster_uuid
            and gpu.reported_cluster_uuid
            and gpu.reported_cluster_uuid != rack.cluster_uuid
        ),
        "degraded": gpu.health in DEGRADED_HEALTH,
        "mig": mig_view(gpu),
    }


def mig_view(gpu: Gpu) -> dict | None:
    """What the GPU page shows of its MIG state: the instances (with the last memory slice each holds) and
    the profiles the driver offers, read back through the report's own rule; None when none is stored."""
    if not gpu.mig:
        return None
    try:
        state = GpuMig.from_dict(gpu.mig)
    except MigReportError:
        return None  # stored by an older portal: shown when the next report comes
    return {
        "complete": state.complete,
        "instances": [
            {**i.as_dict(), "placement_end": i.placement_start + i.placement_size - 1}
            for i in state.instances
        ],
        "profiles": [p.as_dict() for p in state.profiles],
    }


def trays_for_detail(user) -> QuerySet:
    return ComputeTray.objects.visible_to(user).select_related("rack", "partition")


def tray_context(user, tray: ComputeTray) -> dict:
    """The tray, its GPUs (one query) and its intended vs reported clique."""
    gpus = list(Gpu.objects.visible_to(user).filter(tray=tray).order_by("index"))
    partition = tray.partition
    intended_clique = (
        f"{tray.rack.cluster_uuid}.{partition.clique_id}" if partition and tray.rack.cluster_uuid else ""
    )
    for gpu in gpus:
        gpu.tray = tray
        gpu.drift = clique_drift(gpu, partition)
    return {
        "tray": tray,
        "rack": tray.rack,
        "partition": partition,
        "gpus": gpus,
        "intended_clique": intended_clique,
        "clique_drift": bool(
            tray.reported_clique and intended_clique and tray.reported_clique != intended_clique
        ),
    }
