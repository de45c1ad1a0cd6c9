"""The doors of identity providers: OpenID Connect (mozilla-django-oidc) and LDAP (django-auth-ldap).

Both are optional and off until configured from the environment (portal.settings;
docs/operators/sign-in.md), and both end in tenancy.identity: the account linked to the provider's
identifier (made at the first sign-in) and the roles the group rules give.

OpenID Connect: the authorization code flow with PKCE (S256), started from the login page's "Sign in with
<name>" button (`OIDCSignInView`), finished on /oidc/callback/ (`OIDCCallbackView`); the ID token's
signature is checked against the provider's JWKS, the claims are the ID token's merged with the userinfo
endpoint's (some providers put the groups in only one of them). The provider's endpoints come from its
discovery document (OIDC_OP_DISCOVERY_URL), or each from its own setting, which wins. Machine clients send
the provider's access token as `Authorization: Bearer <token>` (`OIDCBearerAuthentication`, mozilla's DRF
class): the userinfo endpoint vouches for it, and the roles are re-synced as at a sign-in.

LDAP: the portal's ordinary login form; `LDAPBackend` binds as the user (found by AUTH_LDAP_USER_SEARCH),
reads their groups (AUTH_LDAP_GROUP_SEARCH, AUTH_LDAP_GROUP_TYPE) and applies the same rules.

Both also refresh the person's POSIX identity (the Unix user their jobs run as) at every sign-in
(tenancy.identity.sync_posix): LDAP from the entry's uid, uidNumber and gidNumber and the gidNumber of every
posixGroup naming them in memberUid (AUTH_LDAP_POSIX_*); OpenID Connect from the claims OIDC_POSIX_*_CLAIM.
"""

from __future__ import annotations

import logging
import threading
import time

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django_auth_ldap.backend import LDAPBackend as BaseLDAPBackend
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.contrib.drf import OIDCAuthentication
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView
from rest_framework import exceptions

from core import tokens
from core.audit import audit_context
from inventory import agent_tokens
from tenancy.choices import IdentityProvider
from tenancy.identity import SignInRefused, account_for, posix_identity_from, sync_posix, sync_roles
from tenancy.models import ExternalIdentity

logger = logging.getLogger(__name__)

# The settings a discovery document can fill (setting -> its key in the document).
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
DISCOVERY_TTL_SECONDS = 3600
_discovery: dict[str, tuple[float, dict]] = {}
_discovery_lock = threading.Lock()


class ProviderUnavailable(Exception):
    """The OpenID provider could not be asked (discovery, token or userinfo endpoint): the message says
    which and why."""


def oidc_enabled() -> bool:
    return bool(getattr(settings, "OIDC_RP_CLIENT_ID", ""))


def ldap_enabled() -> bool:
    return bool(getattr(settings, "AUTH_LDAP_SERVER_URI", ""))


def discovery_document(url: str) -> dict:
    """The provider's discovery document (/.well-known/openid-configuration), fetched once an hour."""
    now = time.monotonic()
    with _discovery_lock:
        cached = _discovery.get(url)
        if cached is not None and now - cached[0] < DISCOVERY_TTL_SECONDS:
            return cached[1]
    try:
        response = requests.get(
            url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL, proxies=settings.OIDC_PROXY
        )
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as error:
        raise ProviderUnavailable(
            f"the OpenID provider's discovery document {url} could not be read: {error}"
        ) from error
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"the OpenID provider's discovery document {url} is not a JSON object")
    with _discovery_lock:
        _discovery[url] = (now, document)
    return document


def forget_discovery() -> None:
    """Drop the cached discovery documents (tests; a provider that moved its endpoints)."""
    with _discovery_lock:
        _discovery.clear()


def oidc_setting(attr, *args):
    """mozilla-django-oidc's settings lookup, with the provider's endpoints taken from its discovery
    document when their own setting is empty."""
    value = import_from_settings(attr, *args)
    if attr in DISCOVERED and not value:
        url = getattr(settings, "OIDC_OP_DISCOVERY_URL", "")
        if not url:
            raise ImproperlyConfigured(
                f"{attr} is empty and so is OIDC_OP_DISCOVERY_URL: set the provider's discovery URL (or each "
                "endpoint) in the environment."
            )
        value = discovery_document(url).get(DISCOVERED[attr], "")
        if not value:
            raise ProviderUnavailable(
                f"the OpenID provider's discovery document {url} names no {DISCOVERED[attr]}"
            )
    return value


