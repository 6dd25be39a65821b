"""The trail's files: appending lines with rotation by size, and reading them back filtered.

Above: the trail (``supervisor.daemon.audit.trail``), which appends each batch of lines from a worker
thread (``TrailFile.append``) and answers ``GetAudit`` with ``read_trail``; the CLI's ``audit --file``,
which reads the files itself. Below: the file system.

Writing: the file (``x.jsonl``) is opened for each batch (``O_APPEND``, mode 0600; its directory made
0700 when missing), so a file removed or replaced under the supervisor is noticed, not written to after
it is gone. Before a line would take the file past ``max_bytes``, the file is rotated: ``x.jsonl.<keep>``
is dropped, each ``x.jsonl.<n>`` becomes ``x.jsonl.<n+1>``, ``x.jsonl`` becomes ``x.jsonl.1``. Whole lines
only: a line is never split between two files (one longer than ``max_bytes`` gets a file of its own),
and a write that fails part-way has what it wrote of its last line cut off again, so the lines that
were not written can be written again whole.

Reading: the current file and the rotated ones, newest first, each read backwards; a line that is not
a JSON object (a torn last line, a file edited by hand) is skipped.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from supervisor.daemon.audit.record import iso_time

__all__ = ["Filters", "TrailFile", "parse_since", "read_trail", "trail_files"]

READ_CHUNK: Final = 64 * 1024  # bytes read at a time, backwards
_SINCE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")
_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class TrailFile:
    """``path`` and its rotated files; ``append`` runs in one thread at a time."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep

    def append(self, lines: list[bytes]) -> tuple[int, OSError | None]:
        """Write ``lines`` (each ending in a newline) in order, rotating as needed: how many were
        written, and the error that stopped the rest (None when every one was)."""
        written = 0
        try:
            fd = self._open()
        except OSError as exc:
            return 0, exc
        try:
            size = os.fstat(fd).st_size
            while written < len(lines):
                chunk = self._fitting(lines, written, size)
                if not chunk:  # the next line does not fit: a new file
                    os.close(fd)
                    fd = -1
                    self._rotate()
                    fd = self._open()
                    size = 0
                    continue
                data = b"".join(chunk)
                done = _write_all(fd, data, size)
                size += done
                written += len(chunk)
        except _Short as short:
            written += short.lines
            return written, short.error
        except OSError as exc:
            return written, exc
        finally:
            if fd >= 0:
                os.close(fd)
        return written, None

    def _fitting(self, lines: list[bytes], start: int, size: int) -> list[bytes]:
        """The lines from ``start`` that fit in the file at ``size`` bytes: at least one when the file is
        empty (a line longer than ``max_bytes`` has a file of its own), none when the next does not fit."""
        room = self.max_bytes - size
        end, total = start, 0
        while end < len(lines) and total + len(lines[end]) <= room:
            total += len(lines[end])
            end += 1
        if end == start and size == 0:
            end = start + 1
        return lines[start:end]

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return os.open(self.path, flags, 0o600)

    def _rotate(self) -> None:
        """``x.jsonl`` -> ``x.jsonl.1`` -> ... -> ``x.jsonl.<keep>``, the oldest dropped."""
        if self.keep == 0:
            self.path.unlink(missing_ok=True)
            return
        for n in range(self.keep - 1, 0, -1):
            older = _numbered(self.path, n)
            if older.exists():
                os.replace(older, _numbered(self.path, n + 1))
        os.replace(self.path, _numbered(self.path, 1))


class _Short(Exception):
    """A write that stopped part-way: the whole lines it wrote, and why it stopped."""

    def __init__(self, lines: int, error: OSError) -> None:
        self.lines = lines
        self.error = error


