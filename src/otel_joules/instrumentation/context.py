"""Trace context through environment variables (``TRACEPARENT``, ``TRACESTATE``).

A parent process that starts a child cannot send it HTTP headers; the W3C trace
context goes through the environment instead, under the upper-case names the
OpenTelemetry specification uses for environment carriers. ``otel-joules run`` puts its
root span there; a child instrumented by ``opentelemetry-instrument`` with otel-joules
(or one calling :func:`attach_environment_context`) starts its spans inside that trace.

Always the W3C format, whatever ``OTEL_PROPAGATORS`` says: the variable names are
W3C's, and a reader cannot guess another format from them.
"""

from __future__ import annotations

import os
from typing import Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_joules.config import TRACEPARENT, TRACESTATE

_PROPAGATOR = TraceContextTextMapPropagator()


def context_from_environment(env: Mapping[str, str] | None = None) -> Context | None:
    """The context ``TRACEPARENT`` (and ``TRACESTATE``) carry, or None when absent or invalid."""
    env = os.environ if env is None else env
    traceparent = env.get(TRACEPARENT, "").strip()
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    tracestate = env.get(TRACESTATE, "").strip()
    if tracestate:
        carrier["tracestate"] = tracestate
    extracted = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def environment_for_span(span: trace.Span) -> dict[str, str]:
    """``{"TRACEPARENT": ..., "TRACESTATE": ...}`` for a child process started inside ``span``.

    ``TRACESTATE`` is present only when the span has a trace state; an invalid (non-recording
    no-op) span gives an empty dict.
    """
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    result = {}
    if "traceparent" in carrier:
        result[TRACEPARENT] = carrier["traceparent"]
    if "tracestate" in carrier:
        result[TRACESTATE] = carrier["tracestate"]
    return result


def child_environment(span: trace.Span, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default ``os.environ``) whose trace context is ``span``'s.

    A ``TRACEPARENT``/``TRACESTATE`` inherited from further up is replaced, never kept
    next to the new one.
    """
    result = dict(os.environ if env is None else env)
    result.pop(TRACEPARENT, None)
    result.pop(TRACESTATE, None)
    result.update(environment_for_span(span))
    return result


def attach_environment_context(env: Mapping[str, str] | None = None) -> object | None:
    """Make the environment's trace context current in this thread; return the token, or None.

    Spans started afterwards in this thread without an explicit parent become children of
    the ``TRACEPARENT`` span. Spans created with an explicit context (a server's request
    spans, which extract the caller's headers) are not affected. Pass the token to
    ``opentelemetry.context.detach`` to undo.
    """
    extracted = context_from_environment(env)
    if extracted is None:
        return None
    return otel_context.attach(extracted)