def groups_claim(claims: dict) -> list:
    """The groups in the configured claim (OIDC_GROUPS_CLAIM): a list, or one string; anything else none."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return [value]
    return list(value) if isinstance(value, list | tuple) else []


def oidc_posix_identity(claims: dict):
    """The POSIX identity the claims carry (OIDC_POSIX_*_CLAIM), or None. The login name falls back to
    the username claim when the provider sends no separate one."""
    name = claims.get(settings.OIDC_POSIX_USERNAME_CLAIM) or claims.get(settings.OIDC_USERNAME_CLAIM)
    uid, gid = claims.get(settings.OIDC_POSIX_UID_CLAIM), claims.get(settings.OIDC_POSIX_GID_CLAIM)
    if uid is None and gid is None:
        return None
    return posix_identity_from(name, uid, gid, claims.get(settings.OIDC_POSIX_GROUPS_CLAIM) or ())


class OIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend: accounts by `sub` (tenancy.identity.account_for), the username from
    OIDC_USERNAME_CLAIM, roles from the groups claim (sync_roles) at every sign-in."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        # The endpoints are resolved when used (discovery may be needed, and may fail): not here, where an
        # error would break every other backend's sign-in too.
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = getattr(settings, "OIDC_RP_IDP_SIGN_KEY", None)
        self.UserModel = get_user_model()
        self.request = None

    def __getattr__(self, name):
        if name in DISCOVERED:
            return oidc_setting(name)
        raise AttributeError(name)

    def authenticate(self, request, **kwargs):
        if not oidc_enabled():
            return None
        return super().authenticate(request, **kwargs)

    def get_userinfo(self, access_token, id_token, payload):
        """The userinfo endpoint's claims over the ID token's (payload; None for a bearer token)."""
        return {**(payload or {}), **super().get_userinfo(access_token, id_token, payload)}

    def verify_claims(self, claims):
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("The OpenID provider's claims have no `sub`.")
        username = claims.get(settings.OIDC_USERNAME_CLAIM) or ""
        try:
            user = account_for(
                IdentityProvider.OIDC,
                str(claims["sub"]),
                str(username),
                email=str(claims.get("email") or ""),
                first_name=str(claims.get("given_name") or "")[:150],
                last_name=str(claims.get("family_name") or "")[:150],
                create=settings.OIDC_CREATE_USER,
            )
        except SignInRefused as refusal:
            if self.request is not None:
                messages.error(self.request, str(refusal))
            logger.warning("OpenID Connect sign-in refused: %s", refusal.english)
            return None
        if not user.is_active:
            if self.request is not None:
                messages.error(self.request, _("Your Rackplane account is disabled: ask a platform admin."))
            return None
        sync_roles(user, groups_claim(claims), IdentityProvider.OIDC, settings.OIDC_GROUPS_PREFIX)
        sync_posix(user, oidc_posix_identity(claims), IdentityProvider.OIDC)
        return user


def _sign_in_failed(request, reason: str) -> HttpResponseRedirect:
    messages.error(
        request,
        _("Signing in with %(provider)s failed: %(reason)s. Try again, or sign in with a local account.")
        % {"provider": settings.OIDC_PROVIDER_NAME, "reason": reason},
    )
    return HttpResponseRedirect(reverse("login"))


@method_decorator(login_not_required, name="dispatch")
class OIDCSignInView(OIDCAuthenticationRequestView):
    """Starts the authorization code flow (state, nonce, PKCE S256 kept in the session) and sends the
    browser to the provider's login page. 404 while OpenID Connect is not configured."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)  # endpoints: in get()

    def get(self, request):
        if not oidc_enabled():
            raise Http404(_("Single sign-on is not configured."))
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnavailable as error:
            logger.warning("OpenID Connect sign-in could not start: %s", error)
            return _sign_in_failed(request, _("the identity provider does not answer"))
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


