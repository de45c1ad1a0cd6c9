"""English and Japanese: the catalogues are complete, compiled, up to date with the code; the switch works.

Every user-visible string is marked for translation (Django's i18n); each app keeps its catalogue in
<app>/locale/ja/LC_MESSAGES/django.po, the shared templates and scripts theirs in locale/ja/LC_MESSAGES, and
the compiled .mo files are committed beside them (as Django itself does), checked here against the .po files.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import polib
import pytest
from django.urls import reverse

from tests.i18n_check import english_left, english_left_but, spacing_slips

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")
PLACEHOLDER = re.compile(r"%\([a-z_]+\)[sdfr]|%[sdfr]|\{[a-z_]*\}")


def catalogues() -> list[Path]:
    found = sorted(ROOT.glob("locale/ja/LC_MESSAGES/*.po"))
    for app in APPS:
        found += sorted((ROOT / app).glob("locale/ja/LC_MESSAGES/*.po"))
    return found


def test_there_are_catalogues_for_the_project_and_every_app_with_text():
    names = {str(path.relative_to(ROOT)) for path in catalogues()}
    assert "locale/ja/LC_MESSAGES/django.po" in names
    assert "locale/ja/LC_MESSAGES/djangojs.po" in names
    for app in ("inventory", "tenancy", "scheduling", "integrations", "portal"):
        assert f"{app}/locale/ja/LC_MESSAGES/django.po" in names, app


@pytest.mark.slow(reason="4 cases, 0.5 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("path", catalogues(), ids=lambda path: str(path.relative_to(ROOT)))
def test_catalogue_is_complete_and_keeps_its_placeholders(path):
    catalogue = polib.pofile(str(path))
    untranslated = [entry.msgid for entry in catalogue.untranslated_entries()]
    fuzzy = [entry.msgid for entry in catalogue.fuzzy_entries()]
    obsolete = [entry.msgid for entry in catalogue.obsolete_entries()]
    assert not untranslated, f"{path}: untranslated {untranslated[:20]}"
    assert not fuzzy, f"{path}: fuzzy {fuzzy[:20]}"
    assert not obsolete, f"{path}: obsolete {obsolete[:20]}"
    for entry in catalogue.translated_entries():
        pairs = (
            [(entry.msgid, entry.msgstr)]
            if not entry.msgid_plural
            else [(entry.msgid_plural, text) for text in entry.msgstr_plural.values()]
        )
        for source, translation in pairs:
            assert sorted(PLACEHOLDER.findall(source)) == sorted(PLACEHOLDER.findall(translation)), (
                f"{path}: {source!r} -> {translation!r} changes the placeholders"
            )


@pytest.mark.parametrize("path", catalogues(), ids=lambda path: str(path.relative_to(ROOT)))
def test_compiled_catalogue_matches_its_source(path):
    compiled = path.with_suffix(".mo")
    assert compiled.exists(), f"{compiled} is missing: run `make messages`"

    def entries(catalogue):
        return {
            (entry.msgctxt, entry.msgid): entry.msgstr or tuple(sorted(entry.msgstr_plural.items()))
            for entry in catalogue
            if not entry.obsolete and "fuzzy" not in entry.flags and (entry.msgstr or entry.msgstr_plural)
        }

    assert entries(polib.mofile(str(compiled))) == entries(polib.pofile(str(path))), (
        f"{compiled} is older than {path.name}: run `make messages`"
    )


@pytest.mark.slow(reason="makemessages twice in subprocesses, on a copy of the code")
@pytest.mark.skipif(shutil.which("xgettext") is None, reason="GNU gettext (xgettext) is not installed")
def test_every_marked_string_is_in_the_catalogues(tmp_path):
    """makemessages, run on a copy of the code, finds no string the committed catalogues lack."""
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.mo", "node_modules")
    for name in (*APPS, "templates", "static", "locale"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    shutil.copy(ROOT / "manage.py", copy / "manage.py")
    for domain in ("django", "djangojs"):
        subprocess.run(
            [
                sys.executable,
                "manage.py",
                "makemessages",
                "-l",
                "ja",
                "-d",
                domain,
                "--no-obsolete",
                "--verbosity",
                "0",
            ],
            cwd=copy,
            check=True,
            env={
                "PATH": "/usr/bin:/bin",
                "DJANGO_SETTINGS_MODULE": "portal.settings",
                "DEBUG": "1",
                "PYTHONPATH": str(copy),
            },
        )
    missing = {}
    for path in copy.rglob("locale/ja/LC_MESSAGES/*.po"):
        committed = ROOT / path.relative_to(copy)
        known = {(e.msgctxt, e.msgid) for e in polib.pofile(str(committed))} if committed.exists() else set()
        new = [e.msgid for e in polib.pofile(str(path)) if (e.msgctxt, e.msgid) not in known]
        if new:
            missing[str(path.relative_to(copy))] = new[:20]
    assert not missing, (
        f"strings marked in the code but missing from the catalogues (run `make messages`): {missing}"
    )


def test_the_switch_sets_the_language_and_returns_to_the_page(client, platform_admin):
    client.force_login(platform_admin)
    racks = reverse("inventory:rack-list")
    response = client.post(reverse("set_language"), {"language": "ja", "next": racks})
    assert response.status_code == 302 and response["Location"] == racks
    page = client.get(racks)
    assert page.headers["Content-Language"] == "ja"
    assert '<html lang="ja">' in page.content.decode()
    assert "ラック" in page.content.decode()
    # The switch names each language in its own words, on a Japanese page too.
    assert '<option value="en" lang="en">English</option>' in page.content.decode()
    assert '<option value="ja" lang="ja" selected>日本語</option>' in page.content.decode()
    # The header's form sends no `next`: the view goes back to the page it was sent from (the Referer).
    back = client.post(
        reverse("set_language"), {"language": "en"}, headers={"referer": f"http://testserver{racks}?q=x"}
    )
    assert back.status_code == 302 and back["Location"] == f"http://testserver{racks}?q=x"
    assert client.get(racks).headers["Content-Language"] == "en"


def test_the_switch_refuses_an_unknown_language_and_an_outside_address(client, platform_admin):
    client.force_login(platform_admin)
    response = client.post(reverse("set_language"), {"language": "xx", "next": "https://attacker.example/"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "rackplane_language" not in response.cookies


def test_the_browser_language_is_used_without_a_choice(client, platform_admin):
    client.force_login(platform_admin)
    assert client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="ja,en;q=0.5").headers["Content-Language"] == "ja"
    assert client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="de").headers["Content-Language"] == "en"


def test_the_sign_in_page_is_japanese(client):
    html = client.get(reverse("login"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert not english_left(html), english_left(html)


def test_the_checker_finds_english_and_ignores_names():
    assert english_left("<p>Jobs waiting for the rack</p>") == ["Jobs waiting for the rack"]
    assert english_left('<p>ジョブ <code>train-pre the</code> <span translate="no">Show all</span></p>') == []
    assert english_left('<button title="Close this">x</button>') == ["Close this"]


def test_data_taken_out_never_hides_the_wording_around_it():
    assert english_left_but("<p>使えない名前: default、all</p>", ["default、all"]) == []
    assert english_left_but("<p>Show all: default、all</p>", ["default、all"]) == ["Show all: default、all"]
    uuid = re.compile(r"GPU-[0-9a-f-]{36}")
    assert english_left_but('<b title="GPU-9be4bcfc-49b6-4a08-b2e6-cc3ababced20 · 正常">x</b>', [uuid]) == []
    assert english_left_but('<b title="GPU-9be4bcfc-49b6-4a08-b2e6-cc3ababced20 is free">x</b>', [uuid])


def test_a_text_has_one_translation_in_every_catalogue():
    """Django merges the catalogues into one: a text translated two ways would show the first catalogue's
    wherever it appears. A word with two meanings gets a context (pgettext) instead."""
    seen: dict[tuple, dict[str, object]] = {}
    for path in catalogues():
        if path.name != "django.po":
            continue
        for entry in polib.pofile(str(path)):
            translation = (
                entry.msgstr if not entry.msgid_plural else tuple(sorted(entry.msgstr_plural.items()))
            )
            seen.setdefault((entry.msgctxt, entry.msgid, entry.msgid_plural), {})[
                str(path.relative_to(ROOT))
            ] = translation
    differing = {key[1]: found for key, found in seen.items() if len(set(found.values())) > 1}
    assert not differing, differing


# ---- Japanese punctuation and spacing ------------------------------------------------------------------

# Translations allowed a slip above, each with why. None is needed today; add one only for data or
# identifiers quoted inside a sentence (say which), never for wording.
SPACING_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("Yes,No", "an ASCII semicolon or comma beside Japanese: 'い,'"): (
        "the yesno filter's argument: its comma separates the two words and is never shown"
    ),
}


def test_the_spacing_check_finds_each_slip_and_passes_good_japanese():
    assert spacing_slips("ジョブ 実行 / 待機") == ["a space between Japanese characters: 'ブ 実'"]
    asked = "キャンセルしますか？ キューから外れます。"  # noqa: RUF001
    assert spacing_slips(asked) == ["a space between Japanese characters: '？ キ'"]  # noqa: RUF001
    assert spacing_slips("条件に一致しません 。") == ["a space before 。 or 、: ' 。'"]
    assert spacing_slips("すべてのラックを表示.") == ["an ASCII full stop ending a Japanese sentence: '示.'"]
    assert spacing_slips("削除されました。.") == ["an ASCII full stop ending a Japanese sentence: '。.'"]
    # Spaces beside Latin letters, numbers and placeholders are the catalogue's style; an ASCII "." inside
    # data (a host name, a version) is not a sentence's end.
    assert spacing_slips("NVL72 ラック 3 台 · トレイ内の GPU 216 基") == []
    assert spacing_slips("%(name)s のジョブ（gb-r01.example）は v1.2 です。") == []  # noqa: RUF001
    # Two sentences joined with an English space; clauses or list items joined with ASCII "; " or ", ".
    assert spacing_slips("再開します。 1 ラック") == ["a space after 。: '。 '"]
    assert spacing_slips("2 件; 開始見込み") == ["an ASCII semicolon or comma beside Japanese: '件;'"]
    assert spacing_slips("ジョブ開始, ジョブ終了") == ["an ASCII semicolon or comma beside Japanese: '始,'"]
    # ASCII parentheses around Japanese, or beside it (a placeholder's own are not parentheses).
    assert spacing_slips("保留中 (3 件)") == ["ASCII parentheses in Japanese: '中 ('"]
    assert spacing_slips("最終報告: (3 分前)") == ["ASCII parentheses in Japanese: '(3 分前)'"]
    assert spacing_slips("%(name)s (ID %(id)s) を削除") == ["ASCII parentheses in Japanese: ') を'"]
    assert spacing_slips("保留中（%(count)s 件）、%(rack)s の v1.2 (beta)") == []  # noqa: RUF001
    # A space around a particle after a value that ends in Japanese ("約 47.5 時間 後").
    assert spacing_slips("約 47.5 時間 後に開始") == ["a space between Japanese characters: '間 後'"]
    # A name kept as data is a Latin word: spaces set it off ("spine-b の"), not a full-width bracket.
    assert spacing_slips('グループ<span translate="no">%(spines)s</span>の') == [
        "a name kept as data touching Japanese: 'プ'",
        "a name kept as data touching Japanese: '<span translate=\"no\">X</span>の'",
    ]
    spaced = 'グループ <span translate="no">%(spines)s</span> の（<span translate="no">a</span>）'  # noqa: RUF001
    assert spacing_slips(spaced) == []
    assert spacing_slips("（見積もり: 猶予時間、制限時間).") == [  # noqa: RUF001
        "a full-width （ closed by an ASCII ): '（見積もり: 猶予時間、制限時間)'"  # noqa: RUF001
    ]


# Brackets and quotes a Japanese text opens and closes: a translation that opens one and leaves it to the
# template to close ("（見積もり: …" + "). ") is a fragment; the whole sentence is translated instead.  # noqa: RUF003
PAIRS = (("（", "）"), ("「", "」"))  # noqa: RUF001


@pytest.mark.parametrize("path", catalogues(), ids=lambda path: str(path.relative_to(ROOT)))
def test_japanese_closes_each_bracket_it_opens(path):
    unclosed = {}
    for entry in polib.pofile(str(path)):
        texts = [entry.msgstr] if not entry.msgid_plural else list(entry.msgstr_plural.values())
        for text in texts:
            if any(text.count(opening) != text.count(closing) for opening, closing in PAIRS):
                unclosed[entry.msgid[:80]] = text
    assert not unclosed, f"{path}: {unclosed}"


@pytest.mark.parametrize("path", catalogues(), ids=lambda path: str(path.relative_to(ROOT)))
def test_japanese_has_no_stray_spaces_or_ascii_full_stops(path):
    slips = {}
    for entry in polib.pofile(str(path)):
        texts = [entry.msgstr] if not entry.msgid_plural else list(entry.msgstr_plural.values())
        found = [slip for text in texts for slip in spacing_slips(text)]
        if found and (entry.msgid, found[0]) not in SPACING_EXCEPTIONS:
            slips[entry.msgid[:80]] = found
    assert not slips, f"{path}: {slips}"


# A translation followed, in the template, by an ASCII full stop (after closing tags or an endif): English
# reads well, Japanese shows "。." or "表示.". The stop belongs inside the translated text.
STOP_AFTER_TRANSLATION = re.compile(
    r"""\{%\s*(?:translate\s+(?:"[^"]*"|'[^']*')[^%]*|endblocktranslate\s*)%\}"""
    r"""(?:</[a-z0-9]+>|\{%\s*end(?:if|with|for)\s*%\})*\)?\.(?=\s|<|$|\{)"""
)


def templates_with_a_stop_after_a_translation(files, root: Path = ROOT) -> dict[str, list[str]]:
    found = {}
    for path in files:
        hits = [match.group(0)[-60:] for match in STOP_AFTER_TRANSLATION.finditer(path.read_text())]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def test_the_stop_check_finds_a_stop_after_a_translation(tmp_path):
    sample = tmp_path / "sample.html"
    sample.write_text(
        '{% translate "No rack matches this filter." %} <a href="/">{% translate "Show all racks" %}</a>.\n'
        "{% if x %}{% blocktranslate %}ahead of it{% endblocktranslate %}{% endif %}. Then\n"
        '{% blocktranslate %}Show all racks.{% endblocktranslate %} {% translate "Versions" %}: <code>\n'
        '(x{% translate ", the waited-for jobs\' time limits" %}{% endif %}).'
    )
    found = templates_with_a_stop_after_a_translation([sample], root=tmp_path)
    # The link's label and the fragment before an endif; not a stop inside the text, nor a label's colon.
    assert found == {
        "sample.html": [
            '{% translate "Show all racks" %}</a>.',
            "{% endblocktranslate %}{% endif %}.",
            # A fragment closing its bracket in the template: "（見積もり: …制限時間)." in Japanese.  # noqa: RUF003
            'anslate ", the waited-for jobs\' time limits" %}{% endif %}).',
        ]
    }


def test_no_template_puts_an_ascii_full_stop_after_a_translation():
    files = [
        path
        for name in (*APPS, "templates")
        for path in sorted((ROOT / name).rglob("*.html"))
        if "locale" not in path.parts
    ]
    assert len(files) > 100
    found = templates_with_a_stop_after_a_translation(files)
    assert not found, f"move the full stop inside the translation: {found}"
