"""Core's tables: the audit log (who changed what, when, through which door, with the object before and
after), personal API tokens, and notifications (subscriptions, notifications, delivery attempts).

The audit table was created by the portal app before the re-cut and keeps its name (db_table)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import get_language, gettext, ngettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from core.access import is_admin, led_department_ids
from core.choices import TextChoices
from core.destinations import check_scope, check_webhook_url
from core.moments import dated
from core.text import TextValidator


class AuditSource(TextChoices):
    UI = "ui", _("Web UI")
    API = "api", _("REST API")
    ADMIN = "admin", _("Django admin")
    TASK = "task", _("Background task")
    COMMAND = "command", _("Command line")
    # A sign-in through an identity provider: its group-to-role rules changed the user's roles
    # (tenancy.identity).
    OIDC = "oidc", _("OpenID Connect sign-in")
    LDAP = "ldap", _("LDAP sign-in")
    # The scheduling pass's own decisions carried out (a re-carve of idle trays: integrations.plans.recarve).
    SCHEDULER = "scheduler", _("The scheduler")


class AuditAction(TextChoices):
    # Labels of their own (a badge in the audit log: "作成", not another catalogue's "Created", a date's
    # column or a past participle).
    CREATE = "create", pgettext_lazy("an audit event's action", "Created")
    UPDATE = "update", pgettext_lazy("an audit event's action", "Updated")
    DELETE = "delete", pgettext_lazy("an audit event's action", "Deleted")
    # A request refused for reaching outside its credential's rights (core.audit.record_refused): the event is
    # on the credential that tried, and says what it tried.
    REFUSE = "refuse", _("Refused")


class AuditEventQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        if not user.is_authenticated:
            return self.none()
        return self.filter(department_id__in=led_department_ids(user))


class AuditEvent(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True, verbose_name=_("at"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("actor"),
    )
    actor_name = models.CharField(
        max_length=150,
        blank=True,
        help_text=_("Kept when the user is deleted."),
        verbose_name=_("actor name"),
    )
    source = models.CharField(max_length=10, choices=AuditSource.choices, verbose_name=_("source"))
    action = models.CharField(max_length=10, choices=AuditAction.choices, verbose_name=_("action"))
    object_type = models.CharField(
        max_length=100, help_text=_("app_label.model"), verbose_name=_("object type")
    )
    object_id = models.CharField(max_length=64, verbose_name=_("object id"))
    object_repr = models.CharField(max_length=200, verbose_name=_("object repr"))
    # A plain id, not a foreign key: events are written while departments and their members are being
    # deleted, and must outlive them.
    department_id = models.PositiveBigIntegerField(
        null=True, blank=True, db_index=True, verbose_name=_("department id")
    )
    before = models.JSONField(null=True, blank=True, verbose_name=_("before"))
    after = models.JSONField(null=True, blank=True, verbose_name=_("after"))
    # Foreign keys stay ids in before/after; the related rows' names at the time go here, since the rows may
    # be renamed or deleted later. Empty on events recorded before labels were kept.
    labels = models.JSONField(
        default=dict,
        blank=True,
        help_text=_('str() of the rows foreign keys pointed to: {"before": {field: name}, "after": {...}}.'),
        verbose_name=_("labels"),
    )

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        verbose_name = _("audit event")
        verbose_name_plural = _("audit events")
        db_table = "portal_auditevent"
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["object_type", "object_id"], name="portal_audit_object_idx")]

    def __str__(self):
        """The admin's title of the event: its moment in the viewer's zone, named; who, what (the action
        as stored in English, its label in another language), and the row's name as recorded."""
        english = (get_language() or "en").startswith("en")
        return gettext("%(at)s %(actor)s %(action)s %(object)s") % {
            "at": dated(self.at),
            "actor": self.actor_name or gettext("system"),
            "action": self.action if english else self.get_action_display(),
            "object": self.object_repr,
        }


class PersonalTokenQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Platform admins see everyone's tokens; anyone else their own."""
        if is_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(user=user)


