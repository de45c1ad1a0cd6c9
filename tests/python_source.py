"""Python source read as a syntax tree by the tests that check the code itself (layers, thin views, the
registry's kinds, the security guide's references).

`parse` is `ast.parse`, asked again when CPython 3.11 answers "SystemError: AST constructor recursion depth
mismatch": the AST constructor's recursion counter is one per interpreter, not per thread, so another thread
building a tree at the same moment can leave it off (python/cpython#106905; seen once in a full run, in a
pytest-xdist worker whose other threads were running). The tree itself is not affected: the same call made
again builds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

_MISMATCH = "AST constructor recursion depth mismatch"


def parse(source: str | Path, attempts: int = 3) -> ast.Module:
    text = source.read_text() if isinstance(source, Path) else source
    for attempt in range(1, attempts + 1):
        try:
            return ast.parse(text)
        except SystemError as error:
            if _MISMATCH not in str(error) or attempt == attempts:
                raise
    raise AssertionError("unreachable")
