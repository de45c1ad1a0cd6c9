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

from tests.i18n_check import english_left

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
