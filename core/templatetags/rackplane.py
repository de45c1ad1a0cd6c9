"""Small display helpers shared by every app's templates: `{% load rackplane %}`. The icons of a tray's or a
GPU's health and state are inventory's (inventory/templatetags/inventory.py)."""

import re

from django import template
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from core.moments import clock as _clock

register = template.Library()


@register.filter
def clock(moment):
    """A moment in the viewer's zone, with its date unless it is today (core.moments.clock), as a <time> that
    does not break across lines; "" for none."""
    if not moment:
        return ""
    return format_html('<time class="nowrap" datetime="{}">{}</time>', moment.isoformat(), _clock(moment))


@register.filter
def short_uuid(value, length=8):
    """The first characters of a UUID (the full value belongs in a title attribute)."""
    if not value:
        return ""
    return str(value)[: int(length)]


@register.filter
def gib(mib):
    """MiB as GiB with one decimal ("184.9 GiB")."""
    if mib in (None, ""):
        return ""
    return f"{int(mib) / 1024:,.1f} GiB"


@register.filter
def site_section(match):
    """The section of the site a page is in, for the menu: the first segment of its URL pattern
    ("inventory", "tenancy", "scheduling"), or its URL name for a top-level page ("home"). By path, not by
    URL namespace: a page's namespace is the app that owns it (the rack view is scheduling's), its path the
    section users see (/inventory/racks/<name>/)."""
    if match is None:
        return ""
    head, slash, _ = (getattr(match, "route", "") or "").partition("/")
    return head if slash and head else (match.url_name or "")


@register.filter
def code_spans(text):
    """Plain text, escaped, with its `backquoted` words shown as code (a backend's help in the job form)."""
    return mark_safe(re.sub(r"`([^`\n]+)`", r"<code>\1</code>", conditional_escape(str(text))))


@register.filter
def sentence_words(text):
    """A sentence stored in English by code without Django (core.sentences: the wizard's findings, the
    scheduler's reasons), in the viewer's language; text no template matches is shown as it is."""
    from core.sentences_i18n import translate

    return translate(str(text)) if text else text


@register.filter
def sentence_html(text):
    """A sentence stored in English (core.sentences) as HTML in the viewer's language, its data (names,
    UUIDs, text no template matched, such as an outside system's own words) marked `translate="no"`: for
    text shown in running prose, where `sentence_words` would leave a name for a browser to translate."""
    from core.sentences_i18n import translate_html

    return translate_html(text) if text else text


@register.filter
def outside_words(text):
    """The outside system's own words a stored sentence holds ("" for none): core.sentences_i18n."""
    from core.sentences_i18n import outside_words as words

    return words(text) if text else ""


@register.filter
def listing(items):
    """Items (names, labels) as one list in the viewer's language: "a, b, c" in English, "a、b、c" in
    Japanese (a comma between Japanese words is the ideographic one)."""
    from django.utils.translation import pgettext

    return pgettext("between the items of a list in a sentence", ", ").join(str(item) for item in items or ())


@register.filter
def sentences(items):
    """Whole sentences, one after the other: a space between them in English, none in Japanese (a sentence
    there ends with 。 and the next follows at once). Each is escaped unless it is already HTML."""
    from django.utils.html import conditional_escape
    from django.utils.translation import pgettext

    texts = [conditional_escape(item) for item in items or ()]
    if not texts:
        return ""
    joined = texts[0]
    pair = pgettext("two sentences, one after the other", "%(first)s %(next)s")
    for text in texts[1:]:
        joined = pair % {"first": joined, "next": text}
    return mark_safe(joined)


@register.filter
def then(first, following):
    """Two whole sentences one after the other, as `sentences` joins them: `{{ first|then:following }}`
    (each, say, a `blocktranslate ... asvar`)."""
    return sentences([first, following])
