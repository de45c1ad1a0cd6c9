"""Fill a translation catalogue from a YAML mapping of English text to Japanese (the translator's tool).

    .venv/bin/python scripts/po_fill.py scheduling/locale/ja/LC_MESSAGES/django.po translations.yaml

The YAML maps each msgid (exactly as in the catalogue) to its translation; a plural entry maps to a list (one
form for Japanese). Entries already translated are overwritten only when the mapping names them. Every
catalogue it touches gets a clean header (Language: ja, not fuzzy). `make messages` compiles afterwards.
With no mapping it only tidies the header and prints the entries still untranslated.
"""

from __future__ import annotations

import sys

import polib
import yaml


def tidy(catalogue: polib.POFile) -> None:
    catalogue.metadata_is_fuzzy = False
    catalogue.metadata.update(
        {
            "Project-Id-Version": "Rackplane",
            "Language": "ja",
            "Language-Team": "Japanese",
            "Plural-Forms": "nplurals=1; plural=0;",
            "Content-Type": "text/plain; charset=UTF-8",
        }
    )
    for key in ("Last-Translator", "PO-Revision-Date", "Report-Msgid-Bugs-To"):
        catalogue.metadata.pop(key, None)
    for entry in catalogue:
        # What a fuzzy match guessed from (`#| msgid ...`): meaningless once the entry is translated by hand.
        if "fuzzy" not in entry.flags:
            entry.previous_msgid = entry.previous_msgid_plural = entry.previous_msgctxt = None


def main(path: str, mapping_path: str | None = None) -> int:
    catalogue = polib.pofile(path, wrapwidth=0)
    tidy(catalogue)
    mapping = {}
    if mapping_path:
        with open(mapping_path, encoding="utf-8") as handle:
            mapping = yaml.safe_load(handle) or {}
    for entry in catalogue:
        if entry.msgid not in mapping:
            continue
        value = mapping[entry.msgid]
        if entry.msgid_plural:
            forms = value if isinstance(value, list) else [value]
            entry.msgstr_plural = dict(enumerate(forms[:1]))
        else:
            entry.msgstr = value
        if "fuzzy" in entry.flags:
            entry.flags.remove("fuzzy")
        entry.previous_msgid = entry.previous_msgid_plural = entry.previous_msgctxt = None
    catalogue.save(path)
    left = [entry.msgid for entry in catalogue.untranslated_entries()]
    for msgid in left:
        print(msgid)
    print(f"{path}: {len(left)} untranslated", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
