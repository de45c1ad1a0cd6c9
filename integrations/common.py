"""Helpers the kinds' adapters share: clipped diffs and paths shown relative to the project."""

from __future__ import annotations

import contextlib
from pathlib import Path

from django.conf import settings


def clip(lines: list[str], limit: int, name: str) -> list[str]:
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"... {len(lines) - limit} more diff lines of {name}"]


def display_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(settings.BASE_DIR))
    return str(path)
