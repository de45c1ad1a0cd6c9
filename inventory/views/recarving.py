"""A rack's re-carving policy (platform admins): the form's own page, and its POST.

The rack page (scheduling.views.racks, which shows the policy to everyone) holds the same form for admins and
posts it here; a valid change redirects (303) back to the rack page, an invalid one shows this page with the
errors (400). Saving goes through inventory.recarving.set_policy.
"""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_http_methods

from core.access import require_admin
from inventory import recarving, selectors
from inventory.forms import RecarvePolicyForm
from inventory.models import RecarvePolicy

WHAT = gettext_lazy("a rack's re-carving policy")


@require_http_methods(["GET", "POST"])
def recarve_policy(request, name):
    require_admin(request.user, WHAT)
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    policy = RecarvePolicy.of(rack)
    if request.method == "POST":
        form = RecarvePolicyForm(request.POST, instance=RecarvePolicy(rack=rack))
        if form.is_valid():
            try:
                policy = recarving.set_policy(rack, **form.cleaned_data)
            except ValidationError as error:
                form.add_error(None, error)
            else:
                messages.success(request, _saved(policy))
                return HttpResponseRedirect(reverse("scheduling:rack-detail", args=[rack.name]), status=303)
    else:
        form = RecarvePolicyForm(instance=policy)
    return render(
        request,
        "inventory/recarve_policy.html",
        {"rack": rack, "form": form, **recarving.policy_context(rack, timezone.now())},
        status=400 if form.is_bound else 200,
    )


def _saved(policy: RecarvePolicy) -> str:
    if not policy.enabled:
        return _("Re-carving of %(rack)s is off: the scheduler leaves its partitions as they are.") % {
            "rack": policy.rack.name
        }
    values = {"rack": policy.rack.name, "trays": policy.smallest_trays, "rate": policy.max_per_hour}
    if policy.max_per_hour == 1:
        return (
            ngettext(
                "Re-carving of %(rack)s is on: partitions of at least %(trays)s tray, at most %(rate)s "
                "re-carve an "
                "hour.",
                "Re-carving of %(rack)s is on: partitions of at least %(trays)s trays, at most %(rate)s "
                "re-carve an "
                "hour.",
                policy.smallest_trays,
            )
            % values
        )
    return (
        ngettext(
            "Re-carving of %(rack)s is on: partitions of at least %(trays)s tray, at most %(rate)s "
            "re-carves an "
            "hour.",
            "Re-carving of %(rack)s is on: partitions of at least %(trays)s trays, at most %(rate)s "
            "re-carves an "
            "hour.",
            policy.smallest_trays,
        )
        % values
    )
