"""Configuration push pages (platform admins only): targets and their settings, pushes, and a push's live
log.

The writes go through integrations.pushes (queue_pushes, retry_now); the pages only collect input. A push's
page polls itself every 2 s while the push is queued or running (htmx) and is told to stop (HTTP 286,
`HttpResponseStopPolling`) with the final state once it has finished. A target's token is never rendered:
the form leaves it empty and keeps the stored one unless a new one is typed or "clear" is ticked.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Max
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST, require_safe
from django_htmx.http import HttpResponseStopPolling

from core.access import require_admin
from core.htmx import page_or_partial
from core.moments import stamped_lines_html
from core.sentences import say
from core.sentences_i18n import log_words
from core.tables import Table
from integrations import contents, push_history, pushes, registry, removals, versions, words
from integrations.forms import ConfigTargetForm
from integrations.models import ConfigPush, ConfigTarget, PushStatus

PUSHES_PER_PAGE = 50
WHAT = gettext_lazy(
    "configuration targets and pushes"
)  # in the 403 reason: "Only platform admins may use ..."
STATUS_BADGE = {
    PushStatus.QUEUED: "state-maintenance",
    PushStatus.RUNNING: "state-maintenance",
    PushStatus.SUCCEEDED: "ok",
    PushStatus.FAILED: "state-down",
    PushStatus.SUPERSEDED: "health-unknown",
}


# --- targets --------------------------------------------------------------------------------------------


def target_list(request):
    require_admin(request.user, WHAT)
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
                # After a rollback: the target runs an older version than the current configuration.
                "rolled_back": push_history.rolled_back(t) if push else None,
            }
        )
    return render(request, "integrations/target_list.html", {"rows": rows, "kinds": registry.kinds()})


@require_safe
def target_versions(request):
    """What each target runs, what Rackplane uses there, and the removals ahead (integrations.versions)."""
    require_admin(request.user, WHAT)
    context = {
        "rows": removals.target_versions(),
        "removals": removals.all_removals(),
        "lead_days": versions.LEAD_DAYS,
    }
    return render(request, "integrations/target_versions.html", context)


@require_http_methods(["GET", "POST"])
def target_create(request):
    require_admin(request.user, WHAT)
    return _target_form(request, None)


@require_http_methods(["GET", "POST"])
def target_edit(request, pk):
    require_admin(request.user, WHAT)
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
                messages.success(request, _("Target %(name)s saved.") % {"name": saved.name})
                return redirect("integrations:target-list")
    else:
        form = ConfigTargetForm(instance=target, kind=request.GET.get("kind"))
        if request.htmx and "kind" in request.GET:
            # The kind select changed: only the settings of that kind.
            return page_or_partial(
                request,
                "integrations/target_form.html",
                "integrations/_target_settings.html",
                {"form": form, "target": target},
            )
    # Changing the kind swaps in that kind's settings (only the kind is sent: never a typed token).
    form.fields["kind"].widget.attrs.update(
        {"hx-get": request.path, "hx-target": "#target-settings", "hx-swap": "outerHTML"}
    )
    # A refused POST says so in its status too (nothing was saved), as the portal's other forms do.
    status = 400 if request.method == "POST" else 200
    return render(request, "integrations/target_form.html", {"form": form, "target": target}, status=status)


# --- pushes ---------------------------------------------------------------------------------------------


PUSH_SORTS = {  # core.tables: the push list's sortable columns
    "id": ("pk",),
    "target": ("target__name",),
    "status": ("status",),
    "reason": ("reason",),
    "requested_by": ("requested_by__username",),
    "attempts": ("attempts",),
    "created": ("created_at",),
    "finished": ("finished_at",),
}


@require_http_methods(["GET", "POST"])
def push_list(request):
    """Every push, newest first (filter by target and status); POST queues a push to all enabled targets,
    or to one (`target`)."""
    require_admin(request.user, WHAT)
    if request.method == "POST":
        return _push_now(request)
    target = request.GET.get("target") or ""
    status = request.GET.get("status") or ""
    table = Table(request, "pushes", PUSH_SORTS, "-id", per_page=PUSHES_PER_PAGE, exports=False)
    page = table.page(table.order(_pushes_filtered(request.user, target, status)))
    for push in page.object_list:
        push.badge = STATUS_BADGE.get(push.status, "")
        push.error_line = push.error.splitlines()[0] if push.error else ""
        push.next_step = pushes.what_to_do(push.error)
    return render(
        request,
        "integrations/push_list.html",
        {
            "page": page,
            "table": table,
            "targets": ConfigTarget.objects.visible_to(request.user).order_by("name"),
            "statuses": PushStatus.choices,
            "selected_target": target,
            "selected_status": status,
            "any_enabled": ConfigTarget.objects.filter(enabled=True).exists(),
        },
    )


def _push_now(request):
    """The "Push to all targets" and "Push now" buttons: one push shows its page, several the list."""
    chosen = None
    if request.POST.get("target"):
        target = get_object_or_404(ConfigTarget.objects.visible_to(request.user), pk=request.POST["target"])
        if not target.enabled:
            messages.error(
                request, _("Target %(name)s is disabled: enable it first.") % {"name": target.name}
            )
            return redirect("integrations:push-list")
        chosen = [target]
    reason = words.PUSH_FROM_PORTAL
    rollback = request.POST.get("after_rollback", "")
    if chosen and rollback.isdigit():  # "Push the current configuration" after a rollback
        reason = say(words.PUSH_AFTER_ROLLBACK, push=int(rollback))
    created = pushes.queue_pushes(reason=reason, user=request.user, targets=chosen)
    if not created:
        messages.info(request, _("A push is running on that target: the change is pushed right after it."))
    elif len(created) == 1:
        return redirect("integrations:push-detail", pk=created[0].pk)
    else:
        messages.success(request, _("%(count)s pushes created.") % {"count": len(created)})
    return redirect("integrations:push-list")


def _pushes_filtered(user, target: str, status: str):
    queryset = (
        ConfigPush.objects.visible_to(user).select_related("target", "requested_by").defer("payload", "log")
    )
    if target.isdigit():
        queryset = queryset.filter(target_id=int(target))
    if status in PushStatus.values:
        queryset = queryset.filter(status=status)
    return queryset


def _kind_of(push: ConfigPush) -> registry.Kind | None:
    return registry.get(push.target.kind) if registry.is_kind(push.target.kind) else None


def _status_context(push: ConfigPush, kind: registry.Kind | None) -> dict:
    """What the status panel (_push_status.html) shows, on the page and in each poll."""
    return {
        "push": push,
        "badge": STATUS_BADGE.get(push.status, ""),
        "next_step": pushes.what_to_do(push.error),
        # The error without its "What to do:" line, which the page shows on its own.
        "error_body": "\n".join(
            line for line in push.error.splitlines() if not line.startswith("What to do:")
        ),
        "target_summary": pushes.target_summary(push.target),
        # Each line's UTC stamp in the viewer's zone, its words (integrations.words) in the viewer's language.
        "log_html": stamped_lines_html(push.log, log_words),
        # A system without transactions keeps what was done before the failure (the log says what).
        "partly_applied": kind is not None and not kind.atomic,
        # A succeeded push that sent nothing: the target's last successful push had the same payload.
        "unchanged": push.status == PushStatus.SUCCEEDED and not push.attempts,
        "rolled_back": _rolled_back_by(push),
        "live_push_id": _live_push_id(push),
    }


def _live_push_id(push: ConfigPush) -> int | None:
    """The target's last successful push when `push` succeeded (it runs that one's configuration, which may
    be a later push's); None for a push that did not succeed."""
    if push.status != PushStatus.SUCCEEDED:
        return None
    return (
        ConfigPush.objects.filter(target_id=push.target_id, status=PushStatus.SUCCEEDED)
        .order_by("-finished_at", "-pk")
        .values_list("pk", flat=True)
        .first()
    )


