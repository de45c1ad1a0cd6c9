"""The signed-in user's own account: the sign-in page, personal API tokens and the older single API token
(core.tokens), as pages and as an API endpoint.

The token pages follow Post/Redirect/Get: the POST makes the token and redirects; the GET page after it
shows the new key once (kept in the session only until then), so reloading a page never makes or replaces a
token.
"""

import datetime

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseClientRedirect
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.views import APIView

from core import tokens
from core.access import is_admin
from core.fields import refuse_body
from core.htmx import confirm_plain_post
from core.models import AuditSource, PersonalToken
from core.text import TextFormField
from core.tokens import expires_at, is_expired, rotate
from tenancy.auth import ldap_enabled, oidc_enabled

# The session key that holds a key the page made until it is shown (once) on the "new token" page.
NEW_KEY_SESSION_KEY = "account_new_api_token"


class RotatedTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The new key: shown only in this answer.")
    kind = serializers.ChoiceField(
        choices=["personal", "single"],
        help_text="The same kind as the token rotated: a personal token (rpt_...) or the single token.",
    )
    name = serializers.CharField(
        help_text="A personal token's name (the old one's); empty for the single token."
    )
    created = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(
        help_text="When the rotated token would have expired: never later."
    )


def _rotated(token: Token) -> dict:
    return {
        "token": token.key,
        "kind": "single",
        "name": "",
        "created": token.created,
        "expires_at": expires_at(token),
    }


def _rotated_personal(token: PersonalToken, key: str) -> dict:
    return {
        "token": key,
        "kind": "personal",
        "name": token.name,
        "created": token.created_at,
        "expires_at": token.expires_at,
    }


class TokenRotateView(APIView):
    """Replace the token you call with: it stops working, the answer holds the new key (once).

    The new token is of the same kind and expires when the old one would have: a personal token (rpt_...)
    becomes a personal token of the same name, the single token a single token; rotation never makes a
    token live longer. Only a token rotates itself: a browser session, an OpenID provider's access token or
    an agent token is refused (make or replace a token on the portal's API tokens pages). An expired or
    revoked token cannot rotate itself (401).
    """

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        request=None,
        responses={
            200: RotatedTokenSerializer,
            400: OpenApiResponse(
                description="Not called with a Rackplane API token, or one that cannot rotate."
            ),
            401: OpenApiResponse(description="No credentials, or an unknown, revoked or expired token."),
        },
    )
    def post(self, request):
        refuse_body(request)  # nothing to choose: the new token keeps the old one's kind and expiry
        credential = request.auth
        try:
            if isinstance(credential, PersonalToken):
                new, key = tokens.rotate_personal(credential, by=request.user)
                data = _rotated_personal(new, key)
            elif isinstance(credential, Token):
                data = _rotated(rotate(request.user, AuditSource.API, keep_expiry=True))
            else:
                raise tokens.NotRotatable(
                    "Only an API token rotates itself: call this with the token to replace (Authorization: "
                    "Token ...). Signed in to the portal, make or replace tokens on the API tokens page "
                    f"({tokens.TOKENS_PAGE}); an identity provider's access token is renewed at the provider."
                )
        except tokens.NotRotatable as refusal:
            raise serializers.ValidationError({"token": [str(refusal)]}) from refusal
        return Response(RotatedTokenSerializer(data).data)


class ReplaceTokenForm(forms.Form):
    """The confirmation a user gives before their working token is replaced (a checkbox: no script)."""

    confirm = forms.BooleanField(
        label=gettext_lazy("I understand my current token stops working at once"),
        error_messages={
            "required": gettext_lazy("Tick the box to replace your token: the current one stops working.")
        },
    )


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request):
    """The signed-in user's API token and when it expires. POST makes one, or replaces a working one once
    confirmed, then redirects (303) to the page that shows the new key once: a reload never re-posts."""
    token = Token.objects.filter(user=request.user).first()
    # An expired token no longer works: replacing it stops nothing, so it needs no confirmation.
    needs_confirmation = bool(token and not is_expired(token))
    form = ReplaceTokenForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and (not needs_confirmation or form.is_valid()):
        request.session[NEW_KEY_SESSION_KEY] = rotate(request.user, AuditSource.UI).key
        return HttpResponseRedirect(reverse("api-token-new"), status=303)
    context = {
        "token": token,
        "expires_at": expires_at(token) if token else None,
        "expired": bool(token and is_expired(token)),
        "needs_confirmation": needs_confirmation,
        "form": form,
        "ttl_days": settings.RACKPLANE_TOKEN_TTL_DAYS,
    }
    return render(request, "portal/account/api_token.html", context, status=400 if form.is_bound else 200)


