"""Configuration push pages (staff only): targets and their settings, pushes, and a push's live log; and
the job pages (everyone, for the jobs they may see): list, detail with live status, cancel.

The writes go through scheduling.pushes (queue_pushes, retry_now); the pages only collect input. A push's
page polls itself every 2 s while the push is queued or running (htmx) and is told to stop (HTTP 286,
`HttpResponseStopPolling`) with the final state once it has finished. A target's token is never rendered:
the form leaves it empty and keeps the stored one unless a new one is typed or "clear" is ticked.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Max
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling
from hostlist import collect_hostlist

from inventory.models import GPUS_PER_TRAY, ComputeTray
from scheduling import pushes
from scheduling.choices import Backend, JobState, PriorityClass, Topology
from scheduling.filters import JobFilter
from scheduling.models import (
    SETTINGS_DEFAULTS,
    Allocation,
    ConfigPush,
    ConfigTarget,
    ConfigTargetKind,
    Job,
    PushStatus,
    clean_settings,
)
from scheduling.services import cancel_job, may_cancel
from tenancy.models import Department, is_admin

PUSHES_PER_PAGE = 50
STATUS_BADGE = {
    PushStatus.QUEUED: "state-maintenance",
    PushStatus.RUNNING: "state-maintenance",
    PushStatus.SUCCEEDED: "ok",
    PushStatus.FAILED: "state-down",
    PushStatus.SUPERSEDED: "health-unknown",
}


def _require_staff(user) -> None:
    if not is_admin(user):
        raise PermissionDenied("Configuration targets and pushes are for platform admins.")


# --- the target form ------------------------------------------------------------------------------------

# form field -> (kind, setting). Field names are unique across kinds; the settings keys are the model's.
FIELD_SETTING = {
    "path": ("directory", "path"),
    "keep": ("directory", "keep"),
    "config_dir": ("slurm", "config_dir"),
    "scontrol": ("slurm", "scontrol"),
    "slurmctld_log": ("slurm", "slurmctld_log"),
    "topology_format": ("slurm", "topology_format"),
    "cpus": ("slurm", "cpus"),
    "memory_mb": ("slurm", "memory_mb"),
    "node_hostname": ("slurm", "node_hostname"),
    "node_address": ("slurm", "node_address"),
    "node_port_base": ("slurm", "node_port_base"),
    "rest_url": ("slurm", "rest_url"),
    "rest_user": ("slurm", "rest_user"),
    "rest_token": ("slurm", "rest_token"),
    "jwt_key_file": ("slurm", "jwt_key_file"),
    "accounting": ("slurm", "accounting"),
    "imex": ("slurm", "imex"),
    "api_url": ("kubernetes", "api_url"),
    "k8s_token": ("kubernetes", "token"),
    "ca_file": ("kubernetes", "ca_file"),
    "insecure": ("kubernetes", "insecure"),
    "dry_run": ("kubernetes", "dry_run"),
    "fabric_kind": ("fabric", "kind"),
    "base_url": ("fabric", "base_url"),
    "fabric_token": ("fabric", "token"),
    "fabric_insecure": ("fabric", "insecure"),
}
TOKEN_FIELDS = {"k8s_token", "fabric_token", "rest_token"}


def _text(label, help_text="", **kwargs):
    return forms.CharField(label=label, required=False, help_text=help_text, **kwargs)


def _number(label, help_text=""):
    return forms.IntegerField(label=label, required=False, help_text=help_text)


def _flag(label, help_text=""):
    return forms.BooleanField(label=label, required=False, help_text=help_text)


def _token(label):
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )


class ConfigTargetForm(forms.Form):
    """Name, kind, enabled and the settings of the chosen kind; `clean_settings` validates them."""

    name = forms.CharField(max_length=64)
    kind = forms.ChoiceField(choices=ConfigTargetKind.choices)
    enabled = _flag("Enabled", "Disabled targets are left out of pushes.")
    path = _text("Directory", "Absolute, or relative to var/. Empty: var/rendered (RACKPLANE_RENDER_DIR).")
    keep = _number("Previous versions kept", "Default 5.")
    config_dir = _text("Config directory", "The directory slurmctld reads (holds slurm.conf), absolute.")
    scontrol = _text("scontrol", "Path or command line; default: scontrol on the PATH.")
    slurmctld_log = _text("slurmctld log", "Optional: quoted when slurmctld refuses a configuration.")
    topology_format = forms.ChoiceField(
        label="Topology file",
        choices=[("conf", "topology.conf (Slurm 24.11)"), ("yaml", "topology.yaml (Slurm 25.05+)")],
        initial="conf",
        required=False,
    )
    cpus = _number("CPUs per node", "Default 144 (two Grace CPUs).")
    memory_mb = _number("Memory per node (MB)", "Empty: what slurmd reports.")
    node_hostname = _text("slurmd host name", "Only when slurmd does not run at the node's own name.")
    node_address = _text("slurmd address", "Only when slurmd is reached at another address.")
    node_port_base = _number("slurmd port base", "Several slurmd on one host: node i listens on base + i.")
    rest_url = _text(
        "slurmrestd URL", "Where jobs are submitted (http://slurm-ctl:6820). Empty: no jobs here."
    )
    rest_user = _text("Slurm user for jobs", "The user jobs are submitted as (needs a JWT).")
    rest_token = _token("slurmrestd token (scontrol token)")
    jwt_key_file = _text("JWT key file", "Or: slurmctld's jwt_key (absolute path), to mint short tokens.")
    accounting = _flag("Account and QOS per department", "Needs slurmdbd with the department accounts.")
    imex = _flag("Per-job IMEX channels", "slurmctld runs SwitchType=switch/nvidia_imex.")
    api_url = _text("API server URL", "https://api.cluster.example:6443")
    k8s_token = _token("Bearer token")
    ca_file = _text("CA file", "Absolute path of the cluster CA certificate (PEM).")
    insecure = _flag("Skip TLS verification", "For testing only.")
    dry_run = _flag("Server-side dry run only", "Validates everything on the API server, changes nothing.")
    fabric_kind = forms.ChoiceField(
        label="Fabric manager",
        choices=[("simulated", "Simulated (embedded)"), ("nmx", "NVIDIA NMX Manager")],
        initial="simulated",
        required=False,
    )
    base_url = _text("NMX-M address", "https://nmx-m.example")
    fabric_token = _token("NMX-M token")
    fabric_insecure = _flag("Skip TLS verification", "For testing only.")
    clear_token = _flag("Clear the stored token")

    def __init__(self, *args, instance: ConfigTarget | None = None, kind: str | None = None, **kwargs):
        self.instance = instance or ConfigTarget()
        if instance is not None and not kwargs.get("initial") and not args:
            initial = {"name": instance.name, "kind": instance.kind, "enabled": instance.enabled}
            values = instance.settings or {}
            for field, (field_kind, key) in FIELD_SETTING.items():
                if field_kind == instance.kind and field not in TOKEN_FIELDS:
                    initial[field] = values.get(key)
            kwargs["initial"] = initial
        elif instance is None and not args:
            kwargs.setdefault("initial", {"enabled": True})
        super().__init__(*args, **kwargs)
        self.kind_value = (
            kind
            or (self.data.get("kind") if self.is_bound else None)
            or self.initial.get("kind")
            or "directory"
        )
        if self.kind_value not in SETTINGS_DEFAULTS:
            self.kind_value = "directory"
        stored = (instance.settings or {}) if instance is not None else {}
        same_kind = instance is not None and instance.kind == self.kind_value
        self.has_token = same_kind and any(
            stored.get(FIELD_SETTING[field][1])
            for field in TOKEN_FIELDS
            if FIELD_SETTING[field][0] == self.kind_value
        )
        for field in TOKEN_FIELDS:
            self.fields[field].help_text = (
                "A token is stored: leave empty to keep it, type a new one to replace it."
                if same_kind and stored.get(FIELD_SETTING[field][1])
                else "Stored as given; never shown again."
            )

    def settings_fields(self):
        return [self[name] for name, (kind, _) in FIELD_SETTING.items() if kind == self.kind_value]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if ConfigTarget.objects.filter(name=name).exclude(pk=self.instance.pk).exists():
            raise ValidationError(f"A target named {name} already exists.")
        return name

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if not kind:
            return data
        raw = {}
        for field, (field_kind, key) in FIELD_SETTING.items():
            if field_kind == kind:
                value = data.get(field)
                raw[key] = value if value is not None else SETTINGS_DEFAULTS[kind][key]
        stored = self.instance.settings or {}
        for field in TOKEN_FIELDS:
            field_kind, key = FIELD_SETTING[field]
            if (
                field_kind == kind
                and not raw[key]
                and self.instance.kind == kind
                and not data.get("clear_token")
            ):
                raw[key] = stored.get(key, "")
        try:
            self.cleaned_settings = clean_settings(kind, raw)
        except ValidationError as error:
            back = {key: field for field, (field_kind, key) in FIELD_SETTING.items() if field_kind == kind}
            for key, messages_ in error.message_dict.items():
                self.add_error(back.get(key), messages_)
        return data

    def save(self) -> ConfigTarget:
        target = self.instance
        target.name = self.cleaned_data["name"]
        target.kind = self.cleaned_data["kind"]
        target.enabled = self.cleaned_data["enabled"]
        target.settings = self.cleaned_settings
        target.full_clean()
        target.save()
        return target


# --- targets --------------------------------------------------------------------------------------------


def target_list(request):
    _require_staff(request.user)
    targets = list(
        ConfigTarget.objects.visible_to(request.user)
        .annotate(push_count=Count("pushes"), last_push_id=Max("pushes__pk"))
        .order_by("name")
    )
    last = {
        p.pk: p
        for p in ConfigPush.objects.filter(pk__in=[t.last_push_id for t in targets if t.last_push_id]).only(
            "pk", "status", "created_at", "error", "target_id"
        )
    }
    rows = []
    for t in targets:
        push = last.get(t.last_push_id)
        rows.append(
            {
                "target": t,
                "summary": pushes.target_summary(t),
                "last": push,
                "badge": STATUS_BADGE.get(push.status, "") if push else "",
            }
        )
    return render(request, "scheduling/target_list.html", {"rows": rows})


@require_http_methods(["GET", "POST"])
def target_create(request):
    _require_staff(request.user)
    return _target_form(request, None)


@require_http_methods(["GET", "POST"])
def target_edit(request, pk):
    _require_staff(request.user)
    target = get_object_or_404(ConfigTarget.objects.visible_to(request.user), pk=pk)
    return _target_form(request, target)


def _target_form(request, target: ConfigTarget | None):
    if request.method == "POST":
        form = ConfigTargetForm(request.POST, instance=target)
        if form.is_valid():
            try:
                saved = form.save()
            except ValidationError as error:
                form.add_error(None, error)
            else:
                messages.success(request, f"Target {saved.name} saved.")
                return redirect("scheduling:target-list")
    else:
        form = ConfigTargetForm(instance=target, kind=request.GET.get("kind"))
        if request.htmx and "kind" in request.GET:
            # The kind select changed: only the settings of that kind.
            response = render(request, "scheduling/_target_settings.html", {"form": form})
            patch_vary_headers(response, ["HX-Request"])
            return response
    # Changing the kind swaps in that kind's settings (only the kind is sent: never a typed token).
    form.fields["kind"].widget.attrs.update(
        {"hx-get": request.path, "hx-target": "#target-settings", "hx-swap": "outerHTML"}
    )
    return render(request, "scheduling/target_form.html", {"form": form, "target": target})


# --- pushes ---------------------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def push_list(request):
    """Every push, newest first (filter by target and status); POST queues a push to all enabled targets,
    or to one (`target`)."""
    _require_staff(request.user)
    if request.method == "POST":
        chosen = None
        if request.POST.get("target"):
            chosen = [
                get_object_or_404(ConfigTarget.objects.visible_to(request.user), pk=request.POST["target"])
            ]
            if not chosen[0].enabled:
                messages.error(request, f"Target {chosen[0].name} is disabled: enable it first.")
                return redirect("scheduling:push-list")
        created = pushes.queue_pushes(reason="pushed from the portal", user=request.user, targets=chosen)
        if not created:
            messages.info(request, "A push is running on that target: the change is pushed right after it.")
        elif len(created) == 1:
            return redirect("scheduling:push-detail", pk=created[0].pk)
        else:
            messages.success(request, f"{len(created)} pushes created.")
        return redirect("scheduling:push-list")

    queryset = (
        ConfigPush.objects.visible_to(request.user)
        .select_related("target", "requested_by")
        .defer("payload", "log")
    )
    target = request.GET.get("target") or ""
    status = request.GET.get("status") or ""
    if target.isdigit():
        queryset = queryset.filter(target_id=int(target))
    if status in PushStatus.values:
        queryset = queryset.filter(status=status)
    page = Paginator(queryset, PUSHES_PER_PAGE).get_page(request.GET.get("page"))
    for push in page.object_list:
        push.badge = STATUS_BADGE.get(push.status, "")
        push.error_line = push.error.splitlines()[0] if push.error else ""
        push.next_step = pushes.what_to_do(push.error)
    return render(
        request,
        "scheduling/push_list.html",
        {
            "page": page,
            "targets": ConfigTarget.objects.visible_to(request.user).order_by("name"),
            "statuses": PushStatus.choices,
            "selected_target": target,
            "selected_status": status,
            "any_enabled": ConfigTarget.objects.filter(enabled=True).exists(),
        },
    )


def _payload_summary(push: ConfigPush) -> list[str]:
    payload = push.payload or {}
    if "files" in payload:
        return [f"{name} · {len(text.encode()):,} bytes" for name, text in sorted(payload["files"].items())]
    if "objects" in payload:
        kinds: dict[str, int] = {}
        for obj in payload["objects"]:
            kinds[obj.get("kind", "?")] = kinds.get(obj.get("kind", "?"), 0) + 1
        return [f"{count:,} {kind}" for kind, count in kinds.items()]
    if "racks" in payload:
        racks = payload["racks"]
        partitions = sum(len(r["partitions"]) for r in racks)
        return [f"{len(racks):,} racks, {partitions:,} NVLink partitions"]
    return []


def push_detail(request, pk):
    """The push, its log as it grows (htmx polls every 2 s while it is queued or running), what to do next
    when it failed."""
    _require_staff(request.user)
    queryset = ConfigPush.objects.visible_to(request.user).select_related("target", "requested_by")
    polling = bool(request.htmx)
    if polling:
        queryset = queryset.defer("payload")
    push = get_object_or_404(queryset, pk=pk)
    context = {
        "push": push,
        "badge": STATUS_BADGE.get(push.status, ""),
        "next_step": pushes.what_to_do(push.error),
        # The error without its "What to do:" line, which the page shows on its own.
        "error_body": "\n".join(
            line for line in push.error.splitlines() if not line.startswith("What to do:")
        ),
        "target_summary": pushes.target_summary(push.target),
    }
    if polling:
        response = render(request, "scheduling/_push_status.html", context)
        if push.is_finished:
            response = HttpResponseStopPolling(response.content)
        patch_vary_headers(response, ["HX-Request"])
        return response
    context["payload_summary"] = _payload_summary(push)
    return render(request, "scheduling/push_detail.html", context)


@require_POST
def push_retry(request, pk):
    """Retry a failed push (a new push of the current state) or send a push waiting for its retry now."""
    _require_staff(request.user)
    push = get_object_or_404(ConfigPush.objects.visible_to(request.user).select_related("target"), pk=pk)
    try:
        created = pushes.retry_now(push, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("scheduling:push-detail", pk=push.pk)
    if not created:
        messages.info(request, "A push is running on that target: the retry is pushed right after it.")
        return redirect("scheduling:push-detail", pk=push.pk)
    return redirect("scheduling:push-detail", pk=created[0].pk)


# --- jobs -----------------------------------------------------------------------------------------------
# Everyone sees the jobs `Job.objects.visible_to` allows (their departments'; staff: all). The list and a
# job's status poll every few seconds while something shown can still change, and are told to stop (HTTP
# 286) once nothing can. Cancelling goes through scheduling.services (may_cancel, cancel_job).

JOBS_PER_PAGE = 50
JOB_POLL_SECONDS = 2  # DESIGN.md: long work polls every 2 s
TOPOLOGY_WORDS = {
    Topology.PARTITION: "in one NVLink partition",
    Topology.RACK: "in one rack (one NVLink domain)",
    Topology.ANY: "anywhere in the cluster",
}


def _hostlist(hosts) -> str:
    return collect_hostlist(list(hosts)) if hosts else ""


def job_list(request):
    """Jobs the user may see, filtered (JobFilter, as in the API) and paginated; `request.htmx`: the table
    only (the page polls it while a shown job is pending, starting or running)."""
    queryset = (
        Job.objects.visible_to(request.user)
        .select_related("department", "submitted_by")
        .defer("work", "backend_message")
        .order_by("-created_at", "-pk")
    )
    filterset = JobFilter(request.GET, queryset=queryset)
    page = Paginator(filterset.qs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    for job in page.object_list:
        job.where = _hostlist(job.placement)
    polling = any(job.is_active for job in page.object_list)
    context = {
        "page": page,
        "filter": filterset,
        "polling": polling,
        "poll_seconds": JOB_POLL_SECONDS,
        "filtered": any(request.GET.getlist(name) for name in filterset.filters),
    }
    if request.htmx:
        response = render(request, "scheduling/_job_table.html", context)
        if not polling:
            response = HttpResponseStopPolling(response.content)
        patch_vary_headers(response, ["HX-Request"])
        return response
    context.update(
        {
            "departments": Department.objects.visible_to(request.user).order_by("name").only("slug", "name"),
            "states": JobState.choices,
            "backends": Backend.choices,
            "priority_classes": PriorityClass.choices,
            "selected_states": request.GET.getlist("state"),
        }
    )
    return render(request, "scheduling/job_list.html", context)


def _visible_job(request, pk) -> Job:
    return get_object_or_404(
        Job.objects.visible_to(request.user).select_related("department", "submitted_by"), pk=pk
    )


def _waiting_words(job: Job) -> list[str]:
    """Why a pending job waits, in sentences: the scheduler's reason first, then what the job asks for."""
    reason = job.pending_reason.strip()
    if reason.lower().startswith("waiting:"):
        reason = reason[len("waiting:") :].strip()
    if reason:
        reason = reason[:1].upper() + reason[1:]
        words = [reason if reason.endswith((".", "!", "?")) else f"{reason}."]
    else:
        words = ["It waits for the next scheduling pass."]
    trays = job.gpus // GPUS_PER_TRAY
    shape = f" ({trays} whole trays)" if job.gpus > GPUS_PER_TRAY else ""
    words.append(
        f"It asks for {job.gpus} GPU{pluralize(job.gpus)}{shape} {TOPOLOGY_WORDS.get(job.topology, '')}."
    )
    if job.preemptions:
        words.append(
            f"It was preempted {job.preemptions} time{pluralize(job.preemptions)} and kept its place in the "
            "queue (queued by submission time)."
        )
    return words


