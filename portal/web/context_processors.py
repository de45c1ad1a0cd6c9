"""Template context shared by every page (portal and Django admin)."""

from django.utils.functional import SimpleLazyObject

from core.access import is_admin
from integrations.removals import biting
from scheduling.usage import guarantee_status


def capacity(request) -> dict:
    """`capacity_status` (scheduling.usage.GuaranteeStatus) for platform admins, for the shortfall banner.

    Lazy: its two aggregate queries run only when a template reads it (full pages, not htmx partials).
    Everyone else gets nothing: who is short of GPUs is not theirs to see.
    """
    user = getattr(request, "user", None)
    if user is None or not is_admin(user):
        return {}
    return {"capacity_status": SimpleLazyObject(guarantee_status)}


def removals(request) -> dict:
    """`removals_ahead` (integrations.removals.biting: (target name, touch) of each removal that bites soon
    on an enabled target) for platform admins, for the banner. Lazy: one query over the targets, run only
    when a full page shows it."""
    user = getattr(request, "user", None)
    if user is None or not is_admin(user):
        return {}
    return {"removals_ahead": SimpleLazyObject(biting)}
