"""The NVLink partition wizard's steps: pick a rack, lay it out, name the partitions, preview, apply.

Platform admins only (core.access.require_admin). The plan travels in the URL (GET steps) and in hidden
fields (the apply POST), never in the session, so back, refresh and a shared link show the same plan.
Views are thin: every rule is in `integrations.plans.service` (check, preview, create_plan, apply_plan,
continue_draining, refresh_status, cancel_plan).
The layout and names steps answer htmx requests with the drawing + findings only. After the apply the plan is
followed in integrations.plans.progress_views (its progress page, cancel, the plan list); the preview's
what-if replays are integrations.plans.whatif_views.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url

from core.access import require_admin
from core.diffs import line_kinds
from core.hardware import GPUS_PER_TRAY, TRAYS_PER_RACK
from integrations.plans import service as plans
from integrations.plans import windows
from integrations.plans.forms import CUSTOM, PlanForm, WhatIfForm, WindowForm, plan_form
from integrations.plans.requeue_now import summarize
from integrations.plans.service import create_and_apply
from inventory import selectors
from inventory.choices import ACTIVE_PLAN_STATES, GpuHealth
from inventory.models import Gpu, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import PRESETS, Finding, Level, PlanCheck, TrayInfo
from inventory.planning import _ranges as slot_ranges
from inventory.selectors import PARTITION_COLOURS
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from tenancy import naming
from tenancy.models import Department

STEPS = ("rack", "layout", "names", "preview", "apply")
WIZARD = gettext_lazy("the NVLink partition wizard")  # in the 403 reason: "Only platform admins may use ..."


def render_step(request, full_template, partial_template, context, status=200):
    """htmx asks for the partial only; a plain request (link, reload, back) gets the whole page."""
    response = render(request, partial_template if request.htmx else full_template, context, status=status)
    patch_vary_headers(response, ["HX-Request"])
    return response


# ---- step 1: pick a rack ------------------------------------------------------------------------------


@require_GET
def pick_rack(request):
    """Every rack with its partitions, health, running work and any plan in flight; paginated."""
    require_admin(request.user, WIZARD)
    filterset, page = selectors.rack_list(request.user, request.GET, request.GET.get("page"))
    racks = page.object_list
    ids = [rack.pk for rack in racks]
    partitions: dict[int, list[str]] = {}
    for rack_id, name in (
        NVLinkPartition.objects.filter(rack_id__in=ids).order_by("clique_id").values_list("rack_id", "name")
    ):
        partitions.setdefault(rack_id, []).append(name)
    work = {
        row["gpu__tray__rack"]: row
        for row in Allocation.objects.filter(job__state__in=HOLDING_STATES, gpu__tray__rack__in=ids)
        .values("gpu__tray__rack")
        .annotate(jobs=Count("job", distinct=True), gpus=Count("pk"))
    }
    # Plans in flight: draining or applying, and drafts waiting for their maintenance window (they start
    # by themselves), as the plan list counts them.
    in_flight: dict[int, list[PartitionPlan]] = {}
    for plan in plans_in_flight().filter(rack_id__in=ids).order_by("pk"):
        in_flight.setdefault(plan.rack_id, []).append(plan)
    for rack in racks:
        rack.partition_names = partitions.get(rack.pk, [])
        rack.running_jobs = work.get(rack.pk, {}).get("jobs", 0)
        rack.busy_gpus = work.get(rack.pk, {}).get("gpus", 0)
        rack.plans_in_flight = in_flight.get(rack.pk, [])
    return render(
        request,
        "integrations/wizard/pick_rack.html",
        {"filter": filterset, "page": page, "step": "rack", "steps": wizard_steps("rack")},
    )


def plans_in_flight():
    """Plans draining or applying, and drafts waiting for their maintenance window
    (windows.WAITING_FOR_WINDOW: they start by themselves when it opens)."""
    return PartitionPlan.objects.filter(
        Q(status__in=ACTIVE_PLAN_STATES) | windows.WAITING_FOR_WINDOW
    ).select_related("window")


# ---- steps 2 and 3: layout and names (live drawing) ------------------------------------------------------


@dataclass
class DrawingRow:
    tray: TrayInfo
    planned: str | None
    colour: int | None
    left_out: bool
    changes: bool
    gpus: list  # (index, health or None when no GPU is recorded there, health in words), by index

    @property
    def attention(self) -> bool:
        return not self.tray.schedulable


def health_words(health: str | None) -> str:
    """A GPU's health in the drawing's words: its GpuHealth label, in the reader's language."""
    if health is None:
        return _("not recorded")
    return str(GpuHealth(health).label) if health in GpuHealth.values else health


