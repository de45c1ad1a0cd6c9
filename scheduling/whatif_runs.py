"""What-if runs: the portal's own job history replayed under several layouts, in Celery tasks.

`start` writes a WhatIfRun and one WhatIfLayout per layout (the cluster as it is first), then queues
`scheduling.tasks.whatif_prepare` on commit. That task reads the history and the trays once (`prepare`: the
same input for every layout) and fans the layouts out as a Celery group of `scheduling.tasks.whatif_replay`
tasks, one per layout (`replay_layout`), so more workers finish a sweep sooner; the last one to finish
settles the run. Every task claims its row atomically and does nothing when it was already claimed, so a
message delivered twice replays nothing twice. The pages only read the rows (`progress`).

The conversion and the replay are `scheduling.whatif` (pure); `manage.py simulate --from-history` calls
`compare` here, which does the same in one process without rows or tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from core.enqueue import enqueue
from core.sentences import gettext_noop, say
from core.task_names import WHATIF_PREPARE
from inventory.mig_layouts import DISABLED, WHOLE_GPU_LAYOUTS, LayoutError, MigLayout, disabled, find
from inventory.mig_options import layout_options
from inventory.models import ComputeTray
from scheduling import whatif
from scheduling.choices import WHATIF_ACTIVE_STATES, JobEventKind, WhatIfState
from scheduling.engine.mig import profiles_from_discovery
from scheduling.models import Job, JobEvent, WhatIfLayout, WhatIfRun
from scheduling.whatif import Carving, History, HistoryJob, Tray, WhatIfError
from tenancy.models import Department, Project

log = logging.getLogger(__name__)

MAX_LAYOUTS = 6  # the cluster as it is, the plan, and up to four other candidates
# A replay task is stopped after this long (Celery's soft time limit) and its layout marked failed.
REPLAY_TIME_LIMIT_S = 600
# A run no worker has started after this long is said to be stuck (the page says what to check).
NOT_STARTED_AFTER = timedelta(minutes=2)
# Stored with a run in English (its labels, why a layout or the run failed): templates (core.sentences) the
# wizard shows in the viewer's language.
NOW = gettext_noop("The cluster now")
TOO_LONG = gettext_noop("The replay took longer than %(minutes)s minutes and was stopped: replay fewer days.")
REPLAY_FAILED = gettext_noop("The replay failed: %(error)s")
HISTORY_FAILED = gettext_noop("Reading the job history failed: %(error)s")
NO_LAYOUT_REPLAYED = gettext_noop("No layout could be replayed: each one says why below.")


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


# --- reading the database ----------------------------------------------------------------------------------


def history(days: int, now: datetime | None = None) -> History:
    """The replay's input: the jobs of the last `days` days (scheduling.whatif.history's rules). A few
    queries; at most whatif.MAX_JOBS job rows are read, the most recent."""
    if not 1 <= days <= whatif.MAX_DAYS:
        raise WhatIfError(
            _("Replay between 1 and %(max)s days of history, not %(days)s.")
            % {"max": whatif.MAX_DAYS, "days": days}
        )
    now = now or timezone.now()
    start = now - timedelta(days=days)
    window = Job.objects.filter(created_at__lte=now).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=start)
    )
    rows = list(
        window.order_by("-created_at", "-pk").values_list(
            "pk",
            "name",
            "department__slug",
            "gpus",
            "state",
            "created_at",
            "started_at",
            "placed_at",
            "finished_at",
            "time_limit_minutes",
            "preemptions",
            "project__slug",
            "mig_profile",
            "mig_slices",
        )[: whatif.MAX_JOBS]
    )
    older = window.count() - len(rows) if len(rows) == whatif.MAX_JOBS else 0
    earlier = _earlier_runs([pk for pk, *_rest, preemptions, _project, _p, _n in rows if preemptions])
    jobs = [
        HistoryJob(
            id=pk,
            name=name,
            department=department,
            gpus=gpus,
            state=state,
            submitted_at=created.timestamp(),
            started_at=_epoch(started or placed),
            finished_at=_epoch(finished),
            time_limit_s=limit * 60.0,
            earlier_run_s=earlier.get(pk, 0.0),
            project=project or "",
            mig_profile=profile,
            mig_slices=slices,
        )
        for (
            pk,
            name,
            department,
            gpus,
            state,
            created,
            started,
            placed,
            finished,
            limit,
            _,
            project,
            profile,
            slices,
        ) in rows
    ]
    guarantees = dict(Department.objects.values_list("slug", "guaranteed_gpus"))
    projects = {
        f"{department}/{slug}": gpus
        for department, slug, gpus in Project.objects.named().values_list(
            "department__slug", "slug", "guaranteed_gpus"
        )
    }
    return whatif.history(
        jobs, start.timestamp(), now.timestamp(), guarantees, older=older, projects=projects
    )


def _earlier_runs(job_ids: list[int]) -> dict[int, float]:
    """Seconds each preempted job ran before its preemptions: from each placement to the preemption after
    it (its events; the job row keeps only its last start)."""
    runs: dict[int, float] = {}
    placed: dict[int, datetime] = {}
    events = JobEvent.objects.filter(
        job_id__in=job_ids, kind__in=(JobEventKind.PLACED, JobEventKind.PREEMPTED)
    ).order_by("job_id", "at", "pk")
    for job_id, kind, at in events.values_list("job_id", "kind", "at"):
        if kind == JobEventKind.PLACED:
            placed[job_id] = at
        elif job_id in placed:
            runs[job_id] = runs.get(job_id, 0.0) + (at - placed.pop(job_id)).total_seconds()
    return runs


def cluster_trays() -> list[Tray]:
    """Every compute tray with its partition and dedication, in the pass's order. One query."""
    return [
        Tray(hostname, rack, slot, partition, owner)
        for hostname, rack, slot, partition, owner in ComputeTray.objects.order_by(
            "rack__name", "partition__clique_id", "slot"
        ).values_list(
            "hostname", "rack__name", "slot", "partition__name", "partition__dedication__department__slug"
        )
    ]


