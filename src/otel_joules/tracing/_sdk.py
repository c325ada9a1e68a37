"""Every private name of the OpenTelemetry API and SDK that otel-joules touches, and nothing else.

The SDK has no public way to do four things this package needs, so they are done here, each
guarded so that an SDK whose internals differ gets the slower public path (or, for removal,
a processor that stays registered but disabled), never an error:

* set our own already-clean attributes on a live span without the SDK's per-value cleaning
  (:func:`set_clean_attributes`: the span's ``_attributes`` ``BoundedAttributes`` with its
  ``_dict``, ``_lock`` and ``_immutable``, and the span's ``_lock`` and ``_end_time``);
* take a span processor out of a provider (:func:`remove_span_processor`: the provider's
  ``_active_span_processor`` and its ``_lock`` and ``_span_processors``);
* hear every setting of the API's global tracer provider (:func:`wrap_global_tracer_provider_setter`:
  the module function ``opentelemetry.trace._set_tracer_provider``);
* keep a wrapped metric exporter's preferences (:func:`metric_exporter_preferences`: its
  ``_preferred_temporality`` and ``_preferred_aggregation``).

:data:`PRIVATE_NAMES` lists them; ``tests/tracing/test_sdk_internals.py`` checks each on the
installed SDK, and CI runs it on the lowest SDK the pin allows and on the newest, so a release
that renames one fails loudly there instead of silently taking the slow path.
"""

from __future__ import annotations

from typing import Any, Callable

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes

#: (owner, private attribute) pairs this module relies on, for the version test.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("sdk.trace.Span", "_attributes"),
    ("sdk.trace.Span", "_lock"),
    ("sdk.trace.Span", "_end_time"),
    ("attributes.BoundedAttributes", "_dict"),
    ("attributes.BoundedAttributes", "_lock"),
    ("attributes.BoundedAttributes", "_immutable"),
    ("sdk.trace.TracerProvider", "_active_span_processor"),
    ("sdk.trace.SynchronousMultiSpanProcessor", "_lock"),
    ("sdk.trace.SynchronousMultiSpanProcessor", "_span_processors"),
    ("trace", "_set_tracer_provider"),
    ("sdk.metrics.export.MetricExporter", "_preferred_temporality"),
    ("sdk.metrics.export.MetricExporter", "_preferred_aggregation"),
)


def set_clean_attributes(span: Any, attributes: dict[str, Any]) -> None:
    """``span.set_attributes(attributes)`` for values this package made, in a fraction of its time.

    The SDK cleans every value (type checks, copies, truncation) and inserts them one by one;
    that was the largest single cost of an instrumented span (~5 us of 13 attributes). Our
    values are floats, bools and short strings, which the cleaning returns unchanged, so when
    nothing the SDK would do differently applies (no value-length limit, room under the
    attribute-count limit, none of our keys set already, the span not ended) they go straight
    into the span's attribute dict under the same two locks ``set_attributes`` takes. Anything
    else, including an SDK whose attribute container is not a ``BoundedAttributes``, takes
    ``set_attributes`` itself.
    """
    store = getattr(span, "_attributes", None)
    if (
        type(store) is BoundedAttributes
        and store.max_value_len is None
        and not getattr(store, "_immutable", True)
        and (store.maxlen is None or len(store._dict) + len(attributes) <= store.maxlen)
        and store._dict.keys().isdisjoint(attributes)
    ):
        with span._lock:
            if span._end_time is None:
                with store._lock:
                    store._dict.update(attributes)
                return
    span.set_attributes(attributes)


def remove_span_processor(provider: Any, processor: object) -> None:
    """Take ``processor`` out of ``provider``'s processors, where the SDK's structure allows it.

    The SDK has no public removal; when its internals differ the processor stays registered
    (the caller disables it first, so that is still correct).
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    processors = getattr(multi, "_span_processors", None)
    if lock is None or not isinstance(processors, tuple):
        return
    with lock:
        multi._span_processors = tuple(p for p in multi._span_processors if p is not processor)


def wrap_global_tracer_provider_setter(after: Callable[[], None]) -> Callable[[], None]:
    """Call ``after()`` right after every setting of the API's global tracer provider; returns the unwrap.

    Every way the global is set (``trace.set_tracer_provider``, the SDK's auto-configuration,
    which imported it by name, and ``OTEL_PYTHON_TRACER_PROVIDER`` in ``get_tracer_provider``)
    calls the module function ``opentelemetry.trace._set_tracer_provider``, looked up by name at
    each call, so wrapping it there sees them all. The unwrap leaves a wrapper that another
    party put on top since in place: ours then just passes through.
    """
    original = trace._set_tracer_provider  # type: ignore[attr-defined]

    def set_then_call(tracer_provider: Any, log: bool) -> None:
        original(tracer_provider, log)
        after()

    def unwrap() -> None:
        if getattr(trace, "_set_tracer_provider", None) is set_then_call:
            trace._set_tracer_provider = original  # type: ignore[attr-defined]

    trace._set_tracer_provider = set_then_call  # type: ignore[attr-defined]
    return unwrap


def metric_exporter_preferences(exporter: Any) -> tuple[Any, Any]:
    """A metric exporter's preferred temporality and aggregation (None each where it keeps none).

    A metric reader reads them from its own exporter, so a wrapper must repeat its inner one's.
    """
    return getattr(exporter, "_preferred_temporality", None), getattr(exporter, "_preferred_aggregation", None)