class PersonalToken(models.Model):
    """A user's named API token with an expiry (core.tokens makes and checks it); a user may hold several.

    Only a SHA-256 hash of the key is stored (the key is 32 random bytes: nothing to guess, so no salt or
    slow hash); `prefix`, the key's first characters, tells tokens apart on the page, in the audit log and
    in the API's refusals. A revoked token is kept, with when and by whom, so its owner sees what stopped.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(
        max_length=100,
        validators=[TextValidator()],
        help_text=_("What it is for, e.g. the script or machine using it."),
        verbose_name=_("name"),
    )
    prefix = models.CharField(
        max_length=16, help_text=_('The key\'s first characters ("rpt_" + 8).'), verbose_name=_("prefix")
    )
    key_hash = models.CharField(max_length=64, help_text=_("SHA-256 of the key, hex."))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    expires_at = models.DateTimeField(verbose_name=_("expires at"))
    last_used_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last used at"))
    revoked_at = models.DateTimeField(null=True, blank=True, verbose_name=_("revoked at"))
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("revoked by"),
    )
    # Set when the token was rotated (core.tokens.rotate_personal): revoked because replaced, by this one.
    rotated_to = models.OneToOneField(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="rotated_from"
    )

    objects = PersonalTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("personal token")
        verbose_name_plural = _("personal tokens")
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["key_hash"], name="%(app_label)s_%(class)s_unique_key_hash"),
        ]
        indexes = [models.Index(fields=["user", "revoked_at"], name="core_ptoken_user_revoked_idx")]

    def __str__(self):
        return f"{self.prefix}… {self.name} ({self.user})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


# --- notifications (core.notifications) ------------------------------------------------------------------


class NotificationEvent(TextChoices):
    """What a notification is about. Other parts of the portal add theirs here (and a migration)."""

    TRAY_DRAINED = "tray_drained", _("Tray drained")
    BREAKER_TRIPPED = "breaker_tripped", _("Circuit breaker tripped")
    JOB_REQUEUED = "job_requeued", _("Job requeued by a fault")
    TRAY_RETURNED = "tray_returned", _("Tray back in service")
    NEEDS_SERVICE = "needs_service", _("Tray needs service")
    # Users' own (portal.pages.my_notifications): about their jobs, scoped user:<id>, job:<id>,
    # department:<slug>.
    JOB_STARTED = "job_started", _("Job started")
    JOB_PREEMPTED = "job_preempted", _("Job preempted")
    JOB_FINISHED = "job_finished", _("Job finished")
    JOB_FAILED = "job_failed", _("Job failed")
    JOB_CANCELLED = "job_cancelled", _("Job cancelled by someone else")
    # Put back in the queue: a fault on its trays, a partition plan's "Requeue now" (scheduling.requeue).
    JOB_PUT_BACK = "job_put_back", _("Job requeued (a fault or a partition plan)")
    # Leads' and admins' (department:<slug>; push failures: target:<name>).
    GUARANTEE_SHORT = "guarantee_short", _("Department short of its guarantee")
    IDLE_GPUS = "idle_gpus", _("Idle GPUs above a threshold")
    PUSH_FAILED = "push_failed", _("Configuration push failed")
    # Admins' (target:<name>): a version a target uses is removed soon (integrations.versions).
    REMOVAL_AHEAD = "removal_ahead", _("A version a target uses is about to be removed")
    # Sent by the "Send a test notification" button to one subscription only; nobody subscribes to it.
    TEST = "test", _("Test notification")


# The events a subscription may choose (the test event goes to one subscription, on request).
SUBSCRIBABLE_EVENTS = [(value, label) for value, label in NotificationEvent.choices if value != "test"]


class NotificationChannel(TextChoices):
    WEBHOOK = "webhook", _("Webhook")
    EMAIL = "email", _("Email")
    # A user's own subscription shown by the bell in the header (core.inbox): no URL, no address.
    PORTAL = "portal", _("In the portal (bell)")


class NotificationStatus(TextChoices):
    PENDING = "pending", _("Pending")  # waiting for its first attempt or for a retry (next_attempt_at)
    SENDING = "sending", _("Sending")  # claimed by a worker
    DELIVERED = "delivered", _("Delivered")
    FAILED = "failed", _("Failed")  # refused by the receiver, or out of attempts
    CANCELLED = "cancelled", _("Cancelled")  # its subscription was disabled or deleted before it went out


class AttemptOutcome(TextChoices):
    DELIVERED = "delivered", _("Delivered")
    RETRY = "retry", _("Failed, will retry")
    FAILED = "failed", _("Failed for good")


class NotificationSubscriptionQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Platform admins see every subscription; anyone else their own (portal.pages.my_notifications)."""
        if is_admin(user):
            return self
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(owner=user)


