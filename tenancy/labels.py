"""The labels of tenancy's model fields in the forms people fill in (the Django admin's forms), translated.

A field without a verbose name of its own is labelled by Django from its name ("guaranteed_gpus" ->
"Guaranteed gpus"), in English only. Giving each field a verbose name would be a migration for every model;
the forms' labels are not part of the schema, so the admin's forms take these instead (the English is the
label Django would make, unchanged). `labels_for(model)` leaves out the fields that have their own verbose
name (PosixAccount's login name): theirs is translated where it is declared.
"""

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

FIELD_LABELS = {
    "allow_private_address": _("Allow private address"),
    "bearer_token": _("Bearer token"),
    "borrowed": _("Borrowed"),
    "bucket_start": _("Bucket start"),
    "ca_file": _("Ca file"),
    "created_at": _("Created at"),
    "default_storage_quota_gib": _("Default storage quota gib"),
    "department": _("Department"),
    "description": _("Description"),
    "enabled": _("Enabled"),
    "export_path": _("Export path"),
    "export_root": _("Export root"),
    "fair_share": _("Fair share"),
    "gpu": _("Gpu"),
    "gpu_label": _("Gpu label"),
    "granted_admin": _("Granted admin"),
    "group": _("Group"),
    "groups": _("Groups"),
    "guaranteed": _("Guaranteed"),
    "guaranteed_gpus": _("Guaranteed gpus"),
    "hostname_label": _("Hostname label"),
    "ib_pkey": _("Ib pkey"),
    "idle": _("Idle"),
    "idle_threshold_percent": _("Idle threshold percent"),
    "idle_window_minutes": _("Idle window minutes"),
    "in_quota": _("In quota"),
    "in_use": _("In use"),
    "is_default": _("Is default"),
    "kind": _("Kind"),
    "last_error": _("Last error"),
    "last_polled_at": _("Last polled at"),
    "last_sample_count": _("Last sample count"),
    "last_scraped_at": _("Last scraped at"),
    "last_series_count": _("Last series count"),
    "last_sign_in_at": _("Last sign in at"),
    "limit_gpus": _("Limit gpus"),
    "low_since": _("Low since"),
    "mean": _("Mean"),
    "metric": _("Metric"),
    "name": _("Name"),
    "network_cidr": _("Network cidr"),
    "nfs_server": _("Nfs server"),
    "origin": _("Origin"),
    "over_quota_weight": _("Over quota weight"),
    "partition": _("Partition"),
    "password": _("Password"),
    "peak": _("Peak"),
    "pending_demand": _("Pending demand"),
    "pkey_first": _("Pkey first"),
    "pkey_last": _("Pkey last"),
    "priority": _("Priority"),
    "project": _("Project"),
    "provider": _("Provider"),
    "quota_history_days": _("Quota history days"),
    "role": _("Role"),
    "sampled_at": _("Sampled at"),
    "samples": _("Samples"),
    "seconds": _("Seconds"),
    "selector": _("Selector"),
    "slug": _("Slug"),
    "source": _("Source"),
    "storage_quota_gib": _("Storage quota gib"),
    "subject": pgettext_lazy("the OpenID Connect claim", "Subject"),
    "taken_at": _("Taken at"),
    "tenant_prefix": _("Tenant prefix"),
    "tenant_supernet": _("Tenant supernet"),
    "timeout_seconds": _("Timeout seconds"),
    "updated_at": _("Updated at"),
    "url": _("Url"),
    "user": _("User"),
    "username": _("Username"),
    "utilization": _("Utilization"),
    "utilization_history_hours": _("Utilization history hours"),
    "uuid_label": _("Uuid label"),
    "vlan_first": _("Vlan first"),
    "vlan_id": _("Vlan id"),
    "vlan_last": _("Vlan last"),
    "vni_first": _("Vni first"),
    "vni_last": _("Vni last"),
    "vxlan_vni": _("Vxlan vni"),
    "window_seconds": _("Window seconds"),
}


def labels_for(model) -> dict:
    """The translated labels of `model`'s fields that have no verbose name of their own (a form's
    Meta.labels; the admin reads them for read-only fields too)."""
    return {
        field.name: FIELD_LABELS[field.name]
        for field in model._meta.get_fields()
        if getattr(field, "concrete", False) and not field.auto_created and field._verbose_name is None
    }


def labelled_form(model, base=forms.ModelForm):
    """A ModelForm of `model` (on `base`) with the translated labels: the form of a ModelAdmin that has no
    form of its own (the admin passes the fields)."""
    meta = type("Meta", (), {"model": model, "fields": "__all__", "labels": labels_for(model)})
    return type(f"{model.__name__}LabelledForm", (base,), {"Meta": meta})
