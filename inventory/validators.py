"""Field validators of the inventory's names: a name Slurm or Kubernetes cannot take is refused at save, on
its field, rather than at render time, where one bad row stops the push of every target (inventory.names
has the rules). The same patterns are the models' named check constraints."""

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from core import sentences_i18n
from inventory import names
from inventory.discovery.mig import is_gi_profile_name
from inventory.mig_layouts import NAME as MIG_LAYOUT_NAME


def _refuse(why: str | None) -> None:
    """Refuse with the names rule's sentence (English, core.sentences) in the asker's language: a form's
    error in the viewer's, an API error in the Accept-Language's (English without one), as DRF's own."""
    if why is not None:
        raise ValidationError(sentences_i18n.translate(why), code="invalid_name")


def validate_rack_name(value):
    """A rack's name: a DNS-1123 label (inventory.names.rack_name_error)."""
    _refuse(names.rack_name_error(value))


def validate_hostname(value):
    """A compute tray's hostname: a DNS-1123 subdomain of at most 63 characters (inventory.names)."""
    _refuse(names.hostname_error(value))


def validate_partition_name(value):
    """An NVLink partition's name: a DNS-1123 label of at most 31 characters (inventory.names)."""
    _refuse(names.partition_name_error(value))


def validate_service_tier(value):
    """A service tier: empty, `gpu` or `gpu_<name>`, never a department's Slurm partition (inventory.names)"""
    _refuse(names.service_tier_error(value))


def validate_mig_profile(value):
    """A MIG GPU instance profile's name as nvidia-smi prints it (1g.23gb; inventory.discovery.mig)."""
    if value and not is_gi_profile_name(value):
        raise ValidationError(
            _("A MIG profile name is <slices>g.<memory>gb, as nvidia-smi prints it (for example 1g.23gb)."),
            code="invalid_name",
        )


def validate_mig_layout_name(value):
    """A MIG layout's name: a Kubernetes label value and a mig-parted config name (inventory.mig_layouts)."""
    if value and not MIG_LAYOUT_NAME.match(value):
        raise ValidationError(
            _("A MIG layout name is lower-case letters, digits, '.', '+' and '-' (at most 63)."),
            code="invalid_name",
        )
