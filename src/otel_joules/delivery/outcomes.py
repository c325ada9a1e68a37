"""What reached each destination: :class:`DeliveryReport`, and the SDK's log lines kept for it.

One :class:`DeliveryReport` is shared by every bounded exporter of a
:class:`~otel_joules.delivery.setup.Telemetry` (:mod:`.bounded`): it counts what each
destination received, keeps each failure with its reason, and remembers which OTLP
endpoints answer, so that an endpoint that failed is not tried again for
:data:`RETRY_AFTER_S` seconds. :class:`capture_sdk_logs` keeps the OpenTelemetry SDK's
warnings in the report, for command-line tools that report delivery themselves.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from otel_joules._fork import register_fork_hook
from otel_joules.config import OTEL_JOULES_PROMETHEUS_WAIT_S
from otel_joules.delivery.destinations import PROMETHEUS, Destination, probe

#: Longest wait for the TCP connection that checks an OTLP endpoint is there.
PROBE_TIMEOUT_S = 2.0
#: An endpoint that failed is not tried again before this many seconds.
RETRY_AFTER_S = 30.0


@dataclass(frozen=True)
class DeliveryFailure:
    """One failed export: where to and why."""

    destination: Destination
    reason: str


@dataclass
class EndpointState:
    """What is known of one endpoint: whether a delivery succeeded, when it last failed and why."""

    good: bool = False
    failed_at: float | None = None
    reason: str = ""


class DeliveryReport:
    """What reached each destination, thread-safe; shared by every wrapped exporter of a :class:`~otel_joules.delivery.setup.Telemetry`.

    Also keeps the state of each OTLP endpoint (answering or not), so spans and metrics
    sent to one unreachable collector fail once each, fast.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        register_fork_hook(self, "_new_lock")  # taken by the exporters' background threads
        self._delivered: dict[Destination, int] = {}
        # Pull destinations: how long shutdown waited for a final scrape, and whether one came.
        self._final_scrape: dict[Destination, tuple[bool, float]] = {}
        self._failures: list[DeliveryFailure] = []
        self._endpoints: dict[tuple[str, int], EndpointState] = {}
        self.sdk_messages: list[str] = []

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def record_success(self, destination: Destination, items: int) -> None:
        """``items`` spans or metric batches reached ``destination``."""
        with self._lock:
            self._delivered[destination] = self._delivered.get(destination, 0) + items

    def record_failure(self, destination: Destination, reason: str) -> None:
        """An export to ``destination`` failed for ``reason``."""
        with self._lock:
            self._failures.append(DeliveryFailure(destination, reason))

    @property
    def failures(self) -> list[DeliveryFailure]:
        """Every failure, in order."""
        with self._lock:
            return list(self._failures)

    def delivered(self, destination: Destination) -> int:
        """How many items reached ``destination``."""
        with self._lock:
            return self._delivered.get(destination, 0)

    def record_final_scrape(self, destination: Destination, scraped: bool, waited_s: float) -> None:
        """Whether the pull ``destination`` was scraped after the last measurement (waiting ``waited_s`` at most)."""
        with self._lock:
            self._final_scrape[destination] = (scraped, waited_s)

    def outcome(self, destination: Destination) -> str:
        """``delivered``, ``failed`` (nothing got through), ``partly delivered`` or ``nothing sent``.

        For a scrape endpoint: ``scraped N time(s)``, and whether the last measurement was.
        """
        with self._lock:
            ok = self._delivered.get(destination, 0)
            failed = any(f.destination == destination for f in self._failures)
            final = self._final_scrape.get(destination)
        if destination.kind == PROMETHEUS:
            return _scrape_outcome(ok, final)
        if failed:
            return "partly delivered" if ok else "failed"
        return "delivered" if ok else "nothing sent"

    # endpoint bookkeeping, used by the wrapped exporters

    def _endpoint_check(self, address: tuple[str, int], timeout_s: float) -> str | None:
        """None when ``address`` may be sent to now, else the reason it may not."""
        with self._lock:
            state = self._endpoints.setdefault(address, EndpointState())
            if state.good:
                return None
            if state.failed_at is not None and time.monotonic() - state.failed_at < RETRY_AFTER_S:
                return state.reason
        reason = probe(address, min(PROBE_TIMEOUT_S, timeout_s))
        if reason is not None:
            self._endpoint_failed(address, reason)
        return reason

    def _endpoint_answered(self, address: tuple[str, int]) -> None:
        with self._lock:
            self._endpoints[address] = EndpointState(good=True)

    def _endpoint_failed(self, address: tuple[str, int], reason: str) -> None:
        with self._lock:
            self._endpoints[address] = EndpointState(good=False, failed_at=time.monotonic(), reason=reason)


def _scrape_outcome(scrapes: int, final: tuple[bool, float] | None) -> str:
    if final is None:
        return f"scraped {scrapes} time(s)" if scrapes else "not scraped yet"
    scraped, waited_s = final
    if scraped:
        return f"scraped {scrapes} time(s), the last after the final measurement"
    hint = f"waited {waited_s:g} s; set {OTEL_JOULES_PROMETHEUS_WAIT_S} to your scrape interval"
    if not scrapes:
        return f"never scraped ({hint})"
    return f"scraped {scrapes} time(s), not after the final measurement: its last joules were not scraped ({hint})"


class SdkLogCapture(logging.Handler):
    """Keeps the OpenTelemetry SDK's log messages for the report instead of printing them."""

    def __init__(self, report: DeliveryReport) -> None:
        super().__init__(logging.WARNING)
        self._report = report

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call must not break delivery
            message = str(record.msg)
        self._report.sdk_messages.append(message.splitlines()[0] if message else message)


class capture_sdk_logs:  # noqa: N801 - used as a context manager, like contextlib's
    """Within ``with capture_sdk_logs(report):``, the ``opentelemetry`` loggers' warnings go to ``report.sdk_messages``.

    For command-line tools that report delivery themselves, once, instead of letting the
    SDK print a retry warning and an error per failed export.
    """

    def __init__(self, report: DeliveryReport, logger_name: str = "opentelemetry") -> None:
        self._logger = logging.getLogger(logger_name)
        self._handler = SdkLogCapture(report)
        self._propagate = True

    def __enter__(self) -> DeliveryReport:
        self._propagate = self._logger.propagate
        self._logger.addHandler(self._handler)
        self._logger.propagate = False
        return self._handler._report

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate


def iter_failures_by_destination(report: DeliveryReport) -> Iterator[tuple[Destination, str]]:
    """Each failed destination once, with its first failure's reason."""
    seen: set[Destination] = set()
    for failure in report.failures:
        if failure.destination not in seen:
            seen.add(failure.destination)
            yield failure.destination, failure.reason
