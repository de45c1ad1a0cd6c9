from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequiredMiddleware


class LoginRequiredMiddleware(DjangoLoginRequiredMiddleware):
    """Login required for every page except the login page.

    The API is left to Django REST framework, which authenticates sessions *and* tokens and answers
    401/403 in JSON; a redirect to the HTML login page would be wrong for a REST client.
    """

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith("/api/"):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