def gpu_health(rack: Rack) -> dict[int, dict[int, str]]:
    """slot -> {GPU index: health}: one query, so the drawing marks the GPU that is actually broken."""
    health: dict[int, dict[int, str]] = {}
    gpus = Gpu.objects.filter(tray__rack=rack).values_list("tray__slot", "index", "health")
    for slot, index, value in gpus:
        health.setdefault(slot, {})[index] = value
    return health


def _drawing(trays: list[TrayInfo], form: PlanForm, check: PlanCheck, health: dict) -> list[DrawingRow]:
    owner = {slot: (i, p.name) for i, p in enumerate(form.partitions) for slot in p.slots}
    left_out = set(form.cleaned_data.get("leave_out") or [])
    changed = {change.slot for change in check.changes}
    rows = []
    for tray in trays:
        index, name = owner.get(tray.slot, (None, None))
        gpus = health.get(tray.slot, {})
        rows.append(
            DrawingRow(
                tray=tray,
                planned=name,
                colour=None if index is None else index % PARTITION_COLOURS,
                left_out=tray.slot in left_out,
                changes=tray.slot in changed,
                gpus=[(i, gpus.get(i), health_words(gpus.get(i))) for i in range(GPUS_PER_TRAY)],
            )
        )
    return rows


def _check(rack: Rack, form: PlanForm, step: str) -> PlanCheck:
    """plans.check on the form's partitions, with the form's own parse errors first.

    Steps 2 and 3 start from the rack as it is, so a plan that changes nothing is where the admin begins,
    not a mistake: it is said as information there, and as the error that keeps Apply off on the preview."""
    drain = bool(form.cleaned_data.get("drain_first"))
    if form.partitions:
        result = plans.check(rack, form.partitions, drain=drain)
        if result.unchanged and step in ("layout", "names"):
            result.findings = [
                Finding(
                    Level.INFO,
                    _(
                        "This is %(rack)s as it is carved now: choose another layout, or change a name, "
                        "department or Slurm partition, to make a plan."
                    )
                    % {"rack": rack.name},
                )
                if f.message == plans.already_carved(rack.name)
                else f
                for f in result.findings
            ]
    else:
        result = PlanCheck(partitions=[], clique_ids={})
        result.add(
            Level.ERROR,
            _("The plan for %(rack)s has no partitions: give it at least one.") % {"rack": rack.name},
        )
    errors = [Finding(Level.ERROR, message) for message in getattr(form, "layout_errors", [])]
    errors += [
        Finding(
            Level.ERROR,
            _("%(field)s: %(errors)s")
            % {"field": form.fields[field].label or field, "errors": " ".join(messages)},
        )
        for field, messages in form.errors.items()
    ]
    result.findings[:0] = errors
    return result


