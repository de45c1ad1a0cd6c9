from django import forms
from django.core.exceptions import ValidationError

from core.text import TextFormField
from inventory.models import ComputeTray, Rack, RecarvePolicy


class AgentTokenForm(forms.Form):
    """Issue an agent token: for one rack (every tray of it) or one host, never both."""

    rack = forms.ModelChoiceField(
        Rack.objects.order_by("name"),
        required=False,
        to_field_name="name",
        empty_label="— no rack —",
        help_text="Every compute tray of this rack (one token for a rack's agents or its aggregator).",
    )
    hostname = forms.CharField(
        required=False,
        max_length=128,
        label="Host",
        help_text="One compute tray's hostname (a node's own token).",
    )
    description = TextFormField(required=False, max_length=200, help_text="What the token is for.")

    def clean_hostname(self):
        hostname = self.cleaned_data["hostname"].strip()
        if hostname and not ComputeTray.objects.filter(hostname=hostname).exists():
            raise ValidationError(f"{hostname} is not a compute tray of the inventory.")
        return hostname

    def clean(self):
        data = super().clean()
        if not self.errors and bool(data.get("rack")) == bool(data.get("hostname")):
            raise ValidationError("Choose a rack or type a host: a token is for one of them.")
        return data


class RecarvePolicyForm(forms.ModelForm):
    """A rack's re-carving policy (inventory.recarving.set_policy saves it, with the model's bounds)."""

    class Meta:
        model = RecarvePolicy
        fields = ["enabled", "smallest_trays", "max_per_hour"]
        labels = {"enabled": "Let the scheduler re-carve idle trays"}
        help_texts = {"enabled": "Off by default. Work in progress and other departments' trays are safe."}
