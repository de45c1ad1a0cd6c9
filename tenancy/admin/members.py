"""Admin of department memberships, saved through tenancy.services (which keeps every department's last
lead)."""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext_lazy, ngettext

from tenancy.admin.checked import ServiceCheckedForm
from tenancy.labels import labels_for
from tenancy.models import Membership
from tenancy.services import remove_membership, set_membership


class MembershipAdminForm(ServiceCheckedForm):
    class Meta:
        model = Membership
        fields = ["user", "department", "role"]
        labels = labels_for(Membership)

    def run_service(self, instance):
        set_membership(instance.department, instance.user.get_username(), instance.role)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    form = MembershipAdminForm
    list_display = ["user", "department", "role", "origin", "created_at"]
    list_filter = ["role", "origin", "department"]
    search_fields = ["user__username", "user__email", "department__name", "department__slug"]
    list_select_related = ["user", "department"]
    autocomplete_fields = ["user", "department"]
    actions = ["remove_selected"]

    def get_readonly_fields(self, request, obj=None):
        # Moving a membership to another user or department is a removal and an addition.
        # The origin follows from who saves: by hand here (tenancy.services.set_membership).
        return ["user", "department", "origin", "created_at"] if obj is not None else ["origin", "created_at"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # bulk deletes would skip the last-lead rule
        return actions

    def save_model(self, request, obj, form, change):
        membership = set_membership(obj.department, obj.user.get_username(), obj.role)
        obj.pk, obj.created_at = membership.pk, membership.created_at
        obj._state.adding = False

    def delete_model(self, request, obj):
        remove_membership(obj)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ValidationError as error:
            self.message_user(request, " ".join(error.messages), messages.ERROR)
            return HttpResponseRedirect(
                reverse("admin:tenancy_membership_change", args=[object_id], current_app=self.admin_site.name)
            )

    @admin.action(
        description=gettext_lazy("Remove selected memberships (keeps every department's last lead)")
    )
    def remove_selected(self, request, queryset):
        removed, refused = 0, []
        for membership in queryset.select_related("user", "department"):
            try:
                remove_membership(membership)
            except ValidationError as error:
                refused.extend(error.messages)
            else:
                removed += 1
        if removed:
            self.message_user(
                request,
                ngettext("Removed %(count)s membership.", "Removed %(count)s memberships.", removed)
                % {"count": removed},
            )
        for message in refused:
            self.message_user(request, message, messages.ERROR)