def _rack_context(request, rack: Rack, form: PlanForm, step: str) -> dict:
    trays = plans.rack_trays(rack)
    check = _check(rack, form, step)
    health = gpu_health(rack)
    rows = _drawing(trays, form, check, health)
    params = form.plan_params()
    return {
        "rack": rack,
        "form": form,
        "step": step,
        "steps": wizard_steps(step, rack, params.urlencode()),
        "trays": trays,
        "check": check,
        "rows": rows,
        "health": health,
        "planned": _planned(form, check, trays),
        # The jobs in the plan's way: which "Requeue now" would requeue, which it would wait for.
        "requeue": summarize(rack, check),
        "requeue_url": reverse("integrations:plan-requeue", args=[rack.name]),
        **_rack_now(rack, trays, health),
        "active_plan": PartitionPlan.objects.filter(rack=rack, status__in=ACTIVE_PLAN_STATES).first(),
        "scheduled_plans": windows.waiting_on(rack),  # they start by themselves when their window opens
        "query": params.urlencode(),
        "custom_rows": form.custom_rows(extra=1 if "add_row" in request.GET else 0),
        **_presets(rack),
        "layout_url": reverse("integrations:plan-layout", args=[rack.name]),
        # Where a finding's "Drain first" leads: the step it is on (the preview overrides it).
        "drain_first_url": reverse(
            f"integrations:plan-{'names' if step == 'names' else 'layout'}", args=[rack.name]
        ),
        "names_url": reverse("integrations:plan-names", args=[rack.name]),
        "layout_hidden": form.hidden_fields_list(exclude=("name", "department", "slurm")),
        "slurm_partitions": sorted(
            set(NVLinkPartition.objects.exclude(service_tier="").values_list("service_tier", flat=True))
        ),
        # The custom rows follow the preset (out of band) unless the user is typing in them.
        "rows_oob": step == "layout" and request.htmx and request.htmx.trigger_name != "slots",
        # The Slurm fields' placeholders follow a department chosen (out of band; never while typing in them).
        "slurm_oob": step == "names" and request.htmx and request.htmx.trigger_name == "department",
    }


def _planned(form: PlanForm, check: PlanCheck, trays: list[TrayInfo]) -> list[dict]:
    """The plan's partitions as the page draws them: slot ranges, GPUs, colour, clique, the Slurm partition
    serving them and, when some of their trays have a MIG layout, the MIG partition serving those; and what
    their Slurm field, left empty, gives (its placeholder on the names step)."""
    mig_slots = {t.slot for t in trays if t.mig_layout}
    planned = []
    for i, p in enumerate(form.partitions):
        slurm = served_by(p.slurm_partition, p.department)
        mig = sorted(set(p.slots) & mig_slots)
        planned.append(
            {
                "partition": p,
                "ranges": slot_ranges(p.slots),
                "gpus": len(p.slots) * GPUS_PER_TRAY,
                "colour": i % PARTITION_COLOURS,
                "clique_id": check.clique_ids.get(p.name),
                "served_by": slurm,
                # integrations.state.slurm_partition_of: trays in MIG mode go to `<partition>--mig`.
                "mig_served_by": naming.mig_partition(slurm) if slurm and mig else "",
                "mig_ranges": slot_ranges(mig),
                "slurm_placeholder": slurm_placeholder(p.department),
            }
        )
    return planned


def served_by(slurm_partition: str, department: str | None) -> str:
    """The Slurm partition the configuration renders for a planned partition, by the renderer's own rule
    (tenancy.naming.slurm_partition: a department's dedicated partition is served by its department's Slurm
    partition whatever was typed; else the tier, else the shared `gpu`); "" for a name the checks refuse."""
    try:
        return naming.slurm_partition("" if department else slurm_partition, department)
    except ValueError:
        return ""


def slurm_placeholder(department: str | None) -> str:
    """What a planned partition's Slurm field says while empty: the Slurm partition it then gets, by
    `served_by`'s rule (its department's own, else the shared `gpu`, where a tier may be typed instead)."""
    partition = served_by("", department)
    if not partition:
        return ""
    if department:
        return _("%(partition)s (its department's)") % {"partition": partition}
    return _("%(partition)s (shared), or gpu_name") % {"partition": partition}


