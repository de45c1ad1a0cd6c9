"""Templates keep the layers too: an app's templates load only tag libraries of its own layer or below
(`{% load %}` is an import import-linter cannot see). Generic tags live in core/templatetags, an app's own in
its templatetags; the project's templates/ (base.html, the error pages) sit above every app."""

import re
from pathlib import Path

from django.template import engines

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["core", "inventory", "tenancy", "scheduling", "integrations", "portal"]  # bottom to top
LOAD = re.compile(r"{%\s*load\s+(.*?)\s*%}")


def loaded_libraries(text: str) -> set[str]:
    """The library names a template loads (`{% load a b %}`, `{% load x y from lib %}`)."""
    names: set[str] = set()
    for match in LOAD.finditer(text):
        words = match.group(1).split()
        names |= {words[-1]} if "from" in words else set(words)
    return names


def test_loaded_libraries_are_read():
    assert loaded_libraries("{% load static humanize %}{% load short_uuid from rackplane %}") == {
        "static",
        "humanize",
        "rackplane",
    }


def test_no_template_loads_a_tag_library_of_a_layer_above():
    libraries = engines["django"].engine.libraries  # name -> module
    found = []
    for layer, app in enumerate(LAYERS):
        for path in sorted((ROOT / app / "templates").rglob("*.html")):
            for name in sorted(loaded_libraries(path.read_text())):
                owner = libraries[name].partition(".")[0]
                if owner in LAYERS and LAYERS.index(owner) > layer:
                    found.append(f"{path.relative_to(ROOT)} loads {name} ({libraries[name]})")
    assert found == []
