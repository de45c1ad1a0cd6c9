"""Forms of the department pages. They collect input; tenancy.services validates and saves it."""

from django import forms
from django.core.exceptions import ValidationError
from django.forms.models import construct_instance
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.access import Role
from core.text import TextFormField
from tenancy import naming
from tenancy.models import Department, TenancySettings
from tenancy.services import ISOLATION_FIELDS, QUOTA_FIELDS


def export_root() -> str:
    """The export root departments' exports live under (TenancySettings; read without making the row: a page
    GET never writes)."""
    saved = TenancySettings.objects.filter(pk=1).values_list("export_root", flat=True).first()
    return saved or TenancySettings._meta.get_field("export_root").default


class ServiceErrorsMixin:
    def add_service_errors(self, error: ValidationError) -> None:
        """Put a service's ValidationError on the fields it names; other messages go to the form."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for name, messages in error.message_dict.items():
            self.add_error(name if name in self.fields else None, messages)


class DepartmentForm(ServiceErrorsMixin, forms.ModelForm):
    """Quota fields, and isolation fields that are allocated from the pools when left empty.

    Validation is `tenancy.services.save_department`'s (the API calls the same): the form only builds the
    instance, and the view puts the service's ValidationError messages on the fields they name.
    """

    class Meta:
        model = Department
        fields = QUOTA_FIELDS + ISOLATION_FIELDS
        labels = {
            "name": gettext_lazy("Name"),
            "slug": gettext_lazy("Slug"),
            "guaranteed_gpus": gettext_lazy("Guaranteed GPUs"),
            "over_quota_weight": gettext_lazy("Over-quota weight"),
            "limit_gpus": gettext_lazy("Limit (GPUs)"),
            "priority": gettext_lazy("Priority"),
            "vlan_id": gettext_lazy("VLAN ID"),
            "vxlan_vni": gettext_lazy("VXLAN VNI"),
            "ib_pkey": gettext_lazy("InfiniBand P_Key"),
            "network_cidr": gettext_lazy("Network (CIDR)"),
            "export_path": gettext_lazy("Export path"),
            "storage_quota_gib": gettext_lazy("Storage quota (GiB)"),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ISOLATION_FIELDS:
            field = self.fields[name]
            field.required = False
            field.help_text = _("Leave empty to allocate from the pool.")
        self.fields["storage_quota_gib"].help_text = _("Leave empty for the default quota.")
        # Exports must lie inside the export root (Department.clean): say where before a path is refused.
        root = export_root().rstrip("/")
        self.fields["export_path"].help_text = _(
            "Leave empty to allocate %(root)s/<slug>. Otherwise a directory inside %(root)s."
        ) % {"root": root}
        # The model's help names the module that derives the names (for developers); people read this.
        self.fields["slug"].help_text = _(
            "Its Kubernetes namespace, Slurm account and QOS: up to %(max)s lower-case letters, digits and "
            "single hyphens, starting with a letter. Names Kubernetes, Slurm or Rackplane use (default, "
            "kube-…, root, gpu, all …) are refused."
        ) % {"max": naming.SLUG_MAX}

    def quota_fields(self):
        return [self[name] for name in QUOTA_FIELDS]

    def isolation_fields(self):
        return [self[name] for name in ISOLATION_FIELDS]

    def _post_clean(self):
        # Only build the instance: save_department validates it (limit vs guarantee, guarantees vs capacity,
        # isolation values and uniqueness) after allocating the isolation fields left empty, and names the
        # field of each error. Model validation here would run first and flag those empty fields.
        self.instance = construct_instance(self, self.instance, self._meta.fields, self._meta.exclude)


class MembershipForm(ServiceErrorsMixin, forms.Form):
    """Add a member by username, or change a member's role (tenancy.services.set_membership saves it)."""

    username = TextFormField(max_length=150, label=gettext_lazy("Username"))
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, label=gettext_lazy("Role"))

    def __init__(self, *args, department: Department, **kwargs):
        super().__init__(*args, **kwargs)
        self.department = department
