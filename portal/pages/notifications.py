"""The notifications page (platform admins only): webhook endpoints and email recipients, what each receives,
a test notification, and the recent deliveries with every attempt.

Changes go through core.notifications and are recorded in the audit log (core.audit: the subscription's
secret never is). A webhook's signing secret follows Post/Redirect/Get: the POST that makes it (adding a
webhook, or "make a new secret") redirects (303) to a page that shows it once, taking it out of the session
as it does; that page is never cached, so a reload shows no secret and makes none.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from core import destinations
from core.access import require_admin
from core.models import (
    SUBSCRIBABLE_EVENTS,
    Notification,
    NotificationChannel,
    NotificationStatus,
    NotificationSubscription,
)
from core.notifications import recording, signing, subscriptions
from core.tables import Table
from core.text import TextFormField
from inventory.models import ComputeTray, Rack
from tenancy.models import Department

WHAT = gettext_lazy("notification settings")
DELIVERIES_PER_PAGE = 50
# core.tables: the deliveries' sortable columns ("Last answer", a line from the attempt log, is not one).
DELIVERY_SORTS = {
    "when": ("created_at",),
    "event": ("event", "-created_at"),
    "subject": ("subject", "-created_at"),
    "to": ("subscription__name", "destination", "-created_at"),
    "status": ("status", "-created_at"),
    "attempts": ("attempts", "-created_at"),
}
# The session key that holds new webhook secrets ({subscription id: secret}) until their page shows them.
NEW_SECRETS_SESSION_KEY = "portal_new_webhook_secrets"
# One line per event for the form, beside its label: when it is sent.
EVENT_DESCRIPTIONS = {
    "tray_drained": gettext_lazy(
        "A health rule or an admin took a tray out of service: no new work is placed on it."
    ),
    "breaker_tripped": gettext_lazy(
        "Too many trays drained in a short time: more automatic drains wait for an admin."
    ),
    "job_requeued": gettext_lazy("A hardware fault stopped a job and it was put back in the queue."),
    "tray_returned": gettext_lazy("A drained tray passed its checks and takes work again."),
    "needs_service": gettext_lazy("A tray needs hands-on repair (e.g. a GPU fell off the bus)."),
    "job_started": gettext_lazy("A job got its GPUs and began running."),
    "job_preempted": gettext_lazy(
        "A job was stopped so that its GPUs go back to a department within its quota."
    ),
    "job_finished": gettext_lazy("A job ended on its own."),
    "job_failed": gettext_lazy("A job ended with an error."),
    "job_cancelled": gettext_lazy(
        "A job was cancelled by someone other than its submitter (a lead, an admin)."
    ),
    "job_put_back": gettext_lazy(
        "A job was stopped and put back in the queue with its place in line: a fault on its trays, or a "
        "partition plan that re-carves its rack."
    ),
    "guarantee_short": gettext_lazy(
        "A department's jobs wait while it holds fewer GPUs than it is guaranteed."
    ),
    "idle_gpus": gettext_lazy(
        "A department's GPUs sit allocated but idle, more of them than at the last count."
    ),
    "push_failed": gettext_lazy(
        "A configuration push to Slurm or Kubernetes failed: the cluster runs the old settings."
    ),
    "removal_ahead": gettext_lazy(
        "A version a target uses (an API of Slurm, Kueue, the DRA driver or NMX-M) is removed soon and "
        "the site must act: once per target, from 90 days before the release."
    ),
}
# What a new endpoint or recipient starts with ticked: the rack-health events the list page leads with.
HEALTH_EVENTS = ["tray_drained", "breaker_tripped", "job_requeued", "tray_returned", "needs_service"]


class SubscriptionForm(forms.Form):
    """One endpoint or recipient: where, which events, about what. The channel is fixed when it is made."""

    name = TextFormField(
        max_length=100,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("Who or what receives it, e.g. “on-call pager” or “facilities team”."),
        error_messages={"required": gettext_lazy("Name it after who or what receives it.")},
    )
    url = forms.URLField(
        label=gettext_lazy("Webhook address"),
        max_length=2000,
        assume_scheme="https",
        help_text=gettext_lazy(
            "Rackplane POSTs signed JSON here. http:// or https://; redirects are not followed."
        ),
    )
    # core.outbound refuses private and loopback addresses unless this is ticked (the installation-wide
    # RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS aside): the refusal tells the admin to tick it, here.
    allow_private_address = forms.BooleanField(
        required=False,
        label=gettext_lazy("Allow a private address"),
        help_text=gettext_lazy(
            "For a receiver inside your own network (a private or loopback address). Link-local and cloud "
            "metadata addresses stay refused whatever this says."
        ),
    )
    email = forms.EmailField(
        label=gettext_lazy("Email address"), help_text=gettext_lazy("One recipient (a list's address works).")
    )
    events = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        choices=SUBSCRIBABLE_EVENTS,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": gettext_lazy("Choose at least one event.")},
    )
    scope = forms.CharField(
        label=gettext_lazy("Scope"),
        max_length=200,
        required=False,
        # help_text: __init__'s (the syntax as code, in the viewer's language).
    )
    enabled = forms.BooleanField(
        label=gettext_lazy("Enabled"),
        required=False,
        initial=True,
        help_text=gettext_lazy("Disabled: nothing is sent to it."),
    )

    def __init__(self, *args, channel: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.channel = channel
        # The other channel's fields do not apply.
        if channel == NotificationChannel.WEBHOOK:
            del self.fields["email"]
        else:
            del self.fields["url"], self.fields["allow_private_address"]
        self.fields["scope"].help_text = format_html(
            _(
                "Empty: every notification of these events. Otherwise only those about this rack, tray or "
                "department, written {syntax} ({examples})."
            ),
            syntax=format_html("<code>{}</code>", "kind:name"),
            examples=format_html_join(
                ", ", "<code>{}</code>", [("rack:gb-r08",), ("tray:gb-r08-t03",), ("department:<slug>",)]
            ),
        )
        if not self.is_bound and "events" not in self.initial:
            self.initial["events"] = list(HEALTH_EVENTS)

    def event_choices(self) -> list[dict]:
        """The events as the form shows them: a checkbox left of each label, a line on when it is sent."""
        chosen = set(self["events"].value() or [])
        return [
            {
                "value": value,
                "label": label,
                "description": EVENT_DESCRIPTIONS.get(value, ""),
                "id": f"id_events_{index}",
                "checked": value in chosen,
            }
            for index, (value, label) in enumerate(self.fields["events"].choices)
        ]

    def clean_url(self):
        url = self.cleaned_data["url"]
        # The field would add "https://" to an address typed without a scheme; a receiver on plain http
        # (e.g. 127.0.0.1:8799/hook) would then never get a delivery. Ask for the scheme instead.
        typed = (self.data.get(self.add_prefix("url")) or "").strip()
        if "://" not in typed:
            raise forms.ValidationError(
                _(
                    "Write the address with its scheme: http://… or https://… (which one "
                    "your receiver speaks)."
                ),
                code="scheme",
            )
        return url  # where it may go is clean()'s: it depends on allow_private_address

    def clean_scope(self):
        scope = self.cleaned_data["scope"].strip()
        if scope:
            destinations.check_scope(scope)
            # Scopes match exactly: one naming nothing that exists would silently never receive anything.
            kind, _colon, name = scope.partition(":")
            lookups = {
                "rack": lambda: Rack.objects.filter(name=name).exists(),
                "tray": lambda: ComputeTray.objects.filter(hostname=name).exists(),
                "department": lambda: Department.objects.filter(slug=name).exists(),
            }
            if kind not in lookups:
                raise forms.ValidationError(
                    _("Unknown scope kind %(kind)s: use rack:, tray: or department:.") % {"kind": repr(kind)},
                    code="scope",
                )
            if not lookups[kind]():
                raise forms.ValidationError(
                    _("There is no %(kind)s named %(name)s (names are lower-case, as on their pages).")
                    % {"kind": kind, "name": repr(name)},
                    code="scope",
                )
        return scope

    def clean(self):
        cleaned = super().clean()
        url = cleaned.get("url")
        if url:
            try:
                destinations.check_webhook_url(
                    url, allow_private_address=cleaned.get("allow_private_address", False)
                )
            except ValidationError as error:
                self.add_error("url", error)
        return cleaned


class EditSubscriptionForm(SubscriptionForm):
    new_secret = forms.BooleanField(
        required=False,
        label=gettext_lazy("Make a new signing secret"),
        help_text=gettext_lazy(
            "The current one stops verifying at once; the new one is shown once, after saving."
        ),
    )

    def __init__(self, *args, channel: str, **kwargs):
        super().__init__(*args, channel=channel, **kwargs)
        if channel != NotificationChannel.WEBHOOK:
            del self.fields["new_secret"]


def _described(subscription: NotificationSubscription) -> str:
    """str(subscription) in the viewer's language (its str() stays English: the audit log keeps it)."""
    if subscription.channel == NotificationChannel.PORTAL:
        return _("%(name)s (in the portal, by the bell)") % {"name": subscription.name}
    return _("%(name)s (%(channel)s to %(destination)s)") % {
        "name": subscription.name,
        "channel": subscription.get_channel_display().lower(),
        "destination": subscription.destination,
    }


