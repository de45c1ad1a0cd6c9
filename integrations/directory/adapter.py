"""The directory target's adapter: rendered files written as versions, `current` switched atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from core.diffs import unified_diff
from integrations import contents
from integrations.common import clip, display_path
from integrations.embedded import safe_relative


def directory_path(values: dict) -> Path:
    """Where a directory target writes: absolute as given, relative under var/; empty: RACKPLANE_RENDER_DIR
    (var/rendered by default)."""
    raw = (values or {}).get("path") or ""
    if not raw:
        return Path(settings.RACKPLANE_RENDER_DIR)
    path = Path(raw)
    return path if path.is_absolute() else Path(settings.VAR_DIR) / path


def _write_file(path: Path, text: str | Iterable[str]) -> None:
    """Write `text` (or its pieces, in order) and sync it to disk."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines([text] if isinstance(text, str) else text)
        handle.flush()
        os.fsync(handle.fileno())


def _linked(old: Path, path: Path) -> bool:
    """Hard-link `path` to the unchanged `old`; False on a filesystem without hard links (write a copy)."""
    try:
        os.link(old, path)
    except OSError:
        return False
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryAdapter:
    """Rendered files in a directory, versioned: `<path>/versions/<time>-push<N>/...` holds each push's
    complete set, `<path>/current` is a symlink to the live one. A push writes a whole new version, then
    switches the symlink with one rename: readers see the old set or the new set, never a mix, and a push
    that fails part-way leaves `current` as it was. Files equal to the previous version's are hard links to
    them (do not edit versions in place). The `keep` previous versions are kept, older ones deleted.

    A push whose files come as stored pieces (integrations.contents.StoredFiles) is written from them:
    `<path>/pieces/<version>.json` records each file's pieces, so a file made of the same pieces as the
    live version's is linked without being read, and a changed file takes its unchanged pieces from the
    live version's bytes (or the process's kept pieces); only the pieces neither holds are read from the
    database."""

    CURRENT = "current"
    VERSIONS = "versions"
    PIECES = "pieces"

    def __init__(self, target, values: dict):
        self.target = target
        self.root = directory_path(values)
        self.keep = int(values.get("keep") or 5)

    def current_dir(self) -> Path | None:
        link = self.root / self.CURRENT
        if link.is_symlink():
            return link.resolve()
        if link.exists():
            raise ValueError(
                f"{link} exists but is not the symlink Rackplane switches: move it away, then retry the push"
            )
        return None

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        files = payload.get("files") or {}
        for name in files:
            safe_relative(name)
        versions = self.root / self.VERSIONS
        versions.mkdir(parents=True, exist_ok=True)
        previous = self.current_dir()
        name = f"{timezone.now():%Y%m%dT%H%M%SZ}-push{push.pk:06d}"
        staging = versions / f".{name}.partial"
        final = versions / name
        shutil.rmtree(staging, ignore_errors=True)
        changed = linked = 0
        stored = files if isinstance(files, contents.StoredFiles) else None
        try:
            if stored is not None:
                changed, linked = self._write_pieces(stored, staging, previous)
                self._write_manifest(stored, name)
            for rel, text in sorted(files.items()) if stored is None else ():
                path = staging / safe_relative(rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                old = previous / rel if previous is not None else None
                if old is not None and old.is_file() and _same_text(old, text) and _linked(old, path):
                    linked += 1
                    continue
                _write_file(path, text)
                changed += 1
            os.replace(staging, final)
            _fsync_dir(versions)
            link_tmp = self.root / f".{self.CURRENT}.{push.pk}.tmp"
            with contextlib.suppress(FileNotFoundError):
                link_tmp.unlink()
            os.symlink(f"{self.VERSIONS}/{name}", link_tmp)
            os.replace(link_tmp, self.root / self.CURRENT)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        removed = _no_longer_rendered(previous, files)
        log(
            f"wrote {len(files)} files to {display_path(final)} "
            f"({changed} new or changed, {linked} unchanged"
            + (f", {len(removed)} no longer rendered: {', '.join(removed)}" if removed else "")
            + ")",
            f"{display_path(self.root / self.CURRENT)} -> {self.VERSIONS}/{name}"
            + (f" (previous: {self.VERSIONS}/{previous.name})" if previous is not None else ""),
        )
        pruned = self._prune(keep_names={name, previous.name if previous else ""})
        if pruned:
            log(f"removed {len(pruned)} old version(s): {', '.join(pruned)}")
        return f"{len(files)} files in {display_path(self.root / self.CURRENT)}"

    def _manifest_path(self, version: str) -> Path:
        return self.root / self.PIECES / f"{version}.json"

    def _manifest(self, version: Path | None) -> dict[str, list[list]]:
        """The pieces each file of `version` was written from ({} when it was not written from pieces)."""
        if version is None:
            return {}
        try:
            with open(self._manifest_path(version.name), encoding="utf-8") as handle:
                manifest = json.load(handle)
        except (OSError, ValueError):
            return {}
        return manifest if isinstance(manifest, dict) else {}

    def _write_manifest(self, files: contents.StoredFiles, version: str) -> None:
        (self.root / self.PIECES).mkdir(parents=True, exist_ok=True)
        tmp = self.root / self.PIECES / f".{version}.json.tmp"
        _write_file(tmp, json.dumps(files.refs, sort_keys=True, separators=(",", ":")))
        os.replace(tmp, self._manifest_path(version))

    def _write_pieces(
        self, files: contents.StoredFiles, staging: Path, previous: Path | None
    ) -> tuple[int, int]:
        """Write a stored payload's files into `staging`: (written, linked)."""
        live = self._manifest(previous)
        changed: list[str] = []
        linked = 0
        for rel in sorted(files):
            path = staging / safe_relative(rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            pieces = files.pieces(rel)
            old = previous / rel if previous is not None else None
            same = live.get(rel) == [list(piece) for piece in pieces]
            if (
                same
                and old is not None
                and old.is_file()
                and old.stat().st_size == files.size(rel)
                and _linked(old, path)
            ):
                linked += 1
            else:
                changed.append(rel)
        texts = _LiveBytes(previous, live).texts(
            [digest for rel in changed for digest, _ in files.pieces(rel)]
        )
        for rel in changed:
            _write_file(staging / safe_relative(rel), (texts[digest] for digest, _ in files.pieces(rel)))
        return len(changed), linked

    def _prune(self, keep_names: set[str]) -> list[str]:
        """Keep the live version and the `keep` newest before it (names sort by time), and their pieces'
        records."""
        versions = self.root / self.VERSIONS
        names = sorted(
            (p.name for p in versions.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True
        )
        removed = []
        for old in names[self.keep + 1 :]:
            if old not in keep_names:
                shutil.rmtree(versions / old, ignore_errors=True)
                with contextlib.suppress(FileNotFoundError):
                    self._manifest_path(old).unlink()
                removed.append(old)
        return removed

    def check(self) -> list[str]:
        """Test connection (integrations.push_history): the directory (or the folder it will be made in)
        can be written; nothing is written. Raises OSError/ValueError in words."""
        where = display_path(self.root)
        current = self.current_dir()
        if self.root.is_dir():
            if not os.access(self.root, os.W_OK | os.X_OK):
                raise PermissionError(f"{where} exists but the portal may not write to it")
            live = f"live version {current.name}" if current is not None else "nothing pushed there yet"
            return [f"{where} is writable", live]
        if self.root.exists():
            raise NotADirectoryError(f"{where} exists but is not a directory")
        parent = self.root.parent
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK | os.X_OK):
            raise PermissionError(f"{where} does not exist and {display_path(parent)} is not writable")
        return [f"{where} does not exist yet: the first push creates it ({display_path(parent)} is writable)"]

    def diff(self, payload: dict) -> list[str]:
        files = payload.get("files") or {}
        current = self.current_dir()
        out = []
        live_names = set()
        if current is not None:
            live_names = {str(p.relative_to(current)) for p in current.rglob("*") if p.is_file()}
        for name in sorted(set(files) | live_names):
            old = (current / name).read_text() if current is not None and name in live_names else None
            new = files.get(name)
            if old == new:
                continue
            if new is None:
                out.append(f"- {name} (no longer rendered)")
                continue
            diff = list(
                unified_diff(
                    (old or "").splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"live/{name}" if old is not None else "/dev/null",
                    tofile=f"rendered/{name}",
                )
            )
            out.extend(line.rstrip("\n") for line in clip(diff, 400, name))
        return out


def _no_longer_rendered(previous: Path | None, files) -> list[str]:
    if previous is None:
        return []
    names = (str(p.relative_to(previous)) for p in previous.rglob("*") if p.is_file())
    return sorted(name for name in names if name not in files)


class _LiveBytes:
    """Pieces' texts for a push written from pieces: the process's kept ones, then the live version's
    bytes where its record says a piece lies (checked against the digest), then the database."""

    def __init__(self, previous: Path | None, manifest: dict[str, list[list]]):
        self.previous = previous
        self.where: dict[str, tuple[str, int, int]] = {}  # digest -> (file, offset, bytes)
        for rel, pieces in manifest.items():
            offset = 0
            for digest, size in pieces if isinstance(pieces, list) else ():
                self.where.setdefault(digest, (rel, offset, size))
                offset += size

    def texts(self, digests: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for digest in dict.fromkeys(digests):
            text = contents.PIECES.get(digest)
            if text is None and digest in self.where:
                text = self._read(digest, *self.where[digest])
            if text is not None:
                found[digest] = text
        found.update(contents.load_pieces(d for d in digests if d not in found))
        return found

    def _read(self, digest: str, rel: str, offset: int, size: int) -> str | None:
        assert self.previous is not None
        try:
            with open(self.previous / safe_relative(rel), "rb") as handle:
                handle.seek(offset)
                data = handle.read(size)
        except (OSError, ValueError):
            return None
        if hashlib.sha256(data).hexdigest() != digest:
            return None
        return data.decode("utf-8")


def _same_text(path: Path, text: str) -> bool:
    try:
        if path.stat().st_size != len(text.encode()):
            return False
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False
