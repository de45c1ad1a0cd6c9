"""`rp`: Rackplane's command line for REST users (docs/api/rp.md).

It speaks to a portal only through the REST API under /api/v1/ with a person's API token, and imports nothing
of the portal, Django or DRF (an import-linter contract in pyproject.toml keeps it so): it runs on a laptop
with only its own few dependencies (httpx, shtab).
"""
