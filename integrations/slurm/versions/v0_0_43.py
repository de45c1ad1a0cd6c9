"""slurmrestd's v0.0.43 API (data_parser/v0.0.43): Slurm 25.05 (newest there) to 26.11.

What changed from v0.0.42 for what Rackplane uses (CHANGELOG/slurm-25.05.md, openapi_spec_v43.json):
* `standard_output` is now the path exactly as submitted (`/tmp/rp-7-%j.out`), and the new `stdout_expanded`
  (with `stderr_expanded`, `stdin_expanded`) holds Slurm's expansion (CHANGELOG 25.05: "The non-expanded
  fields will be shown exactly as the user specified them"; parsers.c JOB_INFO_STDOUT_EXP, dump only;
  measured on 26.05.5: v0.0.42 answers /tmp/rp-7-27.out, v0.0.45 /tmp/rp-7-%j.out and stdout_expanded
  /tmp/rp-7-27.out). The job log page reads `stdout_expanded` from this version on.
* `v0.0.43_job_info` gained `segment_size` and `licenses_allocated` (not read).
Unchanged: the submit body's fields and types, job_state's values, DELETE's parameters and answer, nodes.
"""

import dataclasses

from integrations.slurm.versions import v0_0_42

DIALECT = dataclasses.replace(
    v0_0_42.DIALECT,
    version="v0.0.43",
    expanded_output_field="stdout_expanded",
    changes=("job records say where the output is with Slurm's own expansion (stdout_expanded)",),
)
