"""The job form: submit a job from the browser, with the API's own validation, a preview, and clone.

* The fields are the jobs API's (scheduling.api.serializers.JobSubmitSerializer): whatever that serializer
  takes (department or project, GPUs, topology, priority class, backend, time limit, the fallback opt-in ...)
  the form shows, in its order, with its choices, bounds, defaults and help; a field added there appears here.
  `work` is the one exception: it is asked per backend, as each backend's rule says (core.workloads.WorkRule
  `form`, registered by the integration that runs it: a Slurm batch script; an image, command, arguments and
  environment for Kubernetes; JSON for a backend whose rule names no inputs), and assembled into the API's
  shape by the same rule.
* A submission goes through the same serializer and scheduling.services.admission.submit_job as
  `POST /api/v1/jobs/`, so a bad value gets the same words, shown next to its field, and nothing is written.
  The page carries a one-time key sent as the submission's Idempotency-Key: a double click returns the job
  the first click made.
* The preview (`job_preview`, a GET fetched by htmx while the form changes) asks the scheduler what it would
  decide if the job were submitted now (scheduling.preview.preview_job: the pass run dry, writing nothing):
  where it would start, or why it would wait, or why it could never run.
* `?clone=<job>` pre-fills the form from a job the user may see (404 otherwise); the values are checked
  again when submitted, like any others. The job's project is preselected; when the job has none (or one
  the user may no longer use) and its department now shares its GPUs among projects, the project field says
  so (scheduling.resubmit) and preselects the user's project there if they have exactly one.

Who may: anyone who may submit a job somewhere (members, leads, platform admins); others get a 403 that says
how to get there.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext
from django.views.decorators.http import require_GET, require_http_methods
from rest_framework import serializers

from core.access import is_admin
from core.workloads import JSON_INPUT, WorkError, WorkInput, WorkRule, json_form, work_rule, work_rules
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.api.views import MAX_KEY
from scheduling.models import Job
from scheduling.preview import preview_job
from scheduling.resubmit import resubmit_offer
from scheduling.services.admission import (
    DEFAULT_FALLBACK_AFTER_MINUTES,
    IdempotencyKeyReused,
    check_fallback,
    check_run_as,
    submission,
    submit_job,
    submittable_departments,
)
from tenancy.models import Project
from tenancy.projects import check_job_project, default_job_project

KEY_FIELD = "submission_key"  # the page's one-time Idempotency-Key
KEY_PREFIX = "form-"
NOT_PREVIEWED = ("csrfmiddlewaretoken", KEY_FIELD, "name")  # with the work's inputs: the preview ignores them
NOT_A_NUMBER = gettext_lazy("Enter a whole number (for example 4).")
ALREADY_SUBMITTED = gettext_lazy(
    "This form already submitted job #%(pk)s with other values. Submit again to make a new job with these."
)
# A whole number of any size Python reads (sys.get_int_max_str_digits): the API's bounds and the cluster's
# capacity answer a large one in words ("at most ...", "more than any NVLink partition can hold").
_INTEGER = re.compile(r"[+-]?\d{1,4000}")


def _label(name: str) -> str:
    return str(LABELS.get(name, name.replace("_", " ").capitalize()))


# Each field's label (any other: its name, capitalised).
LABELS = {
    "gpus": gettext_lazy("GPUs"),
    "mig_profile": gettext_lazy("MIG profile"),
    "mig_slices": gettext_lazy("MIG slices"),
    "mig_memory_gb": gettext_lazy("MIG memory (GB)"),
    "time_limit_minutes": gettext_lazy("Time limit (minutes)"),
    "fallback_after_minutes": gettext_lazy("Fall back after (minutes)"),
    "name": gettext_lazy("Name"),
    "department": gettext_lazy("Department"),
    "project": gettext_lazy("Project"),
    "topology": gettext_lazy("Topology"),
    "fallback_topology": gettext_lazy("Fallback topology"),
    "priority_class": gettext_lazy("Priority class"),
    "backend": gettext_lazy("Backend"),
}


@dataclass
class FormField:
    """One input of the form, read off a serializer field."""

    name: str
    label: str
    kind: str  # select, number, text, checkbox
    required: bool
    value: str = ""
    choices: list[tuple[str, str]] = field(default_factory=list)
    groups: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)  # <optgroup>s
    blank: str = ""  # the label of the empty choice of a select ("" when it has none)
    help_text: str = ""
    min_value: int | None = None
    max_value: int | None = None
    errors: list[str] = field(default_factory=list)
    notice: str = ""  # a sentence about the pre-filled value (a clone's project), shown by the field

    @property
    def id(self) -> str:
        return f"id_{self.name}"


def _serializer_fields(request) -> dict[str, serializers.Field]:
    """The jobs API's submission fields, in its order (read-only ones left out)."""
    fields = JobSubmitSerializer(context={"request": request}).fields
    return {name: f for name, f in fields.items() if not f.read_only}


