"""Admin for tenancy: departments, memberships, projects and dedicated partitions are saved through
tenancy.services and tenancy.projects (tenancy.admin.checked: how their forms are checked), identity
providers' mappings, the tenancy settings and telemetry.

Django's admin autodiscovery imports this package: it imports the modules that register the admin classes.
"""

from tenancy.admin import accounts, departments, members, projects, telemetry, tenancy_settings

__all__ = ["accounts", "departments", "members", "projects", "telemetry", "tenancy_settings"]
