"""The CSV and JSON-lines exporters' file: opening, checking, appending whole records, rotation.

:class:`FileSpanExporter` is a :class:`~otel_joules.exporters._retrying.RetryingSpanExporter`
whose destination is a file (records it could not write are kept and written later).

File writing model, documented here once for the CSV and JSON-lines formats:

- The file is opened at construction (``O_APPEND``, created with ``O_EXCL`` and mode 0664
  minus the umask if missing: :mod:`otel_joules.exporters.safe_open`), so a path that
  cannot be written fails there, with
  :class:`~otel_joules.exporters.errors.ExporterPathError`, before any span is measured.
  Its folder must exist: the exporter creates no folders. A symbolic link at the path is
  refused (a link planted there would make it append to another file).
- Each ``export`` call encodes its spans and appends them with one ``write`` system call
  (looping only on short writes), then ``fdatasync``; nothing is held in a Python buffer
  after ``export`` returns, so a crash loses nothing already exported, and a power loss
  cannot leave a region of NUL bytes where exported lines were (the file's new size
  reaching the disk before its data). The sync costs about 0.3 ms per ``export`` call on
  an ext4 disk: behind a ``BatchSpanProcessor`` that is once per batch, not per span.
- A write that fails (disk full, file-size limit, I/O error) keeps the whole records it
  managed to write and truncates the file back to the end of the last whole one, so the
  file never ends in half a line. The records that did not fit stay in memory (at most
  ``max_pending_spans``, oldest dropped first with an error logged) and are written ahead
  of the next batch, by ``force_flush()``, by ``shutdown()``, or at interpreter exit (an
  ``atexit`` hook, removed by ``shutdown()``); the error says how many were written and
  how many are kept.
- The file deleted or moved away while the process runs (log rotation): before each write
  the exporter compares the path with the file it has open and, when they differ, opens
  the path anew (a new file, with the CSV header), with one warning saying so. A symbolic
  link found there instead is refused with one error: the records are kept in memory
  (bounded as below) and written once the link is removed.
- After ``os.fork()`` the child gets a fresh lock (a parent thread may have held it across
  a write at the moment of the fork) and forgets the records the parent still had pending:
  the parent writes those, so nothing is written twice.
- An existing file that does not end in a newline (a writer was killed mid-line) gets a
  newline before the first new line, with a warning, so new lines stay whole.
- One exporter per file: two writers appending to one file can interleave batches and
  the rollback could cut the other's lines. Give each process its own path.
"""

from __future__ import annotations

import logging
import os
import stat
import weakref
from dataclasses import dataclass

from otel_joules.errors import ConfigurationError
from otel_joules.exporters._retrying import DEFAULT_MAX_PENDING_SPANS, RetryingSpanExporter, register_exit_hook
from otel_joules.exporters.errors import ExporterPathError
from otel_joules.exporters.records import SpanRecord
from otel_joules.exporters.safe_open import SymlinkRefusedError, open_append, refuse_symlink

_LOGGER = logging.getLogger("otel_joules.exporters")

# How much of an existing file's first line is read to check a header: far more than
# any header we write, small enough never to read a huge file whole.
_HEADER_READ_LIMIT = 1 << 16


@dataclass(frozen=True)
class ExistingFile:
    """What a file exporter needs to know about a file it is about to append to."""

    #: Size in bytes (0 for a missing file or one that is not a regular file).
    size: int
    #: The first line, without its line ending (b"" if empty, missing, or not regular).
    first_line: bytes
    #: Whether appending needs a newline first (a non-empty file not ending in one).
    needs_newline: bool