def _default(f: serializers.Field) -> str:
    if f.default is serializers.empty or f.default is None or callable(f.default):
        return ""
    return str(f.default)


def _projects(request, f: serializers.Field) -> list[tuple[str, list[tuple[str, str]]]]:
    """The projects the user may submit to, grouped by department, valued as the API names them."""
    usable = getattr(Project.objects, "usable_by", Project.objects.visible_to)
    slug_field = getattr(f, "slug_field", "slug")
    groups: dict[str, list[tuple[str, str]]] = {}
    for project in usable(request.user).select_related("department").order_by("department__name", "name"):
        groups.setdefault(project.department.name, []).append(
            (str(getattr(project, slug_field)), project.name)
        )
    return list(groups.items())


def _default_project(request, department_slug: str, f: serializers.Field) -> str:
    """The project a job of the department goes to when none is chosen (tenancy.projects.
    default_job_project: the person's only project there, else the default project), as the API names it;
    "" when they must choose."""
    department = submittable_departments(request.user).filter(slug=department_slug).first()
    project = default_job_project(request.user, department) if department is not None else None
    return str(getattr(project, getattr(f, "slug_field", "slug"))) if project is not None else ""


def build_fields(
    request, values: dict[str, str], errors: dict[str, list[str]], notices: dict[str, str] | None = None
) -> list[FormField]:
    """The form's inputs (but the work), from the serializer's fields, with `values`, `errors` and
    `notices`."""
    notices = notices or {}
    out = []
    for name, f in _serializer_fields(request).items():
        if name == "work":
            continue
        item = FormField(
            name=name,
            label=_label(name),
            kind="text",
            required=f.required,
            value=values.get(name, _default(f)),
            help_text=str(f.help_text or ""),
            errors=errors.get(name, []),
            notice=notices.get(name, ""),
        )
        _shape(request, item, f)
        item.help_text = str(FORM_HELP.get(name, item.help_text))
        if name == "department" and len(item.choices) == 1 and not item.value:
            item.value = item.choices[0][0]  # the one department the user may submit to
        if name == "project" and not item.value and "project" not in values:
            department = next((i.value for i in out if i.name == "department"), "")
            item.value = _default_project(request, department, f) if department else ""
        out.append(item)
    return out


def _shape(request, item: FormField, f: serializers.Field) -> None:
    """The input's kind, choices, bounds and help, by its serializer field."""
    if item.name == "department":
        item.kind = "select"
        item.blank = _("Choose a department")
        item.choices = [
            (d.slug, d.name)
            for d in submittable_departments(request.user).order_by("name").only("slug", "name")
        ]
        item.help_text = (
            _("Your department: the job runs on its quota.")
            if item.choices
            else _("No department exists yet: a platform admin creates one on the Departments page.")
        )
    elif item.name == "project":
        item.kind = "select"
        item.blank = "" if f.required else _("Your project (your only one, else the department's default)")
        item.groups = _projects(request, f)
        item.help_text = _(
            "The project whose share the job uses: your only project in the department is chosen, else its "
            "default project (for everyone in no named project); you see the projects you may use."
        )
    elif isinstance(f, serializers.BooleanField):
        item.kind = "checkbox"
    elif isinstance(f, serializers.ChoiceField):
        item.kind = "select"
        item.choices = [(str(k), str(v)) for k, v in f.choices.items()]
        if not f.required and not _default(f):
            item.blank = _("Default") if item.name == "topology" else pgettext("an empty choice", "None")
    elif isinstance(f, serializers.IntegerField):
        item.kind = "number"
        item.min_value, item.max_value = f.min_value, f.max_value


