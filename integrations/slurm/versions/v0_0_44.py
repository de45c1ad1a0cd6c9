"""slurmrestd's v0.0.44 API (data_parser/v0.0.44): Slurm 25.11 (newest there) to 26.11.

What changed from v0.0.43 for what Rackplane uses (CHANGELOG/slurm-25.11.md, openapi_spec_v44.json):
* `job_state` may hold `EXPEDITING` (parsers.c: "Expediting the requeue"; slurm.h JOB_EXPEDITING, "checking
  for expedited requeue"). slurmctld sets it together with REQUEUED on a job that failed or lost a node and
  asked for an expedited requeue (src/slurmctld/job_mgr.c): the base state may still say FAILED or
  NODE_FAIL while the job is on its way back to PENDING. Rackplane reads such a job as pending, never as
  failed, so its trays are not given away under it. (v0.0.42 and v0.0.43 have no such value.)
* `v0.0.44_job_info` gained `step_id` and `submit_line`; the submit body gained `step_id` (not used).
* Not the data parser but the release serving it: Slurm 25.11 takes `--segment` with `--nodelist` for a job
  of several segments (CHANGELOG/slurm-25.11.md), which 24.11 refuses. A job the engine placed across
  NVLink partitions is then sent with `segment_size` (the trays per segment), so Slurm itself checks that
  each partition's trays form whole segments of one block (`segments_with_nodelist`).
Unchanged: the submit body's fields Rackplane fills, DELETE's parameters and answer, nodes' names.
"""

import dataclasses

from integrations.slurm.versions import v0_0_43

DIALECT = dataclasses.replace(
    v0_0_43.DIALECT,
    version="v0.0.44",
    job_states=v0_0_43.DIALECT.job_states | {"EXPEDITING"},
    requeue_flags=frozenset({"EXPEDITING"}),
    segments_with_nodelist=True,
    changes=(
        "job_state may hold EXPEDITING (an expedited requeue): read as pending",
        "a job of several NVLink partitions is sent with its segment size beside its trays (Slurm 25.11+)",
    ),
)
