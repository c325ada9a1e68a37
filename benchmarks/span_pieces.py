"""Where an instrumented span's time goes (benchmarks.span_overhead): each piece in a hot loop
(:func:`measure_pieces`) and inside real spans (:func:`measure_itemized`), and the timed batch of spans both use.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from opentelemetry.sdk.trace import TracerProvider

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import SpanAttribution, attributor_for
from otel_joules.meter.interval import Interval
from otel_joules.tracing import processor as processor_module
from otel_joules.tracing._sdk import set_clean_attributes
from otel_joules.tracing.attributes import MeterAttributes, span_attributes


def batch_seconds(tracer, n: int) -> float:  # type: ignore[no-untyped-def]
    """Seconds ``n`` empty spans take on ``tracer``, one after the other."""
    start = time.perf_counter()
    for _ in range(n):
        with tracer.start_as_current_span("op"):
            pass
    return time.perf_counter() - start


def _set_fresh(span, attributes: dict) -> None:  # type: ignore[no-untyped-def]
    """The processor's attribute setter on a span that does not hold these keys yet (as at a span's end)."""
    span._attributes._dict.clear()
    set_clean_attributes(span, attributes)


def measure_pieces(meter: EnergyMeter, n: int = 20000) -> dict[str, float]:
    """Nanoseconds of each piece attribution adds to a span (CPU time of this thread, best of 5)."""
    import timeit

    attributor = attributor_for(meter)
    assert attributor is not None
    clock = attributor.clocks.thread_clock()
    span = TracerProvider().get_tracer("pieces").start_span("x")
    start = meter.snapshot()
    interval = Interval.of_measurement(meter.measure(start, meter.snapshot()), meter)
    measured = span_attributes(interval, None)
    merged = span_attributes(interval, SpanAttribution(1.0, 0.5, 0.0, 1.5))

    def best(function) -> float:  # type: ignore[no-untyped-def]
        return min(timeit.repeat(function, number=n, repeat=5, timer=time.thread_time)) / n * 1e9

    end = meter.snapshot()
    attribution = attributor.close_span(attributor.open_span(None), start, end)
    assert attribution is not None
    plan = MeterAttributes(meter, attributor.kinds)
    return {
        "snapshot_ns": best(meter.snapshot),
        "thread_cpu_clock_read_ns": best(clock),
        "open_and_close_share_ns": best(lambda: attributor.close_span(attributor.open_span(None), start, end)),
        "build_attributes_ns": best(lambda: plan.span_attributes(start, end, attribution)),
        # What the processor does (tracing._sdk.set_clean_attributes) and what the SDK's own call costs.
        "set_all_attributes_ns": best(lambda: _set_fresh(span, merged)),
        "sdk_set_attributes_ns": best(lambda: span.set_attributes(merged)),
        "attributes_count": len(merged),
        "extra_attributes_ns": best(lambda: _set_fresh(span, merged)) - best(lambda: _set_fresh(span, measured)),
    }


#: The pieces of an exact span's cost that measure_itemized times inside real spans.
ITEMS = ("snapshots", "share_ledger", "attribute_dict", "setting_attributes", "hooks", "sdk_end_extra")


def _timed(totals: dict[str, int], key: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, adding the nanoseconds each call takes to ``totals[key]``."""
    clock = time.perf_counter_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        value = function(*args, **kwargs)
        totals[key] += clock() - started
        return value

    return timed


def _wrapper_ns(calls: int = 20000) -> float:
    """What one :func:`_timed` wrapper adds to a call (best of 5), subtracted once per timed call inside another."""
    import timeit

    totals = {"x": 0}
    plain = min(timeit.repeat(_no_op, number=calls, repeat=5, timer=time.perf_counter))
    wrapped_call = _timed(totals, "x", _no_op)
    wrapped = min(timeit.repeat(wrapped_call, number=calls, repeat=5, timer=time.perf_counter))
    return max(0.0, (wrapped - plain) / calls * 1e9)


def _no_op() -> None:
    """The call :func:`_wrapper_ns` wraps."""