class NotificationSubscription(models.Model):
    """Who hears of which events: a webhook endpoint or an email recipient, the events, an optional scope.

    The webhook's secret signs every request (HMAC-SHA256). It is stored as given, not hashed: signing needs
    the key itself. Encrypting it under a key the same server holds (SECRET_KEY) would only move it: whoever
    reads the database and the settings reads both. It is treated like the tokens of integrations' targets:
    shown once when made, never in a page, the API, the admin or the audit log.
    """

    name = models.CharField(
        max_length=100,
        validators=[TextValidator()],
        help_text=_("Who or what receives it, e.g. “on-call pager”."),
        verbose_name=_("name"),
    )
    channel = models.CharField(max_length=10, choices=NotificationChannel.choices, verbose_name=_("channel"))
    url = models.URLField(
        max_length=2000,
        blank=True,
        help_text=_("Webhook: the address Rackplane POSTs to."),
        verbose_name=_("url"),
    )
    secret = models.CharField(
        max_length=100, blank=True, help_text=_("Webhook: the HMAC-SHA256 signing key.")
    )
    # Audited in its place (the secret never is): a new secret is a change people must see in the log.
    secret_made_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When its secret was made."), verbose_name=_("secret made at")
    )
    email = models.EmailField(
        blank=True, help_text=_("Email: the recipient's address."), verbose_name=_("email")
    )
    events = models.JSONField(
        default=list, help_text=_("The NotificationEvent values it receives."), verbose_name=_("events")
    )
    scope = models.CharField(
        max_length=200,
        blank=True,
        help_text=_(
            "Empty: every notification of its events. Otherwise only those about "
            "this scope (e.g. rack:gb-r08)."
        ),
        verbose_name=_("scope"),
    )
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    # The outbound guard (core.outbound, docs/outbound.md) refuses private and loopback addresses unless this
    # is set; only a platform admin sets it (the portal's Webhooks page, the Django admin), audited.
    allow_private_address = models.BooleanField(
        default=False,
        help_text=_(
            "Webhook: the address may be a private or loopback one (an internal receiver). Link-local and "
            "metadata addresses stay refused, and a redirect to another host does not share this."
        ),
        verbose_name=_("allow private address"),
    )
    # Idle GPUs: only when more than this many GPUs are idle (null: any notification of the event).
    threshold = models.PositiveIntegerField(null=True, blank=True)
    # Empty: a platform subscription, managed by admins. Set: a user's own (portal.pages.my_notifications).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("owner"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    objects = NotificationSubscriptionQuerySet.as_manager()

    class Meta:
        verbose_name = _("notification subscription")
        verbose_name_plural = _("notification subscriptions")
        ordering = ["channel", "name", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(channel="webhook") & ~models.Q(url="") & models.Q(email=""))
                | (models.Q(channel="email") & ~models.Q(email="") & models.Q(url="") & models.Q(secret=""))
                | (
                    models.Q(channel="portal")
                    & models.Q(url="")
                    & models.Q(email="")
                    & models.Q(secret="")
                    & models.Q(owner__isnull=False)
                ),
                name="%(app_label)s_%(class)s_destination_matches_channel",
            ),
        ]

    def __str__(self):
        if self.channel == NotificationChannel.PORTAL:
            return f"{self.name} (in the portal, by the bell)"
        return f"{self.name} ({self.get_channel_display().lower()} to {self.destination})"

    @property
    def event_labels(self) -> list[str]:
        """Its events as the subscription forms name them, in the viewer's language (not their codes)."""
        labels = dict(NotificationEvent.choices)
        return [str(labels.get(event, event)) for event in self.events or []]

    @property
    def destination(self) -> str:
        if self.channel == NotificationChannel.PORTAL:
            return "the bell"
        return self.url if self.channel == NotificationChannel.WEBHOOK else self.email

    def clean(self):
        """What a subscription needs whoever saves it (the portal's page, the Django admin, a service)."""
        errors: dict[str, list[str]] = {}
        if self.channel == NotificationChannel.WEBHOOK:
            if self.email:
                errors["email"] = [gettext("A webhook has no email address: leave it empty.")]
            if not self.url:
                errors["url"] = [gettext("Give the address Rackplane POSTs the webhook to.")]
            else:
                try:
                    check_webhook_url(self.url, allow_private_address=self.allow_private_address)
                except ValidationError as error:
                    errors["url"] = error.messages
        elif self.channel == NotificationChannel.EMAIL:
            if self.url or self.secret:
                errors["url"] = [
                    gettext("An email subscription has no webhook address or secret: leave them empty.")
                ]
            if not self.email:
                errors["email"] = [gettext("Give the address the email goes to.")]
        elif self.channel == NotificationChannel.PORTAL:
            if self.url or self.secret or self.email:
                errors["url"] = [gettext("A notification in the portal has no address: leave them empty.")]
            if self.owner_id is None:
                errors["channel"] = [gettext("Only a person's own subscription can notify in the portal.")]
            elif twin_message := self._bell_twin():
                errors["events"] = [twin_message]
        if self.channel == NotificationChannel.WEBHOOK and self.name.strip():
            # Names tell endpoints apart in the lists, the deliveries and the audit log: one name, one
            # webhook (per owner: the platform's, or one person's), whatever its case.
            namesake = (
                NotificationSubscription.objects.filter(
                    channel=NotificationChannel.WEBHOOK,
                    owner_id=self.owner_id,
                    name__iexact=self.name.strip(),
                )
                .exclude(pk=self.pk)
                .only("name")
                .first()
            )
            if namesake is not None:
                errors["name"] = [
                    gettext(
                        "A webhook is already named “%(name)s”: give this one another name "
                        "(names tell webhooks "
                        "apart in the lists and the audit log)."
                    )
                    % {"name": namesake.name}
                ]
        field = "url" if self.channel == NotificationChannel.WEBHOOK else "email"
        if self.channel != NotificationChannel.PORTAL and field not in errors and self.destination:
            # Two subscriptions to one destination with one scope would deliver notifications twice; two
            # webhooks to one endpoint of one owner, whatever their scopes, would sign with two secrets (the
            # receiver checks one): one endpoint, one subscription.
            same_scope = {} if self.channel == NotificationChannel.WEBHOOK else {"scope": self.scope}
            twin = (
                NotificationSubscription.objects.filter(
                    channel=self.channel,
                    owner=self.owner,
                    **same_scope,
                    **{f"{field}__iexact": self.destination},
                )
                .exclude(pk=self.pk)
                .only("name", "scope")
                .first()
            )
            if twin is not None:
                about = twin.scope if self.channel == NotificationChannel.WEBHOOK else self.scope
                if about:
                    message = gettext(
                        "“%(name)s” already sends to this address about %(about)s: edit its "
                        "events instead of "
                        "adding a second one (notifications would arrive twice)."
                    )
                else:
                    message = gettext(
                        "“%(name)s” already sends to this address: edit its events instead of "
                        "adding a second "
                        "one (notifications would arrive twice)."
                    )
                errors[field] = [message % {"name": twin.name, "about": about}]
        known = {value for value, _ in SUBSCRIBABLE_EVENTS}
        events = self.events
        if not isinstance(events, list) or not all(isinstance(event, str) for event in events):
            errors["events"] = [gettext("Events are a list of event names.")]
        elif not events:
            errors["events"] = [gettext("Choose at least one event.")]
        elif unknown := sorted(set(events) - known):
            errors["events"] = [
                ngettext("Unknown event: %(events)s.", "Unknown events: %(events)s.", len(unknown))
                % {"events": ", ".join(unknown)}
            ]
        else:
            self.events = [value for value, _ in SUBSCRIBABLE_EVENTS if value in events]  # catalog order
        if self.scope:
            try:
                check_scope(self.scope)
            except ValidationError as error:
                errors["scope"] = error.messages
        if errors:
            raise ValidationError(errors)

    def _bell_twin(self) -> str:
        """Why this bell subscription repeats one of its owner's ("" when it does not).

        "The same" for the bell: the same owner, the same scope and at least one event in common. Each
        notification of that event would ring the bell twice (core.notifications.recording.notify() also
        delivers one item per person and notification, whatever matches; this says so before it is saved)."""
        events = set(self.events) if isinstance(self.events, list) else set()
        if not events:
            return ""
        others = (
            NotificationSubscription.objects.filter(
                channel=NotificationChannel.PORTAL, owner_id=self.owner_id, scope=self.scope
            )
            .exclude(pk=self.pk)
            .only("name", "events", "scope")
            .order_by("pk")
        )
        labels = dict(NotificationEvent.choices)
        for other in others:
            common = [e for e, _ in SUBSCRIBABLE_EVENTS if e in events and e in (other.events or [])]
            if common:
                what = ", ".join(str(labels.get(e, e)).lower() for e in common)
                values = {"what": what, "scope": self.scope, "name": other.name}
                if self.scope == f"user:{self.owner_id}":
                    message = gettext(
                        "You already hear of %(what)s about your jobs in the portal (“%(name)s”): one "
                        "subscription per event and scope, or each notification shows twice. Choose other "
                        "events, or unsubscribe from that one first."
                    )
                elif self.scope:
                    message = gettext(
                        "You already hear of %(what)s about %(scope)s in the portal (“%(name)s”): one "
                        "subscription per event and scope, or each notification shows twice. Choose other "
                        "events, or unsubscribe from that one first."
                    )
                else:
                    message = gettext(
                        "You already hear of %(what)s in the portal (“%(name)s”): one subscription per event "
                        "and scope, or each notification shows twice. Choose other events, or unsubscribe "
                        "from that one first."
                    )
                return message % values
        return ""

    def receives(self, event: str, scopes, payload=None) -> bool:
        """Whether a notification of `event` about `scopes` (a collection of scope strings) is for it. A
        threshold (idle GPUs) needs the payload's `idle_gpus` above it."""
        if event not in (self.events or []) or (self.scope and self.scope not in scopes):
            return False
        if self.threshold is not None and event == NotificationEvent.IDLE_GPUS:
            # Crossing it: above now, and not above before (when the payload says what it was before).
            payload = payload or {}
            previous = payload.get("previous_idle_gpus")
            return int(payload.get("idle_gpus") or 0) > self.threshold and (
                previous is None or int(previous) <= self.threshold
            )
        return True


