"""Jobs and the GPUs allocated to them; configuration targets and the pushes to them.

An Allocation row is the one record that a GPU is given to a job; the unique constraint on its GPU makes
giving one GPU twice impossible in the database, whatever the scheduler does. Rows are deleted when the
job ends (the job keeps its placement for history).

A ConfigPush row is saved before its task is queued (scheduling.pushes); the partial unique constraint on
its target keeps a target from being applied twice at once.
"""

import re
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from inventory.models import Gpu
from scheduling.choices import (
    ACTIVE_STATES,
    FINISHED_STATES,
    HOLDING_STATES,
    Backend,
    JobEventKind,
    JobState,
    PriorityClass,
    Topology,
)
from tenancy.models import Department, is_admin


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

    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    gpus = models.PositiveIntegerField()
    topology = models.CharField(max_length=16, choices=Topology.choices, default=Topology.PARTITION)
    priority_class = models.CharField(
        max_length=16, choices=PriorityClass.choices, default=PriorityClass.TRAIN
    )
    backend = models.CharField(max_length=16, choices=Backend.choices, default=Backend.SLURM)
    work = models.JSONField(default=dict, blank=True, help_text="Batch script (Slurm) or image and command.")
    time_limit_minutes = models.PositiveIntegerField(default=60)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.PENDING)
    pending_reason = models.CharField(max_length=500, blank=True)
    over_quota = models.BooleanField(default=False, help_text="Running on borrowed GPUs (preemptible).")
    placement = models.JSONField(default=list, blank=True, help_text="Hostnames of the trays it ran on.")
    # Where it runs in its backend: Slurm job id, or "<namespace>/<job name>" in Kubernetes.
    backend_id = models.CharField(max_length=200, blank=True)
    backend_message = models.CharField(
        max_length=500, blank=True, help_text="The backend's latest word (state reason, dispatch error)."
    )
    exit_code = models.IntegerField(null=True, blank=True)
    dispatch_attempts = models.PositiveIntegerField(default=0)
    next_dispatch_at = models.DateTimeField(null=True, blank=True)
    preemptions = models.PositiveIntegerField(default=0)
    # A retried submission with the same key (per user) returns this job instead of making a second one.
    idempotency_key = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="%(app_label)s_%(class)s_gpus_positive"),
            models.CheckConstraint(
                condition=Q(state__in=JobState.values), name="%(app_label)s_%(class)s_state_valid"
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
        ]

    def __str__(self):
        return f"{self.name} ({self.department})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES


class Allocation(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu"], name="%(app_label)s_%(class)s_one_job_per_gpu"),
        ]

    def __str__(self):
        return f"{self.gpu} -> {self.job}"


class JobEvent(models.Model):
    """One step in a job's life (placed, preempted, ...), for its page and its API."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=JobEventKind.choices)
    message = models.CharField(max_length=500, blank=True)
    placement = models.JSONField(default=list, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]
        indexes = [models.Index(fields=["job", "at"], name="scheduling_jobevent_job_at")]

    def __str__(self):
        return f"{self.job_id} {self.kind}"


class BackendCancel(models.Model):
    """A backend job that must be stopped (cancelled or preempted). Kept until the backend confirms, so a
    backend that is down when the job is cancelled still gets told: the sync task retries it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="backend_cancels")
    backend = models.CharField(max_length=16, choices=Backend.choices)
    backend_id = models.CharField(max_length=200)
    reason = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["backend", "backend_id"], name="%(app_label)s_%(class)s_one_per_backend_job"
            ),
        ]

    def __str__(self):
        return f"cancel {self.backend} {self.backend_id}"


class SchedulerState(models.Model):
    """One row (pk=1): its row lock makes scheduling passes run one at a time; it records the last pass."""

    last_pass_at = models.DateTimeField(null=True, blank=True)
    last_pass_ms = models.FloatField(null=True, blank=True)
    last_summary = models.JSONField(default=dict, blank=True)

    def __str__(self):
        return "scheduler"


class SchedulingRequest(models.Model):
    """A reason to run a pass (a submission, a completion, a cancel). Inserting one never waits for the
    pass lock; the pass that holds it runs again while requests newer than its start remain."""

    reason = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.reason


# --- Configuration push: targets and the pushes to them ----------------------------------------------


