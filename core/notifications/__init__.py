"""Notifications: one mechanism for the whole portal, by webhook (signed JSON POST) and by email.

Any part of the portal calls core.notifications.recording.notify, inside the transaction that made the
change worth telling:

    notify(NotificationEvent.TRAY_DRAINED, "gb-r08-t03 drained: XID 79 on GPU-…",
           {"tray": "gb-r08-t03", "reason": "…"}, scope=["rack:gb-r08", "tray:gb-r08-t03"])

It records one `Notification` row per enabled subscription whose events include `event` and whose scope is
empty or one of the notification's scopes, and sends each after the transaction commits (core.enqueue ->
`core.tasks.deliver_notification`): a rolled-back change notifies nobody, and a broker that is down leaves
the rows for the beat (`core.tasks.retry_notifications`). Scopes are "<kind>:<name>" strings:
`rack:<name>`, `tray:<hostname>`, `partition:<rack>/<name>`, `department:<slug>`; pass every one that applies.

Delivery is at least once: a worker lost mid-send, or a receiver that took the request but answered late,
leads to a second request with the same `id`; receivers deduplicate by it. Every attempt is recorded
(`NotificationAttempt`, with the HTTP status). Network errors, timeouts, 5xx, 408 and 429 are retried with
core.retry's backoff (a 429's or 503's Retry-After is honoured, up to an hour), up to MAX_ATTEMPTS attempts
(about 24 minutes); any other answer (a 4xx, a redirect) fails at once: asking again gets the same.

Webhooks. The body is JSON: {"id", "event", "time" (when it happened, ISO 8601 UTC), "subject", "scope",
"payload"}. Headers:

    X-Rackplane-Timestamp: <unix seconds when this attempt was signed>
    X-Rackplane-Signature: sha256=<hex HMAC-SHA256, key = the secret's UTF-8 bytes, of "<timestamp>." + body>
    X-Rackplane-Event: <event>        X-Rackplane-Notification: <id>

A receiver recomputes the HMAC over the timestamp, a dot and the raw body bytes, compares it in constant time,
refuses a timestamp more than 5 minutes from its clock (a replayed request), and ignores an id it has seen
(core.notifications.signing.verify_signature is a reference; docs/notifications.md has it standalone).
Redirects are not followed. Where webhooks may go (http(s) only; in production nothing inside the portal's
own network) is core.destinations, checked when an endpoint is saved and again before each attempt.

The signing secret is stored as given (NotificationSubscription says why) and shown once, when it is made.

Email goes through Django's email backend (EMAIL_URL, DEFAULT_FROM_EMAIL; the console backend in
development), one message per recipient, with the id as its Message-ID.

The modules, by job: recording (notify, send_test), subscriptions (secrets, forgetting a department),
signing (the webhook's headers, signature and body), channels (webhook and email senders), delivery (claim,
attempt, retry; the beat's maintenance).
"""
