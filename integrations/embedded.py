"""What the embedded mode (`make run`, no live Slurm or Kubernetes) writes to disk; no kind of target owns it.

* `write_tree`: rendered files under a directory, each replaced atomically (`manage.py render_configs`).
* `RenderedJobBackend`: the job backend integrations.dispatch falls back to when no enabled target runs a
  job's backend. Each dispatched job is written as the exact request the real backend would get (its kind's
  `render_job`: the slurmrestd submit body, or the Kubernetes objects as YAML) under
  RACKPLANE_RENDER_DIR/jobs/, and reported as running until it is cancelled. Nothing executes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from integrations.jobs import BackendJobState, BackendJobStatus, BackendRejected, DispatchRequest


def safe_relative(name: str) -> PurePosixPath:
    """`name` as a path that stays inside the directory it is written to; ValueError otherwise."""
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(part in ("", ".", "..") for part in path.parts):
        raise ValueError(f"refusing to write {name!r}: not a plain relative path")
    return path


def write_tree(root: Path, files: dict[str, str]) -> list[Path]:
    """Write files under `root` (each atomically: a temp file beside it, then a rename). Returns the paths."""
    written = []
    for name, text in sorted(files.items()):
        path = root / safe_relative(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with open(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        written.append(path)
    return written


# --- jobs ---------------------------------------------------------------------------------------------

PREFIX = "rendered/"


class RenderedJobBackend:
    """`render(request) -> text` is the backend's own offline rendering (its kind's `render_job`), written
    to `<name><suffix>`."""

    def __init__(self, directory: Path, kind: str, render: Callable[[DispatchRequest], str], suffix: str):
        self.directory = Path(directory)
        self.kind = kind
        self.render = render
        self.suffix = suffix

    def _file(self, name: str) -> Path:
        return self.directory / f"{name}{self.suffix}"

    def submit(self, request: DispatchRequest) -> str:
        try:
            text = self.render(request)
        except ValueError as error:
            raise BackendRejected(str(error)) from error
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._file(request.rackplane_name)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        return PREFIX + request.rackplane_name

    def status(self, backend_ids: list[str]) -> dict[str, BackendJobStatus]:
        out = {}
        for backend_id in backend_ids:
            path = self._file(backend_id.removeprefix(PREFIX))
            if path.exists():
                out[backend_id] = BackendJobStatus(
                    backend_id,
                    BackendJobState.RUNNING,
                    f"rendered to {path.name}; no live {self.kind} backend is configured",
                )
            else:
                out[backend_id] = BackendJobStatus(backend_id, BackendJobState.UNKNOWN)
        return out

    def cancel(self, backend_id: str) -> None:
        self._file(backend_id.removeprefix(PREFIX)).unlink(missing_ok=True)