class ConfigTargetKind(models.TextChoices):
    DIRECTORY = "directory", "Directory (rendered files)"
    SLURM = "slurm", "Slurm controller"
    KUBERNETES = "kubernetes", "Kubernetes API server"
    FABRIC = "fabric", "NVLink fabric manager"


class PushStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    SUPERSEDED = "superseded", "Superseded"


ACTIVE_PUSH_STATES = (PushStatus.QUEUED, PushStatus.RUNNING)
FINISHED_PUSH_STATES = (PushStatus.SUCCEEDED, PushStatus.FAILED, PushStatus.SUPERSEDED)


SECRET_SETTINGS = ("token", "rest_token")
MASK = "••••••••"

# kind -> {setting: default}. Every stored settings dict has exactly these keys (clean_settings fills them).
SETTINGS_DEFAULTS: dict[str, dict] = {
    "directory": {"path": "", "keep": 5},
    "slurm": {
        "config_dir": "",
        "scontrol": "scontrol",
        "slurmctld_log": "",
        "topology_format": "conf",
        "cpus": None,
        "memory_mb": None,
        "node_hostname": "",
        "node_address": "",
        "node_port_base": None,
        "rest_url": "",
        "rest_user": "",
        "rest_token": "",
        "jwt_key_file": "",
        "accounting": False,
        "imex": False,
    },
    "kubernetes": {"api_url": "", "token": "", "ca_file": "", "insecure": False, "dry_run": False},
    "fabric": {"kind": "simulated", "base_url": "", "token": "", "insecure": False},
}


def _text(value, key: str, errors: dict) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        errors[key] = "must be text"
        return ""
    return value.strip()


def _integer(value, key: str, errors: dict, low: int, high: int | None = None):
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors[key] = "must be a whole number"
        return None
    if value < low or (high is not None and value > high):
        errors[key] = f"must be between {low} and {high}" if high is not None else f"must be at least {low}"
        return None
    return value


def _flag(value, key: str, errors: dict) -> bool:
    if value in (None, ""):
        return False
    if not isinstance(value, bool):
        errors[key] = "must be true or false"
        return False
    return value


def _url(value: str, key: str, errors: dict) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        errors[key] = f"{value!r} is not an http:// or https:// address"
    return value.rstrip("/")