@method_decorator(login_not_required, name="dispatch")
class OIDCCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: the code is exchanged (with the PKCE verifier), the ID
    token checked, the account found or made and its roles synced. A failure comes back to the login page
    with the reason."""

    get_settings = staticmethod(oidc_setting)

    @property
    def failure_url(self):
        return reverse("login")

    def get(self, request):
        if not oidc_enabled():
            raise Http404(_("Single sign-on is not configured."))
        if request.GET.get("error"):
            description = request.GET.get("error_description") or request.GET["error"]
            super().get(request)  # forgets the state, signs nobody in
            return _sign_in_failed(
                request, _("the identity provider answered %(answer)s") % {"answer": repr(description)}
            )
        try:
            response = super().get(request)
        except (requests.RequestException, ProviderUnavailable) as error:
            logger.warning("OpenID Connect sign-in failed: %s", error)
            return _sign_in_failed(request, _("the identity provider did not accept the sign-in"))
        except SuspiciousOperation as error:
            logger.warning("OpenID Connect sign-in refused: %s", error)
            return _sign_in_failed(
                request, _("the answer could not be verified (start again from this page)")
            )
        if response.url == self.failure_url and not messages.get_messages(request):
            return _sign_in_failed(request, _("the sign-in did not complete"))
        return response


class OIDCBearerAuthentication(OIDCAuthentication):
    """`Authorization: Bearer <access token>` of the OpenID provider, for machine clients: the provider's
    userinfo endpoint vouches for the token, then the same account and roles as a browser sign-in. Bearer
    personal tokens (rpt_) and agent tokens (rpa_) are left to their own classes; while OpenID Connect is
    not configured, every bearer token is left alone."""

    def __init__(self, backend=None):
        self.backend = backend

    def authenticate(self, request):
        if not oidc_enabled():
            return None
        access_token = self.get_access_token(request)
        if not access_token or access_token.startswith((tokens.KEY_PREFIX, agent_tokens.SECRET_PREFIX)):
            return None
        self.backend = self.backend or OIDCBackend()
        try:
            user, token = super().authenticate(request)
        except (requests.RequestException, ProviderUnavailable) as error:
            logger.warning("OpenID Connect bearer token not checked: %s", error)
            raise exceptions.AuthenticationFailed(
                _(
                    "The bearer token could not be checked: the identity provider did not answer. Try again "
                    "later."
                )
            ) from error
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("The bearer token's account is disabled in Rackplane."))
        return user, token


class OIDCBearerScheme(OpenApiAuthenticationExtension):
    target_class = OIDCBearerAuthentication
    name = "oidcBearer"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An access token of the organisation's OpenID provider (when single sign-on is "
            "configured), for machine clients: `Authorization: Bearer <token>`.",
        }


class LDAPBackend(BaseLDAPBackend):
    """django-auth-ldap's backend: the portal's login form checks the password with a bind as the user;
    accounts are linked by DN (never taken over by username); roles from the user's groups (their cn) at
    every sign-in. Off while AUTH_LDAP_SERVER_URI is empty."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not ldap_enabled():
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_or_build_user(self, username, ldap_user):
        link = (
            ExternalIdentity.objects.select_related("user")
            .filter(provider=IdentityProvider.LDAP, subject=ldap_user.dn.lower())
            .first()
        )
        if link is not None:
            return link.user, False
        user, built = super().get_or_build_user(username, ldap_user)
        if not built:
            logger.warning(
                "LDAP sign-in of %s refused: an account named %r exists and is not linked to that entry; "
                "link them in the Django admin (External identities) if they are the same person",
                ldap_user.dn,
                username,
            )
            raise ldap_user.AuthenticationFailed("an account of that name exists and is not linked to LDAP")
        return user, built

    def authenticate_ldap_user(self, ldap_user, password):
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is None:
            return None
        with audit_context(IdentityProvider.LDAP, actor=user):
            ExternalIdentity.objects.get_or_create(
                provider=IdentityProvider.LDAP, subject=ldap_user.dn.lower(), defaults={"user": user}
            )
        if not user.is_active:
            return None
        sync_roles(user, ldap_user.group_names, IdentityProvider.LDAP, settings.AUTH_LDAP_GROUPS_PREFIX)
        sync_posix(user, ldap_posix_identity(ldap_user), IdentityProvider.LDAP)
        return user


def _first(attrs, name: str):
    values = attrs.get(name) or attrs.get(name.lower()) or []
    return values[0] if values else None


def ldap_posix_identity(ldap_user):
    """The POSIX identity of a directory entry (AUTH_LDAP_POSIX_*: uid, uidNumber, gidNumber), with the
    gidNumber of every posixGroup naming the person in memberUid as supplementary groups; None when the
    entry has no uidNumber and gidNumber (not a posixAccount)."""
    attrs = ldap_user.attrs or {}
    name = _first(attrs, settings.AUTH_LDAP_POSIX_NAME_ATTR)
    uid = _first(attrs, settings.AUTH_LDAP_POSIX_UID_ATTR)
    gid = _first(attrs, settings.AUTH_LDAP_POSIX_GID_ATTR)
    if uid is None and gid is None:
        return None
    return posix_identity_from(name, uid, gid, _ldap_posix_groups(ldap_user, name) if name else ())


def _ldap_posix_groups(ldap_user, name: str) -> list:
    """gidNumbers of the posixGroups that list `name` in memberUid (searched as Rackplane's bind)."""
    import ldap
    from ldap.filter import escape_filter_chars

    base = settings.AUTH_LDAP_POSIX_GROUP_SEARCH_BASE or getattr(
        getattr(settings, "AUTH_LDAP_GROUP_SEARCH", None), "base_dn", ""
    )
    if not base:
        return []
    query = settings.AUTH_LDAP_POSIX_GROUP_FILTER % {"name": escape_filter_chars(name)}
    try:
        found = ldap_user.connection.search_s(base, ldap.SCOPE_SUBTREE, query, ["gidNumber"])
    except ldap.LDAPError as error:
        logger.warning("LDAP: the posixGroups of %s could not be read (%s); none used", name, error)
        return []
    return [
        value.decode() if isinstance(value, bytes) else value
        for dn, entry in found
        if dn and isinstance(entry, dict)
        for value in entry.get("gidNumber", [])[:1]
    ]
