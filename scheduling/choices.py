from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class JobState(models.TextChoices):
    PENDING = "pending", _("Pending")
    STARTING = "starting", _("Starting")  # placed, holds its GPUs, being handed to its backend
    RUNNING = "running", _("Running")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


# States in which a job holds GPUs (has Allocation rows).
HOLDING_STATES = (JobState.STARTING, JobState.RUNNING)
ACTIVE_STATES = (JobState.PENDING, *HOLDING_STATES)
FINISHED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class JobEventKind(models.TextChoices):
    SUBMITTED = "submitted", pgettext_lazy("a job's event: it was submitted", "Submitted")
    PLACED = "placed", _("Placed")
    DISPATCHED = "dispatched", _("Handed to its backend")
    DISPATCH_RETRY = "dispatch_retry", _("Backend unreachable or not ready yet, retrying")
    STARTED = "started", _("Started")
    PREEMPTED = "preempted", _("Preempted")
    QUOTA = "quota", _("In quota / borrowed changed")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    FAULT = "fault", _("Its tray failed")  # drained by a fault: left to finish, or asked to checkpoint
    REQUEUED = "requeued", _("Requeued after a fault")
    # A partition plan's "Requeue now" (scheduling.requeue.requeue_for_plan): planned work, not a fault.
    PLAN_CHECKPOINT = "plan_checkpoint", _("Asked to checkpoint for a partition plan")
    PLAN_REQUEUED = "plan_requeued", _("Requeued for a partition plan")


class FaultAction(models.TextChoices):
    """What happens to a running job when a tray it runs on is drained by a fault (scheduling.requeue)."""

    WAIT = "wait", _("Let it finish")
    CHECKPOINT = "checkpoint", _("Signal it to checkpoint, requeue after a grace period")
    STOP = "stop", _("Requeue it at once")


class PriorityClass(models.TextChoices):
    """Run:ai-style classes: training is preemptible and may borrow; build and inference only run in-quota."""

    TRAIN = "train", _("Training (preemptible)")
    BUILD = "build", _("Build / interactive (non-preemptible)")
    INFERENCE = "inference", _("Inference (non-preemptible)")


class Backend(models.TextChoices):
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class Topology(models.TextChoices):
    PARTITION = "partition", _("One NVLink partition")
    RACK = "rack", _("One NVLink domain (rack)")
    ANY = "any", _("Anywhere")


class WhatIfState(models.TextChoices):
    """A what-if replay (scheduling.whatif_runs) and each of its layouts."""

    QUEUED = "queued", _("Queued")
    PREPARING = "preparing", _("Reading the job history")
    RUNNING = "running", _("Replaying")
    DONE = "done", _("Done")
    EMPTY = "empty", _("No jobs in the window")
    FAILED = "failed", _("Failed")


WHATIF_ACTIVE_STATES = (WhatIfState.QUEUED, WhatIfState.PREPARING, WhatIfState.RUNNING)


class StrandedCause(models.TextChoices):
    """Why a free GPU is stranded: no waiting job can use it (scheduling.engine.stranded, whose CAUSES
    these values are; tests/scheduling/test_stranded_portal.py keeps the two lists equal)."""

    FRAGMENTS = "fragments", _("Partition fragments")  # free trays split across partitions, or one too small
    UNAVAILABLE = "unavailable", _("Drained or unhealthy trays")  # also unsettled fabric, degraded partitions
    RUNNING = "running", _("Running work")  # on the tray's other GPUs, or the partition's other trays
    DEDICATED = "dedicated", _("Dedicated, nobody waiting may use it")
