"""Configuration push pages (staff only): targets and their settings, pushes, and a push's live log.

The writes go through scheduling.pushes (queue_pushes, retry_now); the pages only collect input. A push's
page polls itself every 2 s while the push is queued or running (htmx) and is told to stop (HTTP 286,
`HttpResponseStopPolling`) with the final state once it has finished. A target's token is never rendered:
the form leaves it empty and keeps the stored one unless a new one is typed or "clear" is ticked.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Max
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from scheduling import pushes
from scheduling.models import (
    SETTINGS_DEFAULTS,
    ConfigPush,
    ConfigTarget,
    ConfigTargetKind,
    PushStatus,
    clean_settings,
)
from tenancy.models import is_admin

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
TOKEN_FIELDS = {"k8s_token", "fabric_token"}


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
        self.has_token = (
            bool(stored.get("token")) and instance is not None and instance.kind == self.kind_value
        )
        for field in TOKEN_FIELDS:
            self.fields[field].help_text = (
                "A token is stored: leave empty to keep it, type a new one to replace it."
                if self.has_token
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
        if "token" in raw and not raw["token"] and self.instance.kind == kind and not data.get("clear_token"):
            raw["token"] = stored.get("token", "")
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