def clean_settings(kind: str, raw: dict) -> dict:
    """Validate a target's settings for its kind and fill the defaults; ValidationError keyed by setting.

    directory: path (absolute, or relative to the project's var/; empty: RACKPLANE_RENDER_DIR, var/rendered
      by default), keep (previous versions kept, 1-100).
    slurm: config_dir (absolute: the directory slurmctld reads), scontrol (a path, command line or argv
      prefix), slurmctld_log (optional, to quote slurmctld's reason for refusing), topology_format (conf:
      Slurm 24.11 topology.conf), and how slurmd is reached when not at the node's own name (cpus,
      memory_mb, node_hostname, node_address, node_port_base: node i listens on base + i). Running jobs
      (scheduling.backends.slurm.jobs): rest_url (slurmrestd, http:// or https://; empty: this target does
      not run jobs), rest_user (the Slurm user jobs are submitted as), rest_token (a static JWT of that
      user from `scontrol token`, stored as is, never shown) or jwt_key_file (absolute path of slurmctld's
      jwt_key: short-lived tokens are minted from it), accounting (send the department as account and QOS:
      needs slurmdbd with the departments' accounts, as with AccountingStorageEnforce an unknown one is
      refused; without slurmdbd slurmctld ignores both, and AllowQos too), imex (slurmctld runs
      SwitchType=switch/nvidia_imex: jobs asking for an IMEX channel are refused without it).
    kubernetes: api_url, token (stored as is, never shown), ca_file (the cluster CA) or insecure, dry_run
      (server-side dry run only: validates everything, changes nothing).
    fabric: kind (simulated, the embedded default, or nmx: NVIDIA NMX Manager), base_url and token (nmx),
      insecure (do not verify NMX-M's certificate).
    """
    if kind not in SETTINGS_DEFAULTS:
        raise ValidationError({"kind": f"unknown target kind {kind!r}"})
    if not isinstance(raw, dict):
        raise ValidationError("settings must be an object")
    defaults = SETTINGS_DEFAULTS[kind]
    errors: dict[str, str] = {}
    for key in sorted(set(raw) - set(defaults)):
        errors[key] = f"is not a setting of a {kind} target (known: {', '.join(defaults)})"
    value = {**defaults, **{k: v for k, v in raw.items() if k in defaults}}
    out: dict = {}
    if kind == "directory":
        out["path"] = _text(value["path"], "path", errors)
        if "\x00" in out["path"]:
            errors["path"] = "must not contain NUL"
        out["keep"] = _integer(value["keep"], "keep", errors, 1, 100) or 5
    elif kind == "slurm":
        for key in ("config_dir", "scontrol", "slurmctld_log", "node_hostname", "node_address"):
            out[key] = _text(value[key], key, errors)
        if not out["config_dir"]:
            errors["config_dir"] = "is required: the directory that holds slurmctld's slurm.conf"
        elif not out["config_dir"].startswith("/"):
            errors["config_dir"] = "must be an absolute path"
        if out["slurmctld_log"] and not out["slurmctld_log"].startswith("/"):
            errors["slurmctld_log"] = "must be an absolute path"
        out["scontrol"] = out["scontrol"] or "scontrol"
        out["topology_format"] = _text(value["topology_format"], "topology_format", errors) or "conf"
        if out["topology_format"] == "yaml":
            errors["topology_format"] = (
                "topology.yaml (Slurm 25.05+) is not pushed yet: the Slurm adapter applies and verifies "
                "topology.conf (Slurm 24.11); choose conf"
            )
        elif out["topology_format"] != "conf":
            errors["topology_format"] = "must be conf or yaml"
        out["cpus"] = _integer(value["cpus"], "cpus", errors, 1, 100_000)
        out["memory_mb"] = _integer(value["memory_mb"], "memory_mb", errors, 1)
        out["node_port_base"] = _integer(value["node_port_base"], "node_port_base", errors, 1, 65535)
        for key in ("node_hostname", "node_address"):
            if out[key] and not re.match(r"^[A-Za-z0-9.:-]+$", out[key]):
                errors[key] = "must be a host name or an IP address"
        for key in ("rest_url", "rest_user", "rest_token", "jwt_key_file"):
            out[key] = _text(value[key], key, errors)
        if out["rest_url"]:
            out["rest_url"] = _url(out["rest_url"], "rest_url", errors)
        if out["rest_user"] and not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$", out["rest_user"]):
            errors["rest_user"] = "must be a user name (letters, digits, _ . @ -)"
        elif out["rest_url"] and not out["rest_user"]:
            errors["rest_user"] = "is required with rest_url: the Slurm user jobs are submitted as"
        if out["jwt_key_file"] and not out["jwt_key_file"].startswith("/"):
            errors["jwt_key_file"] = "must be an absolute path"
        if out["rest_token"] and out["jwt_key_file"]:
            errors["rest_token"] = "give a token or a jwt_key_file, not both"
        elif out["rest_url"] and not out["rest_token"] and not out["jwt_key_file"]:
            errors["jwt_key_file"] = "slurmrestd needs a JWT: give slurmctld's jwt_key file or a rest_token"
        out["accounting"] = _flag(value["accounting"], "accounting", errors)
        out["imex"] = _flag(value["imex"], "imex", errors)
    elif kind == "kubernetes":
        out["api_url"] = _text(value["api_url"], "api_url", errors)
        if not out["api_url"]:
            errors["api_url"] = "is required (https://api.cluster.example:6443)"
        else:
            out["api_url"] = _url(out["api_url"], "api_url", errors)
        out["token"] = _text(value["token"], "token", errors)
        out["ca_file"] = _text(value["ca_file"], "ca_file", errors)
        out["insecure"] = _flag(value["insecure"], "insecure", errors)
        out["dry_run"] = _flag(value["dry_run"], "dry_run", errors)
        if out["ca_file"] and not out["ca_file"].startswith("/"):
            errors["ca_file"] = "must be an absolute path to the cluster's CA certificate (PEM)"
        if out["ca_file"] and out["insecure"]:
            errors["insecure"] = "give a CA file or skip verification (insecure), not both"
        if out["api_url"].startswith("https://") and not out["ca_file"] and not out["insecure"]:
            errors["ca_file"] = "an https API server needs its CA file (or insecure, for testing only)"
    elif kind == "fabric":
        out["kind"] = _text(value["kind"], "kind", errors) or "simulated"
        if out["kind"] not in ("simulated", "nmx"):
            errors["kind"] = "must be simulated or nmx"
        out["base_url"] = _text(value["base_url"], "base_url", errors)
        out["token"] = _text(value["token"], "token", errors)
        out["insecure"] = _flag(value["insecure"], "insecure", errors)
        if out["kind"] == "nmx":
            if not out["base_url"]:
                errors["base_url"] = "is required for NMX-M (https://nmx-m.example)"
            else:
                out["base_url"] = _url(out["base_url"], "base_url", errors)
    if errors:
        raise ValidationError({key: [message] for key, message in errors.items()})
    return out


