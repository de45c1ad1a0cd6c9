"""A person's own notifications: what they subscribe to (/account/notifications/) and the bell's list
(/account/inbox/).

Anyone signed in subscribes to events about their own jobs (scope user:<id>); a department's lead also to
their department's (department:<slug>: its jobs, short of its guarantee, idle GPUs above a threshold);
platform admins to anything, push failures included. The scope a person may pick is decided here, from
core.access, and checked again on every POST: a department the person does not lead, or another user's id,
is refused (400) and nothing is saved. Subscriptions are NotificationSubscription rows with owner = the
person (visible_to keeps them apart), delivered by core.notifications: in the portal (the bell, core.inbox),
by email, or by a signed webhook (its secret shown once, on the page the POST answers).

The inbox page lists the person's items; a GET never marks anything read: "Mark read" and "Mark all read"
are POSTs (core.inbox.mark_read, which only ever touches the caller's own rows).
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from core import inbox
from core.access import is_admin, led_department_ids
from core.models import InboxItem, NotificationChannel, NotificationEvent, NotificationSubscription
from core.notifications.subscriptions import create_subscription
from tenancy.models import Department

JOB_EVENTS = [
    NotificationEvent.JOB_STARTED,
    NotificationEvent.JOB_PREEMPTED,
    NotificationEvent.JOB_FINISHED,
    NotificationEvent.JOB_FAILED,
    NotificationEvent.JOB_CANCELLED,
    NotificationEvent.JOB_PUT_BACK,
]
DEPARTMENT_EVENTS = [NotificationEvent.GUARANTEE_SHORT, NotificationEvent.IDLE_GPUS]
ADMIN_EVENTS = [NotificationEvent.PUSH_FAILED]
ITEMS_PER_PAGE = 50


def event_choices(user) -> list[tuple[str, str]]:
    events = list(JOB_EVENTS)
    if is_admin(user) or Department.objects.filter(pk__in=led_department_ids(user)).exists():
        events += DEPARTMENT_EVENTS
    if is_admin(user):
        events += ADMIN_EVENTS
    return [(event.value, event.label) for event in events]


def scope_choices(user) -> list[tuple[str, str]]:
    """What `user` may hear about: their own jobs, the departments they lead, anything (admins)."""
    choices = [(f"user:{user.pk}", _("My jobs"))]
    departments = Department.objects.order_by("name")
    if not is_admin(user):
        departments = departments.filter(pk__in=led_department_ids(user))
    choices += [
        (f"department:{d.slug}", _("Department %(name)s") % {"name": d.name})
        for d in departments.only("name", "slug")
    ]
    if is_admin(user):
        choices.append(("", _("Everything (platform admins)")))
    return choices


class MySubscriptionForm(forms.Form):
    channel = forms.ChoiceField(
        choices=NotificationChannel.choices,
        initial=NotificationChannel.PORTAL,
        widget=forms.RadioSelect,
        label=gettext_lazy("How"),
    )
    events = forms.MultipleChoiceField(
        label=gettext_lazy("Events"),
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": gettext_lazy("Choose at least one event.")},
    )
    scope = forms.ChoiceField(label=gettext_lazy("About"), required=False)
    threshold = forms.IntegerField(
        min_value=0,
        required=False,
        label=gettext_lazy("Idle GPUs above"),
        help_text=gettext_lazy(
            "For the idle GPUs event only: tell only when more than this many are idle. Empty: whenever they "
            "rise."
        ),
    )
    email = forms.EmailField(
        required=False, label=gettext_lazy("Email address"), help_text=gettext_lazy("Email: where it goes.")
    )
    url = forms.URLField(
        required=False,
        assume_scheme="https",
        label=gettext_lazy("Webhook address"),
        help_text=gettext_lazy("Webhook: signed JSON, POSTed to an http:// or https:// address."),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["events"].choices = event_choices(user)
        self.fields["scope"].choices = scope_choices(user)
        if NotificationEvent.IDLE_GPUS.value not in {value for value, _ in self.fields["events"].choices}:
            # Only a department's idle GPUs have a threshold: someone who cannot hear of them is not asked.
            del self.fields["threshold"]
        if not self.is_bound:
            self.initial.setdefault("email", user.email)
            self.initial.setdefault("scope", f"user:{user.pk}")

    def scope_refused(self) -> bool:
        """The POST named a scope (or event) this person may not hear about: another user, a department
        they do not lead. A 400, not a form error: the page never offers it."""
        scope = self.data.get("scope", "")
        events = set(self.data.getlist("events"))
        allowed_scopes = {value for value, _ in self.fields["scope"].choices}
        allowed_events = {value for value, _ in self.fields["events"].choices}
        return scope not in allowed_scopes or not events <= allowed_events

    def clean_url(self):
        url = self.cleaned_data["url"]
        # The field would add "https://" to an address typed without a scheme (127.0.0.1:8799/hook): a
        # receiver on plain http would then never get a delivery. Ask for the scheme instead.
        typed = (self.data.get(self.add_prefix("url")) or "").strip()
        if typed and "://" not in typed:
            raise forms.ValidationError(
                _(
                    "Write the address with its scheme: http://… or https://… (which one "
                    "your receiver speaks)."
                ),
                code="scheme",
            )
        return url

    def clean(self):
        data = super().clean()
        channel = data.get("channel")
        chosen = set(data.get("events") or [])
        threshold_given = (self.data.get(self.add_prefix("threshold")) or "").strip() != ""
        if threshold_given and NotificationEvent.IDLE_GPUS.value not in chosen:
            # The threshold applies to the idle GPUs event only: refused rather than saved unused.
            if "threshold" in self.fields:
                message = _(
                    "The idle GPU threshold applies to the idle GPUs event only: leave it "
                    "empty or choose that "
                    "event."
                )
            else:
                message = _("The idle GPU threshold applies to the idle GPUs event only: leave it empty.")
            self.add_error("threshold" if "threshold" in self.fields else None, message)
        if channel == NotificationChannel.EMAIL and not data.get("email"):
            self.add_error("email", _("Give the address the email goes to."))
        if channel == NotificationChannel.WEBHOOK and not data.get("url"):
            self.add_error("url", _("Give the address Rackplane POSTs the webhook to."))
        scope, events = data.get("scope", ""), set(data.get("events") or [])
        if scope.startswith("user:") and events & {e.value for e in DEPARTMENT_EVENTS}:
            self.add_error(
                "scope", _("A department's guarantee and idle GPUs are about a department: choose one.")
            )
        return data


def _subscription_name(form: MySubscriptionForm) -> str:
    """What the subscription is called (people do not name their own). A webhook's name is unique among
    the person's webhooks (NotificationSubscription.clean): a second one of the same events gets a number."""
    labels = dict(form.fields["scope"].choices)
    events = dict(form.fields["events"].choices)
    what = ", ".join(events[e].lower() for e in form.cleaned_data["events"])
    name = f"{labels.get(form.cleaned_data['scope'], 'Everything')}: {what}"[:100]
    if form.cleaned_data.get("channel") != NotificationChannel.WEBHOOK:
        return name
    taken = {
        n.lower()
        for n in NotificationSubscription.objects.filter(
            owner=form.user, channel=NotificationChannel.WEBHOOK
        ).values_list("name", flat=True)
    }
    number, candidate = 1, name
    while candidate.lower() in taken:
        number += 1
        suffix = f" ({number})"
        candidate = name[: 100 - len(suffix)] + suffix
    return candidate


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def my_subscriptions(request):
    """The person's own subscriptions, and a form to add one."""
    user = request.user
    secret = ""
    if request.method == "POST":
        form = MySubscriptionForm(request.POST, user=user)
        if form.scope_refused():
            return HttpResponseBadRequest(
                _("You may subscribe only to your own jobs and the departments you lead: nothing was saved.")
            )
        subscription, secret = _subscribe(form) if form.is_valid() else (None, "")
        if subscription is not None:
            messages.success(request, _("Subscribed: %(name)s.") % {"name": subscription.name})
            if not secret:
                return redirect("my-notifications")
            form = MySubscriptionForm(user=user)
    else:
        form = MySubscriptionForm(user=user)
    subscriptions = NotificationSubscription.objects.visible_to(user).filter(owner=user).order_by("pk")
    return render(
        request,
        "portal/my_notifications.html",
        {"form": form, "subscriptions": subscriptions, "secret": secret},
        status=400 if request.method == "POST" and form.errors else 200,
    )