def _write_all(fd: int, data: bytes, size: int) -> int:
    """Write ``data`` (whole lines) at the end of a file of ``size`` bytes; on an error, cut the file
    back to its last whole line written and raise ``_Short``."""
    view, done = memoryview(data), 0
    try:
        while done < len(data):
            done += os.write(fd, view[done:])
    except OSError as exc:
        whole = data.rfind(b"\n", 0, done) + 1  # the bytes of the whole lines written
        if whole != done:
            with suppress(OSError):  # else the torn line stays: readers skip it
                os.ftruncate(fd, size + whole)
        raise _Short(data.count(b"\n", 0, whole), exc) from exc
    return done


def _numbered(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def trail_files(path: Path, keep: int | None = None) -> list[Path]:
    """The trail's files that exist, newest first: ``path``, then ``path.1``, ``path.2``, ... (up to
    ``keep``; None: as many as are there in a row)."""
    found = [path] if path.exists() else []
    n = 1
    while keep is None or n <= keep:
        older = _numbered(path, n)
        if not older.exists():
            break
        found.append(older)
        n += 1
    return found


@dataclass(frozen=True)
class Filters:
    """What ``read_trail`` keeps: records of requests that arrived at ``since`` or later (seconds since
    the epoch), of that ``identity`` and ``server``, whose ``tool`` matches the glob ``tool``."""

    since: float | None = None
    identity: str | None = None
    tool: str | None = None
    server: str | None = None
    _since_time: str | None = field(default=None, init=False, repr=False)  # as the lines write it

    def __post_init__(self) -> None:
        if self.since is not None:  # the trail's times sort as the times they are
            object.__setattr__(self, "_since_time", iso_time(self.since))

    def keeps(self, record: dict[str, Any]) -> bool:
        if self._since_time is not None and not str(record.get("time", "")) >= self._since_time:
            return False
        if self.identity is not None and record.get("identity") != self.identity:
            return False
        if self.server is not None and record.get("server") != self.server:
            return False
        return self.tool is None or fnmatch.fnmatchcase(str(record.get("tool", "")), self.tool)


def read_trail(
    path: Path, filters: Filters, limit: int, keep: int | None = None, newer: Iterable[bytes] = ()
) -> list[str]:
    """The newest ``limit`` lines that ``filters`` keeps, newest first, as text: those of ``newer`` (lines
    not written yet, oldest first), then the files'. ``OSError`` for a file that cannot be read."""
    found: list[str] = []
    if limit <= 0:
        return found
    for raw in reversed(list(newer)):
        if _take(raw, filters, found) and len(found) >= limit:
            return found
    for file in trail_files(path, keep):
        try:
            lines = _backwards(file)
            for raw in lines:
                if _take(raw, filters, found) and len(found) >= limit:
                    return found
        except FileNotFoundError:
            continue  # rotated away while being read: its lines are in the next file
    return found


def _take(raw: bytes, filters: Filters, found: list[str]) -> bool:
    """Add ``raw`` to ``found`` if it is a record ``filters`` keeps; whether it was."""
    try:
        record = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(record, dict) or not filters.keeps(record):
        return False
    found.append(raw.decode("utf-8", "replace").rstrip("\n"))
    return True


def _backwards(path: Path) -> Iterator[bytes]:
    """A file's lines, last first, without reading it all at once."""
    with path.open("rb") as file:
        end = file.seek(0, os.SEEK_END)
        rest = b""
        while end > 0:
            start = max(0, end - READ_CHUNK)
            file.seek(start)
            block = file.read(end - start) + rest
            end = start
            lines = block.split(b"\n")
            rest = lines.pop(0)  # may be the end of a line that starts in the block before
            for raw in reversed(lines):
                if raw:
                    yield raw
        if rest:
            yield rest


def parse_since(text: str, now: float) -> float:
    """A ``--since`` as seconds since the epoch: an age (``90s``, ``10m``, ``2h``, ``1d``, ``1w``) before
    ``now``, or an ISO 8601 time (without a zone: UTC). ``ValueError`` naming the text otherwise."""
    match = _SINCE.fullmatch(text)
    if match is not None:
        return now - float(match.group(1)) * _SECONDS[match.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since must be an age like 10m, 2h or 1d (s, m, h, d, w) or an ISO time like "
            f"2025-05-01T12:00:00Z, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
