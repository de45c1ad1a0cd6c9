"""Jobs and the GPUs allocated to them, their events, backend cancels and the scheduling pass's own state.

An Allocation row is the one record that a GPU is given to a job; the unique constraint on its GPU makes
giving one GPU twice impossible in the database, whatever the scheduler does. Rows are deleted when the
job ends (the job keeps its placement for history).

"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from core.access import is_admin
from core.text import TextValidator
from inventory.models import Gpu
from inventory.validators import validate_mig_profile
from scheduling.choices import (
    ACTIVE_STATES,
    FINISHED_STATES,
    HOLDING_STATES,
    Backend,
    FaultAction,
    JobEventKind,
    JobState,
    PriorityClass,
    Topology,
    WhatIfState,
)
from tenancy.models import Department

FALLBACK_AFTER_MAX_MINUTES = 60 * 24 * 7  # a job's fallback bound: at most a week of waiting


class JobQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        return self.filter(department__in=Department.objects.visible_to(user))

    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def holding(self):
        """Jobs that hold GPUs: placed and starting, or running."""
        return self.filter(state__in=HOLDING_STATES)


class Job(models.Model):
    """A gang of GPUs asked for by a department. Lifecycle (scheduling.services):

    pending -> starting (placed: Allocation rows saved, handed to the backend by a task) -> running
    (the backend accepted it) -> completed | failed | cancelled. A preempted job goes back to pending with
    its place in the queue (its submission time) and `preemptions` counted; its events tell the story.
    """

    department = models.ForeignKey(
        Department, on_delete=models.PROTECT, related_name="jobs", verbose_name=_("department")
    )
    # The project inside the department it runs under (required when the department has projects; see
    # tenancy.projects and tenancy.quota.hierarchical_fair_share). Empty: the department's own work.
    project = models.ForeignKey(
        "tenancy.Project",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
        verbose_name=_("project"),
    )
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="jobs",
        verbose_name=_("submitted by"),
        db_index=False,  # scheduling_job_submitted_idx and scheduling_job_submit_dept_idx start with it
    )
    # One line of plain text (core.textrule): it reaches Slurm's --job-name, pod labels, logs and pages.
    name = models.CharField(max_length=200, validators=[TextValidator()], verbose_name=_("name"))
    gpus = models.PositiveIntegerField(verbose_name=_("gpus"))
    # MIG slices instead of whole GPUs (scheduling.slices): `mig_slices` MIG devices of the profile
    # `mig_profile` (as the hardware reported it) on one tray; `gpus` is then 0. `mig_memory_gb`: the memory
    # the submitter asked for, when they named a size instead of a profile (the smallest fitting profile
    # offered was chosen into `mig_profile`).
    mig_profile = models.CharField(
        max_length=32,
        blank=True,
        validators=[validate_mig_profile],
        help_text=_("MIG profile of the slices it asks for (1g.23gb); blank: whole GPUs."),
        verbose_name=_("MIG profile"),
    )
    mig_slices = models.PositiveSmallIntegerField(default=0, verbose_name=_("MIG slices"))
    mig_memory_gb = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("MIG memory GB"))
    # The compute slices (g) of `mig_profile` as the GPUs reported it at submission: a slice counts g/7 of a
    # GPU in quota and usage (scheduling.slices), summed in SQL by the dashboards. Set by admission.
    mig_compute_slices = models.PositiveSmallIntegerField(
        default=0, editable=False, verbose_name=_("MIG compute slices")
    )
    topology = models.CharField(
        max_length=16, choices=Topology.choices, default=Topology.PARTITION, verbose_name=_("topology")
    )
    # The submitter's opt-in: a wider topology the job may take once it has waited `fallback_after_minutes`
    # since submission within its department's guarantee (blank: `topology` stays strict).
    fallback_topology = models.CharField(
        max_length=16, choices=Topology.choices, blank=True, default="", verbose_name=_("fallback topology")
    )
    fallback_after_minutes = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("fallback after minutes")
    )
    priority_class = models.CharField(
        max_length=16,
        choices=PriorityClass.choices,
        default=PriorityClass.TRAIN,
        verbose_name=_("priority class"),
    )
    backend = models.CharField(
        max_length=16, choices=Backend.choices, default=Backend.SLURM, verbose_name=_("backend")
    )
    work = models.JSONField(
        default=dict,
        blank=True,
        help_text=_("Batch script (Slurm) or image and command."),
        verbose_name=_("work"),
    )
    time_limit_minutes = models.PositiveIntegerField(default=60, verbose_name=_("time limit minutes"))
    state = models.CharField(
        max_length=16, choices=JobState.choices, default=JobState.PENDING, verbose_name=_("state")
    )
    pending_reason = models.CharField(max_length=500, blank=True, verbose_name=_("pending reason"))
    # When the pass first held it for the compute fabric: it could have started across scalable units but
    # waits for one (scheduling.engine.scheduler, Fabric wait), until this plus the fabric wait. Written by
    # the pass, cleared when it starts.
    fabric_held_since = models.DateTimeField(
        null=True, blank=True, verbose_name=_("held for the fabric since")
    )
    over_quota = models.BooleanField(
        default=False, help_text=_("Running on borrowed GPUs (preemptible)."), verbose_name=_("over quota")
    )
    placement = models.JSONField(
        default=list,
        blank=True,
        help_text=_("Hostnames of the trays it ran on."),
        verbose_name=_("placement"),
    )
    # Where it runs in its backend: Slurm job id, or "<namespace>/<job name>" in Kubernetes.
    backend_id = models.CharField(max_length=200, blank=True, verbose_name=_("backend id"))
    # The department QOS of its latest submission: its department's own (within the guarantee) or
    # `<department>--borrowed` (integrations.dispatch.job_qos). Slurm runs the job under it; Kubernetes
    # ignores it (Kueue decides borrowing from the ClusterQueues). Counted while RUNNING only.
    qos = models.CharField(max_length=64, blank=True, verbose_name=_("qos"))
    backend_message = models.CharField(
        max_length=500,
        blank=True,
        help_text=_("The backend's latest word (state reason, dispatch error)."),
        verbose_name=_("backend message"),
    )
    exit_code = models.IntegerField(null=True, blank=True, verbose_name=_("exit code"))
    dispatch_attempts = models.PositiveIntegerField(default=0, verbose_name=_("dispatch attempts"))
    next_dispatch_at = models.DateTimeField(null=True, blank=True, verbose_name=_("next dispatch at"))
    preemptions = models.PositiveIntegerField(default=0, verbose_name=_("preemptions"))
    # Requeued because a tray it ran on was drained by a fault (scheduling.requeue; counted in preemptions
    # too: each run has its own backend name). `requeue_at`: asked to checkpoint, requeued then unless it
    # ends first; `requeue_note` the requeue's words for its history.
    fault_requeues = models.PositiveIntegerField(default=0, verbose_name=_("fault requeues"))
    # Requeued for a partition plan's "Requeue now" (planned work; counted in preemptions too).
    plan_requeues = models.PositiveIntegerField(default=0, verbose_name=_("plan requeues"))
    requeue_at = models.DateTimeField(null=True, blank=True, verbose_name=_("requeue at"))
    requeue_note = models.CharField(max_length=500, blank=True, verbose_name=_("requeue note"))
    # A retried submission with the same key (per user) returns this job instead of making a second one.
    idempotency_key = models.CharField(max_length=200, blank=True, verbose_name=_("idempotency key"))
    # sha256 of the submission the key was first used with
    # (scheduling.services.admission.submission_fingerprint): the key reused with another request is
    # refused, not answered with this job.
    idempotency_fingerprint = models.CharField(
        max_length=64, blank=True, verbose_name=_("idempotency fingerprint")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    placed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("placed at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-created_at", "-pk"]
        constraints = [
            # Whole GPUs, or MIG slices of one profile: never both, never neither.
            models.CheckConstraint(
                condition=Q(gpus__gte=1, mig_slices=0, mig_profile="")
                | (Q(gpus=0, mig_slices__gte=1) & ~Q(mig_profile="")),
                name="%(app_label)s_%(class)s_gpus_or_slices",
            ),
            models.CheckConstraint(
                condition=Q(state__in=JobState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(fallback_topology__in=["", *Topology.values]),
                name="%(app_label)s_%(class)s_fallback_topology_valid",
            ),
            models.CheckConstraint(
                condition=Q(fallback_topology="")
                | Q(fallback_after_minutes__gte=1, fallback_after_minutes__lte=FALLBACK_AFTER_MAX_MINUTES),
                name="%(app_label)s_%(class)s_fallback_after_in_range",
            ),
            models.UniqueConstraint(
                fields=["submitted_by", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="%(app_label)s_%(class)s_one_job_per_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(fields=["department", "state"], name="scheduling_job_dept_state_idx"),
            models.Index(fields=["state", "created_at"], name="scheduling_job_state_idx"),
            # The search's exact name (portal.pages.search._job_named): a lookup, not a scan of every job.
            models.Index(fields=["name"], name="scheduling_job_name_idx"),
            # Newest first (the search's and the job list's order): a search matching many of a year's jobs
            # reads this backwards and stops at its first 21, instead of sorting every match.
            models.Index(fields=["created_at", "id"], name="scheduling_job_created_idx"),
            # The search's submitters (portal.pages.search._submitters): whether an account submitted a job
            # of one of the viewer's departments, one probe (the newest such job's time, which this order
            # gives at once), not a walk through that account's jobs.
            models.Index(
                fields=["submitted_by", "department", "created_at"], name="scheduling_job_submit_dept_idx"
            ),
            # A submitter's jobs newest first (the search's "sweep alice": alice's jobs named *sweep*): read
            # backwards from here until the first 21 match, not gathered from the submitter's 1.3 million
            # at 10,000 racks and sorted (portal.pages.search.Window). Also the foreign key's index.
            models.Index(fields=["submitted_by", "created_at", "id"], name="scheduling_job_submitted_idx"),
            # The jobs that finished since the decayed usage was rolled up (scheduling.usage.decayed_usage):
            # a few minutes' worth read, not a year's.
            models.Index(fields=["finished_at"], name="scheduling_job_finished_idx"),
            # The department dashboard's running jobs, newest first (scheduling.dashboard_data): its first 50
            # of a department's ~20,000 at 10,000 racks read from here, not all of them sorted. With the
            # columns the running jobs' figures read (PostgreSQL: an index-only scan, not a heap page per
            # job): the decayed usage of every running job (scheduling.usage.decayed_usage, 59 -> 33 ms at
            # 47,700 running jobs) and a department's projects panel (project_changes.running_figures).
            models.Index(
                fields=["department", "-started_at", "-id"],
                name="scheduling_job_running_idx",
                condition=Q(state__in=HOLDING_STATES),
                include=[
                    "project",
                    "gpus",
                    "mig_slices",
                    "mig_compute_slices",
                    "placed_at",
                    "finished_at",
                    "created_at",
                    "over_quota",
                    "priority_class",
                ],
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.department})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES


class FaultPolicy(models.Model):
    """What happens to the running jobs of a priority class when a tray they run on is drained by a fault
    (scheduling.requeue): let them finish, signal them to checkpoint and requeue them after `grace_s`, or
    requeue them at once. One row per class, edited by platform admins; a class without a row uses
    scheduling.requeue.DEFAULTS."""

    priority_class = models.CharField(
        max_length=16, choices=PriorityClass.choices, unique=True, verbose_name=_("priority class")
    )
    action = models.CharField(
        max_length=16, choices=FaultAction.choices, default=FaultAction.CHECKPOINT, verbose_name=_("action")
    )
    grace_s = models.PositiveIntegerField(
        default=300,
        help_text=_("Checkpoint: seconds between the signal and the requeue."),
        verbose_name=_("grace s"),
    )
    signal = models.CharField(
        max_length=16,
        default="USR1",
        help_text=_("Checkpoint: the signal Slurm sends to the job (Kubernetes pods get an annotation)."),
        verbose_name=_("signal"),
    )

    class Meta:
        verbose_name = _("fault policy")
        verbose_name_plural = _("fault policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=FaultAction.values), name="%(app_label)s_%(class)s_action_valid"
            ),
            models.CheckConstraint(
                condition=Q(signal__regex=r"^[A-Z0-9]{1,12}$"), name="%(app_label)s_%(class)s_signal_name"
            ),
        ]

    def __str__(self):
        return f"{self.get_priority_class_display()}: {self.get_action_display().lower()}"


class Allocation(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations", verbose_name=_("job"))
    # No index of its own: the unique constraint's (one job per GPU) is the index on gpu, a second one only
    # made every allocation a pass writes cost one more index insert.
    gpu = models.ForeignKey(
        Gpu, on_delete=models.PROTECT, related_name="allocations", db_index=False, verbose_name=_("gpu")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        constraints = [
            models.UniqueConstraint(fields=["gpu"], name="%(app_label)s_%(class)s_one_job_per_gpu"),
        ]

    def __str__(self):
        return f"{self.gpu} -> {self.job}"


class SliceAllocationQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(job__in=Job.objects.visible_to(user))


class SliceAllocation(models.Model):
    """One MIG device given to a slice job (scheduling.services.slices), as Allocation is one whole GPU.

    The device is named by its UUID (as nvidia-smi -L prints it), not by a foreign key to its MigDevice row:
    discovery rewrites a GPU's MigDevice rows at each report (inventory.ingest.gpus), and the UUID is what
    stays. Unique ignoring case: one device, one job. Deleted when the job ends, like Allocation."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="slice_allocations", verbose_name=_("job")
    )
    gpu = models.ForeignKey(
        Gpu, on_delete=models.PROTECT, related_name="slice_allocations", verbose_name=_("gpu")
    )
    mig_uuid = models.CharField(max_length=96, verbose_name=_("MIG UUID"))
    profile = models.CharField(max_length=32, verbose_name=_("profile"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    objects = SliceAllocationQuerySet.as_manager()

    class Meta:
        verbose_name = _("slice allocation")
        verbose_name_plural = _("slice allocations")
        ordering = ["job", "gpu", "mig_uuid"]
        constraints = [
            models.UniqueConstraint(Lower("mig_uuid"), name="%(app_label)s_%(class)s_one_job_per_device"),
        ]

    def __str__(self):
        return f"{self.mig_uuid} -> {self.job}"


class JobEvent(models.Model):
    """One step in a job's life (placed, preempted, ...), for its page and its API."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", verbose_name=_("job"))
    kind = models.CharField(max_length=20, choices=JobEventKind.choices, verbose_name=_("kind"))
    message = models.CharField(max_length=500, blank=True, verbose_name=_("message"))
    placement = models.JSONField(default=list, blank=True, verbose_name=_("placement"))
    at = models.DateTimeField(default=timezone.now, verbose_name=_("at"))

    class Meta:
        verbose_name = _("job event")
        verbose_name_plural = _("job events")
        ordering = ["at", "pk"]
        indexes = [models.Index(fields=["job", "at"], name="scheduling_jobevent_job_at")]

    def __str__(self):  # the admin's inline rows under a job: the kind in the viewer's language
        return f"#{self.job_id} {self.get_kind_display()}"


class BackendCancel(models.Model):
    """A backend job that must be stopped (cancelled or preempted). Kept until the backend confirms, so a
    backend that is down when the job is cancelled still gets told: the sync task retries it."""

    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="backend_cancels", verbose_name=_("job")
    )
    backend = models.CharField(max_length=16, choices=Backend.choices, verbose_name=_("backend"))
    backend_id = models.CharField(max_length=200, verbose_name=_("backend id"))
    reason = models.CharField(max_length=200, blank=True, verbose_name=_("reason"))
    attempts = models.PositiveIntegerField(default=0, verbose_name=_("attempts"))
    error = models.CharField(max_length=500, blank=True, verbose_name=_("error"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    done_at = models.DateTimeField(null=True, blank=True, verbose_name=_("done at"))

    class Meta:
        verbose_name = _("backend cancel")
        verbose_name_plural = _("backend cancels")
        constraints = [
            models.UniqueConstraint(
                fields=["backend", "backend_id"], name="%(app_label)s_%(class)s_one_per_backend_job"
            ),
        ]

    def __str__(self):
        return gettext("cancel %(backend)s %(backend_id)s") % {
            "backend": self.backend,
            "backend_id": self.backend_id,
        }


class SchedulerState(models.Model):
    """One row (pk=1): its row lock makes scheduling passes run one at a time; it records the last pass."""

    last_pass_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last pass at"))
    last_pass_ms = models.FloatField(null=True, blank=True, verbose_name=_("last pass ms"))
    last_summary = models.JSONField(default=dict, blank=True, verbose_name=_("last summary"))
    # What the last pass said of the jobs it left waiting (scheduling.services.passes): their order (job ids:
    # a job's index is its queue position) and, for the jobs trays are reserved for, when those trays free
    # up ({job id: ISO time}: an estimate, from the running jobs' time limits). Read by the job page and API.
    queue = models.JSONField(default=list, blank=True, verbose_name=_("queue"))
    estimated_starts = models.JSONField(default=dict, blank=True, verbose_name=_("estimated starts"))

    class Meta:
        verbose_name = _("scheduler state")
        verbose_name_plural = _("scheduler states")

    def __str__(self):
        return "scheduler"


class SchedulingRequest(models.Model):
    """A reason to run a pass (a submission, a completion, a cancel). Inserting one never waits for the
    pass lock; the pass that holds it runs again while requests newer than its start remain."""

    reason = models.CharField(max_length=100, verbose_name=_("reason"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("scheduling request")
        verbose_name_plural = _("scheduling requests")

    def __str__(self):
        return self.reason


class UsageRollupQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if is_admin(user) else self.none()


class UsageRollup(models.Model):
    """The decayed usage (Historical fair share, scheduling.usage.decayed_usage) of the jobs that had finished
    by `through`, per department and project (None: the department's jobs of no project), decayed to
    `through` with `half_life_s`. The beat writes them again every five minutes (scheduling.usage.
    roll_up_usage); a reader decays them to its own moment and adds the jobs still running or finished since,
    instead of summing a year of finished jobs (8 million rows at 10,000 racks) on every page and pass."""

    department = models.ForeignKey(
        Department, on_delete=models.CASCADE, related_name="+", verbose_name=_("department")
    )
    project = models.ForeignKey(
        "tenancy.Project", on_delete=models.CASCADE, null=True, related_name="+", verbose_name=_("project")
    )
    usage = models.FloatField(verbose_name=_("decayed GPU-seconds"))
    through = models.DateTimeField(verbose_name=_("through"))
    half_life_s = models.FloatField(verbose_name=_("half-life (seconds)"))

    objects = UsageRollupQuerySet.as_manager()

    class Meta:
        verbose_name = _("usage rollup")
        verbose_name_plural = _("usage rollups")
        constraints = [
            models.UniqueConstraint(
                fields=["department", "project"],
                condition=Q(project__isnull=False),
                name="%(app_label)s_%(class)s_one_per_project",
            ),
            models.UniqueConstraint(
                fields=["department"],
                condition=Q(project__isnull=True),
                name="%(app_label)s_%(class)s_one_per_department",
            ),
            models.CheckConstraint(condition=Q(half_life_s__gt=0), name="%(app_label)s_%(class)s_half_life"),
        ]

    def __str__(self):
        return (
            f"{self.department_id}/{self.project_id}: {self.usage:.0f} through {self.through:%Y-%m-%d %H:%M}"
        )


class IdleCountQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if is_admin(user) else self.none()


class IdleCount(models.Model):
    """How many GPUs a department's running jobs hold idle (scheduling.usage._held_idle) and how many with no
    utilization data (scheduling.usage.held_without_data), counted by the beat every minute
    (scheduling.usage.keep_idle_counts, PostgreSQL only): the department list, both dashboards and the home
    page read these rows while they are fresh (`taken_at` within scheduling.usage.IDLE_KEPT_FOR) instead of
    joining every idle GPU to its job on every request (issue 32: ~80 ms at 10,000 racks, and ~55 ms for the
    GPUs without data). Utilization is sampled once a minute; the counts are that old at most."""

    department = models.OneToOneField(
        Department, on_delete=models.CASCADE, related_name="+", verbose_name=_("department")
    )
    idle = models.PositiveIntegerField(verbose_name=_("idle GPUs"))
    # Held GPUs with no fresh utilization data (scheduling.usage.held_without_data).
    no_data = models.PositiveIntegerField(default=0, verbose_name=_("GPUs without data"))
    taken_at = models.DateTimeField(verbose_name=_("counted at"))

    objects = IdleCountQuerySet.as_manager()

    class Meta:
        verbose_name = _("idle GPU count")
        verbose_name_plural = _("idle GPU counts")
        indexes = [models.Index(fields=["taken_at"], name="%(app_label)s_%(class)s_taken_idx")]

    def __str__(self):
        return f"{self.department_id}: {self.idle} idle at {self.taken_at:%Y-%m-%d %H:%M}"


class WhatIfRunQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if is_admin(user) else self.none()


class WhatIfRun(models.Model):
    """A what-if: the portal's own jobs of the last `days` replayed under several NVLink layouts (the
    cluster as it is first), one Celery task per layout (scheduling.whatif_runs, scheduling.whatif).

    queued -> preparing (the history is read into `history`, the trays into `trays`) -> running (its layouts
    replay) -> done, or empty (no job in the window) or failed (`error` says why)."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    rack = models.CharField(
        max_length=100, blank=True, help_text=_("The rack the previewed plan carves."), verbose_name=_("rack")
    )
    tray = models.CharField(
        max_length=128,
        blank=True,
        help_text=_(
            "The tray whose MIG layout is asked about (a MIG what-if; blank for a partition plan's)."
        ),
        verbose_name=_("tray"),
    )
    days = models.PositiveSmallIntegerField(verbose_name=_("days"))
    window_start = models.DateTimeField(null=True, blank=True, verbose_name=_("window start"))
    window_end = models.DateTimeField(null=True, blank=True, verbose_name=_("window end"))
    state = models.CharField(
        max_length=16, choices=WhatIfState.choices, default=WhatIfState.QUEUED, verbose_name=_("state")
    )
    error = models.CharField(max_length=500, blank=True, verbose_name=_("error"))
    notes = models.JSONField(default=list, blank=True, verbose_name=_("notes"))
    jobs = models.PositiveIntegerField(default=0, verbose_name=_("jobs"))
    history = models.JSONField(
        default=dict, blank=True, help_text=_("The replayed jobs (scheduling.whatif).")
    )
    trays = models.JSONField(default=list, blank=True, help_text=_("The cluster's trays and partitions."))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    objects = WhatIfRunQuerySet.as_manager()

    class Meta:
        verbose_name = _("what-if run")
        verbose_name_plural = _("what-if runs")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=WhatIfState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
            models.CheckConstraint(condition=Q(days__gte=1), name="%(app_label)s_%(class)s_days_positive"),
        ]

    def __str__(self):  # the admin's titles and inline rows: in the viewer's language
        return ngettext("what-if #%(pk)s (%(days)s day)", "what-if #%(pk)s (%(days)s days)", self.days) % {
            "pk": self.pk,
            "days": self.days,
        }