@never_cache
@login_required
@require_http_methods(["GET"])
def api_token_new(request):
    """Shows the key the last POST made, once: it is taken out of the session as it is shown, so a reload
    says it was shown and changes nothing."""
    new_key = request.session.pop(NEW_KEY_SESSION_KEY, None)
    token = Token.objects.filter(user=request.user).first()
    if new_key is not None and (token is None or token.key != new_key):
        new_key = None  # replaced again since (another tab, the API): that key no longer works
    context = {
        "new_key": new_key,
        "token": token,
        "expires_at": expires_at(token) if token else None,
    }
    return render(request, "portal/account/api_token_new.html", context)


# --- the sign-in page ------------------------------------------------------------------------------------


class SignInView(auth_views.LoginView):
    """Django's login form (local accounts, and LDAP accounts when LDAP is configured), with a "Sign in with
    <name>" button when single sign-on (OpenID Connect) is configured."""

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["oidc_enabled"] = oidc_enabled()
        context["oidc_provider_name"] = settings.OIDC_PROVIDER_NAME
        context["ldap_enabled"] = ldap_enabled()
        return context


# --- personal API tokens ---------------------------------------------------------------------------------

# The session key that holds the key a POST made until the "new token" page shows it (once): (pk, key).
NEW_PERSONAL_KEY_SESSION_KEY = "account_new_personal_token"
LIFETIME_CHOICES = (1, 7, 30, 90, 180, 365)
DEFAULT_LIFETIME_DAYS = 90


def lifetime_choices() -> list[tuple[int, str]]:
    """The expiries a user may pick: up to RACKPLANE_PERSONAL_TOKEN_MAX_DAYS (always that one too)."""
    longest = tokens.max_lifetime_days()
    days = sorted({d for d in LIFETIME_CHOICES if d <= longest} | {longest})
    return [(d, ngettext("%(n)s day", "%(n)s days", d) % {"n": d}) for d in days]


