"""Who may report for which host, on the node-agent endpoints: agent tokens (scoped), fleet tokens (global).

* An **agent token** (`Authorization: Bearer rpa_...`, or `Token rpa_...`) is bound to one rack or one host
  (inventory.models.AgentToken). It authenticates no user: `request.user` stays anonymous and
  `request.auth` is the token, so it opens only the views that list AgentTokenAuthentication and accept it
  (discovery reports, telemetry pushes), and only for the hosts in its scope.
* A **fleet token** is the API token of an account a platform admin gave the `inventory.report_discovery`
  permission (`manage.py discovery_agent_token --fleet`): for an aggregator that reports for every host.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import authentication, exceptions, permissions
from rest_framework.settings import api_settings

from inventory import agent_tokens
from inventory.models import AgentToken, Gpu

FLEET_PERMISSION = "inventory.report_discovery"
SCHEMES = (b"bearer", b"token")
CHUNK = 2000  # UUIDs per IN (...) list: a push may be a whole fleet's page, far over SQLite's parameter limit


class AgentTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer rpa_...` (or `Token rpa_...`): an agent token. Other credentials are left to
    the next authentication class; an unknown or revoked agent token is a 401."""

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() not in SCHEMES:
            return None
        try:
            secret = parts[1].decode()
        except UnicodeDecodeError:
            return None
        if not secret.startswith(agent_tokens.SECRET_PREFIX):
            return None
        token = agent_tokens.find(secret)
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown agent token.")
        if token.is_revoked:
            raise exceptions.AuthenticationFailed(
                f"Agent token {token.prefix}… was revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S %Z}."
            )
        agent_tokens.mark_used(token)
        return None, token  # no user: DRF leaves request.user anonymous

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of agent tokens (drf-spectacular registers it by subclassing)."""

    target_class = AgentTokenAuthentication
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Bearer", bearer_format="rpa_..."
        )


# For the node-agent views: an agent token first, then whatever the rest of the API accepts.
NODE_AGENT_AUTHENTICATION = [AgentTokenAuthentication, *api_settings.DEFAULT_AUTHENTICATION_CLASSES]


def agent_token(request) -> AgentToken | None:
    """The agent token the request authenticated with, or None (a fleet token, a session, nobody)."""
    return request.auth if isinstance(request.auth, AgentToken) else None


def is_fleet_agent(user) -> bool:
    return bool(user is not None and user.has_perm(FLEET_PERMISSION))


class IsNodeAgent(permissions.BasePermission):
    """An agent token (its scope is checked by the view, per host) or a fleet token."""

    message = (
        "Posting discovery reports needs an agent token for the host (issued on the portal's agent tokens "
        "page or by `manage.py discovery_agent_token --rack R | --host H`) or a fleet token: an account a "
        "platform admin gave the 'inventory.report_discovery' permission."
    )

    def has_permission(self, request, view):
        return agent_token(request) is not None or is_fleet_agent(request.user)


def require_host_in_scope(request, hostname: str) -> None:
    """403 with the reason when the request's agent token may not report for `hostname`."""
    token = agent_token(request)
    if token is not None and not token.covers_host(hostname):
        raise exceptions.PermissionDenied(
            f"Agent token {token.prefix}… is for {token.scope}; it may not report for host {hostname!r}."
        )


def require_gpus_in_scope(request, uuids) -> None:
    """403 naming them when the request's agent token sends GPUs of the inventory that are not on its trays.

    GPUs the inventory does not know are left to the caller (nothing is recorded for them); a GPU without a
    tray (removed) is outside every scope until discovery places it again.
    """
    token = agent_token(request)
    if token is None:
        return
    uuids, outside = sorted(set(uuids)), []
    for start in range(0, len(uuids), CHUNK):
        outside += (
            Gpu.objects.filter(uuid__in=uuids[start : start + CHUNK])
            .exclude(tray__in=token.trays())
            .order_by("uuid")
            .values_list("uuid", "tray__hostname")
        )
    if outside:
        named = ", ".join(f"{uuid} ({host or 'on no tray'})" for uuid, host in outside[:10])
        more = f" and {len(outside) - 10} more" if len(outside) > 10 else ""
        raise exceptions.PermissionDenied(
            f"Agent token {token.prefix}… is for {token.scope}; "
            f"these GPUs are not on its trays: {named}{more}."
        )
