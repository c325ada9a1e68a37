"""Tracing: the span processor that puts energy on spans; attribute building in :mod:`.attributes`.

``instrument()``, which adds this processor to a tracer provider, lives in
:mod:`otel_joules.instrumentation` (the composition root above tracing and metrics).
"""

from otel_joules.tracing.processor import EnergySpanProcessor, end_span_with_measurement

__all__ = ["EnergySpanProcessor", "end_span_with_measurement"]