# Where the API's help speaks of JSON (`fields`, "absent or null"), the form says it in its own words.
FORM_HELP = {
    "gpus": gettext_lazy(
        "1-4 GPUs on one tray, or a multiple of 4 (whole trays) above that. Leave it empty for MIG slices."
    ),
    "mig_profile": gettext_lazy(
        "Optional, instead of GPUs: a MIG slice profile a tray's layout offers (for example 1g.23gb), "
        "or leave it empty and give the memory below."
    ),
    "mig_memory_gb": gettext_lazy(
        "Optional, instead of a profile: the GB each slice needs; the smallest offered profile with at least "
        "that much is chosen."
    ),
    "fallback_topology": gettext_lazy(
        "Optional: a wider placement the job accepts once it has waited the time below "
        "(e.g. one rack instead of one NVLink partition). Leave it at None to keep the topology strict."
    ),
    "fallback_after_minutes": format_lazy(
        gettext_lazy(
            "How long the job waits for its own topology before it may take the wider one "
            "(minutes, 1 to 10,080; only with a wider placement above). Empty with a wider placement: "
            "{minutes} minutes (two hours)."
        ),
        minutes=DEFAULT_FALLBACK_AFTER_MINUTES,
    ),
}


# --- the form's values -> the API's body ---------------------------------------------------------------


def _work(backend: str, post) -> tuple[dict | None, str]:
    """The API's `work` from the backend's inputs (its rule's form: core.workloads.WorkRule.form); (None,
    why) when the inputs cannot be read as such."""
    rule = work_rule(backend)
    form = rule.job_form() if rule else json_form(backend)
    try:
        return form.from_form(post), ""
    except WorkError as error:
        return None, str(error)


def body(request, post, *, with_work: bool = True) -> tuple[dict, dict[str, list[str]]]:
    """The API body the form's values make, and the errors found reading them (a number that is not one,
    work that cannot be assembled). Empty inputs are left out, so the API's defaults and "required" apply."""
    data: dict = {}
    errors: dict[str, list[str]] = {}
    fields = _serializer_fields(request)
    for name, f in fields.items():
        if name == "work":
            continue
        if isinstance(f, serializers.BooleanField):
            data[name] = post.get(name) in ("on", "true", "1")
            continue
        raw = post.get(name, "").strip()
        if not raw:
            continue
        if isinstance(f, serializers.IntegerField):
            if not _INTEGER.fullmatch(raw):
                errors[name] = [NOT_A_NUMBER]
                continue
            data[name] = int(raw)
        else:
            data[name] = raw
    if with_work and "work" in fields:
        work, problem = _work(data.get("backend") or _default(fields.get("backend")), post)
        if problem:
            errors["work"] = [problem]
        else:
            data["work"] = work
    return data, errors


def _messages(detail) -> dict[str, list[str]]:
    """A serializer's or a service's errors as {field: [sentences]} (non-field ones under "")."""
    out: dict[str, list[str]] = {}
    for name, value in dict(detail).items():
        key = "" if name in ("non_field_errors", "__all__") else name
        items = value if isinstance(value, list) else [value]
        out.setdefault(key, []).extend(
            str(item) if not isinstance(item, dict) else "; ".join(f"{k}: {v}" for k, v in item.items())
            for item in items
        )
    return out


def _form_messages(detail) -> dict[str, list[str]]:
    """The API's errors in the form's words: the department is a choice among the user's own, so one the
    API refuses (another tenant's, one that does not exist, a slug in the wrong case, whatever was posted)
    is a choice not offered, as Django's ModelChoiceField says it: the value is not echoed, and nothing
    tells another department's slug or id from one that does not exist."""
    out = _messages(detail)
    required = str(serializers.Field.default_error_messages["required"])
    if any(message != required for message in out.get("department", [])):
        out["department"] = [str(forms.ModelChoiceField.default_error_messages["invalid_choice"])]
    return out


def _new_key() -> str:
    return f"{KEY_PREFIX}{uuid.uuid4().hex}"


def _may_submit(request) -> None:
    """Members, leads and platform admins (an admin before any department exists too: the menu offers
    the form to every admin)."""
    if not is_admin(request.user) and not submittable_departments(request.user).exists():
        raise PermissionDenied(
            _(
                "Only members of a department and platform admins may submit jobs: ask a department lead to "
                "add you to their department."
            )
        )


# --- clone ---------------------------------------------------------------------------------------------