def _apply_model_errors(form: forms.Form, error: ValidationError) -> None:
    for field, problems in error.message_dict.items():
        form.add_error(field if field in form.fields else None, problems)


def _fields(form: forms.Form) -> dict:
    data = {key: form.cleaned_data[key] for key in ("name", "events", "scope", "enabled")}
    if form.channel == NotificationChannel.WEBHOOK:
        data["url"] = form.cleaned_data["url"]
        data["allow_private_address"] = form.cleaned_data["allow_private_address"]
    else:
        data["email"] = form.cleaned_data["email"]
    return data


def _keep_secret(request, subscription: NotificationSubscription, secret: str) -> HttpResponseRedirect:
    new_secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
    request.session[NEW_SECRETS_SESSION_KEY] = {**new_secrets, str(subscription.pk): secret}
    return HttpResponseRedirect(reverse("notification-secret", args=[subscription.pk]), status=303)


def _subscriptions(user):
    # Platform subscriptions only: users' own (owner set) get their own page with a later issue.
    return NotificationSubscription.objects.visible_to(user).filter(owner__isnull=True)


@require_http_methods(["GET"])
def notification_list(request):
    """Endpoints and recipients, and the recent deliveries, newest first."""
    require_admin(request.user, WHAT)
    deliveries = Notification.objects.select_related("subscription").prefetch_related("attempt_log")
    status = request.GET.get("status", "")
    if status in NotificationStatus.values:
        deliveries = deliveries.filter(status=status)
    table = Table(request, "deliveries", DELIVERY_SORTS, "-when", per_page=DELIVERIES_PER_PAGE, exports=False)
    page = table.page(table.order(deliveries))
    subscriptions = list(_subscriptions(request.user).select_related("created_by"))
    context = {
        "table": table,
        "subscriptions": subscriptions,
        "page": page,
        "statuses": NotificationStatus.choices,
        "status": status,
        "allow_private": destinations.allow_private_targets(),
    }
    return render(request, "portal/notification_list.html", context)


