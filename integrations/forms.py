"""The target form: name, kind, enabled, and the settings of the chosen kind, each field given by the kind
(integrations.registry). A secret is never rendered: left empty it keeps the stored one unless "clear" is
ticked; typed, it replaces it."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.text import TextFormField
from integrations import registry
from integrations.models import ConfigTarget, outbound_problems


class _NameField(TextFormField):
    """The target's name: labelled in the reader's language, its text-rule errors saying "The text" as
    they did before the label was given."""

    def validate(self, value) -> None:
        label, self.label = self.label, None
        try:
            super().validate(value)
        finally:
            self.label = label


class ConfigTargetForm(forms.Form):
    name = _NameField(max_length=64, label=gettext_lazy("Name"))
    kind = forms.ChoiceField(choices=(), label=gettext_lazy("Kind"))
    enabled = forms.BooleanField(
        label=gettext_lazy("Enabled"),
        required=False,
        help_text=gettext_lazy("Disabled targets are left out of pushes."),
    )
    clear_token = forms.BooleanField(label=gettext_lazy("Clear the stored token"), required=False)
    allow_private_address = forms.BooleanField(
        label=gettext_lazy("Allow a private address"),
        required=False,
        help_text=gettext_lazy(
            "Its addresses may be private or loopback ones (an on-premises cluster: the usual case). "
            "Link-local and metadata addresses are refused whatever this says; clear it for a public service."
        ),
    )

    def __init__(self, *args, instance: ConfigTarget | None = None, kind: str | None = None, **kwargs):
        self.instance = instance or ConfigTarget()
        if instance is not None and not kwargs.get("initial") and not args:
            initial = {
                "name": instance.name,
                "kind": instance.kind,
                "enabled": instance.enabled,
                "allow_private_address": instance.allow_private_address,
            }
            if registry.is_kind(instance.kind):
                values = instance.settings or {}
                for setting in registry.get(instance.kind).settings:
                    if not setting.secret:
                        initial[setting.name] = values.get(setting.key)
            kwargs["initial"] = initial
        elif instance is None and not args:
            kwargs.setdefault("initial", {"enabled": True, "allow_private_address": True})
        super().__init__(*args, **kwargs)
        self.fields["kind"].choices = registry.choices()
        clear = self.fields.pop("clear_token")
        for each in registry.kinds():
            for setting in each.settings:
                self.fields[setting.name] = setting.field()
        self.fields["clear_token"] = clear
        names = registry.names()
        self.kind_value = (
            kind or (self.data.get("kind") if self.is_bound else None) or self.initial.get("kind") or names[0]
        )
        if self.kind_value not in names:
            self.kind_value = names[0]
        if not self.is_bound:
            self.initial["kind"] = self.kind_value  # the select shows the kind whose settings are shown
        stored = (instance.settings or {}) if instance is not None else {}
        same_kind = instance is not None and instance.kind == self.kind_value
        secrets = [s for s in registry.get(self.kind_value).settings if s.secret]
        self.has_token = same_kind and any(stored.get(s.key) for s in secrets)
        for each in registry.kinds():
            for setting in each.settings:
                if setting.secret:
                    self.fields[setting.name].help_text = (
                        _("A token is stored: leave empty to keep it, type a new one to replace it.")
                        if same_kind and each.name == self.kind_value and stored.get(setting.key)
                        else _("Stored as given; never shown again.")
                    )

    def settings_fields(self):
        return [self[setting.name] for setting in registry.get(self.kind_value).settings]

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if ConfigTarget.objects.filter(name=name).exclude(pk=self.instance.pk).exists():
            raise ValidationError(_("A target named %(name)s already exists.") % {"name": name})
        return name

    def clean(self):
        data = super().clean()
        kind_name = data.get("kind")
        if not kind_name:
            return data
        kind = registry.get(kind_name)
        raw = {}
        for setting in kind.settings:
            value = data.get(setting.name)
            raw[setting.key] = value if value is not None else setting.default
        stored = self.instance.settings or {}
        for setting in kind.settings:
            keep = not raw[setting.key] and self.instance.kind == kind_name and not data.get("clear_token")
            if setting.secret and keep:
                raw[setting.key] = stored.get(setting.key, "")
        try:
            self.cleaned_settings = registry.clean_settings(kind_name, raw)
        except ValidationError as error:
            back = {setting.key: setting.name for setting in kind.settings}
            for key, messages_ in error.message_dict.items():
                self.add_error(back.get(key), messages_)
            return data
        # The outbound guard (core.outbound): each address against this target's allowance.
        back = {setting.key: setting.name for setting in kind.settings}
        allow = bool(data.get("allow_private_address"))
        for key, message in outbound_problems(self.cleaned_settings, allow).items():
            self.add_error(back.get(key), message)
        return data

    def save(self) -> ConfigTarget:
        target = self.instance
        target.name = self.cleaned_data["name"]
        target.kind = self.cleaned_data["kind"]
        target.enabled = self.cleaned_data["enabled"]
        target.allow_private_address = self.cleaned_data["allow_private_address"]
        target.settings = self.cleaned_settings
        target.full_clean()
        target.save()
        return target
