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
  (looping only on short writes); nothing is held in a Python buffer after ``export``
  returns, so a crash loses nothing already exported.
- A write that fails (disk full, file-size limit, I/O error) is rolled back by truncating
  the file to its size before that write, so the file never ends in half a line. The
  spans of that batch stay in memory (at most ``max_pending_spans``, oldest dropped first
  with an error logged) and are written ahead of the next batch, by ``force_flush()``,
  by ``shutdown()``, or at interpreter exit (an ``atexit`` hook, removed by ``shutdown()``).
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
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

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
# wait for it this long rather than hanging the exit.
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

    def __init__(self, label: str, max_pending_spans: int) -> None:
        self._max_pending_spans = check_max_pending_spans(max_pending_spans)
        # Names the destination in log lines (the path, "MongoDB db.collection").
        self._label = label
        self._lock = threading.Lock()
        # Not yet delivered, oldest first; one entry per span.
        self._pending: deque[_Item] = deque()
        self._failing = False
        self._shutdown = False

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
            return SpanExportResult.SUCCESS if self._send_pending() else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Retry what earlier failures left pending; True when nothing is left.

        Successful exports are already delivered (not buffered), so with no earlier
        failure there is nothing to do.
        """
        with self._lock:
            if self._shutdown:
                return not self._pending
            return self._send_pending()

    def shutdown(self) -> None:
        """Deliver what is pending (one last try), release the destination, remove the exit hook.

        Idempotent. Records still undeliverable are reported in an error log line: they are lost.
        """
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            self._send_pending()
            self._report_lost("at shutdown")
            self._close()
        atexit.unregister(self._exit_hook)

    # Internals -------------------------------------------------------------------------

    def _flush_at_exit(self) -> None:
        # The destination stays open: a TracerProvider's own exit hook may run after this
        # one and still export what its BatchSpanProcessor holds.
        if not self._lock.acquire(timeout=_EXIT_LOCK_TIMEOUT_S):
            _LOGGER.error("%s: could not flush at exit, another thread kept the exporter busy", self._label)
            return
        try:
            if self._shutdown:
                return
            self._send_pending()
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
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise ExporterPathError(
                f"cannot write span records to {self._path!r}: {exc.strerror}; "
                "choose a writable file path (its folder must exist)"
            ) from None
        # Closes the descriptor if the exporter is collected without shutdown(); not at
        # exit, where a TracerProvider's own hook may still export through it.
        self._close_fd = weakref.finalize(self, os.close, self._fd)
        self._close_fd.atexit = False
        if preamble:
            try:
                self._append(preamble)
            except OSError as exc:
                self._close_fd()
                raise ExporterPathError(f"cannot write to {self._path!r}: {exc.strerror}") from None
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

    def _close(self) -> None:
        self._close_fd()

    def _send_pending(self) -> bool:
        """Append every pending line at once; on failure keep them (bounded) and log."""
        if not self._pending:
            return True
        data = b"".join(self._pending)
        try:
            self._append(data)
        except OSError as exc:
            count = len(self._pending)
            if not self._failing:
                _LOGGER.error(
                    "cannot write %d span record(s) to %s: %s; they are kept in memory (at most %d) and written "
                    "on the next export, force_flush() or shutdown(): free disk space or fix the file's permissions",
                    count,
                    self._path,
                    exc.strerror or exc,
                    self._max_pending_spans,
                )
            else:
                _LOGGER.debug("%s still not writable (%s); %d record(s) pending", self._path, exc, count)
            self._failing = True
            self._drop_over_limit()
            return False
        if self._failing:
            _LOGGER.warning("%s is writable again: wrote %d record(s) kept since the failure", self._path, len(self._pending))
            self._failing = False
        self._pending.clear()
        return True

    def _append(self, data: bytes) -> None:
        """Append ``data`` whole or not at all (truncating back on failure)."""
        size_before = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError:
            try:
                os.ftruncate(self._fd, size_before)
            except OSError:
                # A device or pipe cannot be truncated; nothing more can be done here.
                pass
            raise
