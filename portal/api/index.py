"""`/api/` itself (with or without its slash): where the API is.

A browser (portal.pages.home.wants_page: its Accept asks for a page) is sent to the API documentation, the
Swagger UI at /api/docs/ (through the sign-in page when no one is signed in: the documentation needs a
session). A REST client gets a small JSON index, as an API's root conventionally answers (Django REST
framework's router root at /api/v1/, GitHub's `GET /`): the addresses of the API's version, its OpenAPI
document and its documentation, so that a client pointed at /api/ finds the rest without reading a page. It
asks for the same authentication as every other API answer (401 without it: the threat model's "nothing from
the API" holds), and other unknown addresses under /api/ stay a JSON 404 for clients.
"""

from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from drf_spectacular.utils import extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.pages.home import wants_page


@extend_schema(exclude=True)  # not an operation of /api/v1/: the document describes those
class ApiIndexView(APIView):
    renderer_classes = [JSONRenderer]  # a browser is redirected, never shown a rendered JSON page

    def check_permissions(self, request):
        # The API's own (IsAuthenticated: 401 without a token or session) for clients; a browser is only
        # sent on, to the documentation or to the sign-in page.
        if not wants_page(request):
            super().check_permissions(request)

    def get(self, request):
        docs = reverse("api-docs")
        if wants_page(request):
            response = redirect(docs) if request.user.is_authenticated else redirect_to_login(docs)
        else:
            response = Response(
                {
                    "v1": request.build_absolute_uri(reverse("api-root")),
                    "schema": request.build_absolute_uri(reverse("schema")),
                    "docs": request.build_absolute_uri(docs),
                }
            )
        patch_vary_headers(response, ["Accept"])
        return response
