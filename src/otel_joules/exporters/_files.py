"""What the span exporters share: keeping what could not be delivered, and (CSV, JSON lines) the file.

:class:`RetryingSpanExporter` is the part the file exporters and the MongoDB exporter
have in common: spans that could not be delivered are kept (bounded) and sent ahead of
the next batch, by ``force_flush()``, by ``shutdown()`` or at interpreter exit.

File writing model, documented here once for the CSV and JSON-lines formats:

- The file is opened at construction (``O_APPEND``, created with mode 0666 minus the
  umask if missing), so a path that cannot be written fails there, with
  :class:`~otel_joules.exporters.errors.ExporterPathError`, before any span is measured.
  Its folder must exist: the exporter creates no folders.
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
  the path anew (a new file, with the CSV header), with one warning saying so.
- After ``os.fork()`` the child gets a fresh lock (a parent thread may have held it across
  a write at the moment of the fork) and forgets the records the parent still had pending:
  the parent writes those, so nothing is written twice.
- An existing file that does not end in a newline (a writer was killed mid-line) gets a
  newline before the first new line, with a warning, so new lines stay whole.
- One exporter per file: two writers appending to one file can interleave batches and
  the rollback could cut the other's lines. Give each process its own path.
"""

from __future__ import annotations

import atexit
import logging
import os
import stat
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_joules._fork import register_fork_hook
from otel_joules.errors import ConfigurationError
from otel_joules.exporters.errors import ExporterPathError
from otel_joules.exporters.records import SpanRecord, span_record

_LOGGER = logging.getLogger("otel_joules.exporters")

#: Default bound of spans kept in memory while the output cannot be written.
DEFAULT_MAX_PENDING_SPANS = 10_000

# How much of an existing file's first line is read to check a header: far more than
# any header we write, small enough never to read a huge file whole.
_HEADER_READ_LIMIT = 1 << 16

# At interpreter exit another thread (a BatchSpanProcessor worker) may be mid-export;
# wait for it this long (or one delivery attempt's bound, if longer) rather than hanging the exit.
_EXIT_LOCK_TIMEOUT_S = 5.0

#: What a retrying exporter keeps per span: encoded bytes (files), a document (MongoDB).
_Item = TypeVar("_Item")