def measure_itemized(tracer: Any, processor: EnergySpanProcessor, spans: int, batches: int = 21) -> dict[str, Any]:
    """Where an exact span's overhead goes, timed with ``perf_counter_ns`` around each piece inside real spans.

    The processor's hooks (``on_start``, the wrapped ``end``, ``on_end``) are timed whole, and inside them the
    two snapshots, the share ledger's ``open_span`` and ``close_span``, building the attribute dict and
    setting it; the SDK's own ``end`` is timed apart, and what it costs more than a bare span's (timed the same
    way in bare batches) is ``sdk_end_extra``: handing the exporters a span with the energy attributes. ``hooks`` is
    the hooks' time less the pieces inside them: the clocks beside the snapshots, the parent lookup, the
    wrapper object and its weak references, the dispatch in ``end``. Each timed call inside a hook costs the
    hook one timing wrapper more, measured alone and subtracted.

    Timed batches are interleaved with untimed instrumented and bare ones, so the sum (per-batch medians of
    each piece) is set against the overhead measured without any timing under the same machine noise: what
    neither shows is the SDK calling one more processor, and the timing's own disturbance.
    """
    from opentelemetry.sdk.trace import Span

    meter = processor.meter
    attributor = processor.attributor
    assert attributor is not None, "warm the processor up first"
    ledger = attributor.ledger
    keys = ("on_start", "end", "on_end", "snapshots", "share_ledger", "attribute_dict", "setting_attributes", "sdk_end")
    sdk_end = Span.end
    measuring_end_call = processor_module.MeasuringEnd.__call__

    def timed_bare_batch(n: int) -> float:
        totals = {"sdk_end": 0}
        try:
            Span.end = _timed(totals, "sdk_end", sdk_end)  # type: ignore[method-assign]
            batch_seconds(tracer, n)
        finally:
            Span.end = sdk_end  # type: ignore[method-assign]
        return totals["sdk_end"] / n / 1e3

    timed_methods = ((meter, "snapshot"), (ledger, "open_span"), (ledger, "close_span"), (processor, "on_start"),
                     (processor, "on_end"))
    # Methods an object carries as instance attributes (the span ledger's compiled twins): put back after timing.
    own_methods = [(owner, name, owner.__dict__[name]) for owner, name in timed_methods if name in owner.__dict__]

    def timed_batch(n: int) -> dict[str, float]:
        totals = dict.fromkeys(keys, 0)
        try:
            meter.snapshot = _timed(totals, "snapshots", meter.snapshot)  # type: ignore[method-assign]
            ledger.open_span = _timed(totals, "share_ledger", ledger.open_span)  # type: ignore[method-assign]
            ledger.close_span = _timed(totals, "share_ledger", ledger.close_span)  # type: ignore[method-assign]
            processor_module.span_attributes = _timed(totals, "attribute_dict", span_attributes)
            processor_module.set_clean_attributes = _timed(totals, "setting_attributes", set_clean_attributes)
            processor.on_start = _timed(totals, "on_start", processor.on_start)  # type: ignore[method-assign]
            processor.on_end = _timed(totals, "on_end", processor.on_end)  # type: ignore[method-assign]
            processor_module.MeasuringEnd.__call__ = _timed(totals, "end", processor_module.MeasuringEnd._end)  # type: ignore[method-assign]
            Span.end = _timed(totals, "sdk_end", sdk_end)  # type: ignore[method-assign]
            batch_seconds(tracer, n)
        finally:
            Span.end = sdk_end  # type: ignore[method-assign]
            processor_module.MeasuringEnd.__call__ = measuring_end_call  # type: ignore[method-assign]
            processor_module.set_clean_attributes = set_clean_attributes
            processor_module.span_attributes = span_attributes
            for owner, name in timed_methods:
                owner.__dict__.pop(name, None)
            for owner, name, method in own_methods:
                setattr(owner, name, method)
        return {key: value / n / 1e3 for key, value in totals.items()}

    wrapper_us = _wrapper_ns() / 1e3
    inside = ("snapshots", "share_ledger", "attribute_dict", "setting_attributes")
    # Timed calls inside the hooks, per span: 2 snapshots, open and close, the dict, setting it, the SDK's end.
    nested_calls = 7
    per_batch = max(1, spans // batches)
    items: dict[str, list[float]] = {item: [] for item in ITEMS}
    untimed: dict[bool, list[float]] = {False: [], True: []}
    sdk_end_us: dict[str, list[float]] = {"instrumented": [], "bare": []}
    runs = ("timed", True, False, "timed_bare")
    for i in range(batches):
        for run in runs[i % len(runs):] + runs[: i % len(runs)]:
            processor.enabled = run is True or run == "timed"
            if run == "timed_bare":
                sdk_end_us["bare"].append(timed_bare_batch(per_batch))
            elif run == "timed":
                per_span = timed_batch(per_batch)
                for key in inside:
                    items[key].append(per_span[key])
                sdk_end_us["instrumented"].append(per_span["sdk_end"])
                items["hooks"].append(
                    per_span["on_start"] + per_span["end"] + per_span["on_end"] - per_span["sdk_end"]
                    - sum(per_span[key] for key in inside) - nested_calls * wrapper_us
                )
            else:
                untimed[run].append(batch_seconds(tracer, per_batch) / per_batch * 1e6)
    processor.enabled = True
    items.pop("sdk_end_extra")
    medians = {item: statistics.median(values) for item, values in items.items()}
    medians["sdk_end_extra"] = statistics.median(sdk_end_us["instrumented"]) - statistics.median(sdk_end_us["bare"])
    return {
        "items_us": medians,
        "itemized_us": sum(medians.values()),
        "overhead_us": statistics.median(untimed[True]) - statistics.median(untimed[False]),
        "wrapper_us": wrapper_us,
    }
