"""The search results' marks: `{% load search_marks %}{{ hit.title|marked:q }}` shows the parts of a result
that the query matched (portal.pages.search.matched_parts) in <mark>, the rest escaped; `{{ hit|note:q }}`
its note, the parts of it that are searched fields (`Detail.searched`) marked the same way, the others
never."""

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


def _detail(detail, q):
    before, searched, after = detail.text.partition(detail.searched) if detail.searched else ("", "", "")
    if not searched:
        return format_html("{}", detail.text)
    return format_html("{}{}{}", before, marked(searched, q), after)


@register.filter
def note(hit, q):
    return format_html_join(" · ", "{}", ((_detail(detail, q),) for detail in hit.details))
