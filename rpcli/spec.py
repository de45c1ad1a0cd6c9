"""What `rp` relies on in the API's OpenAPI document (/api/schema/), named once.

`rp` is a thin layer over the API rather than a generated client (docs/api/rp.md says why); what it takes
from the document is written here, and tests/cli/test_openapi_contract.py checks every line against the
document the portal serves: each operation exists with its method, each query parameter and submit field is
the API's, and each list of choices is the API's enum. A change of the API that would break `rp` fails that
test.
"""

from __future__ import annotations

API_PREFIX = "/api/v1"

# name -> (method, path template under the portal's address)
OPERATIONS: dict[str, tuple[str, str]] = {
    "jobs_list": ("GET", "/api/v1/jobs/"),
    "jobs_create": ("POST", "/api/v1/jobs/"),
    "jobs_retrieve": ("GET", "/api/v1/jobs/{id}/"),
    "jobs_cancel": ("POST", "/api/v1/jobs/{id}/cancel/"),
    "jobs_logs": ("GET", "/api/v1/jobs/{id}/logs/"),
    "departments_list": ("GET", "/api/v1/departments/"),
    "departments_quota": ("GET", "/api/v1/departments/{slug}/quota/"),
    "projects_list": ("GET", "/api/v1/projects/"),
}

# The filters `rp ls` passes to jobs_list, and the page size it asks for.
JOB_FILTERS = ("state", "department", "project", "name", "backend", "page", "page_size")
PAGE_SIZE = 100

# The fields of a submission (the JobSubmit schema); `rp submit` sends only these.
SUBMIT_FIELDS = (
    "department",
    "project",
    "name",
    "gpus",
    "topology",
    "fallback_topology",
    "fallback_after_minutes",
    "priority_class",
    "backend",
    "time_limit_minutes",
    "work",
)
IDEMPOTENCY_HEADER = "Idempotency-Key"

# The API's enums (Job.state, topology, priority_class, backend): choices and shell completion.
JOB_STATES = ("pending", "starting", "running", "completed", "failed", "cancelled")
FINAL_STATES = ("completed", "failed", "cancelled")
TOPOLOGIES = ("partition", "rack", "any")
PRIORITY_CLASSES = ("train", "build", "inference")
BACKENDS = ("slurm", "kubernetes")

# The fields of a job `rp` reads (the Job schema) and of a job's detail (JobDetail adds these).
JOB_FIELDS = (
    "id",
    "name",
    "department",
    "project",
    "submitted_by",
    "gpus",
    "topology",
    "priority_class",
    "backend",
    "time_limit_minutes",
    "state",
    "pending_reason",
    "over_quota",
    "placement",
    "backend_id",
    "backend_message",
    "exit_code",
    "preemptions",
    "created_at",
    "started_at",
    "finished_at",
)
JOB_DETAIL_FIELDS = ("work", "events")
QUOTA_FIELDS = (
    "department",
    "guaranteed",
    "limit",
    "in_use",
    "in_quota",
    "borrowed",
    "pending_demand",
    "fair_share",
)
PROJECT_FIELDS = ("department", "name", "slug", "guaranteed_gpus", "limit_gpus")
