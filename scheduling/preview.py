"""What would happen to a job if it were submitted now: the scheduling pass run dry, writing nothing.

The job form's preview (scheduling.views.job_form) asks `preview_job` before a job exists. It reads what a
pass reads
through the same function (`scheduling.pass_inputs.gather`: the departments, projects, running and pending
jobs, the cluster with silent trays held out; cold, never the pass's kept cluster), adds the proposed job at
the back of the queue (submitted now, as a submission would be) and runs the same engine
(`scheduling.engine.scheduler.schedule`) with the same arguments and rules (`PassInputs.decide`). The
answer is the engine's own decision for that job: where it would start (trays, NVLink partitions, racks; in
quota or borrowed; what it would preempt), or why it would wait, in the words the job's page would show.

Nothing is written and no pass is requested: a GET may ask. Jobs ahead in the queue are decided first, as
they would be; the answer is for this instant (a pass that runs before the submission may decide otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from hostlist import collect_hostlist

from scheduling import pass_inputs
from scheduling.choices import JobState
from scheduling.engine.words import WAITING, say
from scheduling.jobspec import JobSpec
from scheduling.models import Job
from scheduling.services.admission import check_request, check_slice_request
from scheduling.services.slices import decide as slice_decide
from scheduling.services.slices import slices_words
from scheduling.slices import compute_slices_of
from scheduling.words import translate as scheduler_words
from tenancy.models import Department

PROBE_ID = -1  # the proposed job's id in the dry pass: no row has it
MAX_NAMED = 5  # victims named in a sentence; the rest are counted


@dataclass(frozen=True)
class Victim:
    """A running job the proposed one would preempt: its name, department and project (None: none)."""

    name: str
    department: str
    project: str | None
    own_department: bool  # of the proposed job's department (borrowing its project's unused guarantee)
    # Of the proposed job's own project (or, both without one, its department's work without a project): its
    # borrowed training, which a build or inference job within the guarantee displaces (engine: Standing).
    own_work: bool = False

    @property
    def label(self) -> str:
        if self.project:
            return _("%(name)s (%(department)s, project %(project)s)") % {
                "name": self.name,
                "department": self.department,
                "project": self.project,
            }
        return _("%(name)s (%(department)s, no project)") % {"name": self.name, "department": self.department}


def _victim_sentence(victims: list[Victim], whose: str) -> str:
    """One sentence naming the jobs it would preempt (the first MAX_NAMED; the rest counted): `whose` is
    "mine" (borrowed training of the job's own work), "own" (of its department) or "others" (borrowed, of
    other departments)."""
    named = ", ".join(v.label for v in victims[:MAX_NAMED])
    if len(victims) > MAX_NAMED:
        named = _("%(named)s and %(more)s more") % {"named": named, "more": len(victims) - MAX_NAMED}
    count = len(victims)
    if whose == "mine":
        sentence = ngettext(
            "To make room it would preempt %(count)s borrowed training job of your own: %(named)s.",
            "To make room it would preempt %(count)s borrowed training jobs of your own: %(named)s.",
            count,
        )
    elif whose == "own":
        sentence = ngettext(
            "To make room it would preempt %(count)s job of your department: %(named)s.",
            "To make room it would preempt %(count)s jobs of your department: %(named)s.",
            count,
        )
    else:
        sentence = ngettext(
            "To make room it would preempt %(count)s borrowed job of other departments: %(named)s.",
            "To make room it would preempt %(count)s borrowed jobs of other departments: %(named)s.",
            count,
        )
    return sentence % {"count": count, "named": named}


@dataclass(frozen=True)
class Preview:
    """The engine's decision for a proposed job. `errors` (by field): it could never run as asked."""

    fits: bool = False
    over_quota: bool = False
    trays: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()  # "rack partition" labels
    racks: tuple[str, ...] = ()
    preempts: int = 0  # running borrowed jobs it would preempt to start
    victims: tuple[Victim, ...] = ()  # those jobs, named
    reason: str = ""  # why it would wait (the engine's words)
    slices: str = ""  # a slice job's devices ("gb-r01-t07 GPU 0 1g.23gb (MIG-…)": scheduling.services.slices)
    errors: dict[str, str] = field(default_factory=dict)
    queued_ahead: int = 0  # pending jobs ahead of it in the queue

    @property
    def tray_hostlist(self) -> str:
        """Its trays in the hostlist form the job pages use ("gb-r08-t[01-18]", python-hostlist)."""
        return collect_hostlist(list(self.trays)) if self.trays else ""

    @property
    def sentences(self) -> list[str]:
        """The decision in plain sentences."""
        if self.errors:
            return [
                _("%(message)s.") % {"message": f"{message[:1].upper()}{message[1:]}"}
                for message in map(scheduler_words, self.errors.values())
            ]
        if self.fits and self.slices:
            if self.over_quota:
                fits = _("It fits now: it would start over quota (borrowed GPU-equivalents) on %(slices)s.")
            else:
                fits = _("It fits now: it would start in quota on %(slices)s.")
            return [fits % {"slices": self.slices}]
        if self.fits:
            if self.over_quota:
                fits = ngettext(
                    "It fits now: it would start over quota (borrowed GPUs: preemptible when their owners "
                    "need them) on %(count)s tray (%(trays)s) in %(partitions)s.",
                    "It fits now: it would start over quota (borrowed GPUs: preemptible when their owners "
                    "need them) on %(count)s trays (%(trays)s) in %(partitions)s.",
                    len(self.trays),
                )
            else:
                fits = ngettext(
                    "It fits now: it would start in quota on %(count)s tray (%(trays)s) in %(partitions)s.",
                    "It fits now: it would start in quota on %(count)s trays (%(trays)s) in %(partitions)s.",
                    len(self.trays),
                )
            words = [
                fits
                % {
                    "count": len(self.trays),
                    "trays": self.tray_hostlist,
                    "partitions": ", ".join(self.partitions),
                }
            ]
            mine = [v for v in self.victims if v.own_work]
            own = [v for v in self.victims if v.own_department and not v.own_work]
            others = [v for v in self.victims if not v.own_department]
            if mine:
                words.append(
                    _victim_sentence(mine, "mine")
                    + " "
                    + _(
                        "Build and inference work holds the guarantee first; they borrow beyond it, and run "
                        "again when GPUs free up."
                    )
                )
            if own:
                words.append(
                    _victim_sentence(own, "own")
                    + " "
                    + _(
                        "They run beyond their own share of your department's guarantee (their project's, or "
                        "the share of the work without a project), and your job's share takes it back."
                    )
                )
            if others:
                words.append(_victim_sentence(others, "others"))
            if self.preempts and not self.victims:  # the jobs ended meanwhile: counted only
                words.append(
                    ngettext(
                        "To make room it would preempt %(count)s job.",
                        "To make room it would preempt %(count)s jobs.",
                        self.preempts,
                    )
                    % {"count": self.preempts}
                )
            return words
        reason = self.reason.strip()
        if reason.lower().startswith("waiting:"):
            reason = reason[len("waiting:") :].strip()
        if reason:  # the engine's words, in English, read back in the viewer's language
            words = [_("It would wait: %(reason)s.") % {"reason": scheduler_words(reason)}]
        else:
            words = [_("It would wait: no room for it now.")]
        if self.queued_ahead:
            words.append(
                ngettext(
                    "%(count)s pending job is ahead of it in the queue.",
                    "%(count)s pending jobs are ahead of it in the queue.",
                    self.queued_ahead,
                )
                % {"count": self.queued_ahead}
            )
        return words