def _clone_project(request, job: Job, values: dict[str, str]) -> dict[str, str]:
    """The clone's word on its project when the job's own cannot be submitted again (see the module
    docstring); sets the one project the user has there. {field: sentence}, empty when all is well."""
    if "project" not in values:
        return {}
    offer = resubmit_offer(request.user, job)
    if not offer.may_submit or offer.ready:
        return {}
    if offer.needs_project and len(offer.projects) == 1:
        values["project"] = offer.projects[0].slug
        return {
            "project": _(
                "%(why)s: %(project)s, your one project there, is chosen; change it if the job belongs "
                "elsewhere."
            )
            % {"why": offer.why, "project": offer.projects[0].name}
        }
    if offer.needs_project:
        values["project"] = ""
        names = ", ".join(p.name for p in offer.projects)
        return {
            "project": _("%(why)s: choose one of your projects (%(names)s).")
            % {"why": offer.why, "names": names}
        }
    return {"project" if offer.why else "gpus": offer.reason}


def _clone_values(request, pk) -> tuple[dict[str, str], dict[str, str]]:
    """The form's values from a job the user may see (404 for any other), and notices about them."""
    job = get_object_or_404(
        Job.objects.visible_to(request.user).select_related("department", "project"), pk=pk
    )
    values: dict[str, str] = {}
    for name, f in _serializer_fields(request).items():
        if name == "department":
            values[name] = job.department.slug
        elif name == "project":
            project = getattr(job, "project", None)
            values[name] = (
                str(getattr(project, getattr(f, "slug_field", "slug")))
                if project
                else _default_project(request, job.department.slug, f)  # as a resubmit would place it
            )
        elif name != "work" and hasattr(job, name):
            value = getattr(job, name)
            values[name] = "" if value is None else str(value)
    # Whole GPUs or MIG slices, as the job asked (scheduling.slices): the other fields left empty, and a
    # profile chosen by a memory size asked again by that size.
    if job.mig_slices:
        values["gpus"] = ""
        if job.mig_memory_gb is not None:
            values["mig_profile"] = ""
    else:
        values.update(dict.fromkeys(("mig_profile", "mig_slices", "mig_memory_gb"), ""))
    rule = work_rule(job.backend)
    values.update((rule.job_form() if rule else json_form(job.backend)).to_form(job.work or {}))
    return values, _clone_project(request, job, values)


# --- views ---------------------------------------------------------------------------------------------


@dataclass
class WorkSection:
    """The inputs of one backend's work, shown while that backend is chosen (static/js/job_form.js)."""

    backend: str
    hidden: bool
    inputs: list[tuple[WorkInput, str]]  # each with its value


def _form_rules(fields: list[FormField]) -> list[WorkRule]:
    """Every registered backend's rule, in the order the backend field offers them (any other after)."""
    order = [value for f in fields if f.name == "backend" for value, _ in f.choices]
    return sorted(
        work_rules(), key=lambda r: (order.index(r.backend) if r.backend in order else len(order), r.backend)
    )


def _work_sections(rules: list[WorkRule], backend: str, values: dict[str, str]) -> list[WorkSection]:
    """A section per backend; the chosen backend's is shown (the first when none is)."""
    return [
        WorkSection(
            backend=rule.backend,
            hidden=backend != rule.backend if backend else index > 0,
            inputs=[(item, values.get(item.name) or "") for item in rule.job_form().inputs],
        )
        for index, rule in enumerate(rules)
    ]


def _render(request, values, errors, key, clone=None, status=200, notices=None):
    fields = build_fields(request, values, errors, notices)
    rules = _form_rules(fields)
    backend = values.get("backend") or next((f.value for f in fields if f.name == "backend"), "")
    inputs = [item.name for rule in rules for item in rule.job_form().inputs]
    sections = _work_sections(rules, backend, values)
    shown = next((section for section in sections if not section.hidden), None)
    context = {
        "fields": fields,
        "work_errors": errors.get("work", []),
        # A backend whose work is one input (a Slurm script): its errors are shown beside that input.
        "work_errors_beside": shown is not None and len(shown.inputs) == 1,
        "form_errors": errors.get("", []),
        "key_field": KEY_FIELD,
        "key": key,
        "work_sections": sections,
        "clone": clone,
        "preview_params": ",".join(
            dict.fromkeys(("csrfmiddlewaretoken", KEY_FIELD, "name", *inputs, JSON_INPUT))
        ),
    }
    return render(request, "scheduling/job_form.html", context, status=status)


