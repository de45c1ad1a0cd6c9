"""Configuration targets and the pushes to them.

A ConfigPush row is saved before its task is queued (integrations.pushes); the partial unique constraint on
its target keeps a target from being applied twice at once. A target's `kind` names a kind registered in
integrations.registry (its folder under integrations/); `settings` holds that kind's settings, validated
by it, secrets stored as given and never shown (`masked_settings`).

The tables were created by the scheduling app before the re-cut and keep their names (db_table).
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.access import is_admin
from core.destinations import check_outbound_url
from core.moments import dated
from core.outbound import ALLOW_PRIVATE_SETTING
from core.text import TextValidator
from integrations import registry
from integrations.jobs import API_VERSION_SETTING, TARGET_ID_SETTING


class PushStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    SUPERSEDED = "superseded", _("Superseded")


ACTIVE_PUSH_STATES = (PushStatus.QUEUED, PushStatus.RUNNING)
FINISHED_PUSH_STATES = (PushStatus.SUCCEEDED, PushStatus.FAILED, PushStatus.SUPERSEDED)


API_VERSION_PATTERN = r"^v[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$"  # "v0.0.42"


class ConfigTargetQuerySet(models.QuerySet):
    def visible_to(self, user):
        # Targets hold credentials and pushes change production systems: platform admins only.
        return self if is_admin(user) else self.none()


class ConfigTarget(models.Model):
    """Somewhere Rackplane pushes configuration: a directory, a Slurm controller, a Kubernetes API server,
    an NVLink fabric manager, or any other registered kind."""

    name = models.CharField(max_length=64, validators=[TextValidator()], verbose_name=_("name"))
    kind = models.CharField(
        max_length=16, help_text=_("A registered kind (integrations.registry)."), verbose_name=_("kind")
    )
    enabled = models.BooleanField(
        default=True, help_text=_("Disabled targets are left out of pushes."), verbose_name=_("enabled")
    )
    settings = models.JSONField(default=dict, blank=True)
    # The outbound guard (core.outbound, docs/outbound.md) lets this target's own addresses (slurmrestd,
    # the API server, NMX-M) be private or loopback ones when set: on by default, since an on-premises
    # cluster's services are private addresses and only platform admins see or edit targets. Link-local
    # (cloud metadata), multicast and unspecified addresses stay refused, and a redirect to another host is
    # vetted without it. Clear it for a target that must be public (a hosted API server).
    allow_private_address = models.BooleanField(
        default=True,
        help_text=_(
            "Its addresses may be private or loopback ones (an on-premises cluster). Link-local and "
            "metadata addresses are refused whatever this says."
        ),
    )
    # A change that arrived while a push to this target was running (never two at once): pushed, rendered
    # afresh, when that push finishes. {"reason", "plan_id", "requested_by", "requested_at"}.
    follow_up = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("follow up"))
    # What Rackplane learned about the target when it last tested or pushed it (integrations.push_history):
    # {"slurm_version": "24.11.1", "checked_at": "..."}. The partition wizard reads the Slurm version.
    facts = models.JSONField(default=dict, blank=True, editable=False)
    # The API version Rackplane speaks with the target, chosen with it and kept until Test connection or a
    # request that answers "no such path" chooses again (Slurm: slurmrestd's "v0.0.42"; integrations.slurm.
    # versions). Empty: not chosen yet. Written only by that choice (remember_api_version), never a form.
    api_version = models.CharField(
        max_length=16,
        blank=True,
        default="",
        editable=False,
        help_text=_(
            "The API version chosen with the target (Slurm: v0.0.42 to v0.0.45); empty until chosen."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    objects = ConfigTargetQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("configuration targets")
        db_table = "scheduling_configtarget"
        ordering = ["name"]
        verbose_name = _("configuration target")
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(
                condition=Q(api_version="") | Q(api_version__regex=API_VERSION_PATTERN),
                name="%(app_label)s_%(class)s_api_version_form",
            ),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        if not registry.is_kind(self.kind):
            raise ValidationError(
                {"kind": f"unknown target kind {self.kind!r} (known: {', '.join(registry.names())})"}
            )
        try:
            self.settings = registry.clean_settings(self.kind, self.settings or {})
        except ValidationError as error:
            if hasattr(error, "error_dict"):
                raise ValidationError(
                    {"settings": [f"{key}: {m}" for key, msgs in error.message_dict.items() for m in msgs]}
                ) from error
            raise ValidationError({"settings": error.messages}) from error
        problems = outbound_problems(self.settings, self.allow_private_address)
        if problems:
            raise ValidationError({"settings": [f"{key}: {m}" for key, m in problems.items()]})

    def get_kind_display(self) -> str:
        return registry.label(self.kind)

    def masked_settings(self) -> dict:
        return registry.mask_settings(self.kind, self.settings or {})

    def _for_clients(self) -> dict:
        return {
            ALLOW_PRIVATE_SETTING: self.allow_private_address,
            API_VERSION_SETTING: self.api_version,
            TARGET_ID_SETTING: self.pk,
        }

    def cleaned_settings(self) -> dict:
        """The kind's cleaned settings, with the target's outbound allowance and API version (its clients)."""
        values = registry.clean_settings(self.kind, self.settings or {})
        return {**values, **self._for_clients()}

    def connection_settings(self) -> dict:
        """The stored settings (unvalidated) with the target's outbound allowance and API version
        (integrations.dispatch)."""
        return {**(self.settings or {}), **self._for_clients()}


def remember_api_version(target_id: int | None, version: str, facts: dict | None = None) -> None:
    """Keep the API version a client chose with a target, and the facts that go with it (merged into the
    target's, under its row lock: a push or Test connection may be keeping others at the same moment)."""
    if target_id is None:
        return
    with transaction.atomic():
        target = ConfigTarget.objects.select_for_update().filter(pk=target_id).only("facts").first()
        if target is None:
            return
        merged = {**(target.facts or {}), **(facts or {})}
        ConfigTarget.objects.filter(pk=target_id).update(api_version=version, facts=merged)


def outbound_problems(values: dict, allow_private_address: bool) -> dict[str, str]:
    """{setting key: why the outbound guard refuses its address} for a target's URL settings (the keys
    ending in "url": rest_url, api_url, base_url). A name that does not resolve yet is accepted here: it
    is vetted when connected to."""
    problems = {}
    for key, value in (values or {}).items():
        if key.endswith("url") and isinstance(value, str) and value.strip():
            try:
                check_outbound_url(value.strip(), allow_private_address=allow_private_address)
            except ValidationError as error:
                problems[key] = " ".join(error.messages)
    return problems


class ConfigPushQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if is_admin(user) else self.none()

    def active(self):
        return self.filter(status__in=ACTIVE_PUSH_STATES)


class ConfigPush(models.Model):
    """One push of rendered configuration to one target: the row is saved first, then the task is queued.

    `payload` is what is pushed (each kind's own shape: {"files": ...} for directory and Slurm targets,
    {"objects": [...]} for Kubernetes, {"racks": [...]} for the fabric); `payload_hash` the sha256 of its
    canonical JSON. `log` grows line by line while the push runs (the progress page follows it).
    """

    target = models.ForeignKey(
        ConfigTarget, on_delete=models.PROTECT, related_name="pushes", verbose_name=_("target")
    )
    payload = models.JSONField(default=dict, blank=True)
    payload_hash = models.CharField(max_length=64, blank=True, verbose_name=_("payload hash"))
    # Whether the payload names stored pieces (integrations.contents: a directory or Slurm target's files):
    # the garbage collection reads only these rows' payloads, never a fabric push's 37 MB one.
    has_pieces = models.BooleanField(default=False, editable=False, verbose_name=_("has stored pieces"))
    status = models.CharField(
        max_length=16, choices=PushStatus.choices, default=PushStatus.QUEUED, verbose_name=_("status")
    )
    attempts = models.PositiveIntegerField(default=0, verbose_name=_("attempts"))
    log = models.TextField(blank=True, verbose_name=_("log"))
    error = models.TextField(blank=True, verbose_name=_("error"))
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("requested by"),
    )
    reason = models.CharField(max_length=255, blank=True, verbose_name=_("reason"))
    # The inventory.PartitionPlan this push serves, by id (a plain id: no foreign key across that model).
    plan_id = models.PositiveBigIntegerField(null=True, blank=True, verbose_name=_("plan id"))
    superseded_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="supersedes",
        verbose_name=_("superseded by"),
    )
    next_attempt_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("A queued push that failed transiently is retried from then on."),
        verbose_name=_("next attempt at"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    started_at = models.DateTimeField(null=True, blank=True, verbose_name=_("started at"))
    updated_at = models.DateTimeField(
        auto_now=True, help_text=_("Last progress (log line or status change)."), verbose_name=_("updated at")
    )
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name=_("finished at"))

    objects = ConfigPushQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("configuration pushes")
        db_table = "scheduling_configpush"
        ordering = ["-created_at", "-pk"]
        verbose_name = _("configuration push")
        constraints = [
            # Never two pushes applying to one target at once (nor one queued behind a running one).
            models.UniqueConstraint(
                fields=["target"],
                condition=Q(status__in=ACTIVE_PUSH_STATES),
                name="%(app_label)s_%(class)s_one_active_per_target",
                violation_error_message=_("This target already has a queued or running push."),
            ),
            models.CheckConstraint(
                condition=Q(status__in=PushStatus.values), name="%(app_label)s_%(class)s_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["target", "status"], name="integr_push_target_status")]

    def __str__(self):
        return gettext("Push #%(push)s to %(target)s") % {
            "push": self.pk,
            "target": self.target_id and self.target.name,
        }

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_PUSH_STATES

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_PUSH_STATES


class WindowState(models.TextChoices):
    SCHEDULED = "scheduled", _("Waiting for its window")
    STARTED = "started", _("Started: draining")
    DONE = "done", _("Applied in its window")
    EXPIRED = "expired", _("Expired")


class PlanWindowQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Like the plans they schedule: platform admins' work."""
        return self if is_admin(user) else self.none()


class PlanWindow(models.Model):
    """A maintenance window for a partition plan (integrations.plans.windows): the plan waits as a draft until
    `starts_at`, is then started by the beat (its busy trays drained, and its checkpointable jobs requeued if
    `requeue`), and applies once its trays are free, before `ends_at`; a plan not applied by then is not
    applied at all: cancelled, its trays back in service, and the window marked expired with `reason`.
    Cancelling the plan before that removes the window."""

    plan = models.OneToOneField(
        "inventory.PartitionPlan", on_delete=models.CASCADE, related_name="window", verbose_name=_("plan")
    )
    starts_at = models.DateTimeField(verbose_name=_("starts at"))
    ends_at = models.DateTimeField(verbose_name=_("ends at"))
    requeue = models.BooleanField(
        default=False,
        help_text=_("At the window's start, requeue the checkpointable jobs in the plan's way."),
        verbose_name=_("requeue"),
    )
    state = models.CharField(
        max_length=16, choices=WindowState.choices, default=WindowState.SCHEDULED, verbose_name=_("state")
    )
    reason = models.CharField(
        max_length=500,
        blank=True,
        validators=[TextValidator()],
        help_text=_("Why it expired (or still waits)."),
        verbose_name=_("reason"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    objects = PlanWindowQuerySet.as_manager()

    class Meta:
        verbose_name = _("plan window")
        verbose_name_plural = _("plan windows")
        ordering = ["starts_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")),
                name="%(app_label)s_%(class)s_ends_after_start",
                violation_error_message="A maintenance window ends after it starts.",
            ),
        ]
        indexes = [models.Index(fields=["state", "starts_at"], name="integrations_window_due")]

    def __str__(self):
        # In the viewer's zone (the admin's titles), named; UTC in audit records (core.audit).
        return gettext("Window of plan #%(plan)s: %(starts_at)s to %(ends_at)s") % {
            "plan": self.plan_id,
            "starts_at": dated(self.starts_at),
            "ends_at": dated(self.ends_at),
        }


class ConfigPiece(models.Model):
    """A piece of a rendered file, stored once by its content (integrations.contents, issue 32): a push row
    holds each file as the list of its pieces' digests, so a push writes and carries only what changed.
    Kept while a push row that keeps its payload names it (integrations.contents.collect_garbage)."""

    digest = models.CharField(max_length=64, primary_key=True, verbose_name=_("digest"))
    text = models.TextField(verbose_name=_("text"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("configuration piece")
        verbose_name_plural = _("configuration pieces")

    def __str__(self):
        return self.digest
