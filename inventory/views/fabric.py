"""Importing the fabric (platform admins): upload a file, preview what it changes, apply it; and putting
another source's import in use. The fabric page itself shows free GPUs per unit, so it is scheduling's
(scheduling.views.fabric, at /inventory/fabric/).

Upload (POST) parses the file and plans it against the inventory (a rack it lacks is refused there, nothing
kept), keeps it as a FabricUpload, then redirects to its preview (GET, which only reads:
inventory.fabric_import.plan); Apply (POST) writes it in one transaction
(inventory.fabric_import.apply) and deletes the upload. Bad input is a 400 naming the line, nothing written.
"""

from datetime import timedelta

from django.contrib import messages
from django.http import HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods, require_POST

from core.access import require_admin
from inventory import fabric_import
from inventory.choices import FabricSource
from inventory.discovery.fabric.parsed import MAX_BYTES, FabricInputError
from inventory.discovery.fabric.read import read
from inventory.forms import FabricUploadForm
from inventory.models import FabricUpload

WHAT = gettext_lazy("fabric imports")
KEPT_FOR = timedelta(hours=1)  # an upload not applied within this is deleted by the next upload


def _page(request, form, upload=None, plan=None, error=None, status=200):
    return render(
        request,
        "inventory/fabric_import.html",
        {"form": form, "upload": upload, "plan": plan, "error": error, "shown": fabric_import.SHOWN},
        status=status,
    )


@require_http_methods(["GET", "POST"])
def fabric_import_page(request):
    require_admin(request.user, WHAT)
    if request.method == "POST":
        form = FabricUploadForm(request.POST, request.FILES)
        if not form.is_valid():
            return _page(request, form, status=400)
        data = form.cleaned_data["file"].read(MAX_BYTES + 1)
        name = form.cleaned_data["file"].name
        try:
            # Planned against the inventory too (a few reads): a file naming a rack the inventory lacks is
            # refused here, nothing stored, as the preview would refuse it.
            fabric_import.plan(read(form.cleaned_data["source"], data, name), use=form.cleaned_data["use"])
        except FabricInputError as refused:
            return _page(request, form, error=f"{name}: {refused}", status=400)
        FabricUpload.objects.filter(uploaded_at__lt=timezone.now() - KEPT_FOR).delete()
        upload = FabricUpload.objects.create(
            source=form.cleaned_data["source"],
            name=name,
            data=data,
            use=form.cleaned_data["use"],
            uploaded_by=request.user,
        )
        return HttpResponseRedirect(reverse("inventory:fabric-import") + f"?upload={upload.pk}", status=303)
    pk = request.GET.get("upload", "")
    if not pk:
        return _page(request, FabricUploadForm())
    number = int(pk) if pk.isdigit() and len(pk) <= 18 else 0  # past a 64-bit key: no such upload
    upload = get_object_or_404(FabricUpload.objects.visible_to(request.user), pk=number)
    try:
        plan = fabric_import.plan(read(upload.source, bytes(upload.data), upload.name), use=upload.use)
    except FabricInputError as refused:  # the inventory changed since the upload (a rack deleted)
        return _page(request, FabricUploadForm(), error=f"{upload.name}: {refused}", status=409)
    return _page(request, None, upload=upload, plan=plan)


@require_POST
def fabric_import_apply(request, pk):
    require_admin(request.user, WHAT)
    upload = get_object_or_404(FabricUpload.objects.visible_to(request.user), pk=pk)
    try:
        plan = fabric_import.apply(
            read(upload.source, bytes(upload.data), upload.name),
            label=upload.name,
            user=request.user,
            use=upload.use,
        )
    except FabricInputError as refused:
        return _page(request, FabricUploadForm(), error=f"{upload.name}: {refused}", status=409)
    upload.delete()
    words = {"source": FabricSource(plan.parsed.source).label, "racks": len(plan.racks)}
    if plan.becomes_in_use:
        messages.success(request, _("Imported %(source)s: %(racks)s racks placed; it is in use.") % words)
    else:
        messages.warning(
            request,
            _("Imported %(source)s: %(racks)s racks placed, kept beside the fabric in use (not in use).")
            % words,
        )
    return HttpResponseRedirect(reverse("scheduling:fabric"), status=303)


@require_POST
def fabric_use(request):
    """Put the last import of `source` in use (settling a conflict for it)."""
    require_admin(request.user, WHAT)
    source = request.POST.get("source", "")
    try:
        if source not in FabricSource.values:
            raise FabricInputError(source)
        chosen = fabric_import.use_source(source)
    except FabricInputError:
        return HttpResponseBadRequest(_("No import of that source to use."))
    messages.success(
        request, _("The fabric from %(source)s is in use.") % {"source": chosen.get_source_display()}
    )
    return HttpResponseRedirect(reverse("scheduling:fabric"), status=303)
