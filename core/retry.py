"""One retry policy for everything that talks to the outside world: exponential backoff with a cap.

Pushes, job dispatches and exporter scrapes wait 2, 4, 8 ... seconds between attempts, at most `CAP`.
"""

from __future__ import annotations

CAP_SECONDS = 300
MAX_EXPONENT = 9


def backoff(attempts: int, cap: int = CAP_SECONDS) -> int:
    """Seconds to wait before the next try after `attempts` failed tries (1 -> 2 s, 2 -> 4 s, ... capped)."""
    return min(cap, 2 ** max(1, min(attempts, MAX_EXPONENT)))
