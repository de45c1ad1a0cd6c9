"""Jobs and the GPUs allocated to them.

An Allocation row is the one record that a GPU is given to a job; the unique constraint on its GPU makes
giving one GPU twice impossible in the database, whatever the scheduler does. Rows are deleted when the
job ends (the job keeps its placement for history).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from inventory.models import Gpu
from scheduling.choices import Backend, JobState, PriorityClass, Topology
from tenancy.models import Department, is_admin


class JobQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        return self.filter(department__in=Department.objects.visible_to(user))

    def active(self):
        return self.filter(state__in=[JobState.PENDING, JobState.RUNNING])


class Job(models.Model):
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
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="%(app_label)s_%(class)s_gpus_positive"),
        ]
        indexes = [models.Index(fields=["department", "state"], name="scheduling_job_dept_state_idx")]

    def __str__(self):
        return f"{self.name} ({self.department})"


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
