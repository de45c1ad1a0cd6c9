"""Checks that a page shown in Japanese has no English left in it: the shared helper of the i18n tests.

`english_left(html)` lists the English words still visible in a page (its text and the attributes people read:
title, placeholder, aria-label, alt, value of buttons), skipping what is data rather than wording (code, kbd,
samp, pre, script, style, and elements marked `translate="no"`: names, UUIDs, commands). The word list is
the common words of English sentences and the portal's own verbs, whole words only, so a job called
"train-pre" or a host name never trips it, and a sentence left in English always does.

`spacing_slips(text)` lists what breaks Japanese punctuation and spacing in a text (a catalogue's entry, or
each text of a page: `punctuation_left(html)`, `assert_japanese_punctuation(client, url)`): spaces between
Japanese characters or after 。, ASCII full stops, semicolons, commas or parentheses beside Japanese.
"""

from __future__ import annotations

import re
from html import escape as html_escape
from html import unescape
from html.parser import HTMLParser

# Words that appear in any English sentence or label of the portal and in no name, UUID or command.
ENGLISH_WORDS = frozenset(
    """
    the and of to for with from this that these those are is was were has have had not no none will would
    can could may might must should your you when which what who why where how all any some each every more
    less than only also into onto over under after before since until while about there here their them they
    its it be been being do does did done yes show hide edit new save cancel delete submit back next previous
    search filter apply close open change remove add create update choose select sign log out in at by or if
    free used idle busy running pending waiting failed succeeded finished ago per page rows export list lists
    details settings members member people person leads lead department departments project projects job jobs
    rack racks tray trays partition partitions quota quotas guarantee guaranteed borrowed reclaim plan plans
    push pushes health events event dashboard overview home submit status state reason time times name names
    """.split()  # noqa: SIM905 (a word list reads better as words)
)
SKIPPED_ELEMENTS = frozenset({"script", "style", "code", "kbd", "samp", "pre", "template", "svg"})
READ_ATTRIBUTES = ("title", "placeholder", "aria-label", "alt")
VOID_ELEMENTS = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


class _Visible(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []
        self.texts: list[str] = []

    def _skipping(self) -> bool:
        return any(skip for _, skip in self.stack)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        skip = tag in SKIPPED_ELEMENTS or attributes.get("translate") == "no" or "hidden" in attributes
        if not skip and not self._skipping():
            for name in READ_ATTRIBUTES:
                if attributes.get(name):
                    self.texts.append(attributes[name] or "")
            if tag == "input" and attributes.get("type") in {"submit", "button"} and attributes.get("value"):
                self.texts.append(attributes["value"] or "")
        if tag not in VOID_ELEMENTS:
            self.stack.append((tag, skip))

    def handle_endtag(self, tag):
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data):
        if not self._skipping() and data.strip():
            self.texts.append(data)


def visible_texts(html: str) -> list[str]:
    """The texts of `html` a person reads (see the module's docstring for what is skipped)."""
    parser = _Visible()
    parser.feed(html)
    parser.close()
    return parser.texts


def shown_text(html: str) -> str:
    """The page's text as one line, data marked translate="no" included (visible_texts skips it) and
    attributes left out (a <time>'s title holds its UTC moment)."""
    return " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())


def english_left(html: str) -> list[str]:
    """The visible texts of `html` that still hold an English word, each once, in page order."""
    found: list[str] = []
    for text in visible_texts(html):
        words = {word.lower() for word in WORD.findall(text)}
        if words & ENGLISH_WORDS:
            cleaned = " ".join(text.split())
            if cleaned not in found:
                found.append(cleaned)
    return found


def assert_japanese(client, url: str, **get_kwargs) -> str:
    """GET `url` in Japanese and fail with every English text left on it; returns the page."""
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja", **get_kwargs)
    assert response.status_code == 200, (url, response.status_code)
    assert response.headers.get("Content-Language") == "ja", url
    html = response.content.decode()
    left = english_left(html)
    assert not left, f"{url} in Japanese still shows English: {left}"
    return html


