"""The partition wizard's input, kept in the URL (GET) or hidden fields (POST), never in the session.

One form carries the whole plan through every step, so back, refresh and a copied link all show the same
plan. Parallel lists describe the partitions, one entry each: `slots` (tray ranges, custom layouts only),
`name`, `department` (a slug, or empty) and `slurm` (a Slurm partition name, or empty). The form only turns
that input into `PlannedPartition`s; every rule about a plan is `integrations.plans.service.check`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django import forms
from django.http import QueryDict
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.hardware import TRAYS_PER_RACK
from core.textrule import is_clean_text
from integrations.plans.service import partitions_from_rows
from inventory.filters import FIRST_YEAR, LAST_YEAR
from inventory.models import Rack
from inventory.planning import PRESETS, PlannedPartition, parse_ranges, preset_layout
from inventory.planning import _ranges as slot_ranges
from inventory.views.tray_forms import MAX_LEAD_DAYS, MAX_WINDOW_DAYS, PAST_SLACK_S, DateTimeInput
from scheduling import whatif
from tenancy.models import DedicatedPartition

CUSTOM = "custom"
PRESET_CHOICES = [
    *((preset, preset) for preset in PRESETS),
    (CUSTOM, gettext_lazy("Custom tray ranges")),
]
# Parameters that make up a plan; everything else in a query string (page, htmx's own) is not the plan's.
PLAN_KEYS = ("preset", "slots", "leave_out", "drain_first", "name", "department", "slurm")
# Empty rows a custom layout offers beyond the ones filled in, so a partition can be added without JS.
SPARE_ROWS = 1


class ListInput(forms.MultipleHiddenInput):
    """A repeated query parameter as a list of strings (`name=p1&name=p2`)."""


class PlanForm(forms.Form):
    preset = forms.ChoiceField(choices=PRESET_CHOICES, required=False, widget=forms.RadioSelect)
    slots = forms.Field(required=False, widget=ListInput)
    leave_out = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        choices=[(slot, str(slot)) for slot in range(1, TRAYS_PER_RACK + 1)],
        widget=forms.CheckboxSelectMultiple,
    )
    drain_first = forms.BooleanField(
        required=False,
        label=gettext_lazy("Drain first"),
        help_text=gettext_lazy(
            "Trays that run work and change partition are drained; the plan is applied once it ends."
        ),
    )
    name = forms.Field(required=False, widget=ListInput)
    department = forms.Field(required=False, widget=ListInput)
    slurm = forms.Field(required=False, widget=ListInput)

    def clean_preset(self):
        return self.cleaned_data.get("preset") or CUSTOM

    def clean(self):
        data = super().clean()
        data.setdefault("leave_out", [])
        for key in ("slots", "name", "department", "slurm"):
            data[key] = [str(value).strip() for value in data.get(key) or []]
        self.layout_errors: list[str] = []
        # An unknown preset is the field's error (shown as a finding); there is no layout to build then.
        data["partitions"] = self._partitions(data) if "preset" in data else []
        return data

    def _partitions(self, data) -> list[PlannedPartition]:
        leave_out = set(data["leave_out"])
        if data["preset"] != CUSTOM:
            layout = [(p.slots, p.name) for p in preset_layout(data["preset"], leave_out) if p.slots]
        else:
            layout = []
            rows = data["slots"]
            filled = sum(1 for text in rows if text)
            if filled > TRAYS_PER_RACK:  # each partition takes a tray at least
                self.layout_errors.append(
                    _("%(filled)s partitions: a rack has %(trays)s trays, so at most %(trays)s partitions.")
                    % {"filled": filled, "trays": TRAYS_PER_RACK}
                )
                rows = []
            for number, text in enumerate(rows, start=1):
                if not text:
                    continue  # an empty row: not a partition (the spare row, or one cleared)
                try:
                    slots = parse_ranges(text)
                except ValueError as error:
                    self.layout_errors.append(
                        _("Partition %(number)s: %(error)s.") % {"number": number, "error": error}
                    )
                    continue
                kept = tuple(slot for slot in slots if slot not in leave_out)
                if kept:
                    layout.append((kept, f"p{len(layout) + 1}"))
        # Names, departments and Slurm partitions belong to partitions by position; when the number of
        # partitions changed they no longer describe these ones, and the defaults are used.
        names, departments, slurm = data["name"], data["department"], data["slurm"]
        keep = len(names) == len(layout)
        return [
            PlannedPartition(
                name=(names[i] if keep else "") or default,
                slots=slots,
                department=(departments[i] if keep and i < len(departments) else "") or None,
                slurm_partition=(slurm[i] if keep and i < len(slurm) else ""),
            )
            for i, (slots, default) in enumerate(layout)
        ]

    # ---- what the templates need -------------------------------------------------------------------

    @property
    def partitions(self) -> list[PlannedPartition]:
        return self.cleaned_data["partitions"] if self.is_valid() else []

    @property
    def is_custom(self) -> bool:
        return self.cleaned_data.get("preset") == CUSTOM if self.is_valid() else False

    def custom_rows(self, extra: int = 0) -> list[str]:
        """The custom layout's range inputs: the ones given, or the current partitions', plus spare rows."""
        rows = [text for text in self.cleaned_data.get("slots", []) if text] if self.is_valid() else []
        if not rows or self.is_custom is False:
            rows = [slot_ranges(p.slots) for p in self.partitions]
        return rows + [""] * (SPARE_ROWS + extra if self.is_custom else 0)

    def plan_params(self, **changes) -> QueryDict:
        """The plan as a query string, for links between steps and for the hidden fields of the next one."""
        params = QueryDict(mutable=True)
        if not self.is_valid():
            return params
        data = self.cleaned_data
        params["preset"] = data["preset"]
        if data["preset"] == CUSTOM:
            # The rows as typed (left-out trays included): unticking "leave out" gives the tray back.
            params.setlist("slots", [text for text in data["slots"] if text])
        params.setlist("leave_out", [str(slot) for slot in sorted(data["leave_out"])])
        if data["drain_first"]:
            params["drain_first"] = "on"
        params.setlist("name", [p.name for p in data["partitions"]])
        params.setlist("department", [p.department or "" for p in data["partitions"]])
        params.setlist("slurm", [p.slurm_partition for p in data["partitions"]])
        for key, value in changes.items():
            params.setlist(key, value if isinstance(value, list) else [value])
        return params

    def hidden_fields_list(self, *, exclude=()) -> list[tuple[str, str]]:
        return [
            (key, value)
            for key, values in self.plan_params().lists()
            if key not in exclude
            for value in values
        ]


@dataclass
class CurrentLayout:
    preset: str
    partitions: list[PlannedPartition]
    unassigned: list[int]


def current_layout(rack: Rack) -> CurrentLayout:
    """The rack's partitions now, as the wizard starts from them (a preset when they are one). 2 queries."""
    dedicated = dict(
        DedicatedPartition.objects.filter(partition__rack=rack).values_list(
            "partition_id", "department__slug"
        )
    )
    members: dict[int, list[int]] = {}
    slots = []
    for slot, partition_id in rack.trays.order_by("slot").values_list("slot", "partition_id"):
        slots.append(slot)
        if partition_id is not None:
            members.setdefault(partition_id, []).append(slot)
    partitions = [
        PlannedPartition(
            name=partition.name,
            slots=tuple(members.get(partition.pk, ())),
            department=dedicated.get(partition.pk),
            slurm_partition=partition.service_tier,
        )
        for partition in rack.partitions.order_by("clique_id")
        if members.get(partition.pk)
    ]
    unassigned = sorted(set(slots) - {s for p in partitions for s in p.slots})
    layout = sorted(p.slots for p in partitions)
    for preset in PRESETS:
        if sorted(p.slots for p in preset_layout(preset, unassigned)) == layout:
            return CurrentLayout(preset, partitions, unassigned)
    return CurrentLayout(CUSTOM, partitions, unassigned)


