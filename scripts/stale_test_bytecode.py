"""How many test modules have no up-to-date assert-rewritten bytecode (what pytest keeps in __pycache__).

`scripts/lib.sh`'s compile_tests collects the tests once before the workers start only when this is more
than a few: with the bytecode current, that collection is six seconds of waiting for nothing
(`make test-fast`).
"""

import sys
from pathlib import Path

import pytest

TAG = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}"


def stale(root: Path) -> int:
    count = 0
    for source in root.rglob("*.py"):
        if not (source.name.startswith("test_") or source.name == "conftest.py"):
            continue
        compiled = source.parent / "__pycache__" / f"{source.stem}.{TAG}.pyc"
        try:
            if compiled.stat().st_mtime < source.stat().st_mtime:
                count += 1
        except FileNotFoundError:
            count += 1
    return count


if __name__ == "__main__":
    print(stale(Path(sys.argv[1] if len(sys.argv) > 1 else "tests")))
