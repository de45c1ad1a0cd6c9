"""Sentences written by code that may not import Django (the scheduler's engine, the NVLink planner), as
templates the portal can show in the viewer's language.

Each sentence is built from clauses joined by `CLAUSES` ("; "); each clause is an English template with
named placeholders, marked by `gettext_noop` (the name GNU xgettext and Django's makemessages look for, so the
templates land in the catalogue of the app that defines them) and registered in `TEMPLATES` when its module
is imported. The sentence is stored and sent in English (jobs' pending reasons, placed events, the wizard's
findings, the API); the portal shows it in the viewer's language by reading it back
(core.sentences_i18n.translate): each clause is matched to its template, translated, and its values read the
same way (a duration, a nested reason, a list). Pure: no Django.
"""

from __future__ import annotations

CLAUSES = "; "
TEMPLATES: list[str] = []
# Values a template's read-back shows in words of their own rather than as stored (a choice's stored value,
# "partition", shown as its label): template -> value's name -> {stored value: its words}. Filled by the code
# that owns the choice (scheduling.words: a job's topology in its history).
VALUE_WORDS: dict[str, dict[str, dict[str, object]]] = {}


def gettext_noop(template: str) -> str:
    """Mark `template` for translation (the catalogue) and register it (the read-back); returns it. A
    template of several clauses is not registered: the read-back matches a sentence clause by clause."""
    if CLAUSES not in template:
        TEMPLATES.append(template)
    return template


def say(template: str, **values: object) -> str:
    """`template` with its placeholders filled (every value as text)."""
    return template % {name: str(value) for name, value in values.items()} if values else template


def plural(count: int, one: str, many: str) -> str:
    """The template for `count`: English has one and many; each is a template of its own."""
    return one if count == 1 else many


# Clauses shared by several modules.
ABOUT_MINUTES = gettext_noop("about %(minutes)s min")
ABOUT_HOURS = gettext_noop("about %(hours)s h")
AND_MORE = gettext_noop("%(names)s and %(more)s more")


def duration(seconds: float, in_minutes: str, in_hours: str, *, estimate: bool) -> str:
    """A duration as people read it, in whole minutes below two hours, else in hours, written with the
    caller's templates (`%(minutes)s` / `%(hours)s`). An estimate is rounded ("about 2.5 h"; whole hours
    from 10 h: a tenth of an hour is noise in an estimate that long); a set duration (a configured wait) is
    never rounded: hours only when they are exact to a tenth, else its minutes."""
    whole = max(1, round(seconds / 60))
    hours = whole / 60
    if whole < 120 or (not estimate and whole % 6):
        return say(in_minutes, minutes=f"{whole:,}")
    if estimate:
        return say(in_hours, hours=f"{hours:.1f}" if hours < 9.95 else f"{round(hours):,}")
    return say(in_hours, hours=f"{hours:,.0f}" if whole % 60 == 0 else f"{hours:,.1f}")


def minutes(seconds: float) -> str:
    """An estimated duration: "about 5 min", "about 2.5 h", "about 24 h" (`duration`)."""
    return duration(seconds, ABOUT_MINUTES, ABOUT_HOURS, estimate=True)


def listed(names: list[str], shown: int, total: int | None = None) -> str:
    """At most `shown` names, then how many more (of `total`, when `names` holds only the first ones)."""
    more = (len(names) if total is None else total) - shown
    text = ", ".join(names[:shown])
    return say(AND_MORE, names=text, more=more) if more > 0 else text