def _preview_slices(department: Department, priority_class: str, now, job_fields: dict) -> Preview:
    """A slice job's dry run: the pending slice jobs ahead take their devices first (scheduling.services.
    slices.decide), then the proposed one."""
    spec = JobSpec(
        department=department,
        name="preview",
        gpus=0,
        topology="any",
        priority_class=priority_class,
        backend="",
        time_limit_minutes=1,
        work={},
        mig_profile=job_fields.get("mig_profile") or "",
        mig_slices=job_fields["mig_slices"],
        mig_memory_gb=job_fields.get("mig_memory_gb"),
    )
    spec, errors = check_slice_request(spec)
    if errors:
        return Preview(errors=errors)
    pending = list(Job.objects.filter(state=JobState.PENDING, mig_slices__gte=1).order_by("created_at", "pk"))
    probe = Job(
        department=department,
        priority_class=priority_class,
        gpus=0,
        mig_profile=spec.mig_profile,
        mig_slices=spec.mig_slices,
        mig_compute_slices=compute_slices_of(spec.mig_profile),
        created_at=now,
    )
    probe.pk = PROBE_ID
    decision = slice_decide([*pending, probe])[-1]
    if decision.why:
        return Preview(reason=say(WAITING, reason=decision.why), queued_ahead=len(pending))
    return Preview(
        fits=True,
        over_quota=decision.over,
        trays=tuple(sorted({d.tray for d in decision.taken})),
        slices=slices_words(decision.taken),
        queued_ahead=len(pending),
    )


