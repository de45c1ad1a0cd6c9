"""Carving that follows demand: a rack's re-carving policy, set by a platform admin.

With the policy enabled, the scheduling pass may propose to re-carve the rack's *idle* trays into the NVLink
partition a waiting in-quota gang needs (scheduling.engine.recarve: merge idle partitions, or split a large
idle one); integrations.plans.recarve turns each proposal into a PartitionPlan marked as the scheduler's and
applies it through the wizard's own path. Off by default: a rack without a policy row, or with one disabled,
is never re-carved by the scheduler.

Bounds held here: the smallest partition the scheduler may leave (in trays), and how many re-carves of the
rack it may make in a rolling hour. Two more are not settings because they are never relaxed: a partition
dedicated to a department is only ever re-carved into partitions of that same department (the engine keeps
owners), and a tray that runs work is never touched (the plan's check refuses it, under the rack's lock).
"""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from core.hardware import TRAYS_PER_RACK
from inventory.models.racks import Rack

MAX_RECARVES_PER_HOUR = 60


class RecarvePolicyQuerySet(models.QuerySet):
    def visible_to(self, user):
        # Like the racks it belongs to: every signed-in user may read it; only platform admins change it.
        return self if user.is_authenticated else self.none()

    def enabled(self):
        return self.filter(enabled=True)


class RecarvePolicy(models.Model):
    """Whether, and within which bounds, the scheduler may re-carve one rack's idle trays."""

    rack = models.OneToOneField(Rack, on_delete=models.CASCADE, related_name="recarve_policy")
    enabled = models.BooleanField(
        default=False,
        help_text=_(
            "Let the scheduler re-carve this rack's idle trays into the partition a waiting in-quota gang "
            "needs."
        ),
    )
    smallest_trays = models.PositiveSmallIntegerField(
        _("smallest partition (trays)"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(TRAYS_PER_RACK)],
        help_text=format_lazy(
            _("The scheduler never makes a partition of fewer trays (1 to {max})."), max=TRAYS_PER_RACK
        ),
    )
    max_per_hour = models.PositiveSmallIntegerField(
        _("re-carves per hour, at most"),
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RECARVES_PER_HOUR)],
        help_text=format_lazy(
            _("Scheduler re-carves of this rack in any rolling hour (1 to {max})."), max=MAX_RECARVES_PER_HOUR
        ),
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = RecarvePolicyQuerySet.as_manager()

    class Meta:
        verbose_name = _("re-carving policy")
        verbose_name_plural = _("re-carving policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(smallest_trays__gte=1, smallest_trays__lte=TRAYS_PER_RACK),
                name="%(app_label)s_%(class)s_smallest_trays_range",
                violation_error_message=format_lazy(
                    _("The smallest partition is 1 to {max} trays."), max=TRAYS_PER_RACK
                ),
            ),
            models.CheckConstraint(
                condition=Q(max_per_hour__gte=1, max_per_hour__lte=MAX_RECARVES_PER_HOUR),
                name="%(app_label)s_%(class)s_max_per_hour_range",
                violation_error_message=format_lazy(
                    _("At most 1 to {max} re-carves per hour."), max=MAX_RECARVES_PER_HOUR
                ),
            ),
        ]

    def __str__(self):
        return f"re-carving of {self.rack.name}"

    @classmethod
    def of(cls, rack: Rack) -> "RecarvePolicy":
        """The rack's policy, unsaved with the defaults (disabled) when it has none yet. Never writes."""
        try:
            return rack.recarve_policy
        except cls.DoesNotExist:
            return cls(rack=rack)