@require_http_methods(["GET", "POST"])
def job_new(request):
    """The job form (GET, `?clone=<job>` to pre-fill) and its submission (POST)."""
    _may_submit(request)
    if request.method == "GET":
        clone = request.GET.get("clone", "")
        values, notices = _clone_values(request, clone) if clone.isdigit() else ({}, {})
        return _render(request, values, {}, _new_key(), clone=clone if values else None, notices=notices)

    values = {k: v for k, v in request.POST.items() if k not in ("csrfmiddlewaretoken", KEY_FIELD)}
    key = request.POST.get(KEY_FIELD, "").strip()[:MAX_KEY] or _new_key()
    data, errors = body(request, request.POST)
    # As the API: a retry is validated for its shape only, then compared with the first request.
    serializer = JobSubmitSerializer(
        data=data, context={"request": request, "retried_job": submission(request.user, key)}
    )
    if not serializer.is_valid():
        # The API's words; a field the form already found unreadable keeps the form's own.
        errors = {**_form_messages(serializer.errors), **errors}
    if errors:
        return _render(request, values, errors, key, status=400)
    try:
        job, created = submit_job(user=request.user, idempotency_key=key, **serializer.validated_data)
    except IdempotencyKeyReused as error:
        return _render(
            request, values, {"": [ALREADY_SUBMITTED % {"pk": error.job.pk}]}, _new_key(), status=400
        )
    except DjangoValidationError as error:
        return _render(
            request, values, _form_messages(serializers.as_serializer_error(error)), key, status=400
        )
    _say_submitted(request, job, created)
    return redirect(reverse("scheduling:job-list"))


def _say_submitted(request, job: Job, created: bool) -> None:
    """The message the job list shows after a submission (or a second click of the same form)."""
    if created:
        text = _("Job #%(pk)s %(name)s submitted: the scheduler decides where it runs.")
        messages.success(request, text % {"pk": job.pk, "name": job.name})
    else:
        text = _("Job #%(pk)s %(name)s was already submitted by this form (sent twice).")
        messages.info(request, text % {"pk": job.pk, "name": job.name})


@require_GET
def job_preview(request):
    """htmx: what the scheduler would decide for the form's job if it were submitted now. Writes nothing."""
    _may_submit(request)
    data, errors = body(request, request.GET, with_work=False)
    # The preview is about where and when: any valid name and work stand in for the form's.
    rule = work_rule(data.get("backend") or _default(_serializer_fields(request).get("backend")))
    data.update({"name": "preview", "work": rule.example if rule else {}})
    preview, errors = _preview(request, data, errors)
    required = str(serializers.Field.default_error_messages["required"])
    missing = [_label(name) for name, items in errors.items() if name and items == [required]]
    problems = [
        (_label(name) if name else "", message)
        for name, items in errors.items()
        for message in items
        if message != required
    ]
    response = render(
        request,
        "scheduling/job_form_preview.html",
        {"preview": preview, "problems": problems, "missing": missing},
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def _preview(request, data: dict, errors: dict[str, list[str]]):
    """(scheduling.preview.preview_job's answer or None, the errors that stop it)."""
    serializer = JobSubmitSerializer(data=data, context={"request": request})
    if not serializer.is_valid():
        return None, errors or _form_messages(serializer.errors)
    if errors:
        return None, errors
    attrs = dict(serializer.validated_data)
    for name in ("name", "backend", "work"):
        attrs.pop(name, None)
    if attrs.get("project") is None:  # as submit_job chooses it
        attrs["project"] = default_job_project(request.user, attrs["department"])
    # submit_job's own checks beyond the serializer's (the cluster's are preview_job's), the person's POSIX
    # identity for a live backend among them: the preview never says "it fits" to a refusal.
    errors = _messages(
        check_fallback(
            attrs["topology"], attrs.get("fallback_topology") or "", attrs.get("fallback_after_minutes")
        )
        | check_job_project(request.user, attrs["department"], attrs.get("project"), attrs["gpus"])
        | check_run_as(request.user, serializer.validated_data["backend"])
    )
    return (None if errors else preview_job(**attrs)), errors
