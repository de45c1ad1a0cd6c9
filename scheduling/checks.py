"""Start-up checks of the scheduling settings (registered in SchedulingConfig.ready)."""

from django.conf import settings
from django.core import checks

from scheduling.choices import PriorityClass


def minutes_of(value) -> int | None:
    """Whole minutes >= 0 from a setting's value (an int, or digits from the environment); None if not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    return None


def preemption_bounds(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """RACKPLANE_MIN_RUNTIME_MINUTES names known priority classes with whole minutes >= 0, and
    RACKPLANE_PREEMPT_AFTER_MINUTES is whole minutes >= 0: a typo must stop the start, not be ignored."""
    errors = []
    min_runtime = settings.RACKPLANE_MIN_RUNTIME_MINUTES
    if not isinstance(min_runtime, dict):
        min_runtime = {}
        errors.append(
            checks.Error(
                "RACKPLANE_MIN_RUNTIME_MINUTES must map priority classes to minutes", id="scheduling.E001"
            )
        )
    for name, minutes in min_runtime.items():
        if name not in PriorityClass.values:
            errors.append(
                checks.Error(
                    f"RACKPLANE_MIN_RUNTIME_MINUTES names {name!r}, which is no priority class "
                    f"(known: {', '.join(PriorityClass.values)})",
                    id="scheduling.E001",
                )
            )
        if minutes_of(minutes) is None:
            errors.append(
                checks.Error(
                    f"RACKPLANE_MIN_RUNTIME_MINUTES gives {name!r} {minutes!r}: whole minutes >= 0",
                    id="scheduling.E002",
                )
            )
    grace = settings.RACKPLANE_PREEMPT_AFTER_MINUTES
    if minutes_of(grace) is None:
        errors.append(
            checks.Error(
                f"RACKPLANE_PREEMPT_AFTER_MINUTES is {grace!r}: whole minutes >= 0", id="scheduling.E003"
            )
        )
    return errors
