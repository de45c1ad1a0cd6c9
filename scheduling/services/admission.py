"""Admission: submitting a job against the inventory, its department's quota and project.

* `submit_job` validates against the inventory and the department, makes the Job (or returns the one a
  retried request with the same Idempotency-Key and body made; the key with another body is refused),
  records a scheduling request and, on commit, asks for a pass (scheduling.services.pass_requests).
* `check_request`, `check_fallback`, `check_run_as`: its rules, by field, which the API serializer, the job
  form and its preview ask too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils.translation import gettext as _

from core import posix
from core.access import is_admin
from core.hardware import GPUS_PER_TRAY
from core.sentences import duration
from inventory.models import ComputeTray
from scheduling import slices
from scheduling.choices import Backend, JobEventKind, Topology
from scheduling.engine import placement as engine_placement
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES
from scheduling.engine.words import CLAUSES, plural, say
from scheduling.jobspec import JobSpec
from scheduling.models import FALLBACK_AFTER_MAX_MINUTES, Job, JobEvent
from scheduling.services.pass_requests import request_pass
from scheduling.words import (
    FALLBACK_ACCEPTED,
    SUBMITTED_MANY,
    SUBMITTED_ONE,
    SUBMITTED_SLICE,
    SUBMITTED_SLICES,
    WAIT_HOURS,
    WAIT_MINUTES,
    WAITING_FOR_SCHEDULER,
)
from scheduling.words import translate as scheduler_words
from tenancy.models import Department, Membership
from tenancy.models.accounts import posix_identity_of
from tenancy.projects import check_job_project, default_job_project


def submittable_departments(user):
    """Departments `user` may submit jobs for: all for an admin, else those it belongs to."""
    if is_admin(user):
        return Department.objects.all()
    return Department.objects.filter(pk__in=Membership.objects.filter(user=user).values("department_id"))


@dataclass(frozen=True)
class Capacity:
    """The largest shapes the cluster can hold for one department (whole trays that can be schedulable)."""

    partition_trays: int
    rack_trays: int
    trays: int


def capacity_for(department: Department) -> Capacity:
    """Largest partition, rack and total of trays a job of `department` could use (ignoring what runs)."""
    rows = (
        ComputeTray.objects.filter(partition__isnull=False)
        .filter(Q(partition__dedication__isnull=True) | Q(partition__dedication__department=department))
        .values("partition_id", "rack_id")
        .annotate(n=Count("pk"))
    )
    per_partition: dict[int, int] = {}
    per_rack: dict[int, int] = {}
    for row in rows:
        per_partition[row["partition_id"]] = per_partition.get(row["partition_id"], 0) + row["n"]
        per_rack[row["rack_id"]] = per_rack.get(row["rack_id"], 0) + row["n"]
    return Capacity(
        partition_trays=max(per_partition.values(), default=0),
        rack_trays=max(per_rack.values(), default=0),
        trays=sum(per_partition.values()),
    )


def check_request(department: Department, gpus: int, topology: str, priority_class: str) -> dict[str, str]:
    """What is wrong with a job request, by field (empty when it can run some day)."""
    errors: dict[str, str] = {}
    try:
        engine_placement.check_gpus(gpus)
    except ValueError as error:
        return {"gpus": scheduler_words(str(error))}  # the engine's English, in the asker's language
    if department.limit_gpus is not None and gpus > department.limit_gpus:
        errors["gpus"] = _(
            "%(gpus)s GPUs is over the department's limit of %(limit)s GPUs: it could never run"
        ) % {"gpus": gpus, "limit": department.limit_gpus}
        return errors
    if priority_class not in PREEMPTIBLE_CLASSES and gpus > department.guaranteed_gpus:
        errors["priority_class"] = _(
            "%(class)s jobs are not preemptible and run only within the department's guarantee "
            "(%(guarantee)s GPUs); this job asks for %(gpus)s: submit it as train, or ask for a larger "
            "guarantee"
        ) % {"class": priority_class, "guarantee": department.guaranteed_gpus, "gpus": gpus}
        return errors
    trays = max(1, gpus // GPUS_PER_TRAY)
    capacity = capacity_for(department)
    if gpus > GPUS_PER_TRAY:
        if topology == Topology.PARTITION and trays > capacity.partition_trays:
            errors["gpus"] = _(
                "%(gpus)s GPUs is %(trays)s trays, more than any NVLink partition can hold (the largest has "
                "%(largest)s trays): ask for topology rack or any, or for fewer GPUs"
            ) % {"gpus": gpus, "trays": trays, "largest": capacity.partition_trays}
        elif topology == Topology.RACK and trays > capacity.rack_trays:
            errors["gpus"] = _(
                "%(gpus)s GPUs is %(trays)s trays, more than any rack can hold (the largest has "
                "%(largest)s trays usable): ask for topology any, or for fewer GPUs"
            ) % {"gpus": gpus, "trays": trays, "largest": capacity.rack_trays}
        elif trays > capacity.trays:
            errors["gpus"] = _("%(gpus)s GPUs is %(trays)s trays; the cluster has %(total)s") % {
                "gpus": gpus,
                "trays": trays,
                "total": capacity.trays,
            }
    elif capacity.trays == 0:
        errors["gpus"] = _("the cluster has no tray this department may use")
    return errors


def default_topology(gpus: int) -> str:
    return Topology.PARTITION if gpus > GPUS_PER_TRAY else Topology.ANY


# Topologies from the strictest to the widest: a job's fallback must be wider than its topology.
TOPOLOGY_WIDTH = {Topology.PARTITION: 0, Topology.RACK: 1, Topology.ANY: 2}
DEFAULT_FALLBACK_AFTER_MINUTES = 120  # when a job gives a fallback topology but no bound


def check_fallback(
    topology: str, fallback_topology: str, fallback_after_minutes: int | None
) -> dict[str, str]:
    """What is wrong with a job's fallback opt-in, by field (empty when nothing). `fallback_topology` ""
    means none (the job's topology stays strict)."""
    if not fallback_topology:
        if fallback_after_minutes is not None:
            return {
                "fallback_after_minutes": _(
                    "a wait bound needs a fallback_topology (the wider topology the job accepts after it): "
                    "give one, or leave both out"
                )
            }
        return {}
    if fallback_topology not in TOPOLOGY_WIDTH:
        return {
            "fallback_topology": _("%(value)s is not a topology: partition, rack or any")
            % {"value": repr(fallback_topology)}
        }
    if TOPOLOGY_WIDTH[fallback_topology] <= TOPOLOGY_WIDTH.get(topology, 0):
        wider = [t.value for t in Topology if TOPOLOGY_WIDTH[t] > TOPOLOGY_WIDTH.get(topology, 0)]
        if wider:
            why = _(
                "the fallback must be wider than the job's topology (%(topology)s): give %(wider)s, "
                "or leave it out"
            )
        else:
            why = _(
                "the fallback must be wider than the job's topology (%(topology)s): nothing is "
                "wider; leave it out"
            )
        return {"fallback_topology": why % {"topology": topology, "wider": _(" or ").join(wider)}}
    if fallback_after_minutes is not None and not 1 <= fallback_after_minutes <= FALLBACK_AFTER_MAX_MINUTES:
        return {
            "fallback_after_minutes": _("between 1 and %(max)s minutes (a week); %(value)s is out of range")
            % {"max": FALLBACK_AFTER_MAX_MINUTES, "value": fallback_after_minutes}
        }
    return {}


def check_run_as(user, backend: str) -> dict[str, str]:
    """Whether `user` may have a job run on `backend` now, by field (empty when so): jobs run as their
    person's Unix user (integrations.dispatch), never as someone else's, so a live backend needs the person's
    POSIX identity. submit_job refuses with it, and the job form's preview says it too."""
    if posix.identity_required(backend) and posix_identity_of(user) is None:
        return {
            "backend": posix.no_identity_message(Backend(backend).label if backend in Backend else backend)
        }
    return {}


class IdempotencyKeyReused(Exception):
    """An Idempotency-Key already used by this user for a different submission (answered 422)."""

    def __init__(self, key: str, job: Job):
        self.key, self.job = key, job
        super().__init__(
            _(
                "the Idempotency-Key %(key)s was used for job %(pk)s with a different request: send that "
                "request again to get the job, or use a new key for a new job"
            )
            % {"key": repr(key), "pk": job.pk}
        )


def submission_fingerprint(spec: JobSpec | None = None, **fields) -> str:
    """sha256 of the canonical JSON of a validated submission (a JobSpec, or its fields as keywords): what
    makes two requests the same job (JobSpec.fingerprint_material).

    The migration that added Job.idempotency_fingerprint computes the same for older jobs; keep them equal
    (the fallback opt-in and the project count only when given, so a job without them keeps its
    fingerprint; tests/scheduling/test_jobspec.py pins the form).
    """
    spec = JobSpec(**fields) if spec is None else spec
    text = json.dumps(spec.fingerprint_material(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def submission(user, idempotency_key: str, fingerprint: str | None = None) -> Job | None:
    """The job an earlier submission by `user` with this Idempotency-Key made, if any.

    With `fingerprint` (submission_fingerprint of the request at hand), IdempotencyKeyReused if that job was
    submitted with a different request.
    """
    if not idempotency_key:
        return None
    job = Job.objects.filter(submitted_by=user, idempotency_key=idempotency_key).first()
    if job is not None and fingerprint is not None and job.idempotency_fingerprint != fingerprint:
        raise IdempotencyKeyReused(idempotency_key, job)
    return job


def submit_job(*, user, spec: JobSpec | None = None, idempotency_key: str = "", **fields) -> tuple[Job, bool]:
    """Make a pending job (validated) and ask for a pass; (job, created). What the person asks for is
    `spec`, or its fields as keywords (scheduling.jobspec.JobSpec: department, name, gpus, topology, ...).
    With an idempotency key a second submission by the same user returns the first job, created False, if it
    is the same request (its submission_fingerprint), else raises IdempotencyKeyReused. `fallback_topology`
    (wider than `topology`, "" or None for none) is what the job accepts once it has waited
    `fallback_after_minutes` (default DEFAULT_FALLBACK_AFTER_MINUTES) within its department's guarantee."""
    spec = JobSpec(**fields) if spec is None else spec
    spec = dataclasses.replace(spec, fallback_topology=spec.fallback_topology or "")
    errors = check_fallback(spec.topology, spec.fallback_topology, spec.fallback_after_minutes)
    if errors:
        raise ValidationError(errors)
    if spec.fallback_topology and spec.fallback_after_minutes is None:
        spec = dataclasses.replace(spec, fallback_after_minutes=DEFAULT_FALLBACK_AFTER_MINUTES)
    fingerprint = submission_fingerprint(spec)
    existing = submission(user, idempotency_key, fingerprint)
    if existing is not None:
        return existing, False
    department, gpus = spec.department, spec.gpus
    if not submittable_departments(user).filter(pk=department.pk).exists():
        raise ValidationError(
            {"department": _("you are not a member of %(slug)s") % {"slug": department.slug}}
        )
    if spec.project is None:
        # Named by no one: the person's only project there, else the department's default project
        # (tenancy.projects); after the fingerprint, so a retry without it finds this job.
        spec = dataclasses.replace(spec, project=default_job_project(user, department))
    errors = check_job_project(user, department, spec.project, gpus)
    if spec.mig_slices or spec.mig_profile or spec.mig_memory_gb is not None:
        spec, slice_errors = check_slice_request(spec)
        errors = {**errors, **slice_errors}
    else:
        errors = {**errors, **check_request(department, gpus, spec.topology, spec.priority_class)}
    errors.update(check_run_as(user, spec.backend))
    if errors:
        raise ValidationError(errors)
    job = Job(
        **spec.as_model_kwargs(),
        mig_compute_slices=slices.compute_slices_of(spec.mig_profile) if spec.mig_slices else 0,
        submitted_by=user,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=fingerprint if idempotency_key else "",
        pending_reason=WAITING_FOR_SCHEDULER,
    )
    job.full_clean(exclude=["submitted_by", "department", "project"])
    try:
        with transaction.atomic():
            job.save()
            JobEvent.objects.create(
                job=job,
                kind=JobEventKind.SUBMITTED,
                message=(
                    slice_words(job.mig_slices, job.mig_profile)
                    if job.mig_slices
                    else submitted_words(gpus, spec.topology) + _fallback_words(job)
                ),
            )
            request_pass(f"submitted job {job.pk}")
    except IntegrityError:
        # A concurrent request with the same key won the race: its job if it was the same request.
        existing = submission(user, idempotency_key, fingerprint)
        if existing is not None:
            return existing, False
        raise
    return job, True


def check_slice_request(spec: JobSpec) -> tuple[JobSpec, dict[str, str]]:
    """A slice job's rules (scheduling.slices): no whole GPUs, one tray's topology, a profile a tray
    offers (chosen by the memory size when none is named), and the department's limit and guarantee in
    GPU-equivalents. The spec with its profile chosen, and the errors by field."""
    if spec.gpus:
        return spec, {"gpus": _("ask for whole GPUs or for MIG slices, not both")}
    if spec.mig_slices < 1:
        return spec, {"mig_slices": _("a slice job asks for at least one slice")}
    errors = slices.check_shape(spec.topology, spec.fallback_topology)
    offer = slices.slice_offer()
    # A profile chosen by a size earlier (a resubmission) stays that profile.
    memory = None if spec.mig_profile else spec.mig_memory_gb
    profile, problems = slices.resolve(spec.mig_profile, spec.mig_slices, memory, offer)
    errors.update(problems)
    if errors:
        return spec, errors
    spec = dataclasses.replace(spec, mig_profile=profile)
    equivalents = slices.equivalents_of(profile, spec.mig_slices, offer)
    return spec, slices.check_quota(spec.department, spec.priority_class, equivalents)


def slice_words(count: int, profile: str) -> str:
    """A submitted slice job's event."""
    return say(plural(count, SUBMITTED_SLICE, SUBMITTED_SLICES), count=count, profile=profile)


def _fallback_words(job: Job) -> str:
    if not job.fallback_topology:
        return ""
    return CLAUSES + say(
        FALLBACK_ACCEPTED, topology=job.fallback_topology, wait=wait_words(job.fallback_after_minutes * 60)
    )


def submitted_words(gpus: int, topology: str) -> str:
    """A submitted job's event: its GPUs and topology (scheduling.words, read back on its page)."""
    return say(plural(gpus, SUBMITTED_ONE, SUBMITTED_MANY), gpus=gpus, topology=topology)


def wait_words(seconds: float) -> str:
    """A set wait ("30 min", "2 h", "2.5 h", "135 min"): never rounded (core.sentences.duration)."""
    return duration(seconds, WAIT_MINUTES, WAIT_HOURS, estimate=False)
