"""Where a waiting job stands, as the last scheduling pass left the queue (SchedulerState.queue and
.estimated_starts, written by scheduling.services.passes): its position (how many waiting jobs the pass
serves before it) and, when trays are reserved for it, when they should free up. Both are estimates of
the last pass, labelled so wherever they are shown: the next pass may order the queue differently (a
submission, an end, a department's use changing its fair share), and the start estimate assumes the running
jobs end at their time limits. One query; a GET reads, never writes.

The position counts every waiting job ahead, whatever its department: it says how long the line is in front
of the job, never whose jobs they are."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduling.models import SchedulerState


@dataclass(frozen=True)
class QueueStanding:
    position: int  # 1: the first job the pass serves
    ahead: int  # waiting jobs the pass serves before it
    as_of: datetime | None  # the pass that said so
    estimated_start: datetime | None  # when the trays reserved for it should free up (None: no reservation)


def queue_standing(job_id: int) -> QueueStanding | None:
    """The job's standing after the last pass; None when that pass did not leave it waiting (it was
    submitted since, or started)."""
    state = SchedulerState.objects.filter(pk=1).only("last_pass_at", "queue", "estimated_starts").first()
    if state is None or not isinstance(state.queue, list):
        return None
    try:
        index = state.queue.index(job_id)
    except ValueError:
        return None
    start = (state.estimated_starts or {}).get(str(job_id))
    try:
        estimated = datetime.fromisoformat(start) if isinstance(start, str) else None
    except ValueError:
        estimated = None
    return QueueStanding(position=index + 1, ahead=index, as_of=state.last_pass_at, estimated_start=estimated)
