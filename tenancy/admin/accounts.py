"""Admin of identity providers' group rules, linked identities (tenancy.identity) and POSIX accounts."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tenancy.choices import PosixSource
from tenancy.labels import labelled_form, labels_for
from tenancy.models import ExternalIdentity, GroupRoleRule, PosixAccount


@admin.register(GroupRoleRule)
class GroupRoleRuleAdmin(admin.ModelAdmin):
    """Which identity-provider group gives which role. Applied at each sign-in through OpenID Connect or LDAP:
    a change here takes effect at the person's next sign-in."""

    form = labelled_form(GroupRoleRule)
    list_display = ["group", "role", "department", "project", "description", "created_at"]
    list_filter = ["role", "department"]
    search_fields = ["group", "description", "department__name", "project__name"]
    autocomplete_fields = ["department", "project"]
    readonly_fields = ["created_at"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    """Who signs in as whom. Add one to link an identity provider's user to an account that exists already
    (their first sign-in would otherwise be refused, its username being taken)."""

    form = labelled_form(ExternalIdentity)
    list_display = ["provider", "subject", "user", "granted_admin", "last_sign_in_at"]
    list_filter = ["provider", "granted_admin"]
    search_fields = ["subject", "user__username", "user__email"]
    autocomplete_fields = ["user"]
    readonly_fields = ["granted_admin", "groups", "last_sign_in_at", "created_at"]


class PosixAccountForm(forms.ModelForm):
    """The supplementary groups as "20100, 20101" rather than JSON."""

    groups = forms.CharField(
        required=False,
        label=gettext_lazy("Supplementary group ids"),
        help_text=gettext_lazy("gid numbers separated by commas (posixGroup gidNumbers), e.g. 20100, 20101."),
    )

    class Meta:
        model = PosixAccount
        fields = ["user", "name", "uid", "gid", "groups"]
        labels = labels_for(PosixAccount)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["groups"] = ", ".join(str(g) for g in self.instance.groups or [])

    def clean_groups(self):
        text = self.cleaned_data.get("groups") or ""
        parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
        bad = [p for p in parts if not p.isdigit()]
        if bad:
            raise ValidationError(_("not a group id number: %(values)s") % {"values": ", ".join(bad)})
        return [int(p) for p in parts]


@admin.register(PosixAccount)
class PosixAccountAdmin(admin.ModelAdmin):
    """The Unix user each person's jobs run as (Slurm: submitted as `login name`; Kubernetes: runAsUser,
    runAsGroup, supplementalGroups). Saved here, a mapping is an administrator's: LDAP and OpenID Connect
    sign-ins never overwrite it (delete it to let the provider's come back at the next sign-in)."""

    form = PosixAccountForm
    list_display = ["name", "uid", "gid", "user", "source", "updated_at"]
    list_filter = ["source"]
    search_fields = ["name", "user__username", "user__email", "=uid"]
    autocomplete_fields = ["user"]
    readonly_fields = ["source", "updated_at"]

    def save_model(self, request, obj, form, change):
        obj.source = PosixSource.ADMIN
        super().save_model(request, obj, form, change)