def _subscribe(form: MySubscriptionForm):
    """The subscription a valid form asks for, made, and its webhook secret ("" for email); (None, "") with
    the service's refusals added to the form."""
    data = form.cleaned_data
    channel = data["channel"]
    try:
        return create_subscription(
            created_by=form.user,
            owner=form.user,
            name=_subscription_name(form),
            channel=channel,
            events=data["events"],
            scope=data["scope"],
            threshold=data.get("threshold") if NotificationEvent.IDLE_GPUS.value in data["events"] else None,
            email=data["email"] if channel == NotificationChannel.EMAIL else "",
            url=data["url"] if channel == NotificationChannel.WEBHOOK else "",
        )
    except ValidationError as error:
        for field, errors in error.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return None, ""


@login_required
@require_POST
def my_subscription_delete(request, pk):
    subscription = get_object_or_404(NotificationSubscription.objects.filter(owner=request.user), pk=pk)
    name = subscription.name
    subscription.delete()
    messages.success(request, _("Unsubscribed: %(name)s.") % {"name": name})
    return redirect("my-notifications")


@login_required
@require_http_methods(["GET"])
def inbox_list(request):
    """The bell's page: the person's notifications, newest first (reading the page marks nothing read)."""
    items = InboxItem.objects.visible_to(request.user)
    page = Paginator(items, ITEMS_PER_PAGE).get_page(request.GET.get("page"))
    unread = inbox.unread_count(request.user)
    return render(request, "portal/my_inbox.html", {"page": page, "unread": unread, "bell_count": unread})


@never_cache
@login_required
@require_http_methods(["GET"])
def bell(request):
    """The bell in the header with the unread count (base.html loads it with htmx, then every minute)."""
    return render(request, "portal/_bell.html", {"bell_count": inbox.unread_count(request.user)})


@login_required
@require_POST
def inbox_read(request):
    """Mark read: the ids posted (`item`), or all (`all`). Other people's ids change nothing."""
    if request.POST.get("all"):
        count = inbox.mark_read(request.user)
    else:
        try:
            ids = [int(value) for value in request.POST.getlist("item")]
        except ValueError:
            return HttpResponseBadRequest(_("Item ids are numbers: nothing was marked read."))
        count = inbox.mark_read(request.user, ids)
    messages.success(
        request,
        ngettext("%(n)s notification marked read.", "%(n)s notifications marked read.", count) % {"n": count},
    )
    return redirect("my-inbox")
