from django import forms
from django.apps import apps
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from core import tokens
from core.access import is_admin
from core.models import (
    AuditEvent,
    Notification,
    NotificationAttempt,
    NotificationSubscription,
    PersonalToken,
)
from core.notifications import recording

# The Django admin lets in the portal's platform admins (core.access), not staff alone: the "Admin" link in
# the portal's menu and the door it leads to follow the same rule.
admin.site.has_permission = lambda request: is_admin(request.user)


def model_name(label: str) -> str:
    """A model's name in the viewer's language for its "app_label.model" (an audit event's object type);
    the label itself for a model that is gone."""
    try:
        return capfirst(apps.get_model(label)._meta.verbose_name)
    except (LookupError, ValueError):
        return label


class ObjectTypeFilter(admin.SimpleListFilter):
    """The audit log's object types by their models' names (the stored "app_label.model" is the value)."""

    title = AuditEvent._meta.get_field("object_type").verbose_name
    parameter_name = "object_type"

    def lookups(self, request, model_admin):
        types = AuditEvent.objects.order_by().values_list("object_type", flat=True).distinct()
        return sorted(((label, model_name(label)) for label in types), key=lambda pair: str(pair[1]))

    def queryset(self, request, queryset):
        return queryset.filter(object_type=self.value()) if self.value() else queryset


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """The audit log is evidence: readable by staff, never added, edited or deleted by hand."""

    list_display = [
        "at",
        "actor_name",
        "source",
        "action",
        "object_type_name",
        "object_name",
        "department_id",
    ]
    list_filter = ["source", "action", ObjectTypeFilter]
    search_fields = ["actor_name", "object_repr", "object_id"]
    date_hierarchy = "at"
    show_full_result_count = False
    fields = [
        "at",
        "actor",
        "actor_name",
        "source",
        "action",
        "object_type_name",
        "object_id",
        "object_repr",
        "department_id",
        "before",
        "after",
        "labels",
    ]
    readonly_fields = fields

    @admin.display(description=AuditEvent._meta.get_field("object_repr").verbose_name, ordering="object_repr")
    def object_name(self, obj):
        """The row's name as recorded (in English, whoever made the change: data, shown as stored)."""
        return format_html('<span translate="no">{}</span>', obj.object_repr)

    @admin.display(description=AuditEvent._meta.get_field("object_type").verbose_name, ordering="object_type")
    def object_type_name(self, obj):
        """The model's name, its "app_label.model" beside it as data."""
        return format_html('{} <code translate="no">{}</code>', model_name(obj.object_type), obj.object_type)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PersonalToken)
class PersonalTokenAdmin(admin.ModelAdmin):
    """Users' personal API tokens: seen and revoked here (or on the portal's API tokens page), never made
    here (the key is shown once, to its owner) and never deleted (a revoked token stays, with when)."""

    list_display = ["prefix", "name", "user", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "name", "user__username"]
    list_select_related = ["user"]
    fields = [
        "prefix",
        "name",
        "user",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    readonly_fields = fields
    actions = ["revoke_selected"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description=gettext_lazy("Revoke selected tokens"))
    def revoke_selected(self, request, queryset):
        revoked = 0
        for token in queryset.select_related("user").filter(revoked_at__isnull=True):
            tokens.revoke(token, by=request.user)
            revoked += 1
        self.message_user(
            request,
            ngettext("Revoked %(count)s token.", "Revoked %(count)s tokens.", revoked) % {"count": revoked},
        )


class ReadOnlyErrorsForm(forms.ModelForm):
    """The model's clean() may find fault with a field the admin shows read-only (a webhook's URL that another
    endpoint already has): the message goes above the form instead of a ValueError (a 500) for a field the
    form does not have."""

    def _update_errors(self, errors):
        if hasattr(errors, "error_dict"):
            for name in [name for name in errors.error_dict if name != NON_FIELD_ERRORS]:
                if name not in self.fields:
                    errors.error_dict.setdefault(NON_FIELD_ERRORS, []).extend(errors.error_dict.pop(name))
        super()._update_errors(errors)


@admin.register(NotificationSubscription)
class NotificationSubscriptionAdmin(admin.ModelAdmin):
    """Webhook endpoints and email recipients: seen, enabled or disabled, deleted here; added on the portal's
    Webhooks & email page, which shows a webhook's signing secret once. The secret is never shown here."""

    list_display = ["name", "channel", "url", "email", "scope", "enabled", "owner", "created_at"]
    list_filter = ["channel", "enabled"]
    search_fields = ["name", "url", "email", "scope"]
    fields = [
        "name",
        "channel",
        "url",
        "email",
        "events",
        "scope",
        "enabled",
        "allow_private_address",
        "owner",
        "secret_made_at",
        "created_by",
        "created_at",
        "updated_at",
    ]
    readonly_fields = ["channel", "url", "owner", "secret_made_at", "created_by", "created_at", "updated_at"]
    form = ReadOnlyErrorsForm
    actions = ["send_test"]

    def has_add_permission(self, request):
        return False

    @admin.action(description=gettext_lazy("Send a test notification"))
    def send_test(self, request, queryset):
        for subscription in queryset:
            recording.send_test(subscription, request.user)
        self.message_user(
            request,
            _("Test notifications queued for %(count)s subscription(s).") % {"count": queryset.count()},
        )


class NotificationAttemptInline(admin.TabularInline):
    model = NotificationAttempt
    fields = ["number", "at", "seconds", "http_status", "outcome", "message"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """What was sent to whom and how each attempt went: a record, never edited by hand."""

    list_display = ["created_at", "event", "subject", "channel", "destination", "status", "attempts"]
    list_filter = ["status", "event", "channel"]
    search_fields = ["subject", "destination", "uuid"]
    date_hierarchy = "created_at"
    inlines = [NotificationAttemptInline]
    fields = [
        "uuid",
        "created_at",
        "event",
        "subject",
        "scope",
        "payload",
        "subscription",
        "channel",
        "destination",
        "status",
        "attempts",
        "next_attempt_at",
        "delivered_at",
        "error",
    ]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
