"""Departments (tenants): guaranteed GPU quotas, over-quota borrowing, roles, network and storage isolation;
their projects and people, identity providers' mappings, and GPU telemetry.

Quota semantics follow Run:ai/KAI (see tenancy.quota): a department always gets min(guarantee, demand),
may borrow idle GPUs beyond its guarantee up to its limit (preemptible), shared by over-quota weight.

Django finds an app's models through this package: it imports every model module, and `from tenancy.models
import Department` keeps working. Everything else (choices in tenancy.choices, query sets, validators,
posix_identity_of) is imported from its own module.
"""

from tenancy.models.accounts import ExternalIdentity, GroupRoleRule, PosixAccount
from tenancy.models.departments import DedicatedPartition, Department, TenancySettings
from tenancy.models.members import Membership, MembershipBase, ProjectMembership
from tenancy.models.projects import Project
from tenancy.models.telemetry import (
    ExporterEndpoint,
    GpuActivity,
    GpuUtilization,
    MetricsSource,
    QuotaSnapshot,
)

__all__ = [
    "DedicatedPartition",
    "Department",
    "ExporterEndpoint",
    "ExternalIdentity",
    "GpuActivity",
    "GpuUtilization",
    "GroupRoleRule",
    "Membership",
    "MembershipBase",
    "MetricsSource",
    "PosixAccount",
    "Project",
    "ProjectMembership",
    "QuotaSnapshot",
    "TenancySettings",
]