class Notification(models.Model):
    """One notification to one subscriber: recorded in the transaction that caused it, sent after it
    commits (core.notifications). `uuid` is the id receivers deduplicate by: delivery is at least once."""

    uuid = models.UUIDField(
        unique=True,
        editable=False,
        help_text=_("Sent as `id`: the same on every attempt."),
        verbose_name=_("uuid"),
    )
    subscription = models.ForeignKey(
        NotificationSubscription,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="notifications",
        verbose_name=_("subscription"),
    )
    channel = models.CharField(max_length=10, choices=NotificationChannel.choices, verbose_name=_("channel"))
    destination = models.CharField(
        max_length=2000,
        help_text=_("The URL or address it was for (kept when the subscription goes)."),
        verbose_name=_("destination"),
    )
    event = models.CharField(max_length=40, choices=NotificationEvent.choices, verbose_name=_("event"))
    subject = models.CharField(max_length=200, verbose_name=_("subject"))
    payload = models.JSONField(default=dict, blank=True, verbose_name=_("payload"))
    scope = models.JSONField(
        default=list, blank=True, help_text=_("The scopes it is about."), verbose_name=_("scope")
    )
    created_at = models.DateTimeField(
        help_text=_("When it happened: the `time` sent."), verbose_name=_("created at")
    )
    status = models.CharField(
        max_length=10,
        choices=NotificationStatus.choices,
        default=NotificationStatus.PENDING,
        verbose_name=_("status"),
    )
    attempts = models.PositiveIntegerField(default=0, verbose_name=_("attempts"))
    next_attempt_at = models.DateTimeField(null=True, blank=True, verbose_name=_("next attempt at"))
    claimed_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True, verbose_name=_("delivered at"))
    error = models.TextField(
        blank=True, help_text=_("Why the last attempt failed, and what to do."), verbose_name=_("error")
    )

    class Meta:
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="core_notification_due_idx"),
        ]

    def __str__(self):
        return f"{self.get_event_display()}: {self.subject} -> {self.destination}"

    @property
    def last_attempt(self):
        attempts = list(self.attempt_log.all())  # prefetched by list pages
        return attempts[-1] if attempts else None


