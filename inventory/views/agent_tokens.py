"""Agent token pages (platform admins only): list, issue (the secret is shown once), revoke.

Issuing and revoking go through inventory.agent_tokens; the pages only collect input. Issuing follows
Post/Redirect/Get: the POST issues and redirects (303) to the token's "issued" page, which shows the secret
once. Until then the secret waits in the session; the page takes it out as it shows it and is never cached,
so a reload shows no secret and issues nothing.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from core.access import require_admin
from inventory import agent_tokens
from inventory.forms import AgentTokenForm
from inventory.models import AgentToken

TOKENS_PER_PAGE = 50
WHAT = gettext_lazy("agent tokens")
# The session key that holds new secrets (by token id) until their "issued" page shows them, once.
NEW_SECRETS_SESSION_KEY = "inventory_new_agent_token_secrets"


@require_http_methods(["GET", "POST"])
def agent_token_list(request):
    """Every token, newest first; POST issues one and redirects to the page that shows its secret once."""
    require_admin(request.user, WHAT)
    if request.method == "POST":
        form = AgentTokenForm(request.POST)
        if form.is_valid():
            try:
                token, secret = agent_tokens.issue(
                    rack=form.cleaned_data["rack"],
                    hostname=form.cleaned_data["hostname"],
                    description=form.cleaned_data["description"],
                    created_by=request.user,
                )
            except ValidationError as error:
                form.add_error(None, error)
            else:
                new_secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
                request.session[NEW_SECRETS_SESSION_KEY] = {**new_secrets, str(token.pk): secret}
                return HttpResponseRedirect(
                    reverse("inventory:agent-token-issued", args=[token.pk]), status=303
                )
    else:
        form = AgentTokenForm(initial={"rack": request.GET.get("rack")})
    tokens = AgentToken.objects.visible_to(request.user).select_related("rack", "created_by")
    page = Paginator(tokens, TOKENS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "inventory/agent_token_list.html",
        {"form": form, "page": page},
        status=400 if form.is_bound else 200,
    )


@never_cache
@require_http_methods(["GET"])
def agent_token_issued(request, pk):
    """The token just issued, with its secret the first time; after that, a note that it was shown once."""
    require_admin(request.user, WHAT)
    token = get_object_or_404(AgentToken.objects.visible_to(request.user).select_related("rack"), pk=pk)
    new_secrets = request.session.get(NEW_SECRETS_SESSION_KEY, {})
    secret = new_secrets.pop(str(pk), None)
    if secret is not None:
        if new_secrets:
            request.session[NEW_SECRETS_SESSION_KEY] = new_secrets
        else:
            del request.session[NEW_SECRETS_SESSION_KEY]
        if agent_tokens.hash_secret(secret) != token.secret_hash:
            secret = None  # never show a secret under a token it does not belong to
    return render(request, "inventory/agent_token_issued.html", {"token": token, "secret": secret})


@require_http_methods(["GET", "POST"])
def agent_token_revoke(request, pk):
    """GET asks to confirm; POST revokes (the token's next report is a 401)."""
    require_admin(request.user, WHAT)
    token = get_object_or_404(AgentToken.objects.visible_to(request.user).select_related("rack"), pk=pk)
    if request.method == "POST":
        if not token.is_revoked:
            agent_tokens.revoke(token)
            messages.success(
                request,
                _("Agent token %(prefix)s… for %(scope)s revoked.")
                % {"prefix": token.prefix, "scope": token.shown_scope},
            )
        return redirect("inventory:agent-token-list")
    return render(request, "inventory/agent_token_revoke.html", {"token": token})