def _placement(job: Job) -> list[dict]:
    """The job's trays grouped by rack: hostnames (compressed), partitions, GPUs held now. Two queries."""
    if not job.placement:
        return []
    trays = {
        tray.hostname: tray
        for tray in ComputeTray.objects.filter(hostname__in=job.placement).select_related("rack", "partition")
    }
    held: dict[int, list[int]] = {}
    for tray_id, index in (
        Allocation.objects.filter(job=job).order_by("gpu__index").values_list("gpu__tray_id", "gpu__index")
    ):
        held.setdefault(tray_id, []).append(index)
    racks: dict[str, dict] = {}
    for hostname in job.placement:
        tray = trays.get(hostname)
        name = tray.rack.name if tray else ""
        group = racks.setdefault(name, {"rack": name, "trays": [], "partitions": []})
        group["trays"].append(
            {
                "hostname": hostname,
                "tray": tray,
                "partition": tray.partition.name if tray and tray.partition else "",
                "gpus": held.get(tray.pk, []) if tray else [],
            }
        )
        if tray and tray.partition and tray.partition.name not in group["partitions"]:
            group["partitions"].append(tray.partition.name)
    for group in racks.values():
        group["hostlist"] = _hostlist(row["hostname"] for row in group["trays"])
    return sorted(racks.values(), key=lambda group: group["rack"])


