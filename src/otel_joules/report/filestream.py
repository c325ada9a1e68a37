"""Opening input files safely and streaming them line by line.

Only regular files are opened (non-blocking, so a FIFO swapped in after a check cannot
block); a file is read up to the size it had when opened; lines are streamed, so memory
does not grow with a file's size. A line over :data:`MAX_LINE_BYTES`, one that is not
UTF-8 and a region of NUL bytes are reported and skipped, and reading goes on after them.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO, Callable, Iterator

#: Longest line read (bytes). OTLP files hold a whole export batch per line, which can
#: reach megabytes; a longer line is skipped.
MAX_LINE_BYTES = 64 << 20
# Read in pieces of this size when skipping the rest of an overlong line.
_SKIP_CHUNK = 1 << 20


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for a skip reason."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def stat_reason(exc: OSError) -> str:
    """Why a path could not be looked at, for a skip reason."""
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop"
    if isinstance(exc, FileNotFoundError):
        return "does not exist (or is a dangling link)"
    return f"cannot be read: {exc.strerror or exc}"


def open_regular(path: str) -> tuple[IO[bytes], int]:
    """Open ``path`` for reading if it is a regular file; its size when opened.

    Non-blocking, so that a FIFO swapped in after the check cannot block the open.

    Raises:
        OSError: it cannot be opened, or is not a regular file (``strerror`` says which).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, f"is {file_kind(info.st_mode)}: only regular files are read")
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


class FileLines:
    """The lines of an open file as text, streamed, with damaged ones reported and left out.

    Yields ``(line number, text with its line ending)``. Reads at most ``size`` bytes
    (the size when opened). A line over :data:`MAX_LINE_BYTES`, one that is not UTF-8,
    and a region of NUL bytes (with the partial line before it) are reported through
    ``report`` (set once the format is known; until then they are held) and skipped.
    """

    def __init__(self, handle: IO[bytes], size: int) -> None:
        self._handle = handle
        self._remaining = size
        self.number = 0
        self.held: list[tuple[int, str]] = []
        self.report: Callable[[int, str], None] = lambda number, reason: self.held.append((number, reason))

    def release_held(self, report: Callable[[int, str], None]) -> None:
        """Report what was held back while the format was unknown, and from now on directly."""
        for number, reason in self.held:
            report(number, reason)
        self.held.clear()
        self.report = report

    def _next_raw(self) -> bytes | None:
        while self._remaining > 0:
            raw = self._handle.readline(min(MAX_LINE_BYTES + 1, self._remaining))
            if not raw:
                return None
            self._remaining -= len(raw)
            self.number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                skipped = len(raw) + self._skip_to_line_end()
                self.report(self.number, f"a line of {skipped} bytes or more, over the {MAX_LINE_BYTES}-byte limit, skipped")
                continue
            return raw
        return None

    def _skip_to_line_end(self) -> int:
        skipped = 0
        while self._remaining > 0:
            more = self._handle.readline(min(_SKIP_CHUNK, self._remaining))
            if not more:
                break
            self._remaining -= len(more)
            skipped += len(more)
            if more.endswith(b"\n"):
                break
        return skipped

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while True:
            raw = self._next_raw()
            if raw is None:
                return
            if b"\x00" in raw:
                before, _, after = raw.rpartition(b"\x00")
                nul_bytes = before.count(b"\x00") + 1
                self.report(
                    self.number,
                    f"{nul_bytes} NUL bytes (a damaged region, e.g. power lost while a writer "
                    f"appended) and the partial line before them skipped; reading on after them",
                )
                raw = after
            if self.number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.report(self.number, f"not UTF-8 text (byte {exc.start}); binary or corrupt data skipped")
                continue
            if text.strip():
                yield self.number, text

