"""Django validators for the tenancy values that reach a rendered file unquoted (docs/rendering.md).

The rules themselves are tenancy.renderers' (pure, no Django), so what the model refuses at save and what
the renderer refuses before it writes /etc/exports or a PersistentVolume are one rule: a row saved before
the rule existed is still stopped at render time, with an error naming its department.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from tenancy.renderers import _check_nfs_server, export_path_problem


def validate_export_path(value: str) -> None:
    """A department's export path: absolute, normal form, no character exports(5) reads specially.

    Whether it lies inside the export root and clear of the other departments' exports is
    Department.clean()'s (it needs the database)."""
    if problem := export_path_problem(value):
        raise ValidationError(
            _("The export path %(path)s %(problem)s.") % {"path": repr(value), "problem": problem},
            code="invalid_export_path",
        )


def validate_export_root(value: str) -> None:
    """The directory departments' exports live under (TenancySettings.export_root): the export path rules,
    except that it may be '/' itself."""
    if value != "/" and (problem := export_path_problem(value)):
        raise ValidationError(
            _("The export root %(path)s %(problem)s.") % {"path": repr(value), "problem": problem},
            code="invalid_export_root",
        )


def validate_nfs_server(value: str) -> None:
    """The NFS server written into every department's PersistentVolume (`spec.nfs.server`)."""
    try:
        _check_nfs_server(value)
    except ValueError:
        raise ValidationError(
            _(
                "The NFS server %(server)s is neither an IP address nor a DNS name (letters, digits, '-' and "
                "'.', at most 253 characters)."
            )
            % {"server": repr(value)},
            code="invalid_nfs_server",
        ) from None
