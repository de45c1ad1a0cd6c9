"""Leads manage their people on the department page: find accounts to invite, set roles, remove members.

The members table and its writes are scheduling.views.departments' (`member_set`, `member_remove`, through
tenancy.services.set_membership / remove_membership, which lock the department's lead rows so that two leads
cannot together leave it without one; every change is a Membership save or delete, recorded by core.audit).
This module adds:

* **The people search** (`people_search`): a lead or platform admin types three characters or more and gets
  at most INVITE_SEARCH_MAX accounts they may invite (tenancy.services.invitable_users: active, not yet
  members, not platform admins for a lead). Anyone else gets the department page's own answer (404 for a
  department they cannot see, 403 for a member), before any account is looked at: the search tells nobody
  whether a username exists. Each result's Invite button posts to `member_set`, like the username form.
* **Roles from an identity provider** (Membership.origin, tenancy.identity): shown as such, and neither
  changed nor removed from the portal; `identity_lock` is the refusal `member_set` and `member_remove` give,
  with the reason (the provider's groups decide, at every sign-in).
"""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET

from core.access import Role, require_lead
from scheduling import usage as selectors
from tenancy.choices import RoleOrigin
from tenancy.models import Department, Membership
from tenancy.services import INVITE_SEARCH_MAX, INVITE_SEARCH_MIN, invitable_users

IDENTITY_REASON = gettext_lazy(
    "Roles from the identity provider follow the person's groups there: they are re-synced at every sign-in, "
    "so they are changed at the provider, not here."
)


def identity_lock(membership: Membership | None) -> str:
    """Why `membership` cannot be changed in the portal ("" when it can: a role granted by hand)."""
    if membership is None or membership.origin == RoleOrigin.MANUAL:
        return ""
    source = membership.get_origin_display()
    return _(
        "%(user)s's role in %(department)s comes from an %(source)s: change their group at the identity "
        "provider (it is re-synced at every sign-in), not here."
    ) % {"user": membership.user, "department": membership.department, "source": source}


def identity_lock_for(department: Department, username: str) -> str:
    """`identity_lock` of `username`'s membership of `department`, if they have one."""
    membership = (
        Membership.objects.filter(department=department, user__username=username)
        .select_related("user", "department")
        .first()
    )
    return identity_lock(membership)


@require_GET
def people_search(request, slug):
    """htmx: accounts the lead may invite whose username or name contains `q` (3 characters or more)."""
    department = selectors.visible_department(request.user, slug)
    if department is None:
        raise Http404(_("No such department."))
    require_lead(request.user, department, _("invite people"))
    text = request.GET.get("q", "").strip()[:150]
    found = invitable_users(department, request.user, text)
    response = render(
        request,
        "scheduling/people_search.html",
        {
            "department": department,
            "q": text,
            "too_short": len(text) < INVITE_SEARCH_MIN,
            "minimum": INVITE_SEARCH_MIN,
            "users": found[:INVITE_SEARCH_MAX],
            "more": len(found) > INVITE_SEARCH_MAX,
            "maximum": INVITE_SEARCH_MAX,
            "roles": Role.choices,
        },
    )
    patch_vary_headers(response, ["HX-Request"])
    return response
