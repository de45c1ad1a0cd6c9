from django.db import models


class JobState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"  # placed, holds its GPUs, being handed to its backend
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# States in which a job holds GPUs (has Allocation rows).
HOLDING_STATES = (JobState.STARTING, JobState.RUNNING)
ACTIVE_STATES = (JobState.PENDING, *HOLDING_STATES)
FINISHED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class JobEventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    PLACED = "placed", "Placed"
    DISPATCHED = "dispatched", "Handed to its backend"
    DISPATCH_RETRY = "dispatch_retry", "Backend unreachable, retrying"
    STARTED = "started", "Started"
    PREEMPTED = "preempted", "Preempted"
    QUOTA = "quota", "In quota / borrowed changed"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    FAULT = "fault", "Its tray failed"  # drained by a fault: left to finish, or asked to checkpoint
    REQUEUED = "requeued", "Requeued after a fault"


class FaultAction(models.TextChoices):
    """What happens to a running job when a tray it runs on is drained by a fault (scheduling.requeue)."""

    WAIT = "wait", "Let it finish"
    CHECKPOINT = "checkpoint", "Signal it to checkpoint, requeue after a grace period"
    STOP = "stop", "Requeue it at once"


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


class WhatIfState(models.TextChoices):
    """A what-if replay (scheduling.whatif_runs) and each of its layouts."""

    QUEUED = "queued", "Queued"
    PREPARING = "preparing", "Reading the job history"
    RUNNING = "running", "Replaying"
    DONE = "done", "Done"
    EMPTY = "empty", "No jobs in the window"
    FAILED = "failed", "Failed"


WHATIF_ACTIVE_STATES = (WhatIfState.QUEUED, WhatIfState.PREPARING, WhatIfState.RUNNING)


class StrandedCause(models.TextChoices):
    """Why a free GPU is stranded: no waiting job can use it (scheduling.engine.stranded, whose CAUSES
    these values are; tests/scheduling/test_stranded_portal.py keeps the two lists equal)."""

    FRAGMENTS = "fragments", "Partition fragments"  # free trays split across partitions, or one too small
    UNAVAILABLE = "unavailable", "Drained or unhealthy trays"  # also unsettled fabric, degraded partitions
    RUNNING = "running", "Running work"  # on the tray's other GPUs, or the partition's other trays
    DEDICATED = "dedicated", "Dedicated, nobody waiting may use it"
