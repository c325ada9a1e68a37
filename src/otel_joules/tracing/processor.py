"""The span processor that puts energy on every span of a tracer provider."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.meter.registry import get_energy_meter
from otel_joules.tracing.attributes import measurement_attributes

_log = logging.getLogger("otel_joules")


class EnergySpanProcessor(SpanProcessor):
    """Adds energy attributes (``energy.joules`` and friends) to every span it sees.

    The SDK hands ``on_end`` a span whose attributes are already frozen, so the
    processor instead wraps each span's ``end`` in ``on_start``: the closing snapshot
    and the attributes are taken just before the SDK freezes the span, and every
    processor and exporter of the provider, including those added before this one,
    sees them.

    The wrapper holds only a weak reference to its span and the opening snapshot, so
    ended and abandoned spans leave nothing behind.

    Energy is machine-level: concurrent or nested spans each get everything the
    machine spent during their own interval, so their values overlap.

    Args:
        meter: The meter to read; the process-wide shared meter when omitted.
        on_measurement: Called with ``(span, measurement)`` before the span ends, for
            layers that add attributes of their own (carbon, for instance).
    """

    def __init__(
        self,
        meter: EnergyMeter | None = None,
        *,
        on_measurement: Callable[[Span, EnergyMeasurement], None] | None = None,
    ) -> None:
        self._meter = meter
        self._on_measurement = on_measurement
        self.enabled = True
        self._failure_reported = False

    @property
    def meter(self) -> EnergyMeter:
        """The meter this processor reads (the shared one is created on first use)."""
        if self._meter is None:
            self._meter = get_energy_meter()
        return self._meter

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Take the opening snapshot and arrange for the closing one before the span freezes."""
        if not self.enabled:
            return
        try:
            meter = self.meter
            start = meter.snapshot()
        except Exception as exc:  # noqa: BLE001 - a failing meter must not break the span
            self._report_failure(exc)
            return
        span.end = _MeasuringEnd(span, self, meter, start)  # type: ignore[method-assign]

    def _finish(
        self, span: Span, meter: EnergyMeter, start: EnergySnapshot, measurement: EnergyMeasurement | None
    ) -> None:
        try:
            if measurement is None:
                measurement = meter.measure(start, meter.snapshot())
            if not measurement.joules_by_domain:
                return
            span.set_attributes(measurement_attributes(measurement))
            if self._on_measurement is not None:
                self._on_measurement(span, measurement)
        except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
            self._report_failure(exc)

    def _report_failure(self, exc: Exception) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.warning("otel-joules: could not measure energy for spans (%s); spans end without energy attributes", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Nothing to do: the attributes were set before the span froze."""

    def shutdown(self) -> None:
        """Stop adding energy to spans started from now on."""
        self.enabled = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here."""
        return True


class _MeasuringEnd:
    """Stands in for one span's ``end``: measures, sets the attributes, then really ends it.

    Holds its span and processor weakly (a strong reference would make span -> end ->
    span a cycle) and calls the span class's own ``end`` function.
    """

    __slots__ = ("_span_ref", "_processor_ref", "_meter", "_start", "_original_end")

    def __init__(self, span: Span, processor: EnergySpanProcessor, meter: EnergyMeter, start: EnergySnapshot) -> None:
        self._span_ref = weakref.ref(span)
        self._processor_ref = weakref.ref(processor)
        self._meter = meter
        self._start = start
        self._original_end = type(span).end

    def __call__(self, end_time: int | None = None) -> None:
        self._end(None, end_time)

    def _end(self, measurement: EnergyMeasurement | None, end_time: int | None) -> None:
        span = self._span_ref()
        if span is None:
            return
        processor = self._processor_ref()
        if processor is not None and processor.enabled and span.end_time is None:
            processor._finish(span, self._meter, self._start, measurement)
        self._original_end(span, end_time)


def end_span_with_measurement(span: Any, measurement: EnergyMeasurement, end_time: int | None = None) -> None:
    """End ``span`` carrying ``measurement``, taken by the caller, instead of a second measurement.

    For adapters that measure an interval themselves (the pyJoules API hands the same
    numbers to its handlers): the span gets exactly those energy attributes, and an
    :class:`EnergySpanProcessor` on the span's provider uses them, hooks included,
    rather than reading the counters again.
    """
    end = getattr(span, "__dict__", {}).get("end")
    if isinstance(end, _MeasuringEnd):
        end._end(measurement, end_time)
        return
    if measurement.joules_by_domain and span.is_recording():
        span.set_attributes(measurement_attributes(measurement))
    span.end(end_time)
