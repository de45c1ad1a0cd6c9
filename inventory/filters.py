"""One FilterSet per model, shared by the HTML lists and the API."""

import unicodedata
from datetime import timedelta

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.filters import BooleanFilter, IntegerFilter
from core.text import TextFormField
from inventory.choices import (
    FabricState,
    GpuHealth,
    HealthKind,
    HealthSeverity,
    MigMode,
    SystemModel,
    TrayState,
)
from inventory.models import ComputeTray, Gpu, HealthEvent, NVLinkPartition, Rack
from inventory.staleness import silent_policy, silent_q


class RackFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")
    system_model = django_filters.ChoiceFilter(choices=SystemModel.choices)
    location = django_filters.CharFilter(lookup_expr="icontains")
    has_problems = BooleanFilter(method="filter_has_problems", label=gettext_lazy("Has fabric problems"))

    class Meta:
        model = Rack
        fields = ["name", "system_model", "location", "has_problems"]

    def filter_has_problems(self, queryset, name, value):
        problem_trays = ComputeTray.objects.exclude(fabric_problems=[]).values("rack_id")
        unhealthy = Gpu.objects.exclude(health__in=[GpuHealth.HEALTHY, GpuHealth.NOT_SUPPORTED]).values(
            "tray__rack_id"
        )
        condition = Q(pk__in=problem_trays) | Q(pk__in=unhealthy)
        return queryset.filter(condition) if value else queryset.exclude(condition)


class NVLinkPartitionFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name")
    clique_id = IntegerFilter()

    class Meta:
        model = NVLinkPartition
        fields = ["rack", "clique_id", "name"]


class ComputeTrayFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="rack__name")
    state = django_filters.MultipleChoiceFilter(choices=TrayState.choices)
    clique_id = IntegerFilter(field_name="partition__clique_id")
    hostname = django_filters.CharFilter(lookup_expr="icontains")
    has_problems = BooleanFilter(method="filter_has_problems", label=gettext_lazy("Has fabric problems"))
    stale = BooleanFilter(
        method="filter_stale",
        label=gettext_lazy(
            "Node stopped reporting (reported before, not within the health settings' node silent time)"
        ),
    )

    class Meta:
        model = ComputeTray
        fields = ["rack", "state", "clique_id", "hostname", "has_problems", "stale"]

    def filter_has_problems(self, queryset, name, value):
        return queryset.exclude(fabric_problems=[]) if value else queryset.filter(fabric_problems=[])

    def filter_stale(self, queryset, name, value):
        # The same judgement as the tray's `stale` field and the rack view (inventory.staleness).
        silent = silent_q(silent_policy().cutoff(timezone.now()))
        return queryset.filter(silent) if value else queryset.exclude(silent)


class GpuFilter(django_filters.FilterSet):
    rack = django_filters.CharFilter(field_name="tray__rack__name")
    tray = django_filters.CharFilter(field_name="tray__hostname")
    health = django_filters.MultipleChoiceFilter(choices=GpuHealth.choices)
    fabric_state = django_filters.MultipleChoiceFilter(choices=FabricState.choices)
    mig_mode = django_filters.MultipleChoiceFilter(choices=MigMode.choices)
    clique_id = IntegerFilter(field_name="reported_clique_id")
    intended_clique_id = IntegerFilter(field_name="tray__partition__clique_id")

    class Meta:
        model = Gpu
        fields = [
            "rack",
            "tray",
            "health",
            "fabric_state",
            "mig_mode",
            "clique_id",
            "intended_clique_id",
            "uuid",
        ]


# --- The health centre (inventory.views.health) ------------------------------------------------------------

# The kinds an event can be (node silent is computed when read, never an event).
EVENT_KINDS = [(value, label) for value, label in HealthKind.choices if value != HealthKind.NODE_SILENT]
SEVERITY_Q = {
    HealthSeverity.DRAIN: Q(drains=True),
    HealthSeverity.DEGRADE: Q(degrades=True),
    HealthSeverity.WARN: Q(warns=True, drains=False, degrades=False),
    HealthSeverity.INFO: Q(drains=False, degrades=False, warns=False),
}
# The windows the repeat-offender ranking counts faults in: key -> days.
OFFENDER_WINDOWS = {"7d": 7, "30d": 30, "90d": 90}
OFFENDER_WINDOW_DEFAULT = "30d"


MAX_PART = 128  # longer than any rack name, hostname or GPU UUID: a paste gone wrong, said so


class PartFormField(TextFormField):
    """A part of a name as people type it: NFKC-normalised (a Japanese input method's full-width letters,
    digits and dashes, U+FF01-U+FF5E, read as their ASCII) and trimmed; still held to the text rule (a
    control character is an error)."""

    def to_python(self, value):
        value = super().to_python(value)
        return unicodedata.normalize("NFKC", value).strip() if value else value


