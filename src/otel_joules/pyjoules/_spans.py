"""OpenTelemetry spans for pyJoules-style measurements ("spans for free").

When the global tracer provider is an OpenTelemetry **SDK** provider, every measured
call gets a span named after its tag, and every :class:`EnergyContext` a parent span
with one child span per recorded segment. Their ``energy.*`` attributes
(:func:`otel_joules.tracing.attributes.measurement_attributes`) are computed from the
very snapshots that produce the handler's samples, so the span and the CSV row say
the same thing.

No double measurement: if the user also ran ``otel_joules.instrument()``, its
:class:`~otel_joules.EnergySpanProcessor` would take its own closing snapshot and
overwrite these attributes with a second, slightly different measurement. Our spans
are therefore ended through the SDK's own ``Span.end`` (the processor's per-span
wrapper is skipped) after our attributes are set, and the processor's
``on_measurement`` hook (carbon and other extras) is called with our measurement. The
processor's opening snapshot still happens; it is its only cost.

Without an SDK provider (the API's no-op default) nothing here runs.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Optional

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from otel_joules._version import __version__
from otel_joules.meter.meter import EnergyMeasurement
from otel_joules.tracing.attributes import measurement_attributes
from otel_joules.tracing.processor import EnergySpanProcessor

_log = logging.getLogger("otel_joules.pyjoules")

#: Instrumentation scope of the spans made here.
TRACER_NAME = "otel_joules.pyjoules"


def sdk_tracer() -> "tuple[Any, Tracer] | None":
    """The global provider and our tracer when the provider is an SDK one, else None."""
    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        return None
    return provider, provider.get_tracer(TRACER_NAME, __version__)


def _energy_processors(provider: Any) -> Iterator[EnergySpanProcessor]:
    """The enabled energy processors registered on ``provider`` (SDK internals; none if they differ)."""
    multi = getattr(provider, "_active_span_processor", None)
    for processor in getattr(multi, "_span_processors", ()):
        if isinstance(processor, EnergySpanProcessor) and processor.enabled:
            yield processor


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
        span = self.span
        if measurement is None or not measurement.joules_by_domain:
            span.end()
            return
        try:
            span.set_attributes(measurement_attributes(measurement))
            for processor in _energy_processors(self.provider):
                hook = getattr(processor, "_on_measurement", None)
                if hook is not None:
                    hook(span, measurement)
        except Exception as exc:  # noqa: BLE001 - the span must end whatever happens
            _log.warning("otel-joules: could not put energy attributes on span %r: %s", getattr(span, "name", "?"), exc)
        wrapper = getattr(span, "__dict__", {}).get("end")
        if wrapper is not None and getattr(wrapper, "__qualname__", "").startswith(EnergySpanProcessor.__name__ + "."):
            # The processor's wrapper would measure this span a second time: end it directly.
            type(span).end(span)
        else:
            span.end()


__all__ = ["SpanHandle", "TRACER_NAME", "sdk_tracer"]
