"""Forms checked by the service that saves them.

The admin validates a form before saving it, and a service's ValidationError raised while saving would be a
server error. So the forms run the service during validation, in a savepoint that is rolled back, and show
its errors on the form (under the field it names); `save_model` then runs it for real. The TenancySettings
row is locked first, for the rest of the admin's transaction, so nobody can change the picture between the
check and the save.
"""

import copy

from django import forms
from django.core.exceptions import ValidationError
from django.db import transaction

from tenancy.models import TenancySettings


class _DryRun(Exception):
    """Raised to roll back the savepoint a service ran in while validating a form."""


def _lock_pools() -> None:
    # Inside the admin's transaction (changeform_view is atomic) the lock lasts until the save commits.
    if transaction.get_connection().in_atomic_block:
        TenancySettings.objects.select_for_update().get(pk=TenancySettings.load().pk)


class ServiceCheckedForm(forms.ModelForm):
    """A ModelForm whose validation includes what the service would refuse."""

    def run_service(self, instance):
        raise NotImplementedError

    def _post_clean(self):
        super()._post_clean()
        if self._errors:  # field errors first: the service would only repeat or confuse them
            return
        _lock_pools()
        try:
            with transaction.atomic():
                # A copy: the service fills in allocated values and a primary key we must not keep.
                self.run_service(copy.copy(self.instance))
                raise _DryRun
        except _DryRun:
            pass
        except ValidationError as error:
            self._update_errors(error)