def initial_params(rack: Rack) -> QueryDict:
    """The wizard's first state: the rack as it is (so the first drawing is today's layout)."""
    now = current_layout(rack)
    params = QueryDict(mutable=True)
    params["preset"] = now.preset
    if now.preset == CUSTOM:
        params.setlist("slots", [slot_ranges(p.slots) for p in now.partitions])
    params.setlist("leave_out", [str(slot) for slot in now.unassigned])
    params.setlist("name", [p.name for p in now.partitions])
    params.setlist("department", [p.department or "" for p in now.partitions])
    params.setlist("slurm", [p.slurm_partition for p in now.partitions])
    return params


def plan_form(rack: Rack, data: QueryDict) -> PlanForm:
    """The bound form for a request's parameters; a request without a plan starts from the rack as it is."""
    if not any(key in data for key in PLAN_KEYS):
        data = initial_params(rack)
    form = PlanForm(data)
    form.is_valid()
    return form


# ---- the API's layout ---------------------------------------------------------------------------------


def api_partitions(layout: dict) -> list[PlannedPartition]:
    """`{"preset", "leave_out"}` or `{"partitions": [...]}` (already validated by the serializer)."""
    if layout.get("preset"):
        return preset_layout(layout["preset"], layout.get("leave_out") or ())
    return partitions_from_rows(layout["partitions"])


