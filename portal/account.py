"""The signed-in user's own account: their API token (core.tokens), as pages and as an API endpoint.

The pages follow Post/Redirect/Get: the POST makes the token and redirects; the GET page after it shows the
new key once (kept in the session only until then), so reloading a page never makes or replaces a token.
"""

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.views import APIView

from core.models import AuditSource
from core.tokens import expires_at, is_expired, rotate

# The session key that holds a key the page made until it is shown (once) on the "new token" page.
NEW_KEY_SESSION_KEY = "account_new_api_token"


class RotatedTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="The new key: shown only in this answer.")
    created = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()


def _rotated(token: Token) -> dict:
    return {"token": token.key, "created": token.created, "expires_at": expires_at(token)}


class TokenRotateView(APIView):
    """Replace your API token: the key you called with stops working, the answer holds the new one (once).

    The new token expires after RACKPLANE_TOKEN_TTL_DAYS days. An expired token cannot rotate itself: sign in
    to the portal and use the API token page.
    """

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        request=None,
        responses={
            200: RotatedTokenSerializer,
            401: OpenApiResponse(description="No credentials, or an unknown or expired token."),
        },
    )
    def post(self, request):
        return Response(RotatedTokenSerializer(_rotated(rotate(request.user, AuditSource.API))).data)


class ReplaceTokenForm(forms.Form):
    """The confirmation a user gives before their working token is replaced (a checkbox: no script)."""

    confirm = forms.BooleanField(
        label="I understand my current token stops working at once",
        error_messages={"required": "Tick the box to replace your token: the current one stops working."},
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
    return render(request, "account/api_token.html", context, status=400 if form.is_bound else 200)


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
    return render(request, "account/api_token_new.html", context)