def check_max_pending_spans(value: int) -> int:
    """Validate the ``max_pending_spans`` keyword shared by the exporters that retry."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"max_pending_spans={value!r} must be a whole number >= 0 (0 keeps nothing for retry)")
    return value


def register_exit_hook(target: object, method_name: str) -> Callable[[], None]:
    """Call ``target.<method_name>()`` at interpreter exit, without keeping ``target`` alive.

    Returns the registered callable, to pass to :func:`atexit.unregister`: each call
    makes a new closure, and ``atexit.unregister`` removes by identity, so unregistering
    one exporter's hook leaves every other exporter's in place.
    """
    ref = weakref.ref(target)

    def hook() -> None:
        alive = ref()
        if alive is not None:
            getattr(alive, method_name)()

    atexit.register(hook)
    return hook


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
    """Look at ``path`` before appending; raise :class:`ExporterPathError` if it is unusable."""
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


class RetryingSpanExporter(SpanExporter, Generic[_Item]):
    """Base of the exporters that keep what they could not deliver and retry it.

    ``export`` encodes each span (:meth:`_encode`), queues it and calls
    :meth:`_send_pending`; what that leaves in ``self._pending`` stays (at most
    ``max_pending_spans``, oldest dropped first, see :meth:`_drop_over_limit`) and goes
    first on the next ``export``, ``force_flush()``, ``shutdown()`` or at interpreter
    exit. Subclasses implement :meth:`_encode`, :meth:`_send_pending` and :meth:`_close`,
    register :meth:`_flush_at_exit` with :func:`register_exit_hook` once they are fully
    built (as ``self._exit_hook``), and name their records in the class attributes below,
    which word the log lines.

    A destination that cannot be reached is not asked again for ``retry_interval_s``
    after a failed attempt (a circuit breaker): exports in between keep their spans and
    return at once, so a down server neither stalls the batch thread for every batch nor
    delays the process's exit by one timeout per batch. ``force_flush()`` always tries.
    Closing (``shutdown()`` or interpreter exit) makes at most one last attempt: none
    when an attempt already failed while closing, nor at ``shutdown()`` when one failed
    less than ``retry_interval_s`` ago; what is still undelivered is reported, with its count.
    """

    #: What is kept per span, in log lines.
    _ITEMS = "span record(s)"
    #: Past participle of delivering (``written``, ``stored``).
    _DELIVERED = "written"
    #: Adjective for what is not yet delivered (``unwritten``, ``unsent``).
    _UNDELIVERED = "unwritten"
    #: Why items wait (``the file cannot be written``).
    _WAITING_WHILE = "the file cannot be written"

    _exit_hook: Callable[[], None]

    def __init__(self, label: str, max_pending_spans: int, retry_interval_s: float = 0.0) -> None:
        self._max_pending_spans = check_max_pending_spans(max_pending_spans)
        # Names the destination in log lines (the path, "MongoDB db.collection").
        self._label = label
        self._lock = threading.Lock()
        # Not yet delivered, oldest first; one entry per span.
        self._pending: deque[_Item] = deque()
        self._failing = False
        self._shutdown = False
        self._retry_interval_s = retry_interval_s
        # time.monotonic() of the last failed attempt, and of the start of closing.
        self._failed_at: float | None = None
        self._closing_since: float | None = None
        # Set while the last attempt runs: when it must give up (time.monotonic()).
        self._attempt_deadline: float | None = None
        register_fork_hook(self, "_after_fork_in_child")
        _live_exporters.add(self)

    @property
    def pending_spans(self) -> int:
        """Spans encoded but not yet delivered because delivery failed; retried on the next call."""
        with self._lock:
            return len(self._pending)

    # Subclass hooks -------------------------------------------------------------------

    def _encode(self, record: SpanRecord) -> _Item:
        """What is kept and delivered for one span."""
        raise NotImplementedError

    def _send_pending(self) -> bool:
        """Deliver ``self._pending`` (called under the lock); True when nothing is left to retry."""
        raise NotImplementedError

    def _close(self) -> None:
        """Release the destination at ``shutdown()`` (called under the lock)."""
        raise NotImplementedError

    def _attempt_bound_s(self) -> float:
        """The longest one delivery attempt can block (waiting for the lock at exit uses it)."""
        return 0.0

    # SpanExporter ----------------------------------------------------------------------

    def _encode_batch(self, spans: Sequence[ReadableSpan]) -> list[_Item]:
        """What one ``export`` call keeps and delivers: one item per span by default.

        A format that writes a whole batch as one item (OTLP/JSON: one request per
        line) overrides this instead of :meth:`_encode`.
        """
        return [self._encode(span_record(span)) for span in spans]

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Deliver one record per span, after any kept from earlier failures; FAILURE if some are kept now."""
        items = self._encode_batch(spans)
        with self._lock:
            if self._shutdown:
                _LOGGER.warning(
                    "%s: export after shutdown(); %d span(s) not %s", self._label, len(items), self._DELIVERED
                )
                return SpanExportResult.FAILURE
            self._pending.extend(items)
            return SpanExportResult.SUCCESS if self._deliver() else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Retry what earlier failures left pending; True when nothing is left.

        Successful exports are already delivered (not buffered), so with no earlier
        failure there is nothing to do. Tries even while the circuit breaker is open.
        """
        with self._lock:
            if self._shutdown:
                return not self._pending
            return self._send_pending()

    def shutdown(self, timeout_millis: float | None = None) -> None:
        """Deliver what is pending (at most one last try), release the destination, remove the exit hook.

        Idempotent. The last try is skipped when the destination failed less than the
        retry interval ago, and lasts at most ``timeout_millis`` (the rest of a
        ``BatchSpanProcessor``'s shutdown budget). Records still undeliverable are
        reported in one error log line with their count: they are lost.
        """
        if self._closing_since is None:
            self._closing_since = time.monotonic()
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            self._last_try(timeout_millis)
            self._report_lost("at shutdown")
            self._close()
        atexit.unregister(self._exit_hook)

    # Internals -------------------------------------------------------------------------

    def _deliver(self) -> bool:
        """Send what is pending unless the circuit breaker says the destination was down a moment ago."""
        if not self._pending:
            return True
        if self._breaker_open():
            _LOGGER.debug("%s: not retried yet (failed %.1f s ago); %d pending", self._label, self._since_failure(), len(self._pending))
            self._drop_over_limit()
            return False
        return self._send_pending()

    def _since_failure(self) -> float:
        return float("inf") if self._failed_at is None else time.monotonic() - self._failed_at

    def _breaker_open(self) -> bool:
        return self._failing and self._since_failure() < self._retry_interval_s

    def _last_try(self, timeout_millis: float | None, *, at_exit: bool = False) -> None:
        """The one attempt closing makes: none if it failed while closing (or, at shutdown(), a moment ago).

        At interpreter exit the program is done and a server back since the last failure
        is worth one try; ``shutdown()`` is often called right after a failed batch (a
        ``BatchSpanProcessor`` flushing), where another full wait would only delay exit.
        """
        if not self._pending:
            return
        failed_while_closing = (
            self._failing
            and self._failed_at is not None
            and self._closing_since is not None
            and self._failed_at >= self._closing_since
        )
        if failed_while_closing or (not at_exit and self._breaker_open()):
            return
        if timeout_millis is not None:
            if timeout_millis <= 0:
                return
            self._attempt_deadline = time.monotonic() + timeout_millis / 1000.0
        try:
            self._send_pending()
        finally:
            self._attempt_deadline = None

    def _mark_failed(self) -> None:
        """Record a failed attempt (subclasses call this where they keep items for retry)."""
        self._failing = True
        self._failed_at = time.monotonic()

    def _after_fork_in_child(self) -> None:
        # The parent's batch thread may have held the lock across I/O at the fork: in the
        # child no thread will ever release it. What is pending is the parent's to deliver.
        self._lock = threading.Lock()
        self._pending.clear()

    def _flush_at_exit(self) -> None:
        # The destination stays open: a TracerProvider's own exit hook may run after this
        # one and still export what its BatchSpanProcessor holds.
        if self._closing_since is None:
            self._closing_since = time.monotonic()
        wait_s = max(_EXIT_LOCK_TIMEOUT_S, self._attempt_bound_s() + 1.0)
        if not self._lock.acquire(timeout=wait_s):
            _LOGGER.error("%s: could not flush at exit, another thread kept the exporter busy", self._label)
            return
        try:
            if self._shutdown:
                return
            # What is still pending is counted once, by shutdown() (a TracerProvider's exit
            # hook usually comes next and hands over its last batches first) or else by
            # _report_losses_at_exit, the last hook of all.
            self._last_try(None, at_exit=True)
        finally:
            self._lock.release()

    def _report_lost_at_exit(self) -> None:
        if not self._lock.acquire(timeout=_EXIT_LOCK_TIMEOUT_S):
            return
        try:
            if not self._shutdown:
                self._report_lost("at interpreter exit")
        finally:
            self._lock.release()

    def _report_lost(self, when: str) -> None:
        if self._pending:
            _LOGGER.error(
                "%s: %d %s could not be %s %s and are lost (last error logged above)",
                self._label,
                len(self._pending),
                self._ITEMS,
                self._DELIVERED,
                when,
            )
            self._pending.clear()

    def _drop_over_limit(self) -> None:
        excess = len(self._pending) - self._max_pending_spans
        if excess > 0:
            for _ in range(excess):
                self._pending.popleft()
            _LOGGER.error(
                "%s: dropped the %d oldest %s %s: more than max_pending_spans=%d are waiting while %s",
                self._label,
                excess,
                self._UNDELIVERED,
                self._ITEMS,
                self._max_pending_spans,
                self._WAITING_WHILE,
            )


# Every retrying exporter alive, so that one hook at the very end of interpreter exit can
# count what none of them delivered, once. Part of the exporters' exit lifecycle, not
# user-visible state; weak, so it never keeps an exporter alive.
_live_exporters: "weakref.WeakSet[RetryingSpanExporter[Any]]" = weakref.WeakSet()


def _report_losses_at_exit() -> None:
    for exporter in list(_live_exporters):
        exporter._report_lost_at_exit()


# Registered when this module is imported, before any exporter (and, in the usual order,
# any TracerProvider) registers its own hook: atexit runs hooks last-in first-out, so this
# one runs after them all.
atexit.register(_report_losses_at_exit)


class FileSpanExporter(RetryingSpanExporter[bytes]):
    """Base of the CSV and JSON-lines exporters (see the module docstring for the model).

    Subclasses implement :meth:`_preamble` (what to write before the first record,
    after checking the existing file) and :meth:`_encode` (one record to bytes ending
    in ``\\n``).
    """

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
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
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
            on_disk = os.stat(self._path)
            moved = (on_disk.st_dev, on_disk.st_ino) != (current.st_dev, current.st_ino)
        except FileNotFoundError:
            moved = True
        except OSError:
            return
        if not moved:
            return
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
                _LOGGER.warning("%s is writable again: wrote %d record(s) kept since the failure", self._path, count)
                self._failing = False
            return True
        if not self._failing:
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