class PersonalTokenForm(forms.Form):
    name = TextFormField(
        max_length=100,
        help_text=gettext_lazy(
            "What will use it: a script, a notebook, a machine. Shown in the list and the audit log."
        ),
        error_messages={"required": gettext_lazy("Name the token after what will use it.")},
    )
    lifetime_days = forms.TypedChoiceField(
        label=gettext_lazy("Expires in"),
        coerce=int,
        help_text=gettext_lazy("The API refuses the token after that; make a new one then."),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = lifetime_choices()
        self.fields["lifetime_days"].choices = choices
        values = [value for value, _ in choices]
        self.fields["lifetime_days"].initial = min(values, key=lambda d: abs(d - DEFAULT_LIFETIME_DAYS))


def _status(token: PersonalToken, now) -> str:
    if token.revoked_at is not None:
        return "rotated" if token.rotated_to_id is not None else "revoked"
    return "expired" if token.expires_at <= now else "active"


def _rows(queryset, now) -> list[dict]:
    return [{"token": token, "status": _status(token, now)} for token in queryset]


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def personal_tokens(request):
    """Your personal API tokens (and, for platform admins, everyone's active ones): POST makes one, then
    redirects (303) to the page that shows its key once."""
    form = PersonalTokenForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        days = form.cleaned_data["lifetime_days"]
        try:
            token, key = tokens.issue(
                request.user, form.cleaned_data["name"], timezone.now() + datetime.timedelta(days=days)
            )
        except ValidationError as error:
            for field, problems in error.message_dict.items():
                form.add_error(field if field in form.fields else None, problems)
        else:
            request.session[NEW_PERSONAL_KEY_SESSION_KEY] = [token.pk, key]
            return HttpResponseRedirect(reverse("personal-token-new"), status=303)
    now = timezone.now()
    own = PersonalToken.objects.filter(user=request.user).select_related("rotated_to")
    everyone = None
    if is_admin(request.user):
        everyone = _rows(
            PersonalToken.objects.visible_to(request.user)
            .exclude(user=request.user)
            .filter(revoked_at__isnull=True, expires_at__gt=now)
            .select_related("user")
            .order_by("user__username", "-created_at"),
            now,
        )
    legacy = Token.objects.filter(user=request.user).first()
    context = {
        "form": form,
        "rows": _rows(own, now),
        "everyone": everyone,
        "legacy": legacy,
        "legacy_expires_at": expires_at(legacy) if legacy else None,
        "legacy_expired": bool(legacy and is_expired(legacy)),
        "max_days": tokens.max_lifetime_days(),
    }
    return render(request, "portal/account/tokens.html", context, status=400 if form.is_bound else 200)


@never_cache
@login_required
@require_http_methods(["GET"])
def personal_token_new(request):
    """Shows the key the last POST made, once: taken out of the session as it is shown, so a reload says it
    was shown and changes nothing."""
    pk, key = request.session.pop(NEW_PERSONAL_KEY_SESSION_KEY, None) or (None, None)
    token = PersonalToken.objects.filter(pk=pk, user=request.user).first() if pk else None
    if token is not None and token.revoked_at is not None:
        token, key = None, None  # revoked since (another tab): that key no longer works
    if token is None or not key:
        # Opened directly, or reloaded after the key was shown: no key to show. The token list, with its
        # form, is where one is made (this page never makes one).
        messages.info(
            request,
            _(
                "There is no new token to show: a token's key is shown once, right after it is made. Make a "
                "new one below if you lost it (and revoke the lost one)."
            ),
        )
        return HttpResponseRedirect(reverse("personal-tokens"), status=303)
    api_root = request.build_absolute_uri("/api/v1/")
    site = request.build_absolute_uri("/").rstrip("/")
    return render(
        request,
        "portal/account/tokens_new.html",
        {"token": token, "key": key, "api_root": api_root, "site": site},
    )


@login_required
@require_http_methods(["POST"])
def personal_token_revoke(request, pk: int):
    """Revoke one of your tokens (a platform admin: anyone's), then back to the page it was asked from."""
    token = get_object_or_404(PersonalToken.objects.visible_to(request.user).select_related("user"), pk=pk)
    already = token.revoked_at is not None
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = reverse("personal-tokens")
    if not already:
        # Its Revoke button asks first (hx-confirm); posted without htmx, a page asks the same question.
        asked = confirm_plain_post(
            request,
            question_template="portal/account/_token_revoke_question.html",
            context={"token": token},
            title=_("Revoke token %(prefix)s…?") % {"prefix": token.prefix},
            action=_("Revoke"),
            back_url=back,
        )
        if asked:
            return asked
    tokens.revoke(token, by=request.user)
    values = {"prefix": token.prefix, "name": token.name, "user": token.user.get_username()}
    own = token.user_id == request.user.pk
    if already:
        if own:
            message = _("Token %(prefix)s… (%(name)s) was already revoked.")
        else:
            message = _("Token %(prefix)s… (%(name)s) of %(user)s was already revoked.")
        messages.info(request, message % values)
    else:
        if own:
            message = _("Revoked token %(prefix)s… (%(name)s): the API refuses it from now on.")
        else:
            message = _("Revoked token %(prefix)s… (%(name)s) of %(user)s: the API refuses it from now on.")
        messages.success(request, message % values)
    if request.htmx:
        return HttpResponseClientRedirect(back)  # the whole page again, with the message
    return HttpResponseRedirect(back, status=303)