class WhatIfLayout(models.Model):
    """One layout of a what-if: the cluster as it is, with `carvings` (racks carved anew) over it."""

    run = models.ForeignKey(
        WhatIfRun, on_delete=models.CASCADE, related_name="layouts", verbose_name=_("run")
    )
    position = models.PositiveSmallIntegerField(verbose_name=_("position"))
    label = models.CharField(max_length=100, validators=[TextValidator()], verbose_name=_("label"))
    carvings = models.JSONField(default=list, blank=True, verbose_name=_("carvings"))
    # A MIG what-if's MIG trays and the profiles they offer (scheduling.whatif.mig_plan); {}: no MIG.
    mig = models.JSONField(default=dict, blank=True, verbose_name=_("MIG trays"))
    state = models.CharField(
        max_length=16, choices=WhatIfState.choices, default=WhatIfState.QUEUED, verbose_name=_("state")
    )
    figures = models.JSONField(default=dict, blank=True, verbose_name=_("figures"))
    error = models.CharField(max_length=500, blank=True, verbose_name=_("error"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    class Meta:
        verbose_name = _("what-if layout")
        verbose_name_plural = _("what-if layouts")
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "position"], name="%(app_label)s_%(class)s_one_per_position"
            ),
            models.CheckConstraint(
                condition=Q(state__in=WhatIfState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
        ]

    def __str__(self):
        return f"{self.run}: {self.label}"
