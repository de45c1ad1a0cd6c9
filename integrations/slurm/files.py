"""Writing the files slurmctld reads (integrations.slurm.target): each atomically, so slurmctld never reads a
half-written topology.conf, and with the mode of the file it replaces."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, text: str, like: Path | None = None) -> None:
    """Write `text` to `path` atomically: temp file beside it, fsync, rename, fsync the directory."""
    mode = 0o644
    if like is not None:
        with contextlib.suppress(OSError):
            mode = like.stat().st_mode & 0o777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
