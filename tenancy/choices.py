"""Tenancy's choice sets: where a role came from, identity providers, project and granted roles, who set a
POSIX identity, where GPU utilization comes from."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from core.access import Role


class RoleOrigin(models.TextChoices):
    """Where a membership (or a platform admin's flag) came from: granted by hand, or by an identity
    provider's group through a GroupRoleRule. Sign-ins re-sync only what their own provider granted."""

    MANUAL = "manual", _("Granted by hand")
    OIDC = "oidc", _("OpenID Connect group")
    LDAP = "ldap", _("LDAP group")


class IdentityProvider(models.TextChoices):
    OIDC = RoleOrigin.OIDC.value, _("OpenID Connect")
    LDAP = RoleOrigin.LDAP.value, _("LDAP")


class ProjectRole(models.TextChoices):
    LEAD = "lead", _("Project lead")
    MEMBER = "member", _("Project member")


class GrantedRole(models.TextChoices):
    PLATFORM_ADMIN = "platform_admin", _("Platform admin")
    LEAD = Role.LEAD.value, Role.LEAD.label
    MEMBER = Role.MEMBER.value, Role.MEMBER.label


class PosixSource(models.TextChoices):
    """Who set a person's POSIX identity. A provider's is refreshed at each sign-in through it; an
    administrator's mapping is never overwritten by a provider."""

    LDAP = RoleOrigin.LDAP.value, _("LDAP (uidNumber, gidNumber, posixGroup)")
    OIDC = RoleOrigin.OIDC.value, _("OpenID Connect claims")
    ADMIN = "admin", _("Set by an administrator")


class MetricsSourceKind(models.TextChoices):
    DIRECT = "direct", _("Direct: Rackplane scrapes the DCGM exporters (or nodes push)")
    PROMETHEUS = "prometheus", _("The site's Prometheus-compatible query API")