class NotificationAttempt(models.Model):
    """One try at delivering a notification, and what came back."""

    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField(verbose_name=_("number"))
    at = models.DateTimeField(verbose_name=_("at"))
    seconds = models.FloatField(help_text=_("How long the attempt took."), verbose_name=_("seconds"))
    http_status = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Webhooks: the answer's."), verbose_name=_("http status")
    )
    outcome = models.CharField(max_length=10, choices=AttemptOutcome.choices, verbose_name=_("outcome"))
    message = models.TextField(
        blank=True,
        help_text=_("What happened, in words (the answer's first lines)."),
        verbose_name=_("message"),
    )

    class Meta:
        ordering = ["notification", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "number"], name="%(app_label)s_%(class)s_unique_number"
            ),
        ]

    def __str__(self):
        return f"attempt {self.number} of {self.notification_id}: {self.outcome}"


class InboxItemQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Everyone sees their own notifications only (the bell), admins included."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(user=user)

    def unread(self):
        return self.filter(read_at__isnull=True)


class InboxItem(models.Model):
    """One notification shown to one person by the bell in the header (core.inbox): made by notify() for a
    subscription of the portal channel; read when that person marks it so (a POST)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    subscription = models.ForeignKey(
        NotificationSubscription, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    event = models.CharField(max_length=40, choices=NotificationEvent.choices)
    subject = models.CharField(max_length=200)
    payload = models.JSONField(default=dict, blank=True)
    link = models.CharField(max_length=300, blank=True, help_text=_("Where the subject is in the portal."))
    created_at = models.DateTimeField()
    read_at = models.DateTimeField(null=True, blank=True)

    objects = InboxItemQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["user", "read_at"], name="core_inbox_user_read_idx")]

    def __str__(self):
        return f"{self.user_id}: {self.subject}"
