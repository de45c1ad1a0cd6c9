"""The Django admin's read-only fields for what Rackplane stores in English (core.sentences: a tray's state
reason, a job event's message, a push's reason and log), shown as the portal's pages show them: read back
in the viewer's language (core.sentences_i18n), a moment in the viewer's zone with the zone named, data
(names, an outside system's own words) as stored. The stored text is unchanged.

    state_reason_words = stored_sentence(ComputeTray, "state_reason")   # in a ModelAdmin, then named in
                                                                        # list_display or readonly_fields
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from core.moments import stamped_lines_html
from core.sentences_i18n import log_words, translate_html


def stored_sentence(model, name: str):
    """A ModelAdmin's display of `model`'s field `name`, a sentence stored in English (labelled as the field
    is): in the viewer's language and zone."""

    @admin.display(description=model._meta.get_field(name).verbose_name, ordering=name)
    def shown(model_admin, obj):
        text = getattr(obj, name)
        return translate_html(text) if text else model_admin.get_empty_value_display()

    return shown


def stored_log(model, name: str):
    """A ModelAdmin's display of `model`'s field `name`, log lines stamped in UTC (core.moments): each stamp
    in the viewer's zone, named, and each line's words read back as `log_words` does, as the push page
    shows them."""

    @admin.display(description=model._meta.get_field(name).verbose_name)
    def shown(model_admin, obj):
        text = getattr(obj, name)
        if not text:
            return model_admin.get_empty_value_display()
        return format_html('<pre class="admin-log">{}</pre>', stamped_lines_html(text, log_words))

    return shown
