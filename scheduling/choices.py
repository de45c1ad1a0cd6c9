from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"


ACTIVE_STATES = (JobState.PENDING, JobState.RUNNING)


class PriorityClass(models.TextChoices):
    """Run:ai-style classes: training is preemptible and may borrow; build and inference only run in-quota."""

    TRAIN = "train", "Training (preemptible)"
    BUILD = "build", "Build / interactive (non-preemptible)"
    INFERENCE = "inference", "Inference (non-preemptible)"


class Backend(models.TextChoices):
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class Topology(models.TextChoices):
    PARTITION = "partition", "One NVLink partition"
    RACK = "rack", "One NVLink domain (rack)"
    ANY = "any", "Anywhere"
