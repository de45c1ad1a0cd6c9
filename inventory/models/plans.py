"""Partition plans: a new NVLink partition layout for one rack, previewed, then applied by an admin."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.access import is_admin
from inventory.choices import ACTIVE_PLAN_STATES, PlanOrigin, PlanStatus
from inventory.models.racks import Rack


class PartitionPlanQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Plans are platform admins' work: they see all of them, nobody else any."""
        return self if is_admin(user) else self.none()


class PartitionPlan(models.Model):
    """A new NVLink partition layout for one rack, previewed, then applied by an admin.

    `layout` is a list of {"name", "slots", "clique_id", "department", "slurm_partition"}. `base_layout` is
    the rack's layout when the plan was checked: applying refuses a plan whose rack changed since.

    `origin` says who made it: an admin (the wizard, the API), or the scheduler re-carving idle trays for a
    waiting gang under the rack's RecarvePolicy (integrations.plans.recarve), with `reason`, the sentence
    saying why, and `for_job_id`, the job it was made for (a plain id: jobs are scheduling's, above this
    app). A scheduler's plan has no `created_by`.
    """

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="plans")
    layout = models.JSONField()
    base_layout = models.CharField(max_length=2000)
    drain_first = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=PlanStatus.choices, default=PlanStatus.DRAFT)
    findings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    origin = models.CharField(max_length=16, choices=PlanOrigin.choices, default=PlanOrigin.ADMIN)
    reason = models.CharField(
        max_length=300, blank=True, help_text=_("Why the scheduler re-carved (its plans only).")
    )
    for_job_id = models.PositiveBigIntegerField(
        null=True, blank=True, help_text=_("The waiting job the scheduler re-carved for (its plans only).")
    )

    objects = PartitionPlanQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # Two admins applying plans to one rack: the database lets only one be in flight.
            models.UniqueConstraint(
                fields=["rack"],
                condition=Q(status__in=ACTIVE_PLAN_STATES),
                name="%(app_label)s_%(class)s_one_active_per_rack",
                violation_error_message=_("Another plan is already being applied to this rack."),
            ),
            # The scheduler's plans say why, and are nobody's.
            models.CheckConstraint(
                condition=~Q(origin=PlanOrigin.SCHEDULER) | (~Q(reason="") & Q(created_by__isnull=True)),
                name="%(app_label)s_%(class)s_scheduler_plan_has_reason",
                violation_error_message=_("A plan of the scheduler has a reason and no user."),
            ),
        ]
        indexes = [
            # The pass counts each rack's recent re-carves by the scheduler (the hourly bound).
            models.Index(fields=["origin", "created_at"], name="inventory_plan_origin_created"),
        ]

    def __str__(self):
        return gettext("Plan #%(plan)s for %(rack)s") % {"plan": self.pk, "rack": self.rack.name}

    @property
    def by_scheduler(self) -> bool:
        return self.origin == PlanOrigin.SCHEDULER

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_PLAN_STATES
