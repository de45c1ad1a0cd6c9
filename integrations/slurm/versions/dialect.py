"""What one slurmrestd API version says differently, for what Rackplane sends and reads (versions/)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Dialect:
    """One `/slurm/v0.0.NN` API as Rackplane uses it.

    version: "v0.0.42". job_states: every string the version's `job_state` list may hold (its OpenAPI
    enum: base states and flags). expanded_output_field: the job_info field holding the output path with
    Slurm's %j/%x/%u patterns already expanded (v0.0.42: standard_output; v0.0.43 on: stdout_expanded,
    standard_output being the pattern as submitted).
    requeue_flags: job state flags that mean slurmctld is putting the job back in the queue, whatever the
    base state still says (read as pending, so its GPUs are not handed to another job yet).
    segments_with_nodelist: a job pinned to its trays may also say its segment size when it has several
    segments (see the field).
    """

    version: str
    job_states: frozenset[str]
    expanded_output_field: str = "standard_output"
    requeue_flags: frozenset[str] = frozenset()
    # Whether slurmctld takes `segment_size` beside `required_nodes` for a job of several segments: Slurm
    # 25.11, the first release serving v0.0.44, does (26.05.5 measured: `SegmentSize=` in `scontrol show
    # job`, and a node list that does not split into whole segments per block is refused with 2014); 24.11
    # refuses it with 2178 and 25.05 has only "limited support".
    segments_with_nodelist: bool = False
    changes: tuple[str, ...] = field(default=(), compare=False)  # what this version changed, in words

    @property
    def api(self) -> str:
        """The path prefix: "/slurm/v0.0.42"."""
        return f"/slurm/{self.version}"

    def output_path(self, job: Mapping[str, Any]) -> str:
        """The job's output file as Slurm expanded it ("" when the record does not say)."""
        value = job.get(self.expanded_output_field)
        return value if isinstance(value, str) else ""
