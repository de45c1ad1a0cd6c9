from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.text import TextFormField, validate_text
from inventory.choices import FabricSource, ServiceStatus
from inventory.discovery.fabric.parsed import MAX_BYTES
from inventory.health.actions import typed_text_problem
from inventory.health.service import NOTE_REQUIRED, SERVICE_NOTE_LIMIT
from inventory.models import ComputeTray, Rack, RecarvePolicy


class AgentTokenForm(forms.Form):
    """Issue an agent token: for one rack (every tray of it) or one host, never both."""

    rack = forms.ModelChoiceField(
        Rack.objects.order_by("name"),
        required=False,
        to_field_name="name",
        label=gettext_lazy("Rack"),
        empty_label=gettext_lazy("— no rack —"),
        help_text=gettext_lazy(
            "Every compute tray of this rack (one token for a rack's agents or its aggregator)."
        ),
    )
    hostname = forms.CharField(
        required=False,
        max_length=128,
        label=gettext_lazy("Host"),
        help_text=gettext_lazy("One compute tray's hostname (a node's own token)."),
    )
    description = TextFormField(
        required=False,
        max_length=200,
        label=gettext_lazy("Description"),
        help_text=gettext_lazy("What the token is for."),
    )

    def clean_hostname(self):
        hostname = self.cleaned_data["hostname"].strip()
        if hostname and not ComputeTray.objects.filter(hostname=hostname).exists():
            raise ValidationError(_("%(host)s is not a compute tray of the inventory.") % {"host": hostname})
        return hostname

    def clean(self):
        data = super().clean()
        if not self.errors and bool(data.get("rack")) == bool(data.get("hostname")):
            raise ValidationError(_("Choose a rack or type a host: a token is for one of them."))
        return data


class RecarvePolicyForm(forms.ModelForm):
    """A rack's re-carving policy (inventory.recarving.set_policy saves it, with the model's bounds)."""

    class Meta:
        model = RecarvePolicy
        fields = ["enabled", "smallest_trays", "max_per_hour"]
        labels = {"enabled": gettext_lazy("Let the scheduler re-carve idle trays")}
        help_texts = {
            "enabled": gettext_lazy("Off by default. Work in progress and other departments' trays are safe.")
        }


class DataChoices(forms.Select):
    """A select whose options (but the empty one) name data: a GPU's index and UUID, a MIG layout's name.
    Marked translate="no", as identifiers are everywhere else on the pages (a layout's summary beside its
    name is translated all the same: inventory.mig_options.layout_summary)."""

    def create_option(self, name, value, *args, **kwargs):
        option = super().create_option(name, value, *args, **kwargs)
        if value:
            option["attrs"]["translate"] = "no"
        return option


class ServiceMarkForm(forms.Form):
    """The next step of a tray's service or RMA tracking (inventory.health.service.mark_service): which, for
    the whole tray or one of its GPUs, and a note."""

    status = forms.ChoiceField(
        choices=ServiceStatus.choices,
        widget=forms.RadioSelect,
        label=gettext_lazy("Mark it"),
        error_messages={
            "required": gettext_lazy("Choose a step: needs service, sent for RMA or returned."),
            "invalid_choice": gettext_lazy("Choose needs service, sent for RMA or returned (not %(value)s)."),
        },
    )
    gpu = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Which part"),
        widget=DataChoices,
        error_messages={
            "invalid_choice": gettext_lazy("Choose the whole tray or one of its GPUs (not %(value)s).")
        },
    )
    note = forms.CharField(
        max_length=SERVICE_NOTE_LIMIT,
        required=False,
        strip=True,
        label=gettext_lazy("Note"),
        help_text=gettext_lazy(
            "What is wrong, the RMA number, what was done. Needed for “needs service” and “sent for RMA”."
        ),
    )

    def __init__(self, data=None, *, tray: ComputeTray, **kwargs):
        super().__init__(data, **kwargs)
        self.gpus = {str(gpu.index): gpu for gpu in tray.gpus.order_by("index")}
        self.fields["gpu"].choices = [("", _("The whole tray"))] + [
            (index, f"GPU {index} ({gpu.uuid})") for index, gpu in self.gpus.items()
        ]

    def clean_note(self):
        note = self.cleaned_data.get("note", "")
        problem = typed_text_problem(note, what=_("The note"), limit=SERVICE_NOTE_LIMIT) if note else ""
        if problem:
            raise ValidationError(problem, code="typed_text")
        return note

    def clean(self):
        data = super().clean()
        status = data.get("status")
        if status in NOTE_REQUIRED and not data.get("note") and "note" not in self.errors:
            self.add_error("note", _(NOTE_REQUIRED[status]))
        data["gpu"] = self.gpus.get(data.get("gpu") or "")
        return data


class FabricUploadForm(forms.Form):
    """A fabric file to import (inventory.fabric_import): what it is, the file, and whether to put it in use
    even where another source is."""

    source = forms.ChoiceField(
        choices=FabricSource.choices,
        label=gettext_lazy("Source"),
        help_text=gettext_lazy(
            "ibnetdiscover: its topology output. Topograph: `kubectl get nodes -o json` of nodes Topograph "
            "labelled. Site file: YAML or CSV (see the operators' guide)."
        ),
    )
    file = forms.FileField(label=gettext_lazy("File"), allow_empty_file=False)
    use = forms.BooleanField(
        required=False,
        label=gettext_lazy("Put it in use"),
        help_text=gettext_lazy(
            "Even where another source is in use (otherwise it is kept beside it and their disagreements "
            "are shown)."
        ),
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > MAX_BYTES:
            raise ValidationError(
                _("The file has %(size)s bytes; a fabric file may have at most %(limit)s.")
                % {"size": upload.size, "limit": MAX_BYTES}
            )
        # The name is only a label (never a path): held to the text rule.
        validate_text(upload.name or "", field=_("file name"), max_length=200)
        return upload
