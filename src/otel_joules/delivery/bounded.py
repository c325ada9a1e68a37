"""Exporters that never hang or fail the caller: each call bounded in time, each outcome recorded.

:class:`BoundedSpanExporter` and :class:`BoundedMetricExporter` wrap any exporter so that
one export call takes at most ``timeout_s`` (the stock exporters retry for up to their own
timeout, and SDK 1.27's for over a minute), exceptions become failed exports, and each
outcome is recorded in a :class:`~otel_joules.delivery.outcomes.DeliveryReport`. Before
sending to an OTLP endpoint not yet known to answer, a TCP connection is tried first
(:func:`~otel_joules.delivery.destinations.probe`), so a closed port fails in milliseconds
instead of after the exporter's retries.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_joules.delivery.destinations import Destination
from otel_joules.delivery.outcomes import DeliveryReport
from otel_joules.tracing._sdk import metric_exporter_preferences


class BoundedCalls:
    """Runs an exporter's calls on a helper thread and stops waiting after ``timeout_s``.

    A call that overruns is left to finish on its (daemon) thread; while it runs, further
    exports fail at once instead of queueing behind it.
    """

    def __init__(self, destination: Destination, report: DeliveryReport, timeout_s: float, address: tuple[str, int] | None) -> None:
        self.destination = destination
        self._report = report
        self._timeout_s = timeout_s
        self._address = address
        self._busy = threading.Event()

    def run(self, call: Callable[[], Any], items: int, ok: Callable[[Any], bool], what: str) -> bool:
        """Export through ``call``; True when ``ok(result)``. Records the outcome."""
        if self._busy.is_set():
            self._report.record_failure(self.destination, f"a previous {what} is still running")
            return False
        if self._address is not None:
            refused = self._report._endpoint_check(self._address, self._timeout_s)
            if refused is not None:
                self._report.record_failure(self.destination, refused)
                return False
        finished, result, error = self.call_bounded(call)
        if not finished:
            reason = f"no answer within {self._timeout_s:g} s"
            if self._address is not None:
                self._report._endpoint_failed(self._address, reason)
            self._report.record_failure(self.destination, reason)
            return False
        if error is not None:
            reason = f"{type(error).__name__}: {error}"
            if self._address is not None:
                self._report._endpoint_failed(self._address, reason)
            self._report.record_failure(self.destination, reason)
            return False
        if ok(result):
            if self._address is not None:
                self._report._endpoint_answered(self._address)
            self._report.record_success(self.destination, items)
            return True
        self._report.record_failure(self.destination, "the exporter reported a failure")
        return False

    def call_bounded(self, call: Callable[[], Any]) -> tuple[bool, Any, BaseException | None]:
        """(finished, result, exception) of ``call`` run for at most ``timeout_s``."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                outcome["result"] = call()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller, never raised on this thread
                outcome["error"] = exc
            finally:
                self._busy.clear()
                done.set()

        self._busy.set()
        thread = threading.Thread(target=target, name=f"otel-joules-export-{self.destination.signal}", daemon=True)
        thread.start()
        if not done.wait(self._timeout_s):
            return False, None, None
        return True, outcome.get("result"), outcome.get("error")


class BoundedSpanExporter(SpanExporter):
    """A ``SpanExporter`` that never blocks longer than ``timeout_s`` per call and never raises.

    Args:
        inner: The exporter doing the work.
        destination: What to call it in the report.
        report: Where outcomes are recorded.
        timeout_s: Longest wait for one export, flush or shutdown.
        probe_address: ``(host, port)`` checked with a TCP connection while the endpoint
            is not known to answer (OTLP); None for local exporters.
    """

    def __init__(
        self,
        inner: SpanExporter,
        destination: Destination,
        report: DeliveryReport,
        timeout_s: float,
        probe_address: tuple[str, int] | None = None,
    ) -> None:
        self.inner = inner
        self._bounded = BoundedCalls(destination, report, timeout_s, probe_address)

    @property
    def destination(self) -> Destination:
        """Where this exporter sends."""
        return self._bounded.destination

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export ``spans`` within the time bound; FAILURE on timeout, error or unreachable endpoint."""
        spans = list(spans)
        ok = self._bounded.run(lambda: self.inner.export(spans), len(spans), lambda r: r == SpanExportResult.SUCCESS, "span export")
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the inner exporter, waiting at most the time bound."""
        finished, result, error = self._bounded.call_bounded(lambda: self.inner.force_flush(timeout_millis))
        return bool(finished and error is None and result is not False)

    def shutdown(self) -> None:
        """Shut the inner exporter down, waiting at most the time bound."""
        self._bounded.call_bounded(self.inner.shutdown)


class BoundedMetricExporter(MetricExporter):
    """A ``MetricExporter`` with the guarantees of :class:`BoundedSpanExporter`.

    Keeps the inner exporter's preferred temporality and aggregation, which the
    metric reader reads from its exporter.
    """

    def __init__(
        self,
        inner: MetricExporter,
        destination: Destination,
        report: DeliveryReport,
        timeout_s: float,
        probe_address: tuple[str, int] | None = None,
    ) -> None:
        temporality, aggregation = metric_exporter_preferences(inner)
        super().__init__(preferred_temporality=temporality, preferred_aggregation=aggregation)
        self.inner = inner
        self._bounded = BoundedCalls(destination, report, timeout_s, probe_address)

    @property
    def destination(self) -> Destination:
        """Where this exporter sends."""
        return self._bounded.destination

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        """Export one collection within the time bound; FAILURE on timeout, error or unreachable endpoint."""
        ok = self._bounded.run(
            lambda: self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            1,
            lambda r: r == MetricExportResult.SUCCESS,
            "metric export",
        )
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the inner exporter, waiting at most the time bound."""
        finished, result, error = self._bounded.call_bounded(lambda: self.inner.force_flush(timeout_millis=timeout_millis))
        return bool(finished and error is None and result is not False)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Shut the inner exporter down, waiting at most the time bound."""
        self._bounded.call_bounded(lambda: self.inner.shutdown(timeout_millis=timeout_millis, **kwargs))
