"""Tracing: the span processor and ``instrument()``; attribute names in :mod:`.attributes`."""

from otel_joules.tracing.instrument import Instrumentation, instrument
from otel_joules.tracing.processor import EnergySpanProcessor, end_span_with_measurement

__all__ = ["EnergySpanProcessor", "Instrumentation", "end_span_with_measurement", "instrument"]