def inspect_existing(path: str) -> ExistingFile:
    """Look at ``path`` before appending; raise :class:`ExporterPathError` if it is unusable (a link included)."""
    try:
        refuse_symlink(path)
    except SymlinkRefusedError as exc:
        raise ExporterPathError(f"cannot write span records to {path!r}: {exc.strerror}") from None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return ExistingFile(size=0, first_line=b"", needs_newline=False)
    except OSError as exc:
        raise ExporterPathError(f"cannot use {path!r} for span records: {exc.strerror}; choose a path you can write") from None
    if stat.S_ISDIR(info.st_mode):
        raise ExporterPathError(f"{path!r} is a folder; give a file path such as {os.path.join(path, 'spans.csv')!r}")
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        # A device or pipe (/dev/stdout, a FIFO) has no header to check and cannot be read back.
        return ExistingFile(size=0, first_line=b"", needs_newline=False)
    try:
        with open(path, "rb") as handle:
            first = handle.readline(_HEADER_READ_LIMIT)
            handle.seek(-1, os.SEEK_END)
            last = handle.read(1)
    except OSError as exc:
        raise ExporterPathError(
            f"cannot read the existing file {path!r} to check it before appending: {exc.strerror}; "
            "make it readable or choose another path"
        ) from None
    return ExistingFile(size=info.st_size, first_line=first.rstrip(b"\r\n"), needs_newline=last != b"\n")


