"""The signed-in user's own account: their API token (core.tokens), as a page and as an API endpoint."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.authtoken.models import Token
from rest_framework.response import Response
from rest_framework.views import APIView

from core.models import AuditSource
from core.tokens import expires_at, is_expired, rotate


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


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request):
    """The signed-in user's API token: when it expires; POST replaces it and shows the new key once."""
    new_token = None
    if request.method == "POST":
        new_token = rotate(request.user, AuditSource.UI)
    token = new_token or Token.objects.filter(user=request.user).first()
    context = {
        "new_key": new_token.key if new_token else None,
        "token": token,
        "expires_at": expires_at(token) if token else None,
        "expired": bool(token and is_expired(token)),
        "ttl_days": settings.RACKPLANE_TOKEN_TTL_DAYS,
    }
    return render(request, "account/api_token.html", context)
