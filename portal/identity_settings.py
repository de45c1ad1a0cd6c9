"""The identity settings: single sign-on (OpenID Connect, mozilla-django-oidc) and LDAP (django-auth-ldap).

Part of portal.settings, which star-imports this module where these settings belong (after the API tokens);
read from the same environment (the process environment, and var/dev.env, which portal.settings has loaded
into it by then). Only the upper-case names are exported (`__all__` below). docs/operators/sign-in.md.
"""

import environ
from django.core.exceptions import ImproperlyConfigured

env = environ.Env()

# --- Single sign-on: OpenID Connect (tenancy.auth; docs/operators/sign-in.md) -----------------------------
# Off while OIDC_RP_CLIENT_ID is empty (the login page then shows only the local form). The authorization code
# flow with PKCE; the provider's endpoints from its discovery document unless set one by one.
OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_RP_CLIENT_SECRET", default="")
OIDC_OP_DISCOVERY_URL = env.str("OIDC_OP_DISCOVERY_URL", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default="")
OIDC_RP_SIGN_ALGO = env.str("OIDC_RP_SIGN_ALGO", default="RS256")
OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile groups")
OIDC_PROVIDER_NAME = env.str("OIDC_PROVIDER_NAME", default="single sign-on")  # "Sign in with <name>"
OIDC_USERNAME_CLAIM = env.str("OIDC_USERNAME_CLAIM", default="preferred_username")
OIDC_GROUPS_CLAIM = env.str("OIDC_GROUPS_CLAIM", default="groups")
OIDC_GROUPS_PREFIX = env.str("OIDC_GROUPS_PREFIX", default="")
OIDC_CREATE_USER = env.bool("OIDC_CREATE_USER", default=True)
# The POSIX identity jobs run as (tenancy.PosixAccount; docs/identity.md): the claims that carry it. A
# person whose claims lack uid or gid gets none from the provider (an administrator may map one).
OIDC_POSIX_USERNAME_CLAIM = env.str("OIDC_POSIX_USERNAME_CLAIM", default="posix_username")
OIDC_POSIX_UID_CLAIM = env.str("OIDC_POSIX_UID_CLAIM", default="uid_number")
OIDC_POSIX_GID_CLAIM = env.str("OIDC_POSIX_GID_CLAIM", default="gid_number")
OIDC_POSIX_GROUPS_CLAIM = env.str("OIDC_POSIX_GROUPS_CLAIM", default="posix_groups")
OIDC_TOKEN_USE_BASIC_AUTH = env.bool("OIDC_TOKEN_USE_BASIC_AUTH", default=True)  # client_secret_basic
OIDC_VERIFY_SSL = env.bool("OIDC_VERIFY_SSL", default=True)
OIDC_TIMEOUT = env.int("OIDC_TIMEOUT", default=10)
OIDC_PROXY = None
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_STORE_ACCESS_TOKEN = False
OIDC_STORE_ID_TOKEN = False
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
if OIDC_RP_CLIENT_ID:
    if not OIDC_RP_CLIENT_SECRET:
        raise ImproperlyConfigured(
            "OIDC_RP_CLIENT_ID is set but OIDC_RP_CLIENT_SECRET is empty: set the client secret the OpenID "
            "provider gave Rackplane's client, or unset OIDC_RP_CLIENT_ID to turn single sign-on off."
        )
    _missing = [
        name
        for name in ("OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT")
        + (("OIDC_OP_JWKS_ENDPOINT",) if OIDC_RP_SIGN_ALGO.startswith(("RS", "ES")) else ())
        if not globals()[name]
    ]
    if _missing and not OIDC_OP_DISCOVERY_URL:
        raise ImproperlyConfigured(
            f"Single sign-on is on (OIDC_RP_CLIENT_ID) but {', '.join(_missing)} "
            f"{'is' if len(_missing) == 1 else 'are'} empty: set OIDC_OP_DISCOVERY_URL to the provider's "
            "/.well-known/openid-configuration URL, or each endpoint."
        )
# The OpenID provider's redirect back is a top-level GET from another site: the session cookie must travel
# with it, which "Lax" allows and "Strict" does not (SESSION_COOKIE_SAMESITE in portal.settings stays "Lax").

