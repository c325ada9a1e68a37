"""OpenTelemetry spans for pyJoules-style measurements ("spans for free").

When the global tracer provider is an OpenTelemetry **SDK** provider, every measured
call gets a span named after its tag, and every :class:`EnergyContext` a parent span
with one child span per recorded segment. Their ``energy.*`` attributes
(:func:`otel_joules.tracing.attributes.span_attributes`) are computed from the
very snapshots that produce the handler's samples, so the span and the CSV row say
the same thing.

No double measurement: if the user also ran ``otel_joules.instrument()``, its
:class:`~otel_joules.EnergySpanProcessor` would take its own closing snapshot and
overwrite these attributes with a second, slightly different measurement. Our spans
are therefore ended with :func:`otel_joules.tracing.end_span_with_measurement`, which
hands the processor our measurement (its ``on_measurement`` hook included) instead.
The processor's opening snapshot still happens; it is its only cost.

Without an SDK provider (the API's no-op default) nothing here runs.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from otel_joules._version import __version__
from otel_joules.meter.meter import EnergyMeasurement
from otel_joules.tracing.processor import end_span_with_measurement

_log = logging.getLogger("otel_joules.pyjoules")

#: Instrumentation scope of the spans made here.
TRACER_NAME = "otel_joules.pyjoules"


def sdk_tracer() -> "tuple[Any, Tracer] | None":
    """The global provider and our tracer when the provider is an SDK one, else None."""
    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        return None
    return provider, provider.get_tracer(TRACER_NAME, __version__)


class SpanHandle:
    """One started span and the provider it belongs to."""

    __slots__ = ("span", "provider")

    def __init__(self, provider: Any, span: Span) -> None:
        self.provider = provider
        self.span = span

    @classmethod
    def start(cls, name: str, context: Any = None) -> "Optional[SpanHandle]":
        """Start a span named ``name`` (child of ``context``, else of the current span); None without an SDK provider."""
        found = sdk_tracer()
        if found is None:
            return None
        provider, tracer = found
        return cls(provider, tracer.start_span(name, context=context))

    def end(self, measurement: Optional[EnergyMeasurement]) -> None:
        """Set the energy attributes of ``measurement`` (if it measured anything) and end the span."""
        if measurement is None:
            self.span.end()
            return
        end_span_with_measurement(self.span, measurement)
