"""How often a client may try: sign-in lockout (django-axes) and API request rates (DRF throttles).

Both count in shared storage, so every replica of the portal agrees: failed sign-ins in the database
(axes' database handler), API requests in the default cache (Redis in production: CACHE_URL). Both name a
client by the same address rule, `client_address`. Rates and limits are settings (README, "Throttling,
lockout and API tokens").
"""

import hashlib
import math

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_client_username, get_cool_off
from django.shortcuts import render
from rest_framework import throttling
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

    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)


class UserRateThrottle(RatesFromSettings, throttling.UserRateThrottle):
    """Signed-in API clients, per account (scope `user`)."""


class AnonRateThrottle(RatesFromSettings, throttling.AnonRateThrottle):
    """Anonymous API requests, per client address (scope `anon`)."""


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
