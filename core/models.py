"""The audit log: who changed what, when, through which door, with the object before and after.

The table was created by the portal app before the re-cut and keeps its name (db_table)."""

from django.conf import settings
from django.db import models

from core.access import is_admin, led_department_ids


class AuditSource(models.TextChoices):
    UI = "ui", "Web UI"
    API = "api", "REST API"
    ADMIN = "admin", "Django admin"
    TASK = "task", "Background task"
    COMMAND = "command", "Command line"


class AuditAction(models.TextChoices):
    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"


class AuditEventQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        if not user.is_authenticated:
            return self.none()
        return self.filter(department_id__in=led_department_ids(user))


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user is deleted.")
    source = models.CharField(max_length=10, choices=AuditSource.choices)
    action = models.CharField(max_length=10, choices=AuditAction.choices)
    object_type = models.CharField(max_length=100, help_text="app_label.model")
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    # A plain id, not a foreign key: events are written while departments and their members are being
    # deleted, and must outlive them.
    department_id = models.PositiveBigIntegerField(null=True, blank=True, db_index=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    # Foreign keys stay ids in before/after; the related rows' names at the time go here, since the rows may
    # be renamed or deleted later. Empty on events recorded before labels were kept.
    labels = models.JSONField(
        default=dict,
        blank=True,
        help_text='str() of the rows foreign keys pointed to: {"before": {field: name}, "after": {...}}.',
    )

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "portal_auditevent"
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="portal_audit_object_idx")]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name or 'system'} {self.action} {self.object_repr}"
