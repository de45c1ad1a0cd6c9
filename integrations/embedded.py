"""What the embedded mode (`make run`, no live Slurm or Kubernetes) writes to disk; no kind of target owns it.

* `write_tree`: rendered files under a directory, each replaced atomically (`manage.py render_configs`).
* `RenderedJobBackend`: the job backend integrations.dispatch falls back to when no enabled target runs a
  job's backend. Each dispatched job is written as the exact request the real backend would get (its kind's
  `render_job`: the slurmrestd submit body, or the Kubernetes objects as YAML) under
  RACKPLANE_RENDER_DIR/jobs/, and reported as running until it is cancelled or its time limit is up (as
  Slurm's TimeLimit or a Job's activeDeadlineSeconds would end it), then as completed. Nothing executes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath

from core.moments import utc_words
from core.sentences import say
from integrations.jobs import BackendJobState, BackendJobStatus, BackendRejected, DispatchRequest
from integrations.words import EMBEDDED_RAN_UNTIL, EMBEDDED_RENDERED, EMBEDDED_RENDERED_UNTIL


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

    def __init__(
        self,
        directory: Path,
        kind: str,
        render: Callable[[DispatchRequest], str],
        suffix: str,
        submits_qos: bool = False,
    ):
        self.directory = Path(directory)
        self.kind = kind
        self.render = render
        self.suffix = suffix
        self.submits_qos = submits_qos  # the rendering carries the job's QOS (integrations.registry.Kind)

    def _file(self, name: str) -> Path:
        return self.directory / f"{name}{self.suffix}"

    def _ends(self, name: str) -> Path:
        return self.directory / f"{name}.ends"

    def submit(self, request: DispatchRequest, started_at: datetime | None = None) -> str:
        """Write the job's request and when its time limit ends (from `started_at`, default now: the demo
        seed adopts jobs that started earlier)."""
        try:
            text = self.render(request)
        except ValueError as error:
            raise BackendRejected(str(error)) from error
        self.directory.mkdir(parents=True, exist_ok=True)
        start = started_at or datetime.now(UTC)
        ends = start + timedelta(minutes=request.time_limit_minutes)
        for path, content in (
            (self._ends(request.rackplane_name), ends.isoformat()),
            (self._file(request.rackplane_name), text),
        ):
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(content)
            tmp.replace(path)
        return PREFIX + request.rackplane_name

    def status(self, backend_ids: list[str]) -> dict[str, BackendJobStatus]:
        out = {}
        now = datetime.now(UTC)
        for backend_id in backend_ids:
            name = backend_id.removeprefix(PREFIX)
            path = self._file(name)
            if not path.exists():
                out[backend_id] = BackendJobStatus(backend_id, BackendJobState.UNKNOWN)
                continue
            ends = _read_time(self._ends(name))
            if ends is not None and now >= ends:
                out[backend_id] = BackendJobStatus(
                    backend_id,
                    BackendJobState.COMPLETED,
                    say(EMBEDDED_RAN_UNTIL, ends_at=utc_words(ends, seconds=False)),
                )
            else:
                out[backend_id] = BackendJobStatus(
                    backend_id,
                    BackendJobState.RUNNING,
                    say(EMBEDDED_RENDERED, rendered_file=path.name, backend_kind=self.kind)
                    if ends is None
                    else say(
                        EMBEDDED_RENDERED_UNTIL,
                        rendered_file=path.name,
                        backend_kind=self.kind,
                        ends_at=utc_words(ends, seconds=False),
                    ),
                )
        return out

    def cancel(self, backend_id: str) -> None:
        name = backend_id.removeprefix(PREFIX)
        self._file(name).unlink(missing_ok=True)
        self._ends(name).unlink(missing_ok=True)


def _read_time(path: Path) -> datetime | None:
    """The time in a `.ends` file; None when there is none (a job rendered before time limits were kept)."""
    try:
        return datetime.fromisoformat(path.read_text().strip())
    except (OSError, ValueError):
        return None