@require_http_methods(["GET", "POST"])
def subscription_new(request, channel: str):
    """Add a webhook endpoint or an email recipient; a webhook's secret is shown once, on the next page."""
    require_admin(request.user, WHAT)
    if channel not in NotificationChannel.values:
        raise Http404(_("No such channel."))
    form = SubscriptionForm(request.POST if request.method == "POST" else None, channel=channel)
    if request.method == "POST" and form.is_valid():
        try:
            subscription, secret = subscriptions.create_subscription(
                channel=channel, created_by=request.user, **_fields(form)
            )
        except ValidationError as error:
            _apply_model_errors(form, error)
        else:
            messages.success(
                request, _("Added %(subscription)s.") % {"subscription": _described(subscription)}
            )
            if secret:
                return _keep_secret(request, subscription, secret)
            return HttpResponseRedirect(reverse("notification-list"), status=303)
    return render(
        request,
        "portal/notification_form.html",
        {"form": form, "channel": channel, "channel_label": NotificationChannel(channel).label},
        status=400 if form.is_bound else 200,
    )


# What the edit form starts from: the subscription's own values.
EDITED_FIELDS = ("name", "url", "email", "events", "scope", "enabled", "allow_private_address")


@require_http_methods(["GET", "POST"])
def subscription_edit(request, pk: int):
    require_admin(request.user, WHAT)
    subscription = get_object_or_404(_subscriptions(request.user), pk=pk)
    form = EditSubscriptionForm(
        request.POST if request.method == "POST" else None,
        channel=subscription.channel,
        initial={name: getattr(subscription, name) for name in EDITED_FIELDS},
    )
    if request.method == "POST" and form.is_valid():
        for field, value in _fields(form).items():
            setattr(subscription, field, value)
        secret = ""
        if form.cleaned_data.get("new_secret"):
            secret = subscriptions.new_secret(subscription)
        try:
            subscription.full_clean()
        except ValidationError as error:
            _apply_model_errors(form, error)
        else:
            subscription.save()
            messages.success(
                request, _("Saved %(subscription)s.") % {"subscription": _described(subscription)}
            )
            if secret:
                return _keep_secret(request, subscription, secret)
            return HttpResponseRedirect(reverse("notification-list"), status=303)
    return render(
        request,
        "portal/notification_form.html",
        {
            "form": form,
            "subscription": subscription,
            "channel": subscription.channel,
            "channel_label": subscription.get_channel_display(),
        },
        status=400 if form.is_bound else 200,
    )