class FileSpanExporter(RetryingSpanExporter[bytes]):
    """Base of the CSV and JSON-lines exporters (see the module docstring for the model).

    Subclasses implement :meth:`_preamble` (what to write before the first record,
    after checking the existing file) and :meth:`_encode` (one record to bytes ending
    in ``\\n``).
    """

    #: Open the file readable too (a subclass that reads back what it wrote: the Parquet journal).
    _READ_BACK = False

    def __init__(self, path: str | os.PathLike[str], *, max_pending_spans: int = DEFAULT_MAX_PENDING_SPANS) -> None:
        try:
            self._path = os.fspath(path)
        except TypeError:
            raise ConfigurationError(f"path={path!r} must be a file path (str or os.PathLike)") from None
        super().__init__(self._path, max_pending_spans)
        self._fd = -1
        self._close_fd: weakref.finalize | None = None
        self._open()
        self._exit_hook = register_exit_hook(self, "_flush_at_exit")

    @property
    def path(self) -> str:
        """The file this exporter appends to."""
        return self._path

    # Subclass hooks -------------------------------------------------------------------

    def _preamble(self, existing: ExistingFile) -> bytes:
        """Check ``existing`` and return the bytes to write before any record (e.g. a header)."""
        raise NotImplementedError

    def _encode(self, record: SpanRecord) -> bytes:
        """One record as bytes, ending in ``\\n``."""
        raise NotImplementedError

    # Internals -------------------------------------------------------------------------

    def _open(self) -> None:
        """Open the path for appending and write the preamble; raise :class:`ExporterPathError` if unusable."""
        existing = inspect_existing(self._path)
        preamble = self._preamble(existing)
        if existing.needs_newline:
            _LOGGER.warning(
                "%s does not end with a newline (a writer was stopped mid-line); "
                "starting a new line so the records appended now stay whole",
                self._path,
            )
            preamble = b"\n" + preamble
        try:
            fd = open_append(self._path, read=self._READ_BACK)
        except SymlinkRefusedError as exc:
            raise ExporterPathError(f"cannot write span records to {self._path!r}: {exc.strerror}") from None
        except OSError as exc:
            raise ExporterPathError(
                f"cannot write span records to {self._path!r}: {exc.strerror}; "
                "choose a writable file path (its folder must exist)"
            ) from None
        self._fd = fd
        # Closes the descriptor if the exporter is collected without shutdown(); not at
        # exit, where a TracerProvider's own hook may still export through it.
        self._close_fd = weakref.finalize(self, os.close, fd)
        self._close_fd.atexit = False
        if preamble:
            try:
                self._append_all(preamble)
            except OSError as exc:
                self._close()
                raise ExporterPathError(f"cannot write to {self._path!r}: {exc.strerror}") from None

    def _close(self) -> None:
        if self._close_fd is not None:
            self._close_fd()

    def _reopen_if_moved(self) -> None:
        """Open the path anew when the open file was deleted or moved away (log rotation)."""
        try:
            current = os.fstat(self._fd)
        except OSError:
            return
        if not stat.S_ISREG(current.st_mode):
            return  # a pipe or device: nothing can be rotated
        try:
            on_disk = os.lstat(self._path)
            moved = (on_disk.st_dev, on_disk.st_ino) != (current.st_dev, current.st_ino)
        except FileNotFoundError:
            moved = True
        except OSError:
            return
        if not moved:
            return
        # A link where the file was (planted after it moved): never followed, said once by the caller.
        refuse_symlink(self._path)
        old_fd, old_close = self._fd, self._close_fd
        try:
            self._open()
        except ConfigurationError as exc:  # unwritable, or another CSV header now at the path
            # Keep writing nowhere new; the records stay pending and the next batch retries.
            self._fd, self._close_fd = old_fd, old_close
            raise OSError(f"the file was deleted or moved away and cannot be created again ({exc})") from None
        if old_close is not None:
            old_close()
        _LOGGER.warning(
            "%s was deleted or moved away while spans were being written to it (log rotation?); "
            "opened it anew: records from now on go to the new file",
            self._path,
        )

    def _send_pending(self) -> bool:
        """Append every pending line at once; on failure keep what did not fit (bounded) and log."""
        if not self._pending:
            return True
        count = len(self._pending)
        try:
            self._reopen_if_moved()
        except OSError as exc:
            written, error = 0, exc
        else:
            written, error = self._append_whole(list(self._pending))
        for _ in range(written):
            self._pending.popleft()
        if error is None:
            if self._failing:
                dropped = self._mark_recovered()
                _LOGGER.warning("%s is writable again: wrote %d record(s) kept since the failure%s", self._path, count, dropped)
            return True
        if not self._failing and isinstance(error, SymlinkRefusedError):
            _LOGGER.error(
                "cannot write %d span record(s) to %s: %s. They are kept in memory (at most %d) and written to a new "
                "file at that path on the first export, force_flush() or shutdown() after the link is removed",
                count,
                self._path,
                error.strerror,
                self._max_pending_spans,
            )
        elif not self._failing:
            _LOGGER.error(
                "cannot write %d of %d span record(s) to %s: %s; the %d whole record(s) that fitted are written, "
                "the rest are kept in memory (at most %d) and written on the next export, force_flush() or "
                "shutdown(): free disk space or fix the file's permissions",
                len(self._pending),
                count,
                self._path,
                error.strerror or error,
                written,
                self._max_pending_spans,
            )
        else:
            _LOGGER.debug("%s still not writable (%s); %d record(s) pending", self._path, error, len(self._pending))
        self._mark_failed()
        self._drop_over_limit()
        return False

    def _append_whole(self, records: list[bytes]) -> tuple[int, OSError | None]:
        """Append ``records``: how many were written whole, and the error that stopped the rest.

        On failure the file is truncated back to the end of the last whole record that
        fitted, so it never ends in half a line and those records are not written twice.
        """
        try:
            size_before = os.fstat(self._fd).st_size
        except OSError as exc:
            return 0, exc
        data = b"".join(records)
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, view[done:])
        except OSError as exc:
            whole, whole_bytes = 0, 0
            for record in records:
                if whole_bytes + len(record) > done:
                    break
                whole += 1
                whole_bytes += len(record)
            try:
                os.ftruncate(self._fd, size_before + whole_bytes)
            except OSError:
                # A device or pipe cannot be truncated; nothing more can be done here.
                pass
            self._sync()
            return whole, exc
        self._sync()
        return len(records), None

    def _append_all(self, data: bytes) -> None:
        """Append ``data`` whole or not at all (truncating back on failure)."""
        size_before = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            try:
                os.ftruncate(self._fd, size_before)
            except OSError:
                pass
            raise
        self._sync()

    def _sync(self) -> None:
        # What export() reported as written must survive a power loss: without this, a
        # crash can leave the file's new size on disk with zeros instead of the lines
        # (the "NUL region" a reader then has to skip).
        try:
            os.fdatasync(self._fd)
        except OSError:
            pass  # pipes and devices cannot be synced; a real I/O error shows on the next write