def preview_job(
    *,
    department: Department,
    gpus: int,
    topology: str,
    priority_class: str,
    time_limit_minutes: int,
    **job_fields,
) -> Preview:
    """What the scheduler would decide for this job if it were submitted now. `job_fields`: other Job
    fields the engine reads (fallback_topology, fallback_after_minutes, project ...); others are ignored.
    Reads only."""
    now = timezone.now()
    if job_fields.get("mig_slices"):
        return _preview_slices(department, priority_class, now, job_fields)
    errors = check_request(department, gpus, topology, priority_class)
    if errors:
        return Preview(errors=errors)
    inputs = pass_inputs.gather(kept=False)  # cold: the kept cluster is the pass's
    cluster = inputs.cluster
    known = {f.attname for f in Job._meta.concrete_fields} | {f.name for f in Job._meta.concrete_fields}
    probe = Job(
        department=department,
        gpus=gpus,
        topology=topology,
        priority_class=priority_class,
        time_limit_minutes=time_limit_minutes,
        created_at=now,
        **{name: value for name, value in job_fields.items() if name in known},
    )
    probe.pk = PROBE_ID
    result = inputs.decide(now, extra_pending=[probe])
    ahead = len(inputs.pending)
    start = next((s for s in result.started if s.job_id == PROBE_ID), None)
    if start is None:
        return Preview(reason=result.waiting.get(PROBE_ID, ""), queued_ahead=ahead)
    victim_ids = [victim for victim, beneficiary in result.preempted.items() if beneficiary == PROBE_ID]
    project_pk = probe.project_id
    victims = tuple(
        Victim(
            name=job.name,
            department=job.department.name,
            project=job.project.name if job.project_id else None,
            own_department=job.department_id == department.pk,
            own_work=job.department_id == department.pk and job.project_id == project_pk,
        )
        for job in Job.objects.filter(pk__in=victim_ids)
        .select_related("department", "project")
        .order_by("department__name", "name", "pk")
    )
    trays = [t for t, _ in start.placement]
    partitions = sorted({cluster.partition_label(cluster.tray_part[t]) for t in trays})
    racks = sorted({cluster.rack_name[cluster.tray_rack[t]] for t in trays})
    return Preview(
        fits=True,
        over_quota=start.over_quota,
        trays=tuple(cluster.tray_host[t] for t in trays),
        partitions=tuple(partitions),
        racks=tuple(racks),
        preempts=len(victim_ids),
        victims=victims,
        queued_ahead=ahead,
    )
