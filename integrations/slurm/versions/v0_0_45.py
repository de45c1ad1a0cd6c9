"""slurmrestd's v0.0.45 API (data_parser/v0.0.45): Slurm 26.05 (newest there) and 26.11.

What changed from v0.0.44 for what Rackplane uses (CHANGELOG/slurm-26.05.md, openapi_spec_v45.json):
* `GET /ping/`: `pings[]` lost `pinged` and `mode` (deprecated in v0.0.44) and gained `status`.
  Rackplane reads `responding`, which every version has.
* "Remove fields that were deprecated in v0.0.44": the job record lost `power`, the submit body
  `power_flags`, a node `power`, `external_sensors` and `tres_weighted`: none of them used.
* The submit body gained `cores_per_socket`, `memory_update_delay`, `memory_update_margin` and
  `container_type`; the top-level `script` of job_submit_req is no longer marked deprecated (Rackplane
  sends the script inside `job`, as every version takes it).
Unchanged: every field `submit_payload` fills, job_state's values, DELETE's parameters and answer.
"""

import dataclasses

from integrations.slurm.versions import v0_0_44

DIALECT = dataclasses.replace(
    v0_0_44.DIALECT,
    version="v0.0.45",
    changes=("ping answers lost pinged/mode and gained status (Rackplane reads responding)",),
)
