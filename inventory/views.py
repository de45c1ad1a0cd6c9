"""Agent token pages (platform admins only): list, issue (the secret is shown once), revoke.

Issuing and revoking go through inventory.agent_tokens; the pages only collect input. The page that shows
a new secret is never cached, and the secret is not kept anywhere after it is sent.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods

from core.access import require_admin
from inventory import agent_tokens
from inventory.forms import AgentTokenForm
from inventory.models import AgentToken

TOKENS_PER_PAGE = 50
WHAT = "agent tokens"


@require_http_methods(["GET", "POST"])
def agent_token_list(request):
    """Every token, newest first; POST issues one and answers with its secret (shown this once)."""
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
                response = render(
                    request, "inventory/agent_token_issued.html", {"token": token, "secret": secret}
                )
                add_never_cache_headers(response)
                return response
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


@require_http_methods(["GET", "POST"])
def agent_token_revoke(request, pk):
    """GET asks to confirm; POST revokes (the token's next report is a 401)."""
    require_admin(request.user, WHAT)
    token = get_object_or_404(AgentToken.objects.visible_to(request.user).select_related("rack"), pk=pk)
    if request.method == "POST":
        if not token.is_revoked:
            agent_tokens.revoke(token)
            messages.success(request, f"Agent token {token.prefix}… for {token.scope} revoked.")
        return redirect("inventory:agent-token-list")
    return render(request, "inventory/agent_token_revoke.html", {"token": token})
