"""Partition plans: a new NVLink partition layout for one rack, previewed, then applied by an admin."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.access import is_admin
from inventory.choices import ACTIVE_PLAN_STATES, PlanStatus
from inventory.models.racks import Rack


class PartitionPlanQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Plans are platform admins' work: they see all of them, nobody else any."""
        return self if is_admin(user) else self.none()


class PartitionPlan(models.Model):
    """A new NVLink partition layout for one rack, previewed, then applied by an admin.

    `layout` is a list of {"name", "slots", "clique_id", "department", "slurm_partition"}. `base_layout` is
    the rack's layout when the plan was checked: applying refuses a plan whose rack changed since.
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

    objects = PartitionPlanQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # Two admins applying plans to one rack: the database lets only one be in flight.
            models.UniqueConstraint(
                fields=["rack"],
                condition=Q(status__in=ACTIVE_PLAN_STATES),
                name="%(app_label)s_%(class)s_one_active_per_rack",
                violation_error_message="Another plan is already being applied to this rack.",
            ),
        ]

    def __str__(self):
        return f"Plan #{self.pk} for {self.rack.name}"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_PLAN_STATES
