"""A department's settings page (platform admins): its quota, network and storage. Integrations' page (the
`integrations` namespace, at /tenancy/departments/<slug>/edit/) because what it says after a save is whether
Slurm and Kubernetes are told (integrations.signals queues the push); the save itself is the department pages'
(scheduling.views.departments.save_form, through tenancy.services).
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from core.access import require_admin
from integrations.models import ConfigTarget
from integrations.signals import requested_push
from scheduling.views.departments import save_form
from tenancy.forms import DepartmentForm
from tenancy.models import Department


def _saved_message(department: Department):
    """What the save did, and whether Slurm and Kubernetes are told (integrations.signals queues the push)."""
    reason = requested_push(department)
    if reason is None:
        return _("Department %(name)s saved.") % {"name": department.name}
    if not ConfigTarget.objects.filter(enabled=True).exists():
        return format_html(
            _(
                "Department {name} saved. No configuration target is enabled, so nothing was pushed: Slurm "
                'and Kubernetes keep the old values (<a href="{url}">configuration targets</a>).'
            ),
            name=department.name,
            url=reverse("integrations:target-list"),
        )
    return format_html(
        _(
            "Department {name} saved. A configuration push was queued ({reason}): "
            '<a href="{url}">see the pushes</a>.'
        ),
        name=department.name,
        reason=reason,
        url=reverse("integrations:push-list"),
    )


@require_http_methods(["GET", "POST"])
def department_edit(request, slug):
    require_admin(request.user, _("department settings"))
    department = get_object_or_404(Department.objects.visible_to(request.user), slug=slug)
    if request.method == "POST":
        form = DepartmentForm(request.POST, instance=department)
        saved = save_form(request, form)
        if saved is not None:
            messages.success(request, _saved_message(saved))
            return redirect("scheduling:department-detail", slug=saved.slug)
        # A failed save may have allocated values onto the instance: show the stored department.
        department = Department.objects.get(pk=department.pk)
    else:
        form = DepartmentForm(instance=department)
    return render(request, "integrations/department_form.html", {"form": form, "department": department})