def _job_status_context(request, job: Job, **extra) -> dict:
    events = list(job.events.all())
    for event in events:
        event.hostlist = _hostlist(event.placement)
    return {
        "job": job,
        "can_cancel": job.is_active and may_cancel(request.user, job),
        "waiting_words": _waiting_words(job) if job.state == JobState.PENDING else [],
        "placement": _placement(job),
        "hostlist": _hostlist(job.placement),
        "events": events,
        "poll_seconds": JOB_POLL_SECONDS,
        **extra,
    }


def _job_status_response(request, job: Job, **extra):
    """The live part of a job's page (state, why, placement, events, cancel): 286 once it has finished."""
    response = render(request, "scheduling/_job_status.html", _job_status_context(request, job, **extra))
    if job.is_finished:
        response = HttpResponseStopPolling(response.content)
    patch_vary_headers(response, ["HX-Request"])
    return response


def job_detail(request, pk):
    """Everything about a job; `request.htmx`: its live status only (polled while it is active)."""
    job = _visible_job(request, pk)
    if request.htmx:
        return _job_status_response(request, job)
    context = _job_status_context(request, job)
    context["work"] = [
        (key, value if isinstance(value, str) else json.dumps(value, indent=2))
        for key, value in (job.work or {}).items()
    ]
    return render(request, "scheduling/job_detail.html", context)


@require_POST
def job_cancel(request, pk):
    """Cancel a job (its submitter, its department's leads, staff). htmx: the status partial, with the
    outcome in words; a plain form post: back to the job's page with a message."""
    job = _visible_job(request, pk)
    error = ""
    if not may_cancel(request.user, job):
        error = "Only the job's submitter, its department's leads and platform admins may cancel it."
    else:
        try:
            job = cancel_job(job, request.user)
        except ValidationError as refused:
            error = f"Not cancelled: {' '.join(refused.messages)}."
        else:
            job = _visible_job(request, pk)
    if request.htmx:
        notice = "" if error else "Cancelled: its GPUs are free again."
        return _job_status_response(request, job, cancel_error=error, cancel_notice=notice)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"Job #{job.pk} {job.name} cancelled: its GPUs are free again.")
    return redirect("scheduling:job-detail", pk=job.pk)