# ---- the what-if on the cluster's own history (scheduling.whatif) ------------------------------------------


class WhatIfForm(forms.Form):
    """How many days of the portal's own jobs to replay, and which other layouts of the rack to try beside
    the plan (the cluster as it is always comes first)."""

    days = forms.IntegerField(
        label=gettext_lazy("Days of history"),
        initial=whatif.DEFAULT_DAYS,
        min_value=1,
        max_value=whatif.MAX_DAYS,
        error_messages={
            "required": gettext_lazy("Say how many days of history to replay, e.g. 7."),
            "invalid": gettext_lazy("Give the days as a whole number, e.g. 7."),
            "min_value": gettext_lazy("Replay at least 1 day of history."),
            "max_value": gettext_lazy(
                "At most %(limit_value)s days: a longer window replays more jobs than a layout comparison "
                "needs, and takes long. Choose %(limit_value)s or fewer."
            ),
        },
    )
    also = forms.MultipleChoiceField(
        label=gettext_lazy("Also try"),
        required=False,
        choices=[(preset, preset) for preset in PRESETS],
        widget=forms.CheckboxSelectMultiple,
        error_messages={"invalid_choice": gettext_lazy("%(value)s is not a preset layout to try.")},
    )


class MigWhatIfForm(WhatIfForm):
    """The days of history a MIG layout's what-if replays (the tray page's "What would this do?")."""

    also = None


# ---- a maintenance window for the plan (integrations.plans.windows) -------------------------------------

WINDOW_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"]


class WindowTimeField(forms.DateTimeField):
    """A time as typed; a value holding anything but printable text (a NUL, a control character, a
    replacement character from invalid UTF-8) is refused before parsing (the parser would drop some)."""

    def to_python(self, value):
        if isinstance(value, str) and not is_clean_text(value, max_length=40):
            raise forms.ValidationError(_("Give a date and time such as 2026-12-10 05:00."), code="invalid")
        return super().to_python(value)


class WindowForm(forms.Form):
    """When the plan may be applied: a start and an end, typed in the viewer's time zone
    (portal.web.middleware.ViewerTimezoneMiddleware; UTC without it), each within FIRST_YEAR-LAST_YEAR, the
    end after the start and at most MAX_WINDOW_DAYS later; and whether to requeue the checkpointable jobs in
    the plan's way when it starts."""

    window_start = WindowTimeField(
        label=gettext_lazy("Window start"), widget=DateTimeInput(), input_formats=WINDOW_FORMATS
    )
    window_end = WindowTimeField(
        label=gettext_lazy("Window end"), widget=DateTimeInput(), input_formats=WINDOW_FORMATS
    )
    window_requeue = forms.BooleanField(
        required=False,
        label=gettext_lazy("Requeue checkpointable jobs at the start"),
        help_text=gettext_lazy("Otherwise the plan waits for the jobs in its way to end, within the window."),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.zone = timezone.get_current_timezone_name()
        self.fields["window_start"].help_text = _("In your time zone (%(zone)s).") % {"zone": self.zone}

    def clean(self):
        data = super().clean()
        # Checked on the typed value first: a year-1 time east of UTC cannot even be compared with now.
        for name in ("window_start", "window_end"):
            value = data.get(name)
            if value is not None and not FIRST_YEAR <= value.year <= LAST_YEAR:
                self.add_error(
                    name,
                    _("Give a time between %(first)s and %(last)s.")
                    % {"first": FIRST_YEAR, "last": LAST_YEAR},
                )
        start, end = data.get("window_start"), data.get("window_end")
        if self.errors or start is None or end is None:
            return data
        now = timezone.now()
        if end <= start:
            self.add_error(
                "window_end", _("The window ends before it starts: choose an end after the start.")
            )
        elif end - start > timedelta(days=MAX_WINDOW_DAYS):
            self.add_error(
                "window_end",
                _("A window lasts at most %(days)s days: choose an earlier end.") % {"days": MAX_WINDOW_DAYS},
            )
        if start < now - timedelta(seconds=PAST_SLACK_S):
            self.add_error(
                "window_start",
                _("The window starts in the past: choose a start from now on (%(zone)s).")
                % {"zone": self.zone},
            )
        elif start > now + timedelta(days=MAX_LEAD_DAYS):
            self.add_error(
                "window_start",
                _("The window starts more than %(days)s days from now: check the year.")
                % {"days": MAX_LEAD_DAYS},
            )
        return data
