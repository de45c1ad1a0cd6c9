"""The search results' marks: `{% load search_marks %}{{ hit.title|marked:q }}` shows the parts of a result
that the query matched (portal.pages.search.matched_parts) in <mark>, the rest escaped."""

from django import template
from django.utils.html import format_html, format_html_join

from portal.pages.search import matched_parts

register = template.Library()


@register.filter
def marked(text, q):
    return format_html_join(
        "",
        "{}",
        (
            (format_html("<mark>{}</mark>", part) if hit else part,)
            for part, hit in matched_parts(str(text), str(q))
        ),
    )
