"""axe-core for the accessibility tests: a pinned release from the npm registry, fetched with the machine's
npm (`npm pack`) into the user's cache directory once per version and reused by every later run and clone."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

AXE_VERSION = "4.14.1"
SERIOUS = ("serious", "critical")


def _cache() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rackplane" / "axe-core" / AXE_VERSION


def axe_source() -> str:
    """axe.min.js of AXE_VERSION, fetched on first use; an AssertionError saying why when it cannot be."""
    script = _cache() / "package" / "axe.min.js"
    if not script.exists():
        npm = shutil.which("npm")
        assert npm, (
            "npm is needed once to fetch axe-core for the accessibility tests (Debian: apt install npm)"
        )
        target = _cache()
        target.parent.mkdir(parents=True, exist_ok=True)
        # Unpacked beside its place (one file system: the rename below is atomic).
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            done = subprocess.run(
                [npm, "pack", f"axe-core@{AXE_VERSION}", "--silent", "--pack-destination", tmp],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, (
                f"npm pack axe-core@{AXE_VERSION} failed: {done.stderr.strip()[-500:]}"
            )
            [archive] = Path(tmp).glob("axe-core-*.tgz")
            unpacked = Path(tmp) / "unpacked"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            # Whole or not at all: another test process may be fetching the same version at the same time.
            try:
                unpacked.rename(target)
            except OSError:
                assert script.exists(), f"could not put axe-core into {target}"
    return script.read_text()


def serious_violations(page) -> list[str]:
    """The page's serious and critical violations as "rule: help (selector, ...)" lines."""
    results = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    lines = []
    for violation in results["violations"]:
        if violation.get("impact") in SERIOUS:
            nodes = violation["nodes"]
            targets = ", ".join(str(node["target"][0]) for node in nodes[:4])
            more = len(nodes) - 4
            why = " ".join((nodes[0].get("failureSummary") or "").split())[:300] if nodes else ""
            lines.append(
                f"{violation['id']} ({violation['impact']}): {violation['help']} [{targets}"
                + (f" and {more} more" if more > 0 else "")
                + f"] {why}"
            )
    return lines
