"""Instrumentation: the front door that wires energy into an application's OpenTelemetry setup.

This package is the composition root: it sits above :mod:`otel_joules.tracing` (the span
processor), :mod:`otel_joules.metrics` (the ``hw.*``/``process.*`` instruments),
:mod:`otel_joules.carbon` and :mod:`otel_joules.meter`, and puts them together; nothing
below it imports it.

- :func:`instrument` / :class:`Instrumentation` (:mod:`.instrument`): one call that puts
  energy on every span of a tracer provider and exports the energy metrics; the handle undoes it.
- :mod:`.context`: the W3C trace context through ``TRACEPARENT``/``TRACESTATE``, so a child
  process joins its parent's trace (:func:`attach_environment_context`,
  :func:`child_environment`, :func:`context_from_environment`, :func:`environment_for_span`).
- :class:`EnergyInstrumentor` (:mod:`.zero_code`): the ``opentelemetry-instrument`` entry
  point. It needs the optional ``opentelemetry-instrumentation`` package
  (``pip install 'otel-joules[instrument]'``), so it is imported only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_joules._lazy import lazy_exports
from otel_joules.instrumentation.instrument import Instrumentation, instrument
from otel_joules.instrumentation.context import (
    attach_environment_context,
    child_environment,
    context_from_environment,
    environment_for_span,
)

if TYPE_CHECKING:
    from otel_joules.instrumentation.zero_code import EnergyInstrumentor

__all__ = [
    "EnergyInstrumentor",
    "Instrumentation",
    "attach_environment_context",
    "child_environment",
    "context_from_environment",
    "environment_for_span",
    "instrument",
]

# EnergyInstrumentor subclasses BaseInstrumentor from an optional extra: imported on
# first use only (an ImportError then names what is missing).
__getattr__, __dir__ = lazy_exports(__name__, {"EnergyInstrumentor": "otel_joules.instrumentation.zero_code"})