# --- runs and their tasks ----------------------------------------------------------------------------------


def start(
    user,
    days: int,
    layouts: Sequence[tuple[str, Sequence[Carving]]],
    rack: str = "",
    *,
    tray: str = "",
    mig: Sequence[Mapping] = (),
) -> WhatIfRun:
    """Save a what-if of `days` days over `layouts` (label, racks carved anew) and queue it. The cluster as
    it is comes first, whether listed or not. WhatIfError for a window or a sweep out of bounds. A MIG
    what-if (`start_mig`) names its `tray` and gives each layout, the cluster now first, its MIG trays
    (`mig`: scheduling.whatif.mig_plan's data)."""
    if not 1 <= days <= whatif.MAX_DAYS:
        raise WhatIfError(
            _("Replay between 1 and %(max)s days of history, not %(days)s.")
            % {"max": whatif.MAX_DAYS, "days": days}
        )
    layouts = [(label, list(carvings)) for label, carvings in layouts if carvings or mig]
    if len(layouts) + 1 > MAX_LAYOUTS:
        raise WhatIfError(
            _("At most %(max)s layouts at once (the cluster now included).") % {"max": MAX_LAYOUTS}
        )
    with transaction.atomic():
        run = WhatIfRun.objects.create(created_by=user, days=days, rack=rack, tray=tray)
        WhatIfLayout.objects.bulk_create(
            WhatIfLayout(
                run=run,
                position=position,
                label=label,
                carvings=[c.to_json() for c in carvings],
                mig=dict(mig[position]) if mig else {},
            )
            for position, (label, carvings) in enumerate([(NOW, []), *layouts])
        )
        enqueue(WHATIF_PREPARE, run.pk)
    return run


def prepare(run_id: int, now: datetime | None = None) -> list[int]:
    """Read the run's history and trays once; returns the layouts to replay (none when the window is empty,
    the run was prepared already or it failed)."""
    claimed = WhatIfRun.objects.filter(pk=run_id, state=WhatIfState.QUEUED).update(
        state=WhatIfState.PREPARING
    )
    if not claimed:
        return []
    run = WhatIfRun.objects.get(pk=run_id)
    now = now or timezone.now()
    try:
        replayed = history(run.days, now)
        trays = cluster_trays()
    except Exception as error:  # the run must end in words, whatever went wrong
        log.exception("what-if #%s: reading the history failed", run_id)
        _end(run, WhatIfState.FAILED, say(HISTORY_FAILED, error=_words(error)))
        return []
    run.window_start = datetime.fromtimestamp(replayed.window_start, tz=now.tzinfo)
    run.window_end = now
    run.notes = replayed.notes
    run.jobs = len(replayed.jobs)
    if not replayed.jobs:
        _end(run, WhatIfState.EMPTY, "")
        return []
    run.history = replayed.to_json()
    run.trays = [[t.hostname, t.rack, t.slot, t.partition, t.owner] for t in trays]
    run.state = WhatIfState.RUNNING
    run.save(update_fields=["window_start", "window_end", "notes", "jobs", "history", "trays", "state"])
    return list(run.layouts.filter(state=WhatIfState.QUEUED).values_list("pk", flat=True))


