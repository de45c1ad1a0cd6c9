"""Admin of the tenancy settings: the isolation pools, storage and telemetry knobs (one row)."""

import ipaddress

from django import forms
from django.contrib import admin
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from tenancy.labels import labels_for
from tenancy.models import TenancySettings


class TenancySettingsForm(forms.ModelForm):
    class Meta:
        model = TenancySettings
        labels = labels_for(TenancySettings)
        fields = [
            "vlan_first",
            "vlan_last",
            "vni_first",
            "vni_last",
            "pkey_first",
            "pkey_last",
            "tenant_supernet",
            "tenant_prefix",
            "export_root",
            "nfs_server",
            "default_storage_quota_gib",
            "idle_threshold_percent",
            "idle_window_minutes",
            "utilization_history_hours",
            "quota_history_days",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            self.instance.pk = 1  # the singleton row

    def clean(self):
        data = super().clean()
        supernet, prefix = data.get("tenant_supernet"), data.get("tenant_prefix")
        if supernet:
            try:
                network = ipaddress.ip_network(supernet, strict=True)
            except ValueError as error:
                self.add_error("tenant_supernet", _("not a network address: %(error)s") % {"error": error})
            else:
                if prefix is not None and not network.prefixlen <= prefix <= network.max_prefixlen:
                    self.add_error(
                        "tenant_prefix",
                        _("a tenant network must fit in %(network)s: between /%(shortest)s and /%(longest)s")
                        % {
                            "network": network,
                            "shortest": network.prefixlen,
                            "longest": network.max_prefixlen,
                        },
                    )
        return data


@admin.register(TenancySettings)
class TenancySettingsAdmin(admin.ModelAdmin):
    form = TenancySettingsForm
    fieldsets = [
        (
            gettext_lazy("Network isolation pools"),
            {
                "fields": [
                    ("vlan_first", "vlan_last"),
                    ("vni_first", "vni_last"),
                    ("pkey_first", "pkey_last"),
                    ("tenant_supernet", "tenant_prefix"),
                ]
            },
        ),
        (gettext_lazy("Storage"), {"fields": ["export_root", "nfs_server", "default_storage_quota_gib"]}),
        (
            gettext_lazy("Telemetry"),
            {
                "fields": [
                    "idle_threshold_percent",
                    "idle_window_minutes",
                    "utilization_history_hours",
                    "quota_history_days",
                ]
            },
        ),
    ]

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not TenancySettings.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        # One row: the list is the row.
        settings = TenancySettings.objects.first()
        if settings is not None and self.has_view_or_change_permission(request, settings):
            return HttpResponseRedirect(
                reverse(
                    "admin:tenancy_tenancysettings_change",
                    args=[settings.pk],
                    current_app=self.admin_site.name,
                )
            )
        return super().changelist_view(request, extra_context)
