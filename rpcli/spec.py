"""What `rp` relies on in the API's OpenAPI document (/api/schema/), named once.

`rp` is a thin layer over the API rather than a generated client (docs/api/rp.md says why); what it takes
from the document is written here, and tests/cli/test_openapi_contract.py checks every line against the
document the portal serves: each operation exists with its method, each query parameter and header is the
API's, and each list of choices is the API's enum. The same test checks that a submission `rp` builds has
exactly the fields the API takes and that every field rpcli/commands.py reads of an answer is in the
document. A change of the API that would break `rp` fails there.
"""

from __future__ import annotations

import urllib.parse

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


def path(operation: str, **values: object) -> str:
    """The operation's path with its parameters filled in (each quoted: a slug cannot add a path segment)."""
    template = OPERATIONS[operation][1]
    return template.format(
        **{name: urllib.parse.quote(str(value), safe="") for name, value in values.items()}
    )


# The filters `rp ls` passes to jobs_list, and the page size it asks for.
JOB_FILTERS = ("state", "department", "project", "name", "backend", "page", "page_size")
PAGE_SIZE = 100

IDEMPOTENCY_HEADER = "Idempotency-Key"

# The API's enums (Job.state, topology, priority_class, backend): choices and shell completion.
JOB_STATES = ("pending", "starting", "running", "completed", "failed", "cancelled")
FINAL_STATES = ("completed", "failed", "cancelled")
TOPOLOGIES = ("partition", "rack", "any")
PRIORITY_CLASSES = ("train", "build", "inference")
BACKENDS = ("slurm", "kubernetes")