def _rack_now(rack: Rack, trays: list[TrayInfo], health: dict[int, dict[int, str]]) -> dict:
    """The rack as it is: its partitions, running jobs, trays up, healthy GPUs, trays that need attention,
    and the departments a plan may give partitions to."""
    return {
        "current_partitions": list(
            NVLinkPartition.objects.filter(rack=rack)
            .annotate(tray_count=Count("trays"))
            .order_by("clique_id")
        ),
        "running_jobs": sorted({job for tray in trays for job in tray.running_jobs}),
        "trays_up": sum(1 for tray in trays if tray.state == "up"),
        # Counted as the rack page counts them (inventory.selectors.gpu_health_counts): one figure for both.
        **selectors.gpu_health_counts(h for gpus in health.values() for h in gpus.values()),
        "attention": [tray for tray in trays if not tray.schedulable],
        "departments": list(Department.objects.order_by("name").only("name", "slug", "guaranteed_gpus")),
    }


def _presets(rack: Rack) -> dict:
    """The preset choices and, once above them, what the fleet's Slurm cannot express on this rack."""
    limits = plans.preset_limits(rack)
    return {"preset_options": _preset_options(limits.blocked), "preset_notes": limits.notes}


def _preset_options(blocked: dict[str, str] | None = None) -> list[dict]:
    """The presets, each greyed out with a short reason when the fleet's Slurm cannot express it on the rack
    (plans.preset_limits; the long explanation is said once, in `preset_notes`)."""
    blocked = blocked or {}
    options = []
    for value, count_size in ((p, p.split("x")) for p in PRESETS):
        count, size = int(count_size[0]), int(count_size[1])
        options.append(
            {
                "value": value,
                "title": value,
                "description": _("the whole rack, one partition")
                if count == 1
                else ngettext(
                    "%(count)s partitions of %(size)s tray", "%(count)s partitions of %(size)s trays", size
                )
                % {"count": count, "size": size},
                "cells": [(slot - 1) // size % PARTITION_COLOURS for slot in range(1, TRAYS_PER_RACK + 1)],
                "blocked": blocked.get(value, ""),
            }
        )
    options.append(
        {"value": CUSTOM, "title": _("Custom"), "description": _("your own tray ranges"), "cells": []}
    )
    return options


def admin_rack(request, name: str) -> Rack:
    require_admin(request.user, WIZARD)
    return get_object_or_404(selectors.racks(request.user), name=name)


@require_GET
def plan_layout(request, name):
    """Step 2: a preset or custom ranges, trays left out, drain first; the drawing follows every change."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.GET)
    context = _rack_context(request, rack, form, "layout")
    response = render_step(
        request, "integrations/wizard/layout.html", "integrations/wizard/_drawing.html", context
    )
    return _push_canonical_url(request, response, "integrations:plan-layout", rack, context)


@require_GET
def plan_names(request, name):
    """Step 3: a name for each partition, optionally a department (service tier) and a Slurm partition."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.GET)
    context = _rack_context(request, rack, form, "names")
    response = render_step(
        request, "integrations/wizard/names.html", "integrations/wizard/_drawing.html", context
    )
    return _push_canonical_url(request, response, "integrations:plan-names", rack, context)


def _push_canonical_url(request, response, view: str, rack: Rack, context: dict):
    """The address bar shows the plan, not every input htmx sent: back and refresh land on the same plan."""
    if request.htmx and context["query"]:
        push_url(response, f"{reverse(view, args=[rack.name])}?{context['query']}")
    return response


# ---- step 4: preview -------------------------------------------------------------------------------------


@dataclass
class FileDiff:
    path: str
    group: str
    lines: list[tuple[str, str]]  # (css class, text)
    added: int
    removed: int


GROUPS = (
    ("topology", gettext_lazy("Slurm topology")),
    ("slurm", gettext_lazy("Slurm partitions and nodes")),
    ("kubernetes", gettext_lazy("Kubernetes labels and Kueue objects")),
    ("opensm", gettext_lazy("OpenSM partitions")),
    ("fabric", gettext_lazy("NVLink fabric")),
)


def _group(path: str) -> str:
    lowered = path.lower()
    for key, label in GROUPS:
        if key in lowered:
            return str(label)
    return _("Other files")


def _file_diffs(diffs: dict[str, str]) -> list[FileDiff]:
    files = []
    for path, text in diffs.items():
        kinds = list(line_kinds(text.splitlines()))
        lines = [(f"diff-{kind}", line) for kind, line in kinds]
        added = sum(1 for kind, _line in kinds if kind == "add")
        removed = sum(1 for kind, _line in kinds if kind == "del")
        files.append(FileDiff(path, _group(path), lines, added, removed))
    order = {str(label): i for i, (_key, label) in enumerate(GROUPS)}
    return sorted(files, key=lambda f: (order.get(f.group, len(order)), f.path))


def preview_context(
    request,
    rack: Rack,
    form: PlanForm,
    whatif_form: WhatIfForm | None = None,
    window_form: WindowForm | None = None,
) -> dict:
    context = _rack_context(request, rack, form, "preview")
    check = context["check"]
    files: list[FileDiff] = []
    if check.ok:
        result = plans.preview(rack, form.partitions, drain=bool(form.cleaned_data.get("drain_first")))
        check = result.check
        context["rows"] = _drawing(context["trays"], form, check, context["health"])
        files = _file_diffs(result.diffs)
        context["fabric_steps"] = result.fabric_steps
    context.update(
        check=check,
        files=files,
        hidden=form.hidden_fields_list(),
        # A plan may change no tray's partition and still change what is pushed (a dedication): it applies.
        can_apply=check.ok and bool(check.changes or files) and context["active_plan"] is None,
        whatif_form=whatif_form or WhatIfForm(),
        window_form=window_form or WindowForm(),
        whatif_presets=list(PRESETS),
        # "Drain first" beside a finding re-runs this preview in place, not the layout step.
        drain_first_url=reverse("integrations:plan-preview", args=[rack.name]),
    )
    return context


@require_GET
def plan_preview(request, name):
    """Step 4: every finding in plain words and the exact diff of every file the plan changes."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.GET)
    return render(request, "integrations/wizard/preview.html", preview_context(request, rack, form))


# ---- step 5: apply (then follow it: integrations.plans.progress_views) -----------------------------------


@require_POST
def plan_apply(request, name):
    """Save and apply the previewed plan, then follow it; a refusal re-shows the preview with what to do."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.POST)
    try:
        if not form.partitions or getattr(form, "layout_errors", None):
            raise ValidationError(_("The plan has errors: go back to the layout and fix them."))
        plan = create_and_apply(
            rack, form.partitions, drain=bool(form.cleaned_data.get("drain_first")), user=request.user
        )
    except plans.PlanConflict as error:
        context = preview_context(request, rack, form)
        context.update(apply_error=str(error), conflict=True)
        return render(request, "integrations/wizard/preview.html", context, status=409)
    except ValidationError as error:
        context = preview_context(request, rack, form)
        context.update(apply_error=" ".join(error.messages), conflict=False)
        return render(request, "integrations/wizard/preview.html", context, status=400)
    return redirect("integrations:plan-detail", pk=plan.pk)


# ---- the step bar ----------------------------------------------------------------------------------------


def wizard_steps(current: str, rack: Rack | None = None, query: str = "", done: bool = False) -> list[dict]:
    """The five steps with a link for those reachable from here (later steps only through the forms)."""
    urls = {"rack": reverse("integrations:plan-new")}
    if rack is not None:
        suffix = f"?{query}" if query else ""
        urls["layout"] = reverse("integrations:plan-layout", args=[rack.name]) + suffix
        if query:
            urls["names"] = reverse("integrations:plan-names", args=[rack.name]) + suffix
            urls["preview"] = reverse("integrations:plan-preview", args=[rack.name]) + suffix
    labels = {
        "rack": _("Rack"),
        "layout": _("Layout"),
        "names": _("Names"),
        "preview": _("Preview"),
        "apply": _("Apply"),
    }
    position = STEPS.index(current)
    return [
        {
            "key": key,
            "number": number,
            "label": labels[key],
            "url": urls.get(key),
            "current": key == current,
            "done": STEPS.index(key) < position or (done and key == current),
        }
        for number, key in enumerate(STEPS, start=1)
    ]
