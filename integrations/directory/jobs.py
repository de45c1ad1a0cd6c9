"""The embedded job backend (`make run`, no Slurm or Kubernetes configured): each dispatched job is written
as the exact request the real backend would get (the slurmrestd submit body, or the Kubernetes objects as
YAML) under RACKPLANE_RENDER_DIR/jobs/, and reported as running until it is cancelled. Nothing executes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from integrations.jobs import BackendJobState, BackendJobStatus, BackendRejected, DispatchRequest

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