def replay_layout(layout_id: int, **options) -> str:
    """Replay the run's history on one layout and keep its figures (or why it could not); returns the state.
    `options` go to the simulator (scheduling.whatif.replay)."""
    claimed = WhatIfLayout.objects.filter(
        pk=layout_id, state=WhatIfState.QUEUED, run__state=WhatIfState.RUNNING
    ).update(state=WhatIfState.RUNNING, started_at=timezone.now())
    if not claimed:
        return "not claimed"
    layout = WhatIfLayout.objects.select_related("run").get(pk=layout_id)
    run = layout.run
    try:
        specs = whatif.carve(
            [Tray(*row) for row in run.trays], [Carving.from_json(c) for c in layout.carvings]
        )
        layout.figures = whatif.replay(
            History.from_json(run.history), specs, mig=layout.mig or None, **options
        )
        layout.state = WhatIfState.DONE
    except WhatIfError as error:
        layout.state, layout.error = WhatIfState.FAILED, str(error)
    except SoftTimeLimitExceeded:
        layout.state = WhatIfState.FAILED
        layout.error = say(TOO_LONG, minutes=REPLAY_TIME_LIMIT_S // 60)
    except Exception as error:  # a layout must end in words, whatever went wrong
        log.exception("what-if #%s: replaying %s failed", run.pk, layout.label)
        layout.state, layout.error = WhatIfState.FAILED, say(REPLAY_FAILED, error=_words(error))
    layout.finished_at = timezone.now()
    layout.save(update_fields=["figures", "state", "error", "finished_at"])
    settle(run.pk)
    return layout.state


def settle(run_id: int) -> None:
    """Once no layout is queued or replaying, the run is done (failed when no layout could be replayed)."""
    with transaction.atomic():
        run = WhatIfRun.objects.select_for_update().get(pk=run_id)
        if run.state != WhatIfState.RUNNING:
            return
        states = set(run.layouts.values_list("state", flat=True))
        if states & set(WHATIF_ACTIVE_STATES):
            return
        if WhatIfState.DONE in states:
            _end(run, WhatIfState.DONE, "")
        else:
            _end(run, WhatIfState.FAILED, NO_LAYOUT_REPLAYED)


def _end(run: WhatIfRun, state: str, error: str) -> None:
    run.state, run.error, run.finished_at = state, error[:500], timezone.now()
    run.save()
    # Layouts never replayed end with their run (an empty window, a history that could not be read).
    run.layouts.filter(state=WhatIfState.QUEUED).update(state=state, finished_at=run.finished_at)


def _words(error: Exception) -> str:
    return (str(error) or type(error).__name__)[:400]


# --- what the pages show -----------------------------------------------------------------------------------


@dataclass
class Progress:
    run: WhatIfRun
    layouts: list[WhatIfLayout]
    done: bool  # nothing will change any more: the page stops polling
    stuck: str  # why nothing seems to move, in words ("" when it does)
    replayed: int  # layouts finished (done or failed)
    rows: list[dict]  # the comparison (scheduling.whatif.comparison), when done


def progress(run: WhatIfRun, now: datetime | None = None) -> Progress:
    """A run as its page shows it. Reads only."""
    now = now or timezone.now()
    layouts = list(run.layouts.all())
    finished = [layout for layout in layouts if layout.state in (WhatIfState.DONE, WhatIfState.FAILED)]
    stuck = ""
    if run.state in (WhatIfState.QUEUED, WhatIfState.PREPARING) and now - run.created_at > NOT_STARTED_AFTER:
        stuck = (
            f"No worker has read the history in {int((now - run.created_at).total_seconds() // 60)} minutes: "
            "check that the Celery worker is running, then run the what-if again."
        )
    elif run.state == WhatIfState.RUNNING:
        limit = timedelta(seconds=REPLAY_TIME_LIMIT_S + 120)
        if any(
            layout.state == WhatIfState.RUNNING and layout.started_at and now - layout.started_at > limit
            for layout in layouts
        ):
            stuck = (
                "A replay has run past its time limit without a result (its worker may have stopped): run "
                "the what-if again, with fewer days if it keeps happening."
            )
        elif (
            any(layout.state == WhatIfState.QUEUED for layout in layouts)
            and run.window_end
            and now - run.window_end > NOT_STARTED_AFTER
        ):
            stuck = "Layouts have waited minutes for a worker: check that the Celery workers are running."
    rows = []
    if run.state == WhatIfState.DONE:
        rows = whatif.comparison(
            [
                (layout.label, layout.figures if layout.state == WhatIfState.DONE else None)
                for layout in layouts
            ],
            whatif.MIG_FIGURES if run.tray else whatif.FIGURES,
        )
    done = run.state not in WHATIF_ACTIVE_STATES or bool(stuck)
    return Progress(run, layouts, done, stuck, len(finished), rows)


# --- a MIG layout's what-if ------------------------------------------------------------------------------

# `hosts`, not `trays` (a count, core.sentences_i18n.NUMBERS): the stored label is read back in the viewer's
# language only when its tray names match.
AS_MIG_LAYOUT = gettext_noop("%(hosts)s with %(layout)s")


def mig_trays_now() -> list[list]:
    """[hostname, layout name, devices] of every tray with a MIG layout chosen (whole-GPU trays left out).
    One query."""
    return [
        [hostname, name, dict(devices)]
        for hostname, name, devices in ComputeTray.objects.exclude(mig_layout__in=WHOLE_GPU_LAYOUTS)
        .order_by("rack__name", "slot")
        .values_list("hostname", "mig_layout", "mig_layout_devices")
    ]


def mig_layouts(
    trays: Sequence[str], layout: MigLayout, profiles: Sequence
) -> tuple[list[Mapping], tuple[str, list[Carving]]]:
    """The MIG data (scheduling.whatif.mig_plan) of the cluster now and of the candidate (`trays` given
    `layout`: an inventory.mig_layouts.MigLayout, all-disabled for whole GPUs), and the candidate's
    (label, carvings). `profiles`: the SliceProfiles (scheduling.engine.mig) the GPUs reported."""
    now = mig_trays_now()
    chosen = set(trays)
    candidate = [row for row in now if row[0] not in chosen]
    if layout.enabled:
        candidate += [[host, layout.name, layout.as_dict()] for host in trays]
    table = whatif.profiles_json(profiles)
    label = say(AS_MIG_LAYOUT, hosts=", ".join(trays), layout=layout.name)
    return [{"profiles": table, "trays": now}, {"profiles": table, "trays": candidate}], (label, [])


def tray_mig_choice(tray: ComputeTray, name: str) -> tuple[MigLayout, tuple]:
    """The layout `name` of the tray's catalogue (inventory.mig_options: the profiles its GPUs' model
    reported) and those profiles as the simulator takes them; WhatIfError in words when the tray offers no
    such layout or its GPUs reported no MIG profiles."""
    options = layout_options(tray)
    profiles = profiles_from_discovery(options.profiles)
    if not profiles:
        raise WhatIfError(options.problem or _("These GPUs reported no MIG profiles."))
    if name == DISABLED:
        return disabled(), profiles
    try:
        return find(name, options.profiles), profiles
    except LayoutError as error:
        raise WhatIfError(f"{tray.hostname}: {error}") from None


def start_mig(user, days: int, tray: ComputeTray, layout: MigLayout, profiles: Sequence) -> WhatIfRun:
    """Queue the what-if of giving `tray` the MIG `layout`: the history replayed on the cluster now (its
    trays' MIG layouts as they are) and with the tray carved by `layout`, side by side (MIG_FIGURES)."""
    data, candidate = mig_layouts([tray.hostname], layout, profiles)
    return start(user, days, [candidate], tray=tray.hostname, mig=data)


# --- the command line --------------------------------------------------------------------------------------


def compare(
    days: int,
    layouts: Sequence[tuple[str, Sequence[Carving]]],
    *,
    now: datetime | None = None,
    progress: Callable[[str, dict | None, str], None] | None = None,
    mig: Sequence[Mapping] = (),
    **options,
) -> tuple[History, list[tuple[str, dict | None, str]]]:
    """The what-if in this process (`manage.py simulate --from-history`): (history, [(label, figures or
    None, error)]), the cluster as it is first. `mig`: each layout's MIG trays, the cluster now first
    (`mig_layouts`)."""
    replayed = history(days, now)
    if not replayed.jobs:
        return replayed, []
    trays = cluster_trays()
    results = []
    for position, (label, carvings) in enumerate([(NOW, []), *((label, c) for label, c in layouts)]):
        figures, error = None, ""
        try:
            specs = whatif.carve(trays, carvings)
            figures = whatif.replay(replayed, specs, mig=mig[position] if mig else None, **options)
        except WhatIfError as failure:
            error = str(failure)
        results.append((label, figures, error))
        if progress is not None:
            progress(label, figures, error)
    return replayed, results
