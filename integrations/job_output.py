"""What every job log reader returns (integrations.logs and each job-running kind's logs.py): the parts of a
job's output and bounded reads of a file. Imports no kind and nothing that does, so that the kinds' readers
can share it and still stand alone (the "kinds" import contract).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from django.utils.translation import gettext

DEFAULT_LIMIT = 64 * 1024  # what the page shows: the last 64 KiB
MAX_DOWNLOAD = (
    16 * 1024 * 1024
)  # "download all" stops here too: a runaway log must not fill the portal's memory


@dataclass
class LogPart:
    """One stream of output: a file, or one pod's log."""

    name: str
    text: str = ""
    size: int | None = None  # bytes in the whole stream, when known
    truncated: bool = False  # only the last `limit` bytes are in `text`
    error: str = ""


@dataclass
class JobLogs:
    source: str  # where the output comes from, in words
    parts: list[LogPart] = field(default_factory=list)
    error: str = ""  # why nothing could be read at all

    @property
    def truncated(self) -> bool:
        return any(part.truncated for part in self.parts)

    def as_text(self) -> str:
        """All parts as one text (the download), each under a header line when there are several."""
        if len(self.parts) == 1:
            return self.parts[0].text
        chunks = []
        for part in self.parts:
            chunks.append(f"==> {part.name} <==\n")
            chunks.append(part.text if not part.error else f"({part.error})\n")
        return "".join(chunks)


def _tail(path: Path, limit: int | None) -> LogPart:
    """The last `limit` bytes of a file (decoded as UTF-8, bad bytes replaced), starting at a line."""
    cap = MAX_DOWNLOAD if limit is None else limit
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - cap)
            handle.seek(start)
            data = handle.read(cap)
    except FileNotFoundError:
        return LogPart(
            str(path),
            error=gettext("%(path)s does not exist (yet) where the portal can read it") % {"path": path},
        )
    except OSError as error:
        return LogPart(
            str(path),
            error=gettext("%(path)s cannot be read: %(error)s")
            % {"path": path, "error": error.strerror or error},
        )
    if start and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # begin at a whole line
    return LogPart(str(path), data.decode("utf-8", "replace"), size=size, truncated=start > 0)
