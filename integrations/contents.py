"""Rendered files stored by content, outside the push rows (issue 32).

A directory or Slurm target is sent whole files (slurmctld reads `rackplane.conf` and its topology file
whole); at 10,000 racks they are 88 MB, of which a one-rack re-carve changes a few lines. A push row
therefore holds each file as the list of its pieces (`file_pieces`: name -> [[sha256, bytes], ...]) and each
piece's text is stored once in `ConfigPiece`, keyed by its sha256: a push writes only the pieces no earlier
push wrote, and its task reads only the pieces it needs (integrations.directory.adapter reuses the live
version's bytes for the rest).

Decisions, and why:

* **A table, not a folder.** Push rows are written by web processes and applied by Celery workers that may
  run on other machines; the database is the one store both share, and a piece inserted in the same
  transaction as the push row that names it is never seen without it (nor the row without its pieces).
* **Pieces cut by content** (`cut`): a cut before a line whose first characters hash to a chosen residue,
  at least PIECE_MIN characters after the last cut and at most PIECE_MAX; so a change to one rack's lines
  changes the piece that holds them (and seldom the next), not every piece after it.
* **Garbage collected** (`collect_garbage`, after a finished push that let older payloads go: the only way a
  piece stops being named, as push rows are never deleted): a piece is deleted only when no push row that
  keeps its payload names it. The queued and running pushes keep theirs, and so does each target's
  last successful push (integrations.pushes.prune_payloads); the target rows are locked as queue_pushes
  locks them, so a push being created (which may reuse an old piece) is committed before the collection
  looks, or waits for it.
* **A process keeps the pieces it wrote or read** (`PIECES`, least recently used go past 128 MB): with eager
  Celery (`make run`) the push runs in the process that rendered it and reads nothing back.

Rows written before this (a payload with `files` as texts, or a version pushed again) are read as they are.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.db import transaction

from integrations.models import ConfigPiece, ConfigPush, ConfigTarget

FILES = "files"
FILE_PIECES = "file_pieces"
PIECE_MIN = 32 * 1024  # characters
PIECE_MAX = 512 * 1024
_WINDOW = 32  # characters of a line start whose crc32 decides a cut
_MASK = 0x3F  # a line start qualifies one time in 64
_BATCH = 500  # digests per IN (SQLite's bound on parameters)


def cut(text: str) -> list[str]:
    """`text` in pieces whose join is `text`, cut by content (see the module docstring)."""
    return _cut_from(text, 0, {})[0]


def _cut_from(text: str, start: int, stops: Mapping[int, int]) -> tuple[list[str], int | None]:
    """`cut(text)`'s pieces from `start` (one of its cuts) on, until a cut lands on a position of `stops`:
    (the pieces, the stop's value; None when the text ran out first)."""
    pieces = []
    size = len(text)
    while size - start > PIECE_MIN:
        end = size
        at = start + PIECE_MIN
        while True:
            newline = text.find("\n", at)
            if newline < 0 or newline + 1 >= size:
                break
            line = newline + 1
            if line - start >= PIECE_MAX or zlib.crc32(text[line : line + _WINDOW].encode()) & _MASK == 0:
                end = line
                break
            at = line
        pieces.append(text[start:end])
        start = end
        if start in stops:
            return pieces, stops[start]
    if start < size or not pieces:
        pieces.append(text[start:])
    return pieces, None


def recut(old_pieces: Sequence[str], new: str) -> list[str]:
    """`cut(new)`, knowing `old_pieces` is the cut of an old text: the old pieces before the first change
    and after the last are taken as they are (the same objects), only the pieces between are cut again. A
    cut depends only on the text from the piece's start to `_WINDOW` characters past its end (and, for the
    last piece, on the end of the text), so a piece whose text and following window are unchanged is cut the
    same way; after the change, once a cut lands where an old piece starts in the common tail, every later
    cut is the old one. tests/integrations/test_contents.py holds it equal to `cut` for any change
    (hypothesis)."""
    old_size = sum(len(piece) for piece in old_pieces)
    head: list[str] = []
    position = 0
    for index, piece in enumerate(old_pieces[:-1]):  # the last piece ends with the text: its cut saw the end
        end = position + len(piece)
        window = _window(old_pieces, index + 1)
        if (
            end + _WINDOW <= min(old_size, len(new))
            and new.startswith(piece, position)
            and new.startswith(window, end)
        ):
            head.append(piece)
            position = end
        else:
            break
    # Where each old piece of the common tail starts, in the new text's positions -> its index.
    shift = len(new) - old_size
    tail_starts: dict[int, int] = {}
    tail = 0
    for index in range(len(old_pieces) - 1, len(head) - 1, -1):
        piece = old_pieces[index]
        stop = len(new) - tail
        if stop - len(piece) < position or not new.endswith(piece, 0, stop):
            break
        tail += len(piece)
        tail_starts[old_size - tail + shift] = index
    if position in tail_starts:  # pieces were taken out whole: the tail's cuts follow the head's
        return head + list(old_pieces[tail_starts[position] :])
    middle, index = _cut_from(new, position, tail_starts)
    return head + middle + (list(old_pieces[index:]) if index is not None else [])


def _window(pieces: Sequence[str], index: int) -> str:
    """The first `_WINDOW` characters of the pieces from `index` on (fewer at the end of the text)."""
    window = ""
    while index < len(pieces) and len(window) < _WINDOW:
        window += pieces[index][: _WINDOW - len(window)]
        index += 1
    return window


def digest_of(text: str) -> tuple[str, bytes]:
    data = text.encode()
    return hashlib.sha256(data).hexdigest(), data


class PieceCache:
    """Piece texts by digest, least recently used dropped past `max_bytes`. Thread-safe."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> str | None:
        with self._lock:
            text = self._kept.get(digest)
            if text is not None:
                self._kept.move_to_end(digest)
            return text

    def put(self, digest: str, text: str) -> None:
        with self._lock:
            if digest in self._kept:
                self._kept.move_to_end(digest)
                return
            self._kept[digest] = text
            self._bytes += len(text)
            while self._bytes > self.max_bytes and self._kept:
                self._bytes -= len(self._kept.popitem(last=False)[1])

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0


PIECES = PieceCache(max_bytes=128 * 1024 * 1024)


# File name -> (its last pieces, their digests and sizes): a render's files mostly equal the last push's, or
# differ in a few lines (`recut`); at 10,000 racks cutting and hashing 85 MB took ~0.3 s a push. The pieces
# are the ones the process keeps anyway (PIECES), not a second copy of the files.
_LAST_CUTS: dict[str, tuple[list[str], list[tuple[str, int]]]] = {}
_LAST_CUTS_LOCK = threading.Lock()


def forget_cuts() -> None:
    with _LAST_CUTS_LOCK:
        _LAST_CUTS.clear()


def _pieces_of(name: str, text: str) -> tuple[list[str], list[tuple[str, int]]]:
    """`cut(text)` with each piece's (sha256, bytes), from the last text of the same file name when there is
    one (the same pieces for an equal text; `recut` for a changed one, hashing only its new pieces)."""
    with _LAST_CUTS_LOCK:
        last = _LAST_CUTS.get(name)
    if last is None:
        pieces, known = cut(text), {}
    else:
        pieces = recut(last[0], text)
        if len(pieces) == len(last[0]) and all(a is b for a, b in zip(pieces, last[0], strict=True)):
            return last  # the same text
        known = {id(piece): ref for piece, ref in zip(last[0], last[1], strict=True)}
    refs = []
    for piece in pieces:
        ref = known.get(id(piece))
        if ref is None:
            digest, data = digest_of(piece)
            ref = (digest, len(data))
        refs.append(ref)
    with _LAST_CUTS_LOCK:
        _LAST_CUTS[name] = (pieces, refs)
    return pieces, refs


def split_payload(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the payload as a push row stores it, the pieces' texts by digest). A payload without whole files
    (`files`: name -> text) is stored as it is."""
    files = payload.get(FILES)
    if not isinstance(files, Mapping) or isinstance(files, StoredFiles):
        if isinstance(files, StoredFiles):
            return {**_rest(payload), FILE_PIECES: files.refs}, {}
        return payload, {}
    if not all(isinstance(text, str) for text in files.values()):
        return payload, {}
    texts: dict[str, str] = {}
    refs: dict[str, list[list[Any]]] = {}
    for name, text in sorted(files.items()):
        pieces, digests = _pieces_of(name, text)
        refs[name] = [[digest, size] for digest, size in digests]
        texts.update((digest, piece) for piece, (digest, _) in zip(pieces, digests, strict=True))
    return {**_rest(payload), FILE_PIECES: refs}, texts


def _rest(payload: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in payload.items() if key != FILES}


def save_pieces(texts: Mapping[str, str]) -> int:
    """Store the pieces no row holds yet (inside the caller's transaction); returns how many were new."""
    digests = sorted(texts)
    have: set[str] = set()
    for start in range(0, len(digests), _BATCH):
        batch = digests[start : start + _BATCH]
        have.update(ConfigPiece.objects.filter(digest__in=batch).values_list("digest", flat=True))
    new = [ConfigPiece(digest=d, text=texts[d]) for d in digests if d not in have]
    ConfigPiece.objects.bulk_create(new, batch_size=100, ignore_conflicts=True)
    for digest in digests:
        PIECES.put(digest, texts[digest])
    return len(new)


def load_pieces(digests: Iterable[str]) -> dict[str, str]:
    """The texts of `digests`: the process's kept ones, the others read from the database. Raises
    ValueError naming a piece that is missing (collected while a row still named it: never expected)."""
    found: dict[str, str] = {}
    missing = []
    for digest in dict.fromkeys(digests):
        text = PIECES.get(digest)
        if text is None:
            missing.append(digest)
        else:
            found[digest] = text
    for start in range(0, len(missing), _BATCH):
        batch = missing[start : start + _BATCH]
        for digest, text in ConfigPiece.objects.filter(digest__in=batch).values_list("digest", "text"):
            found[digest] = text
            PIECES.put(digest, text)
    lost = [d for d in missing if d not in found]
    if lost:
        raise ValueError(f"{len(lost)} stored piece(s) of this push are missing (first {lost[0]})")
    return found


class StoredFiles(Mapping[str, str]):
    """A stored payload's files, name -> text, each read (from its pieces) when it is asked for.
    `pieces(name)` says what a file is made of without reading it."""

    def __init__(self, refs: Mapping[str, list[list[Any]]]):
        self.refs = {name: [list(piece) for piece in pieces] for name, pieces in refs.items()}

    def __getitem__(self, name: str) -> str:
        pieces = self.refs[name]
        texts = load_pieces(digest for digest, _ in pieces)
        return "".join(texts[digest] for digest, _ in pieces)

    def __iter__(self) -> Iterator[str]:
        return iter(self.refs)

    def __len__(self) -> int:
        return len(self.refs)

    def __contains__(self, name: object) -> bool:
        return name in self.refs

    def pieces(self, name: str) -> list[tuple[str, int]]:
        """(digest, bytes) of the file's pieces, in order."""
        return [(digest, size) for digest, size in self.refs[name]]

    def size(self, name: str) -> int:
        return sum(size for _, size in self.refs[name])


def payload_of(stored: dict[str, Any]) -> dict[str, Any]:
    """A push row's payload as its kind built it (`files` read lazily: StoredFiles); a row written before
    pieces, as it is."""
    refs = (stored or {}).get(FILE_PIECES)
    if not isinstance(refs, dict):
        return stored
    return {**{k: v for k, v in stored.items() if k != FILE_PIECES}, FILES: StoredFiles(refs)}


def _named(payload: Any) -> set[str]:
    refs = payload.get(FILE_PIECES) if isinstance(payload, dict) else None
    if not isinstance(refs, dict):
        return set()
    return {piece[0] for pieces in refs.values() for piece in pieces}


def collect_garbage() -> int:
    """Delete the pieces no push row that keeps its payload names; returns how many went. The target rows
    are locked first, in the order queue_pushes locks them (see the module docstring)."""
    with transaction.atomic():
        list(ConfigTarget.objects.select_for_update().order_by("pk").values_list("pk", flat=True))
        named: set[str] = set()
        for payload in ConfigPush.objects.filter(has_pieces=True, payload__has_key=FILE_PIECES).values_list(
            "payload", flat=True
        ):
            named |= _named(payload)
        unused = [d for d in ConfigPiece.objects.values_list("digest", flat=True) if d not in named]
        for start in range(0, len(unused), _BATCH):
            ConfigPiece.objects.filter(digest__in=unused[start : start + _BATCH]).delete()
    return len(unused)
