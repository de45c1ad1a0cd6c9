"""How often a client may try: sign-in lockout (django-axes) and API request rates (DRF throttles).

Both count in shared storage, so every replica of the portal agrees: failed sign-ins in the database
(axes' database handler), API requests in the default cache (Redis in production: CACHE_URL). Both name a
client by the same address rule, `client_address`. Rates and limits are settings (docs/api/access.md).
"""

import hashlib
import math

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_client_username, get_cool_off
from django.shortcuts import render
from rest_framework import exceptions, throttling
from rest_framework.settings import api_settings


def client_address(request) -> str | None:
    """The client's IP address: REMOTE_ADDR, or behind RACKPLANE_PROXY_COUNT proxies the address the outermost
    of them saw in X-Forwarded-For (earlier entries are whatever the client sent, never trusted)."""
    return throttling.BaseThrottle().get_ident(request)


class SignInLockoutBackend(AxesStandaloneBackend):
    """Axes' check that refuses a locked-out username or address, even with the right password.

    A sign-in over HTTP (the portal's and the admin's login forms pass the request) is counted and checked.
    `authenticate()` without a request (Django's test client, a shell) comes from no client address: there
    is nothing to count, so it is left to the next backend instead of raising axes' "request required".
    """

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class RatesFromSettings:
    """Reads the scope's rate when a throttle is made, not when DRF was imported, so a changed setting (tests,
    override_settings) takes effect."""

    scope: str | None  # the throttle class's own (DRF's SimpleRateThrottle)

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)


class UserRateThrottle(RatesFromSettings, throttling.UserRateThrottle):
    """Signed-in API clients, per account (scope `user`)."""


class AnonRateThrottle(RatesFromSettings, throttling.AnonRateThrottle):
    """Anonymous API requests, per client address (scope `anon`)."""


class FailedAuthenticationThrottle(AnonRateThrottle):
    """A request whose credentials were refused (an unknown, revoked, expired or malformed token) or that
    brought none to an endpoint that needs them, counted against the anonymous rate of its client address.

    DRF authenticates before it throttles, and refuses bad credentials there: without this a flood of
    guessed tokens was never counted, while the same client without a token was. `core.api.exception_handler`
    asks `refusal_throttled` for every 401 it answers; over the anonymous rate the answer is 429 instead. The
    count is the anonymous one (same cache key): guessing tokens and calling anonymously share one budget.
    A client whose token works is counted per account as before, whoever else shares its address.
    """

    def get_cache_key(self, request, view):
        # The request's user is anonymous after a refusal; counted by address whatever it is.
        return self.cache_format % {"scope": self.scope, "ident": client_address(request)}


FAILED_AUTHENTICATION_DETAIL = (
    "Too many requests without valid credentials from this address: check the API token (make a new one on "
    "the portal's API tokens page, /account/tokens/ if it was revoked or expired)."
)


def refusal_throttled(request, view) -> exceptions.Throttled | None:
    """Count a refused authentication of `request` against its address's anonymous rate; a Throttled (429,
    with when to come back) once it is over the rate, None while it is not (the 401 stands)."""
    throttle = FailedAuthenticationThrottle()
    if throttle.allow_request(request, view):
        return None
    return exceptions.Throttled(wait=throttle.wait(), detail=FAILED_AUTHENTICATION_DETAIL)


class NodeAgentRateThrottle(RatesFromSettings, throttling.SimpleRateThrottle):
    """Node agents' reports (discovery, telemetry), per credential (scope `node-agent`).

    Replaces the user and anonymous throttles on the agents' endpoints: one fleet account may report for
    18,000 nodes every minute, which a per-account rate for people would refuse. Without a rate (the default)
    agents are not throttled; with one, each agent token has its own count (hashed: a cache key never holds a
    secret), and a request without a credential counts by address.
    """

    scope = "node-agent"

    def get_cache_key(self, request, view):
        credential = getattr(request.auth, "pk", None)
        if credential is None:
            ident = client_address(request)
        else:
            label = getattr(getattr(request.auth, "_meta", None), "label_lower", type(request.auth).__name__)
            ident = hashlib.sha256(f"{label}:{credential}".encode()).hexdigest()[:32]
        return self.cache_format % {"scope": self.scope, "ident": ident}


def lockout_response(request, original_response=None, credentials=None):
    """The page axes answers (429) while a username or address is locked out: why, and for how long."""
    minutes = math.ceil(get_cool_off(request).total_seconds() / 60)
    context = {"username": get_client_username(request, credentials) or "", "cooloff_minutes": minutes}
    return render(request, "registration/locked_out.html", context, status=429)
