"""slurmrestd's v0.0.42 API (data_parser/v0.0.42): Slurm 24.11 (newest there), 25.05, 25.11, 26.05
(deprecated there); removed in 26.11.

The whole of what Rackplane uses is written down in integrations/slurm/rest.py, measured on Slurm 24.11.5:
`POST /job/submit` with `{"job": v0.0.42_job_desc_msg}`, `GET /job/{id}` and `GET /jobs/` answering
`v0.0.42_job_info` records, `DELETE /job/{id}` (with `signal` and `flags=FULL_JOB`) answering
`status[].error.code`, `GET /nodes/` (`nodes[].name`) and `GET /ping/` (`pings[].responding`). The later
versions are this one plus their own changes.

A job record's `standard_output` is the output path with Slurm's patterns expanded (`/tmp/rp-7-27.out` for
`/tmp/rp-7-%j.out`): measured on 24.11.5, and on 26.05.5 under /slurm/v0.0.42.
"""

from integrations.slurm.versions.dialect import Dialect

# v0.0.42_job_info.job_state's enum (openapi_spec_v42.json; src/plugins/data_parser/v0.0.42/parsers.c
# PARSER_FLAG_ARRAY(JOB_STATE)): the base states, then the flags.
JOB_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "LAUNCH_FAILED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
        "RESIZING",
        "CONFIGURING",
        "COMPLETING",
        "STOPPED",
        "RECONFIG_FAIL",
        "POWER_UP_NODE",
        "REVOKED",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "SIGNALING",
        "STAGE_OUT",
    }
)

DIALECT = Dialect(version="v0.0.42", job_states=JOB_STATES)
