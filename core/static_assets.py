"""plotly.js under a content-hashed name, so browsers keep it for a year and fetch it once.

plotly's minified bundle is 4.7 MB (it ships in the plotly package: `package_data/plotly.min.js`). Served as
`plotly/plotly.min.js` it can only be cached briefly (the name does not change when the package does), so
every dashboard visit asked for it again. `HashedPlotlyFinder` offers the same file as
`plotly/plotly.min.<first 12 hex of its sha256>.js` to the static files machinery (the finders WhiteNoise
serves from, and `collectstatic`), and the `{% plotly_js_url %}` tag (core/templatetags/charts.py)
names it. WhiteNoise marks a file whose name carries such a hash immutable
(WHITENOISE_IMMUTABLE_FILE_TEST in portal/settings.py): `Cache-Control: max-age=315360000, public,
immutable`, plus its gzip and Brotli forms (~1.4 MB on the wire). A new plotly version is a new name.

The rest of the static files keep their plain names (no manifest storage: tests and `make run` need no
`collectstatic`).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

SOURCE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
HASH_LENGTH = 12


@functools.cache
def plotly_name() -> str:
    """`plotly/plotly.min.<hash>.js`: the name the portal serves plotly's bundle under."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:HASH_LENGTH]
    return f"plotly/plotly.min.{digest}.js"


class _OneFileStorage(FileSystemStorage):
    """The storage `list()` hands out: the hashed name is the bundle in the plotly package."""

    def path(self, name):
        return str(SOURCE) if name == plotly_name() else super().path(name)


class HashedPlotlyFinder(BaseFinder):
    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)
        if path == plotly_name():
            return [str(SOURCE)] if find_all else str(SOURCE)
        # Not found is [] either way, as Django's own finders answer: finders.find() gathers every finder's
        # answer into a list, and a None in it would be taken for a match.
        return []

    def list(self, ignore_patterns):
        yield plotly_name(), _OneFileStorage(location=str(SOURCE.parent))
