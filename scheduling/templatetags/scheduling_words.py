"""`{{ job.pending_reason|scheduler_words }}`: a sentence of the scheduler's in the viewer's language."""

from django import template

from scheduling.words import translate

register = template.Library()


@register.filter
def scheduler_words(text):
    return translate(str(text)) if text else text