@never_cache
@require_http_methods(["GET"])
def subscription_secret(request, pk: int):
    """The secret the last POST made for this webhook, once; after that, a note that it was shown."""
    require_admin(request.user, WHAT)
    subscription = get_object_or_404(_subscriptions(request.user), pk=pk)
    new_secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
    secret = new_secrets.pop(str(pk), None)
    if secret is not None:
        if new_secrets:
            request.session[NEW_SECRETS_SESSION_KEY] = new_secrets
        else:
            del request.session[NEW_SECRETS_SESSION_KEY]
        if secret != subscription.secret:
            secret = None  # replaced since (another tab): that secret no longer verifies
    return render(
        request,
        "portal/notification_secret.html",
        {
            "subscription": subscription,
            "secret": secret,
            "signature_header": signing.SIGNATURE_HEADER,
            "timestamp_header": signing.TIMESTAMP_HEADER,
        },
    )


@require_http_methods(["POST"])
def subscription_toggle(request, pk: int):
    """Enable or disable (pending deliveries to a disabled one are cancelled when their turn comes)."""
    require_admin(request.user, WHAT)
    subscription = get_object_or_404(_subscriptions(request.user), pk=pk)
    subscription.enabled = not subscription.enabled
    subscription.save(update_fields=["enabled", "updated_at"])
    if subscription.enabled:
        message = _("%(name)s enabled: it receives its events again.")
    else:
        message = _("%(name)s disabled: nothing is sent.")
    messages.success(request, message % {"name": subscription.name})
    return HttpResponseRedirect(reverse("notification-list"), status=303)


@require_http_methods(["GET", "POST"])
def subscription_delete(request, pk: int):
    """GET asks to confirm; POST deletes (its past deliveries stay, with their destination)."""
    require_admin(request.user, WHAT)
    subscription = get_object_or_404(_subscriptions(request.user), pk=pk)
    if request.method == "POST":
        name = _described(subscription)
        subscription.delete()
        messages.success(request, _("Deleted %(subscription)s.") % {"subscription": name})
        return HttpResponseRedirect(reverse("notification-list"), status=303)
    return render(request, "portal/notification_delete.html", {"subscription": subscription})


@require_http_methods(["POST"])
def subscription_test(request, pk: int):
    """Send a test notification to this subscription alone, and say how it went (or that it is on its way)."""
    require_admin(request.user, WHAT)
    subscription = get_object_or_404(_subscriptions(request.user), pk=pk)
    notification = recording.send_test(subscription, request.user)  # sent now: no transaction is open
    notification.refresh_from_db()
    destination = subscription.destination
    if notification.status == NotificationStatus.DELIVERED:
        messages.success(
            request, _("Test notification delivered to %(destination)s.") % {"destination": destination}
        )
    elif notification.status == NotificationStatus.FAILED:
        messages.error(
            request,
            _("Test notification to %(destination)s failed. %(error)s")
            % {"destination": destination, "error": notification.error},
        )
    elif notification.attempts:
        messages.warning(
            request,
            _("Test notification to %(destination)s not delivered yet. %(error)s")
            % {"destination": destination, "error": notification.error},
        )
    else:
        messages.info(
            request,
            _("Test notification to %(destination)s queued: see its delivery below.")
            % {"destination": destination},
        )
    return HttpResponseRedirect(reverse("notification-list"), status=303)


@require_http_methods(["GET"])
def delivery_detail(request, pk: int):
    """One notification: what was sent, to where, and every attempt."""
    require_admin(request.user, WHAT)
    notification = get_object_or_404(Notification.objects.select_related("subscription"), pk=pk)
    return render(
        request,
        "portal/notification_delivery.html",
        {
            "notification": notification,
            "attempts": notification.attempt_log.all(),
            "payload_json": json.dumps(notification.payload, indent=2, ensure_ascii=False),
        },
    )
