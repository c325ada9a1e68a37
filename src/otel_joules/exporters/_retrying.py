"""What the retrying span exporters share: keeping what could not be delivered, and sending it later.

:class:`RetryingSpanExporter` is the part the file exporters (:mod:`._files`) and the
MongoDB exporter have in common: spans that could not be delivered are kept (bounded) and
sent ahead of the next batch, by ``force_flush()``, by ``shutdown()`` or at interpreter
exit (:func:`register_exit_hook`; one last hook counts what none of them delivered). A
destination that failed is not asked again for a while (a circuit breaker), and after
``os.fork()`` the child gets a fresh lock and leaves what is pending to the parent.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from typing import Any, Callable, Generic, Sequence, TypeVar

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_joules._fork import register_fork_hook
from otel_joules.errors import ConfigurationError
from otel_joules.exporters.records import SpanRecord, span_record

_LOGGER = logging.getLogger("otel_joules.exporters")

#: Default bound of spans kept in memory while the output cannot be written.
DEFAULT_MAX_PENDING_SPANS = 10_000

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


class RetryingSpanExporter(SpanExporter, Generic[_Item]):
    """Base of the exporters that keep what they could not deliver and retry it.

    ``export`` encodes each span (:meth:`_encode`), queues it and calls
    :meth:`_send_pending`; what that leaves in ``self._pending`` stays (at most
    ``max_pending_spans``, oldest dropped first, see :meth:`_drop_over_limit`) and goes
    first on the next ``export``, ``force_flush()``, ``shutdown()`` or at interpreter
    exit. Subclasses implement :meth:`_encode`, :meth:`_send_pending` and :meth:`_close`,
    register :meth:`_flush_at_exit` with :func:`register_exit_hook` once they are fully
    built (as ``self._exit_hook``), call :meth:`_mark_failed` where an attempt fails and
    :meth:`_mark_recovered` where one succeeds after a failure, and name their records in
    the class attributes below, which word the log lines.

    One outage logs one error when it starts (the subclass's), one more the first time
    spans are dropped for the bound (later drops in the same outage are counted, not
    logged again), and one line when it ends: delivered again (with how many were kept and
    how many were dropped in all) or, at ``shutdown()``/exit, how many are lost.

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
        # Spans dropped for the bound since the current outage began (reported when it ends).
        self._dropped_in_outage = 0
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

    def _mark_recovered(self) -> str:
        """End the outage (subclasses call this where an attempt succeeds); the text their "again" line ends with.

        That text is empty, or says how many spans the bound dropped during the outage, so
        that the one line ending an outage counts everything it cost.
        """
        self._failing = False
        dropped, self._dropped_in_outage = self._dropped_in_outage, 0
        if not dropped:
            return ""
        return f"; {dropped} older {self._ITEMS} were dropped during the failure (max_pending_spans={self._max_pending_spans})"

    def _after_fork_in_child(self) -> None:
        # The parent's batch thread may have held the lock across I/O at the fork: in the
        # child no thread will ever release it. What is pending is the parent's to deliver.
        self._lock = threading.Lock()
        self._pending.clear()
        self._dropped_in_outage = 0

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
        dropped, self._dropped_in_outage = self._dropped_in_outage, 0
        if self._pending:
            _LOGGER.error(
                "%s: %d %s could not be %s %s and are lost (last error logged above)%s",
                self._label,
                len(self._pending),
                self._ITEMS,
                self._DELIVERED,
                when,
                f"; {dropped} older ones were dropped before (max_pending_spans={self._max_pending_spans})" if dropped else "",
            )
            self._pending.clear()
        elif dropped:
            _LOGGER.error(
                "%s: %d %s were dropped while %s (max_pending_spans=%d)",
                self._label,
                dropped,
                self._ITEMS,
                self._WAITING_WHILE,
                self._max_pending_spans,
            )

    def _drop_over_limit(self) -> None:
        """Drop the oldest pending items beyond ``max_pending_spans``: an error the first time in an outage.

        Later drops in the same outage are only counted (one error per batch would flood a
        long outage's log); the line that ends the outage gives the total.
        """
        excess = len(self._pending) - self._max_pending_spans
        if excess <= 0:
            return
        for _ in range(excess):
            self._pending.popleft()
        first = self._dropped_in_outage == 0
        self._dropped_in_outage += excess
        _LOGGER.log(
            logging.ERROR if first else logging.DEBUG,
            "%s: dropped the %d oldest %s %s: more than max_pending_spans=%d are waiting while %s%s",
            self._label,
            excess,
            self._UNDELIVERED,
            self._ITEMS,
            self._max_pending_spans,
            self._WAITING_WHILE,
            "; further drops are counted and reported when it ends" if first else f" ({self._dropped_in_outage} in all)",
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
