"""Sentences the health code both keeps and shows: in English where they are kept (a drain reason, a health
decision's text, Slurm's reason) and in the viewer's language where a page shows them.

A `Phrase` holds its English text (a catalogue message id, marked with gettext_noop where it is written) and
its values, which may be phrases themselves ("it is %(mark)s", the mark being "sent for RMA by alice at ...").
`english()` fills it in English whatever the request's language; `shown()` translates it and its phrase
values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.utils import formats, timezone
from django.utils.translation import gettext

from core.moments import IN_ZONE, UTC_WORDS


@dataclass(frozen=True)
class Phrase:
    text: str
    values: dict = field(default_factory=dict)
    lower_first: bool = False  # a label ("Sent for RMA") inside a sentence ("sent for RMA")

    def english(self) -> str:
        return self._fill(self.text, {name: _english(value) for name, value in self.values.items()})

    def shown(self) -> str:
        text = gettext(self.text)
        # Only English lowers a label's first letter (a translation keeps its own: "RMA に送付").
        lower = self.lower_first and text == self.text
        return self._fill(text, {name: _shown(value) for name, value in self.values.items()}, lower)

    def _fill(self, text: str, values: dict, lower: bool | None = None) -> str:
        words = text % values if values else text
        return words[:1].lower() + words[1:] if (self.lower_first if lower is None else lower) else words

    def __str__(self) -> str:
        return self.english()


def _english(value):
    return value.english() if isinstance(value, Phrase) else value


def _shown(value):
    if isinstance(value, str) and re.fullmatch(UTC_WORDS, value) and value.count(":") == 2:
        # A moment as kept (core.moments.utc_words): in the viewer's zone, named, where a page shows it.
        moment = datetime.strptime(value, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC)
        return formats.date_format(timezone.localtime(moment), IN_ZONE)
    return value.shown() if isinstance(value, Phrase) else value
