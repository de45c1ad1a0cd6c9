"""Node agents' credentials, each bound to the hosts it may report for (inventory.agent_tokens makes and
checks them)."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.access import is_admin
from core.text import TextValidator
from inventory import names
from inventory.models.racks import Rack
from inventory.models.trays import ComputeTray


class AgentTokenQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Agent tokens are platform admins' business: they see all of them, nobody else any."""
        return self if is_admin(user) else self.none()

    def active(self):
        return self.filter(revoked_at__isnull=True)


class AgentToken(models.Model):
    """A node agent's credential, bound to the hosts it may report for: one rack (all its trays) or one host.

    Only a SHA-256 hash of the secret is stored (inventory.agent_tokens makes and checks it); `prefix`, the
    secret's first characters, tells tokens apart on the page and in logs. A revoked token is kept, with
    when, so the page shows what was used until then.
    """

    prefix = models.CharField(
        max_length=16, help_text=_('The secret\'s first characters ("rpa_" + 8).'), verbose_name=_("prefix")
    )
    secret_hash = models.CharField(max_length=64, help_text=_("SHA-256 of the secret, hex."))
    rack = models.ForeignKey(
        Rack,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="agent_tokens",
        help_text=_("Scope: every compute tray of this rack."),
        verbose_name=_("rack"),
    )
    hostname = models.CharField(
        max_length=128, blank=True, help_text=_("Scope: this one compute tray."), verbose_name=_("hostname")
    )
    description = models.CharField(
        max_length=200, blank=True, validators=[TextValidator()], verbose_name=_("description")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))

    objects = AgentTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("agent token")
        verbose_name_plural = _("agent tokens")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["secret_hash"], name="%(app_label)s_%(class)s_unique_secret_hash"
            ),
            models.CheckConstraint(
                condition=Q(rack__isnull=False, hostname="") | Q(rack__isnull=True) & ~Q(hostname=""),
                name="%(app_label)s_%(class)s_one_scope",
                violation_error_message=_(
                    "An agent token is for one rack or for one host, not both or none."
                ),
            ),
        ]

    def __str__(self):
        return f"{self.prefix}… ({self.scope})"

    @property
    def scope(self) -> str:
        return f"rack {self.rack.name}" if self.rack_id else f"host {self.hostname}"

    @property
    def shown_scope(self) -> str:
        """`scope` in the viewer's language, for the pages (`scope` itself goes into logs and audit)."""
        if self.rack_id:
            return gettext("rack %(name)s") % {"name": self.rack.name}
        return gettext("host %(name)s") % {"name": self.hostname}

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def trays(self):
        """The compute trays this token may report for."""
        if self.rack_id:
            return ComputeTray.objects.filter(rack_id=self.rack_id)
        return ComputeTray.objects.filter(hostname=self.hostname)

    def covers_host(self, hostname: str) -> bool:
        """A host token covers its host (known to the inventory yet or not: a dry run may come first); a rack
        token covers the hosts of its rack's trays."""
        if not self.rack_id:
            return hostname == self.hostname
        if names.hostname_error(hostname) is not None:
            # No tray can have it, so no rack's token covers it; not looked up: a NUL in it would be a 500
            # on PostgreSQL (its text cannot hold one).
            return False
        return self.trays().filter(hostname=hostname).exists()