class PartFilter(django_filters.CharFilter):
    """A filter that finds the rows whose `field_name` holds the typed text anywhere, in any case, like the
    global search (portal.pages.search): "r03" finds gb-r03's events, "f3aed0b6" a GPU by a part of its UUID.
    Nothing matching is an empty list, never an error; too long a text (MAX_PART) or a control or invisible
    character (the text rule, core.textrule) is a 400 naming the filter."""

    field_class = PartFormField

    def __init__(self, field_name: str, label, **extra):
        super().__init__(
            field_name=field_name, label=label, lookup_expr="icontains", max_length=MAX_PART, **extra
        )


FIRST_YEAR, LAST_YEAR = 2000, 2099  # health events' times: anything else is a typo (and 0001 overflows)


class TimeRangeForm(forms.Form):
    """A filter form with a `since` and an `until` (typed in the viewer's time zone: portal.web.middleware
    .ViewerTimezoneMiddleware): each within FIRST_YEAR-LAST_YEAR (checked on the typed value: a year-1 time
    east of UTC cannot even be converted to UTC), and the end after the start."""

    def clean(self):
        data = super().clean()
        for name, message in (
            ("since", _("“Seen at or after” must be a time between %(first)s and %(last)s.")),
            ("until", _("“Seen before” must be a time between %(first)s and %(last)s.")),
        ):
            value = data.get(name)
            if value is not None and not FIRST_YEAR <= value.year <= LAST_YEAR:
                self.add_error(name, message % {"first": FIRST_YEAR, "last": LAST_YEAR})
                data.pop(name, None)
        since, until = data.get("since"), data.get("until")
        if since is not None and until is not None and until <= since:
            raise ValidationError(_("“Seen before” must be after “seen at or after”."), code="range")
        return data


class WithoutEmptyValues:
    """A FilterSet whose empty values are no filter (a form's "Any" sends `kind=`), also for its several-
    valued filters, which would read "" as a choice that does not exist."""

    def __init__(self, data=None, *args, **kwargs):
        if data is not None:
            data = data.copy()
            for key in list(data):
                values = [value for value in data.getlist(key) if value != ""]
                if values:
                    data.setlist(key, values)
                else:
                    del data[key]
        super().__init__(data, *args, **kwargs)


def _choice_error(what) -> dict:
    return {
        "invalid_choice": format_lazy(gettext_lazy("{what}: %(value)s is not one of the choices."), what=what)
    }


class HealthEventFilter(WithoutEmptyValues, django_filters.FilterSet):
    """The health centre's fleet events: by rack, tray, GPU, kind, severity and time (last seen)."""

    # Parts of names, as the global search reads them (PartFilter): not the naming rules of new objects.
    rack = PartFilter("tray__rack__name", gettext_lazy("Rack"))
    tray = PartFilter("tray__hostname", gettext_lazy("Tray (hostname)"))
    gpu = PartFilter("gpu_uuid", gettext_lazy("GPU UUID"))
    kind = django_filters.MultipleChoiceFilter(
        choices=EVENT_KINDS, label=gettext_lazy("Kind"), error_messages=_choice_error(gettext_lazy("Kind"))
    )
    severity = django_filters.MultipleChoiceFilter(
        choices=HealthSeverity.choices,
        method="filter_severity",
        label=gettext_lazy("Severity"),
        error_messages=_choice_error(gettext_lazy("Severity")),
    )
    since = django_filters.IsoDateTimeFilter(
        field_name="last_seen", lookup_expr="gte", label=gettext_lazy("Seen at or after (your time zone)")
    )
    until = django_filters.IsoDateTimeFilter(
        field_name="last_seen", lookup_expr="lt", label=gettext_lazy("Seen before (your time zone)")
    )

    class Meta:
        model = HealthEvent
        fields = ["rack", "tray", "gpu", "kind", "severity", "since", "until"]
        form = TimeRangeForm

    def filter_severity(self, queryset, name, value):
        condition = Q()
        for severity in value:
            condition |= SEVERITY_Q[severity]
        return queryset.filter(condition)


class OffenderFilter(WithoutEmptyValues, django_filters.FilterSet):
    """The repeat-offender ranking: the rack and the window its faults are counted in (30 days unless
    chosen)."""

    rack = PartFilter("tray__rack__name", gettext_lazy("Rack"))
    window = django_filters.ChoiceFilter(
        choices=[
            (key, format_lazy(gettext_lazy("{days} days"), days=days))
            for key, days in OFFENDER_WINDOWS.items()
        ],
        method="filter_window",
        label=gettext_lazy("Window"),
        empty_label=None,
        error_messages=_choice_error(gettext_lazy("Window")),
    )

    class Meta:
        model = HealthEvent
        fields = ["rack", "window"]

    def __init__(self, data=None, *args, **kwargs):
        if data is not None and not data.get("window"):
            data = data.copy()
            data.setlist("window", [OFFENDER_WINDOW_DEFAULT])
        super().__init__(data, *args, **kwargs)

    def since(self):
        """The start of the window (the form must be valid)."""
        days = OFFENDER_WINDOWS[self.form.cleaned_data.get("window") or OFFENDER_WINDOW_DEFAULT]
        return timezone.now() - timedelta(days=days)

    def filter_window(self, queryset, name, value):
        return queryset.filter(last_seen__gte=self.since())
