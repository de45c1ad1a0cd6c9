"""`TextChoices` for core's tables: Django's own, as mypy should see it.

Django ships no types (and django-stubs is left out so that mypy stays fast), so to mypy
`models.TextChoices` is Any and a member such as `AuditSource.API = "api", "REST API"` a tuple. Under type
checking it is what Django makes of it: a str enum whose members carry a label, with the class's
`choices`, `labels` and `values`. At run time it is `django.db.models.TextChoices` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from django.db import models

if TYPE_CHECKING:
    from enum import StrEnum

    class TextChoices(StrEnum):
        choices: ClassVar[list[tuple[str, str]]]
        labels: ClassVar[list[str]]
        values: ClassVar[list[str]]

        @property
        def label(self) -> str: ...

else:
    TextChoices = models.TextChoices