def english_left_but(html: str, data) -> list[str]:
    """english_left(html), after taking out of each text the `data` it quotes (strings, or compiled patterns
    for data of a shape: a UUID, a stored reason): a text is left only if the rest of it still holds an
    English word, so data never hides the wording around it."""
    left = []
    for text in english_left(html):
        rest = text
        for quoted in data:
            rest = quoted.sub(" ", rest) if hasattr(quoted, "sub") else rest.replace(quoted, " ")
        if english_left(f"<p>{html_escape(rest)}</p>"):
            left.append(text)
    return left


# ---- Japanese punctuation and spacing ------------------------------------------------------------------

# Kana, kanji, and the Japanese and full-width punctuation, whose neighbours are checked.
KANA_KANJI = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
JAPANESE = (
    KANA_KANJI  # kana, kanji; then the Japanese and full-width punctuation
    + "\u3001-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
)
SPACING_SLIPS = {
    # "ジョブ 実行": Japanese runs on without spaces (a space belongs only beside Latin letters and numbers).
    "a space between Japanese characters": re.compile(rf"[{JAPANESE}][ \u3000]+(?![。、])[{JAPANESE}]"),
    "a space before 。 or 、": re.compile(r"[ \u3000][。、]"),
    # "。 1 ラック": the next sentence follows 。 at once (two sentences joined with an English space).
    "a space after 。": re.compile(r"。[ \u3000]"),
    # "します." or "。.": a Japanese sentence ends with 。 (a "." after a template's translation shows this).
    "an ASCII full stop ending a Japanese sentence": re.compile(rf"[{JAPANESE}]\.(?=\s|$|<)"),
    # "2 件; 開始見込み", "ジョブ開始, ジョブ終了": clauses and items are joined with 。 or 、 in Japanese.
    "an ASCII semicolon or comma beside Japanese": re.compile(rf"[{JAPANESE}] ?[;,]|[;,] ?[{JAPANESE}]"),
    # "(3 件)": parentheses in Japanese text are the full-width ones.
    "ASCII parentheses in Japanese": re.compile(
        rf"\([^()]*[{JAPANESE}][^()]*\)|[{JAPANESE}] ?\(|\) ?[{JAPANESE}]"
    ),
    # "(full-width) 見積もり: …制限時間).": a full-width bracket is closed by the full-width one (a translated
    # fragment that opens it, the template closing it in ASCII, shows this).
    "a full-width （ closed by an ASCII )": re.compile(r"（[^（）()]*\)"),  # noqa: RUF001
    # "スパイングループ<span translate="no">spine-b</span>の": a name kept as data (translate="no") is a Latin
    # word too, set off from kana and kanji by a space ("spine-b の"), as the catalogues write a placeholder.
    "a name kept as data touching Japanese": re.compile(
        rf'[{KANA_KANJI}](?=<span translate="no">)|<span translate="no">[^<]*</span>[{KANA_KANJI}]'
    ),
}
# A placeholder's parentheses ("%(count)s") are no text's: each placeholder is checked as a Latin word.
_PLACEHOLDERS = re.compile(r"%\(\w+\)[sd]")


def spacing_slips(text: str) -> list[str]:
    """What in a Japanese `text` breaks the spacing and punctuation rules (SPACING_SLIPS)."""
    text = _PLACEHOLDERS.sub("X", text)
    return [
        f"{name}: {match.group(0)!r}" for name, rule in SPACING_SLIPS.items() for match in rule.finditer(text)
    ]


def punctuation_left(html: str) -> list[str]:
    """The visible texts of a Japanese page that break SPACING_SLIPS, each with what it breaks."""
    found = []
    for text in visible_texts(html):
        for slip in spacing_slips(" ".join(text.split())):
            found.append(f"{slip} in {' '.join(text.split())[:120]!r}")
    return found


def assert_japanese_punctuation(client, url: str, **get_kwargs) -> str:
    """GET `url` in Japanese and fail with every slip of punctuation or spacing on it; returns the page."""
    response = client.get(url, HTTP_ACCEPT_LANGUAGE="ja", **get_kwargs)
    assert response.status_code == 200, (url, response.status_code)
    html = response.content.decode()
    left = punctuation_left(html)
    assert not left, f"{url} in Japanese breaks its punctuation: {left}"
    return html