def mask_settings(values: dict) -> dict:
    """The settings as pages, the API and logs may show them: secrets replaced by a mask (or empty)."""
    return {
        key: (MASK if value else "") if key in SECRET_SETTINGS else value for key, value in values.items()
    }


class ConfigTargetQuerySet(models.QuerySet):
    def visible_to(self, user):
        # Targets hold credentials and pushes change production systems: staff only.
        return self if is_admin(user) else self.none()


class ConfigTarget(models.Model):
    """Somewhere Rackplane pushes configuration: a directory, a Slurm controller, a Kubernetes API server or
    an NVLink fabric manager. `settings` depends on `kind` (see `clean_settings`); a token
    in it is stored as given and never shown (`masked_settings`)."""

    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=ConfigTargetKind.choices)
    enabled = models.BooleanField(default=True, help_text="Disabled targets are left out of pushes.")
    settings = models.JSONField(default=dict, blank=True)
    # A change that arrived while a push to this target was running (never two at once): pushed, rendered
    # afresh, when that push finishes. {"reason", "plan_id", "requested_by", "requested_at"}.
    follow_up = models.JSONField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConfigTargetQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = "configuration target"
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(
                condition=Q(kind__in=ConfigTargetKind.values), name="%(app_label)s_%(class)s_kind_valid"
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        if self.kind not in SETTINGS_DEFAULTS:
            return  # the field's own choices validation reports it
        try:
            self.settings = clean_settings(self.kind, self.settings or {})
        except ValidationError as error:
            if hasattr(error, "error_dict"):
                raise ValidationError(
                    {"settings": [f"{key}: {m}" for key, msgs in error.message_dict.items() for m in msgs]}
                ) from error
            raise ValidationError({"settings": error.messages}) from error

    def masked_settings(self) -> dict:
        return mask_settings(self.settings or {})


class ConfigPushQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if is_admin(user) else self.none()

    def active(self):
        return self.filter(status__in=ACTIVE_PUSH_STATES)


class ConfigPush(models.Model):
    """One push of rendered configuration to one target: the row is saved first, then the task is queued.

    `payload` is what is pushed ({"files": {name: text}} for directory and Slurm targets, {"objects": [...]}
    for Kubernetes, {"racks": [...]} for the fabric); `payload_hash` the sha256 of its canonical JSON. `log`
    grows line by line while the push runs (the progress page follows it).
    """

    target = models.ForeignKey(ConfigTarget, on_delete=models.PROTECT, related_name="pushes")
    payload = models.JSONField(default=dict, blank=True)
    payload_hash = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=PushStatus.choices, default=PushStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.CharField(max_length=255, blank=True)
    # The inventory.PartitionPlan this push serves, by id (a plain id: no foreign key across that model).
    plan_id = models.PositiveBigIntegerField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="supersedes"
    )
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="A queued push that failed transiently is retried from then on."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True, help_text="Last progress (log line or status change).")
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ConfigPushQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "configuration push"
        constraints = [
            # Never two pushes applying to one target at once (nor one queued behind a running one).
            models.UniqueConstraint(
                fields=["target"],
                condition=Q(status__in=ACTIVE_PUSH_STATES),
                name="%(app_label)s_%(class)s_one_active_per_target",
                violation_error_message="This target already has a queued or running push.",
            ),
            models.CheckConstraint(
                condition=Q(status__in=PushStatus.values), name="%(app_label)s_%(class)s_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["target", "status"], name="scheduling_push_target_status")]

    def __str__(self):
        return f"Push #{self.pk} to {self.target_id and self.target.name}"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_PUSH_STATES

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_PUSH_STATES