# --- LDAP (tenancy.auth.LDAPBackend, django-auth-ldap): the login form checks passwords against LDAP too ---
# Off while AUTH_LDAP_SERVER_URI is empty.
AUTH_LDAP_SERVER_URI = env.str("AUTH_LDAP_SERVER_URI", default="")
AUTH_LDAP_BIND_DN = env.str("AUTH_LDAP_BIND_DN", default="")
AUTH_LDAP_BIND_PASSWORD = env.str("AUTH_LDAP_BIND_PASSWORD", default="")
AUTH_LDAP_START_TLS = env.bool("AUTH_LDAP_START_TLS", default=False)
AUTH_LDAP_GROUPS_PREFIX = env.str("AUTH_LDAP_GROUPS_PREFIX", default="")
AUTH_LDAP_USER_ATTR_MAP = {"first_name": "givenName", "last_name": "sn", "email": "mail"}
AUTH_LDAP_ALWAYS_UPDATE_USER = True
AUTH_LDAP_FIND_GROUP_PERMS = False
AUTH_LDAP_MIRROR_GROUPS = False  # roles come from the group rules (tenancy.identity), not Django groups
# The POSIX identity jobs run as (tenancy.PosixAccount; docs/identity.md): the person's entry's attributes,
# and the gidNumber of every posixGroup that lists them (memberUid) under the base (default: the group base).
AUTH_LDAP_POSIX_NAME_ATTR = env.str("AUTH_LDAP_POSIX_NAME_ATTR", default="uid")
AUTH_LDAP_POSIX_UID_ATTR = env.str("AUTH_LDAP_POSIX_UID_ATTR", default="uidNumber")
AUTH_LDAP_POSIX_GID_ATTR = env.str("AUTH_LDAP_POSIX_GID_ATTR", default="gidNumber")
AUTH_LDAP_POSIX_GROUP_SEARCH_BASE = env.str("AUTH_LDAP_POSIX_GROUP_SEARCH_BASE", default="")
AUTH_LDAP_POSIX_GROUP_FILTER = env.str(
    "AUTH_LDAP_POSIX_GROUP_FILTER", default="(&(objectClass=posixGroup)(memberUid=%(name)s))"
)
if AUTH_LDAP_SERVER_URI:
    import ldap
    from django_auth_ldap import config as ldap_config

    _ldap_group_types = {
        "groupOfNames": ldap_config.GroupOfNamesType,
        "groupOfUniqueNames": ldap_config.GroupOfUniqueNamesType,
        "posixGroup": ldap_config.PosixGroupType,
    }
    _group_type = env.str("AUTH_LDAP_GROUP_TYPE", default="groupOfNames")
    if _group_type not in _ldap_group_types:
        raise ImproperlyConfigured(
            f"AUTH_LDAP_GROUP_TYPE is {_group_type!r}: it must be one of {', '.join(_ldap_group_types)}."
        )
    for _name in ("AUTH_LDAP_USER_SEARCH_BASE", "AUTH_LDAP_GROUP_SEARCH_BASE"):
        if not env.str(_name, default=""):
            raise ImproperlyConfigured(
                f"LDAP is on (AUTH_LDAP_SERVER_URI) but {_name} is empty: set the DN under which the "
                f"{'users' if 'USER' in _name else 'groups'} are, e.g. ou=people,dc=example,dc=org."
            )
    AUTH_LDAP_USER_SEARCH = ldap_config.LDAPSearch(
        env.str("AUTH_LDAP_USER_SEARCH_BASE"),
        ldap.SCOPE_SUBTREE,
        env.str("AUTH_LDAP_USER_FILTER", default="(uid=%(user)s)"),
    )
    AUTH_LDAP_GROUP_SEARCH = ldap_config.LDAPSearch(
        env.str("AUTH_LDAP_GROUP_SEARCH_BASE"),
        ldap.SCOPE_SUBTREE,
        env.str("AUTH_LDAP_GROUP_FILTER", default=f"(objectClass={_group_type})"),
    )
    AUTH_LDAP_GROUP_TYPE = _ldap_group_types[_group_type](name_attr="cn")
    AUTH_LDAP_CONNECTION_OPTIONS = {ldap.OPT_NETWORK_TIMEOUT: env.int("AUTH_LDAP_TIMEOUT", default=10)}

# What `from portal.identity_settings import *` gives portal.settings: the settings, not the helpers.
__all__ = [name for name in dir() if name.isupper()]
