"""Tracing: the span processor and ``instrument()``; attribute names in :mod:`.attributes`."""

from otel_joules.tracing.instrument import Instrumentation, instrument
from otel_joules.tracing.processor import EnergySpanProcessor

__all__ = ["EnergySpanProcessor", "Instrumentation", "instrument"]