def _rolled_back_by(push: ConfigPush) -> push_history.RolledBack | None:
    """When `push` is the rollback its target runs and the current configuration differs: what to say."""
    if push.status != PushStatus.SUCCEEDED or push_history.rollback_of(push) is None:
        return None
    state = push_history.rolled_back(push.target)
    return state if state is not None and state.push.pk == push.pk else None


def push_detail(request, pk):
    """The push, its log as it grows (htmx polls every 2 s while it is queued or running), what to do next
    when it failed."""
    require_admin(request.user, WHAT)
    queryset = ConfigPush.objects.visible_to(request.user).select_related("target", "requested_by")
    polling = bool(request.htmx)
    if polling:
        queryset = queryset.defer("payload")
    push = get_object_or_404(queryset, pk=pk)
    kind = _kind_of(push)
    context = _status_context(push, kind)
    if polling:
        response = render(request, "integrations/_push_status.html", context)
        if push.is_finished:
            response = HttpResponseStopPolling(response.content)
        patch_vary_headers(response, ["HX-Request"])
        return response
    # What the push carries, in a few lines (its kind says how), and what it changed (push_history).
    context["payload_summary"] = kind.describe(contents.payload_of(push.payload or {})) if kind else []
    context["diff"] = push_history.push_diff(push)
    context["push_again_blocked"] = push_history.can_push_again(push)
    context["newest_push_id"] = (
        ConfigPush.objects.filter(target_id=push.target_id)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    return render(request, "integrations/push_detail.html", context)


@require_POST
def push_again(request, pk):
    """Rollback: this push's version pushed again as a new push (audited; integrations.push_history)."""
    require_admin(request.user, WHAT)
    push = get_object_or_404(ConfigPush.objects.visible_to(request.user).select_related("target"), pk=pk)
    try:
        created = push_history.push_again(push, request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("integrations:push-detail", pk=push.pk)
    messages.success(
        request,
        _("The version of push #%(push)s is being pushed again as push #%(new)s.")
        % {"push": push.pk, "new": created.pk},
    )
    return redirect("integrations:push-detail", pk=created.pk)


@require_POST
def target_test(request, pk):
    """Test connection: the target's adapter checks reachability and credentials without writing."""
    require_admin(request.user, WHAT)
    target = get_object_or_404(ConfigTarget.objects.visible_to(request.user), pk=pk)
    result = push_history.test_connection(target)
    if request.htmx:
        return render(request, "integrations/push_target_check.html", {"target": target, "result": result})
    text = " ".join([result.summary, *(f"{line}." for line in result.details)])
    (messages.success if result.ok else messages.error)(request, text)
    return redirect("integrations:target-list")


@require_POST
def push_retry(request, pk):
    """Retry a failed push (a new push of the current state) or send a push waiting for its retry now."""
    require_admin(request.user, WHAT)
    push = get_object_or_404(ConfigPush.objects.visible_to(request.user).select_related("target"), pk=pk)
    try:
        created = pushes.retry_now(push, user=request.user)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return redirect("integrations:push-detail", pk=push.pk)
    if not created:
        messages.info(request, _("A push is running on that target: the retry is pushed right after it."))
        return redirect("integrations:push-detail", pk=push.pk)
    return redirect("integrations:push-detail", pk=created[0].pk)
