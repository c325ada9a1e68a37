"""Cost of an instrumented span relative to a bare span, and memory after 100k spans.

Both kinds of span run on the same TracerProvider, whose only other processor hands
spans to an exporter that drops them; the energy processor is switched on and off
between interleaved batches so machine noise hits both alike. Counters come from a
fake powercap tree with 4 domains (package, core, dram, psys) in a temp dir, plus one GPU
read off the span path in the meter's device thread exactly as NVML is (``--no-gpu``
leaves it out); the GPU's counter is a clock-driven stand-in, so the NVML call itself
(off the span path either way) is not in the figures.

    python -m benchmarks.span_overhead [--spans N] [--no-gpu] [--source direct|agent] [--coarsening]
                                       [--synchronize torch|jax|cupy|auto] [--json]
    # from the repository root (it imports tests.fakes)

``--synchronize NAME`` times only the exact mode with and without ``synchronize=NAME`` (4 RAPL
domains, no GPU stand-in): what waiting for the device at both span boundaries costs a span that
queued nothing. On a machine without the device (torch on the CPU) it is the cost of finding
that there is nothing to wait for; on a GPU, of a synchronisation of an idle device. A device
with work queued stalls for as long as that work takes: the reason it is off for plain spans.

``--source agent`` reads the same fake tree through a real ``otel-joules agent`` process (its socket in the
temp dir) instead of the files: the library's agent channels return the readings the agent pushed, so a span
is to cost no more than with direct reads. ``--coarsening`` measures what the agent's ``--min-interval-ms``
costs spans in accuracy: spans of 50 ms, 200 ms and 1 s against a counter whose readings arrive only every
interval, at a random phase (as the agent's pushes do).

Targets (issue 10): the exact mode at most 1.8x a bare span, the cached mode at most 1.4x,
with attribution on (the default); issue 9 asked that attribution keep the exact mode at or
below its cost before attribution (2.1-2.6x).

Every mode is timed on both span paths where the C extension is built (``otel_joules.meter._fastsnap``,
the default there) and on its pure-Python reference (``OTEL_JOULES_FAST_PATH=0``), one after the other
in one run; the top-level figures of ``--json`` are the default path's. For the exact mode of each path,
``itemized`` times each piece inside real spans (:func:`measure_itemized`) and sets their sum against the
overhead measured without timing: the issue-21 check that they add up within 15%.

Three modes are timed: ``exact`` (the default: every snapshot reads every counter, and the
span's share is attributed), ``exact_no_attribution`` (the same without
``energy.attributed.*``: the cost before issue 9) and ``cached`` (``max_snapshot_age_s``: a
snapshot younger than the window is reused; with attribution). ``pieces`` times what
attribution adds per span on its own: two reads of the thread's CPU clock, the ledger
bookkeeping at start and end (clock reads included), and the five extra attributes through the
SDK, and the rest of a span's cost: one snapshot, building the attribute dict, and the SDK's
``set_attributes`` of all of them, each in a hot loop (caches warm: inside real spans the same code
costs more, which is why the itemized list is timed there instead). The accuracy of the exact and cached modes is measured against a counter that, like RAPL,
is updated every millisecond at a known power, driven by the clock (see ClockCounterChannel).

Two floors bound what any processor of this design can reach on the machine at hand
(:class:`FloorProcessor`): ``floor_exact`` does only what the exact mode cannot leave out (read
the 4 RAPL counters and the thread's CPU clock at both ends, wrap ``end``, build and set as many
attributes as the exact mode sets) and ``floor_cached`` the same without the counter reads. No
wrap correction, GPU, totals or share bookkeeping: the real modes cost more than their floor, so
a target below a floor cannot be met by this design in Python. Issue 37's target (exact with attribution at
most 1.3x ``floor_exact``) is measured with both in the same interleaved batches (``against_floor``): the
floors' own run comes minutes after the modes', and this VM's bare span moves by half between them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import json
import operator
import statistics
import sys
import tempfile
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import SpanAttribution, attributor_for
from otel_joules.attribution.procfs import CpuClocks
from otel_joules.config import Settings
from otel_joules.meter.interval import Interval
from otel_joules.meter.fastpath import COMPILED
from otel_joules.sensors import rapl
from otel_joules.sensors.base import Channel, Domain
from otel_joules.semconv import KIND_CPU, KIND_GPU
from otel_joules.tracing import processor as processor_module
from otel_joules.tracing.attributes import MeterAttributes, span_attributes
from otel_joules.tracing._sdk import set_clean_attributes
from tests.fakes.powercap import ConstantPower, make_powercap

#: Issue 10's bounds on instrumented / bare, per mode.
TARGET_RATIOS = {"exact": 1.8, "exact_no_attribution": 1.8, "cached": 1.4}
#: The cached mode's window: a fifth of RAPL's ~1 ms update period.
CACHED_WINDOW_S = 0.0002
#: Issue 21: seconds per span the span path may spend acquiring locks or waiting on a condition, under cProfile.
TARGET_LOCK_WAIT_US = 0.5


class DropExporter(SpanExporter):
    """Accepts every span and keeps none."""

    def export(self, spans: Sequence) -> SpanExportResult:  # type: ignore[override]
        return SpanExportResult.SUCCESS


def _settings(max_age_s: float, fast_path: bool) -> Settings:
    """A meter's settings for one mode on one span path (compiled, or its pure-Python reference)."""
    return Settings.from_env(max_snapshot_age_s=max_age_s, fast_path=fast_path)


class _FloorEnd:
    """The floor's stand-in for a span's ``end``: as cheap as the real processor's wrapper can be."""

    __slots__ = ("_span_ref", "_processor", "_start")

    def __init__(self, span: Any, processor: "FloorProcessor", start: list) -> None:
        self._span_ref = weakref.ref(span)
        self._processor = processor
        self._start = start

    def __call__(self, end_time: int | None = None) -> None:
        span = self._span_ref()
        processor = self._processor
        end = processor.read()
        attributes = processor.template.copy()
        attributes.update(zip(processor.keys, map(operator.sub, end, self._start)))
        set_clean_attributes(span, attributes)
        type(span).end(span, end_time)


class FloorProcessor(SpanProcessor):
    """Does per span only what a mode cannot leave out, to show the least that mode can cost here.

    Reads the given counter descriptors (``pread`` + ``int``, as the meter's snapshot does) and the
    thread's CPU clock (attribution's one read per end) at start and end, wraps ``end`` as
    :class:`~otel_joules.EnergySpanProcessor` does, and sets one attribute per key through the
    processor's own setter: the differences of the reads, the rest copied from a template. No wrap
    correction, GPU, totals or shares.

    Args:
        fds: The counter descriptors to read at each end (none for the cached mode's floor).
        clock: The thread's CPU clock, as the attributor reads it.
        keys: The attribute keys to set, as many as the real mode sets.
    """

    def __init__(self, fds: Sequence[int], clock: Callable[[], float], keys: Sequence[str]) -> None:
        self.enabled = True
        self.keys = tuple(keys)
        self.template = dict.fromkeys(self.keys, 0.0)
        pread = os.pread
        fds = tuple(fds)

        def read() -> list:
            values = [int(pread(fd, 32, 0)) for fd in fds]
            values.append(clock())
            return values

        self.read = read

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Read the clocks and wrap the span's ``end``."""
        if self.enabled:
            span.end = _FloorEnd(span, self, self.read())


def _batch_seconds(tracer, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        with tracer.start_as_current_span("op"):
            pass
    return time.perf_counter() - start


def measure_ratio(tracer, processor: EnergySpanProcessor | FloorProcessor, spans: int, batches: int = 21) -> dict[str, float]:
    """Median per-span seconds with ``processor`` on and off, in interleaved batches, and their ratio."""
    per_batch = max(1, spans // batches)
    bare: list[float] = []
    instrumented: list[float] = []
    for i in range(batches):
        for enabled in ((False, True) if i % 2 == 0 else (True, False)):
            processor.enabled = enabled
            seconds = _batch_seconds(tracer, per_batch)
            (instrumented if enabled else bare).append(seconds / per_batch)
    bare_us = statistics.median(bare) * 1e6
    instrumented_us = statistics.median(instrumented) * 1e6
    return {"bare_us": bare_us, "instrumented_us": instrumented_us, "ratio": instrumented_us / bare_us}


def _is_lock_wait(function: tuple[str, int, str]) -> bool:
    """A cProfile entry that takes a lock or waits on one: ``acquire``/``__enter__`` of a lock, ``Condition.wait``."""
    filename, _, name = function
    if filename == "~":  # a builtin: "<method 'acquire' of '_thread.lock' objects>"
        return ("_thread.lock" in name or "_thread.RLock" in name) and ("acquire" in name or "__enter__" in name)
    return filename.endswith("threading.py") and name in ("wait", "acquire", "__enter__")


def measure_lock_waits(tracer, processor: EnergySpanProcessor, spans: int) -> dict[str, float]:
    """Lock acquisitions and the time spent in them per instrumented span, under cProfile.

    Profiles the calling thread only: time the span path spends taking a lock (or waiting on a
    condition) that a background thread may hold. The bare-span part (the SDK's own locks) is
    profiled apart and subtracted, so the figure is what the energy processor adds.
    """
    import cProfile
    import pstats

    def profiled(enabled: bool) -> tuple[float, float]:
        processor.enabled = enabled
        profile = cProfile.Profile()
        profile.enable()
        _batch_seconds(tracer, spans)
        profile.disable()
        stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
        calls = sum(entry[1] for function, entry in stats.items() if _is_lock_wait(function))
        seconds = sum(entry[2] for function, entry in stats.items() if _is_lock_wait(function))
        return calls / spans, seconds / spans

    bare_calls, bare_s = profiled(False)
    calls, seconds = profiled(True)
    processor.enabled = True
    return {
        "lock_calls_per_span": calls - bare_calls,
        "lock_wait_us_per_span": (seconds - bare_s) * 1e6,
        "target_us": TARGET_LOCK_WAIT_US,
    }


def measure_memory(tracer, spans: int) -> dict[str, float]:
    """Traced memory before and after ``spans`` spans (half ended, half abandoned)."""
    gc.collect()
    tracemalloc.start()
    for _ in range(1000):  # warm caches first
        with tracer.start_as_current_span("warm"):
            pass
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(spans):
        if i % 2:
            tracer.start_span("abandoned")
        else:
            with tracer.start_as_current_span("ended"):
                pass
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"spans": spans, "bytes_before": before, "bytes_after": after, "bytes_per_span": (after - before) / spans}


class ClockCounterChannel(Channel):
    """A counter that behaves like RAPL's: it advances by watts x period once per period.

    Driven by the monotonic clock rather than by a writer process, so the accuracy
    figures show what the snapshots cost, not how late another process was scheduled.
    """

    def __init__(self, watts: float, update_period_s: float = 0.001) -> None:
        super().__init__(
            Domain("package_0", KIND_CPU, "clock-driven RAPL stand-in", "clock", update_period_s=update_period_s)
        )
        self._step_uj = round(watts * update_period_s * 1e6)
        self._period_ns = round(update_period_s * 1e9)
        self._origin_ns = time.monotonic_ns()

    def read_uj(self) -> int:
        return (time.monotonic_ns() - self._origin_ns) // self._period_ns * self._step_uj


class ClockGpuChannel(ClockCounterChannel):
    """A GPU counter read like NVML's: ``may_block``, so the meter reads it in its device thread."""

    def __init__(self, watts: float = 300.0) -> None:
        Channel.__init__(
            self, Domain("nvidia_gpu_0", KIND_GPU, "clock-driven NVML stand-in", "GPU-bench", update_period_s=0.1)
        )
        self._step_uj = round(watts * 0.1 * 1e6)
        self._period_ns = 100_000_000
        self._origin_ns = time.monotonic_ns()

    @property
    def may_block(self) -> bool:
        return True


def measure_accuracy(
    max_age_s: float, watts: float = 50.0, span_s: float = 0.02, spans: int = 200, fast_path: bool = True
) -> dict[str, float]:
    """Mean and worst relative error of span energy against watts x span duration.

    The counter advances in 1 ms steps (RAPL's update period), so even exact reads are
    off by up to one step at each end; the cached mode must not be measurably worse.
    """
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    meter = EnergyMeter(channels=[ClockCounterChannel(watts)], settings=_settings(max_age_s, fast_path))
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter))
    tracer = provider.get_tracer("accuracy")
    for _ in range(spans):
        with tracer.start_as_current_span("before"):
            pass  # a span ending right before: its snapshot is what the cache could reuse
        with tracer.start_as_current_span("timed"):
            deadline = time.perf_counter() + span_s
            while time.perf_counter() < deadline:
                pass
    errors = []
    for span in exporter.get_finished_spans():
        if span.name == "timed":
            truth_j = watts * (span.end_time - span.start_time) / 1e9
            errors.append(abs(span.attributes["energy.package_0.joules"] - truth_j) / truth_j)
    meter.close()
    return {"mean_rel_error": statistics.mean(errors), "max_rel_error": max(errors), "one_update_rel": 0.001 / span_s}


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
            _batch_seconds(tracer, n)
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
            _batch_seconds(tracer, n)
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
                untimed[run].append(_batch_seconds(tracer, per_batch) / per_batch * 1e6)
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


def _floor_tracer(tree: Any, exact: bool, attributes_count: int) -> tuple[Any, FloorProcessor, list[Channel]]:
    """A tracer of a provider with the floor of the exact mode (``exact``: the 4 counters read) or of the cached
    mode, and the counters' channels (the caller closes them)."""
    channels = rapl.discover(Settings(sysfs_root=tree.sysfs_root)).channels
    fds = [channel.pread_fd for channel in channels]
    assert all(fd is not None for fd in fds), "the floor reads the counters as the meter does: by descriptor"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    processor = FloorProcessor(fds if exact else [], CpuClocks().thread_clock(), [f"floor.{i}" for i in range(attributes_count)])
    provider.add_span_processor(processor)
    return provider.get_tracer("floor"), processor, channels


def measure_against_floor(
    tree: Any, tracer: Any, processor: EnergySpanProcessor, spans: int, attributes_count: int, batches: int = 21
) -> dict[str, float]:
    """The exact mode against its floor in the same batches: bare, exact and floor batches interleaved, so machine
    noise hits all three alike (the floors' own run, :func:`measure_floors`, comes minutes after the modes').

    ``ratio`` is the exact mode's median per-span time over the floor's: issue 37's target, at most 1.3."""
    floor_tracer, _, channels = _floor_tracer(tree, True, attributes_count)
    _batch_seconds(floor_tracer, max(2000, spans // 10))  # warm-up, untimed
    per_batch = max(1, spans // batches)
    times: dict[str, list[float]] = {"bare": [], "exact": [], "floor": []}
    runs = ("bare", "exact", "floor")
    for i in range(batches):
        for run in runs[i % 3:] + runs[: i % 3]:
            processor.enabled = run == "exact"
            times[run].append(_batch_seconds(floor_tracer if run == "floor" else tracer, per_batch) / per_batch)
    processor.enabled = True
    for channel in channels:
        channel.close()
    bare_us, exact_us, floor_us = (statistics.median(times[run]) * 1e6 for run in runs)
    return {
        "bare_us": bare_us,
        "exact_us": exact_us,
        "floor_us": floor_us,
        "exact_ratio": exact_us / bare_us,
        "floor_ratio": floor_us / bare_us,
        "ratio": exact_us / floor_us,
    }


def measure_floors(tree: Any, spans: int, attributes_count: int) -> dict[str, dict[str, float]]:
    """The ratios of :class:`FloorProcessor` for the exact and the cached mode, on the same counters."""
    floors = {}
    for mode, exact in (("floor_exact", True), ("floor_cached", False)):
        tracer, processor, channels = _floor_tracer(tree, exact, attributes_count)
        measure_ratio(tracer, processor, max(2000, spans // 10))
        floors[mode] = measure_ratio(tracer, processor, spans)
        for channel in channels:
            channel.close()
    return floors


class CoarsenedClockChannel(ClockCounterChannel):
    """The clock-driven RAPL stand-in as seen through the agent: the value of its last push, every ``interval_s``."""

    def __init__(self, watts: float, interval_s: float, phase_s: float) -> None:
        super().__init__(watts)
        self.domain = Domain("package_0", KIND_CPU, "coarsened stand-in", "clock", update_period_s=interval_s)
        self._interval_ns = round(interval_s * 1e9)
        self._phase_ns = round(phase_s * 1e9)

    def read_uj(self) -> int:
        elapsed_ns = time.monotonic_ns() - self._origin_ns - self._phase_ns
        pushed_ns = elapsed_ns // self._interval_ns * self._interval_ns + self._phase_ns
        return max(0, pushed_ns) // self._period_ns * self._step_uj


def measure_coarsening(interval_s: float, span_s: float, spans: int, watts: float = 50.0) -> dict[str, float]:
    """Per-span and summed relative error of spans of ``span_s`` against readings every ``interval_s``."""
    import random

    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    meter = EnergyMeter(channels=[CoarsenedClockChannel(watts, interval_s, random.uniform(0, interval_s))], sample=False)
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    tracer = provider.get_tracer("coarsening")
    for _ in range(spans):
        time.sleep(random.uniform(0, interval_s))  # spans start at any phase of the pushes
        with tracer.start_as_current_span("timed"):
            time.sleep(span_s)
    errors, measured_j, truth_j = [], 0.0, 0.0
    for span in exporter.get_finished_spans():
        truth = watts * (span.end_time - span.start_time) / 1e9
        value = span.attributes["energy.package_0.joules"]
        errors.append(abs(value - truth) / truth)
        measured_j += value
        truth_j += truth
    meter.close()
    return {
        "mean_rel_error": statistics.mean(errors),
        "max_rel_error": max(errors),
        "sum_rel_error": measured_j / truth_j - 1,
        "bound_rel": interval_s / span_s,
    }


#: (span seconds, spans) for the coarsening runs: ~30 s per interval.
COARSENING_SPANS = ((0.05, 200), (0.2, 50), (1.0, 10))
COARSENING_INTERVALS_MS = (1, 10, 50, 100)


def _agent_channels(tree: Any, tmp: str) -> tuple[list[Channel], Any]:
    """The tree's zones through a real agent process (stopped by the caller)."""
    import subprocess

    from otel_joules.sensors import agent

    runtime = Path(tmp) / "run"
    socket_path = str(runtime / "agent.sock")
    env = {**os.environ, "OTEL_JOULES_SYSFS_ROOT": tree.sysfs_root}
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_joules.cli.main", "agent", "--socket", socket_path, "--group", str(os.getgid())],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not os.path.exists(socket_path):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise SystemExit("the agent did not start")
        time.sleep(0.05)
    found = agent.discover(Settings(sysfs_root=tree.sysfs_root, agent_socket=socket_path))
    if not found.channels:
        process.kill()
        raise SystemExit(f"no agent channels: {found.unavailable}")
    return found.channels, process


def _call_seconds(call: Callable[[], Any], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return time.perf_counter() - started


def measure_synchronize(name: str, spans: int, batches: int = 21) -> dict[str, Any]:
    """Per-span seconds of the exact mode without and with ``synchronize=name``, in interleaved batches.

    One processor whose synchronizer is swapped between batches, so machine noise hits both alike.
    """
    with tempfile.TemporaryDirectory() as tmp:
        tree = make_powercap(Path(tmp) / "sys", "four_domains")
        meter = EnergyMeter(channels=rapl.discover(Settings(sysfs_root=tree.sysfs_root)).channels)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
        processor = EnergySpanProcessor(meter, synchronize=name)
        synchronizer = processor._synchronize
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("benchmark")
        per_batch = max(1, spans // batches)
        _batch_seconds(tracer, max(2000, spans // 10))  # warm-up (and the framework's import), untimed
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(batches):
            for synchronized in ((False, True) if i % 2 == 0 else (True, False)):
                processor._synchronize = synchronizer if synchronized else None
                times[synchronized].append(_batch_seconds(tracer, per_batch) / per_batch)
        meter.close()
        # The call alone, best of several runs: on a busy machine the span timings above can hide it.
        calls = 20_000
        call_ns = min(_call_seconds(synchronizer, calls) for _ in range(5)) / calls * 1e9
    plain_us, synced_us = (statistics.median(times[key]) * 1e6 for key in (False, True))
    return {
        "synchronize": name,
        "call_ns": call_ns,
        "exact_us": plain_us,
        "exact_synchronized_us": synced_us,
        "synchronize_us_per_span": synced_us - plain_us,
        "ratio": synced_us / plain_us,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans per kind for the timing")
    parser.add_argument("--memory-spans", type=int, default=100_000)
    parser.add_argument("--no-accuracy", action="store_true", help="skip the accuracy runs")
    parser.add_argument("--no-gpu", action="store_true", help="RAPL domains only")
    parser.add_argument("--source", choices=("direct", "agent"), default="direct", help="read RAPL files, or through a real agent")
    parser.add_argument("--coarsening", action="store_true", help="only measure the accuracy cost of the agent's intervals")
    parser.add_argument("--synchronize", choices=("torch", "jax", "cupy", "auto"),
                        help="only time the exact mode with and without synchronize=NAME")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.synchronize:
        synchronized = measure_synchronize(args.synchronize, args.spans)
        if args.json:
            print(json.dumps(synchronized, indent=2))
            return 0
        print(
            f"exact span {synchronized['exact_us']:.2f} us; with synchronize={args.synchronize} "
            f"{synchronized['exact_synchronized_us']:.2f} us ({synchronized['ratio']:.2f}x): "
            f"{synchronized['synchronize_us_per_span']:+.2f} us per span for its two synchronisations; "
            f"one call alone {synchronized['call_ns']:.0f} ns"
        )
        return 0
    if args.coarsening:
        coarsening = {
            f"{interval_ms}ms": {
                f"{span_s:g}s": measure_coarsening(interval_ms / 1e3, span_s, spans) for span_s, spans in COARSENING_SPANS
            }
            for interval_ms in COARSENING_INTERVALS_MS
        }
        if args.json:
            print(json.dumps(coarsening, indent=2))
            return 0
        for interval, by_span in coarsening.items():
            for span, acc in by_span.items():
                print(
                    f"readings every {interval}, spans of {span}: mean error {acc['mean_rel_error']:.2%}, worst "
                    f"{acc['max_rel_error']:.2%} (bound {acc['bound_rel']:.1%}), sum over spans {acc['sum_rel_error']:+.2%}"
                )
        return 0
    result: dict = {
        "domains": "4 RAPL" if args.no_gpu else "4 RAPL + 1 GPU",
        "target_ratios": TARGET_RATIOS,
        "cached_window_s": CACHED_WINDOW_S,
        "source": args.source,
    }
    # The compiled span path first (what the library takes where it is built), then its pure-Python reference.
    paths = ("compiled", "python") if COMPILED is not None else ("python",)
    result["paths"] = paths
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        tree = make_powercap(Path(tmp) / "sys", "four_domains")
        if args.source == "agent":
            # The counters move as on a real host: readings that never change mean a lost agent.
            stack.enter_context(ConstantPower(tree, {"package_0": 40.0, "dram_0": 6.0}))
        for path in paths:
            for mode, max_age_s, attribution in (
                ("exact", 0.0, True),
                ("exact_no_attribution", 0.0, False),
                ("cached", CACHED_WINDOW_S, True),
            ):
                agent_process = None
                if args.source == "agent":
                    channels, agent_process = _agent_channels(tree, tmp)
                else:
                    channels = rapl.discover(Settings(sysfs_root=tree.sysfs_root)).channels
                if not args.no_gpu:
                    channels.append(ClockGpuChannel())
                meter = EnergyMeter(channels=channels, settings=_settings(max_age_s, path == "compiled"))
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
                processor = EnergySpanProcessor(meter, attribution=attribution)
                provider.add_span_processor(processor)
                tracer = provider.get_tracer("benchmark")
                # Untimed first: the first mode timed otherwise paid the interpreter's warm-up (its bare
                # span read 25 us against 14 us in the modes after it).
                measure_ratio(tracer, processor, max(2000, args.spans // 10))
                timing = measure_ratio(tracer, processor, args.spans)
                timing["locks"] = measure_lock_waits(tracer, processor, max(2000, args.spans // 5))
                if mode == "exact":
                    timing["itemized"] = measure_itemized(tracer, processor, args.spans)
                if mode == "exact" and path == paths[0]:
                    processor.enabled = True
                    result["memory"] = measure_memory(tracer, args.memory_spans)
                    result["pieces"] = measure_pieces(meter)
                    timing["against_floor"] = measure_against_floor(
                        tree, tracer, processor, args.spans, result["pieces"]["attributes_count"]
                    )
                result.setdefault(path, {})[mode] = timing
                meter.close()
                if agent_process is not None:
                    agent_process.terminate()
                    agent_process.wait(10)
            if not args.no_accuracy:
                for mode, max_age_s in (("exact", 0.0), ("cached", CACHED_WINDOW_S)):
                    result[path][mode]["accuracy"] = measure_accuracy(max_age_s, fast_path=path == "compiled")
        # Each mode's figures at the top level are the default path's (compiled where it is built).
        for mode in ("exact", "exact_no_attribution", "cached"):
            result[mode] = result[paths[0]][mode]
        result.update(measure_floors(tree, args.spans, result["pieces"]["attributes_count"]))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    labels = {
        "exact": "every snapshot reads the counters, shares attributed",
        "exact_no_attribution": "the same without energy.attributed.*",
        "cached": f"snapshots reused for {CACHED_WINDOW_S * 1e3:g} ms, shares attributed",
    }
    print(f"RAPL read {'through a real otel-joules agent' if args.source == 'agent' else 'from the files'}")
    for path, mode in itertools.product(paths, ("exact", "exact_no_attribution", "cached")):
        timing = result[path][mode]
        label = labels[mode]
        print(f"{mode} on the {path} span path ({label}):")
        print(f"  bare span {timing['bare_us']:.2f} us, instrumented {timing['instrumented_us']:.2f} us")
        print(f"  ratio {timing['ratio']:.2f}x (target <= {TARGET_RATIOS[mode]}x)")
        locks = timing["locks"]
        print(
            f"  locks on the span path (cProfile, over a bare span): {locks['lock_calls_per_span']:.2f} per span, "
            f"{locks['lock_wait_us_per_span']:.2f} us per span (target <= {TARGET_LOCK_WAIT_US} us)"
        )
        if "accuracy" in timing:
            acc = timing["accuracy"]
            print(
                f"  accuracy on 20 ms spans vs a 1 ms-update counter: mean error {acc['mean_rel_error']:.2%}, "
                f"worst {acc['max_rel_error']:.2%} (one counter update = {acc['one_update_rel']:.0%})"
            )
    for mode, real, what in (
        ("floor_exact", "exact", "4 counter reads and the thread's CPU clock at each end, the end hook"),
        ("floor_cached", "cached", "the thread's CPU clock at each end, the end hook"),
    ):
        floor = result[mode]
        spare_us = (TARGET_RATIOS[real] - floor["ratio"]) * floor["bare_us"]
        print(
            f"{mode} ({what}, {result['pieces']['attributes_count']} attributes set; nothing else): ratio "
            f"{floor['ratio']:.2f}x, leaving {spare_us:.2f} us under the {real} target for everything it leaves out"
        )
    against = result[paths[0]]["exact"]["against_floor"]
    print(
        f"exact on the {paths[0]} path against floor_exact in the same interleaved batches: {against['exact_us']:.2f} us "
        f"against {against['floor_us']:.2f} us (bare {against['bare_us']:.2f} us): {against['ratio']:.2f}x its floor "
        f"(issue 37's target <= 1.3x)"
    )
    pieces = result["pieces"]
    print(
        f"per span ({result['domains']}): 2 x {pieces['snapshot_ns'] / 1e3:.2f} us snapshots, "
        f"{pieces['open_and_close_share_ns'] / 1e3:.2f} us share ledger, {pieces['build_attributes_ns'] / 1e3:.2f} us "
        f"building the attribute dict, {pieces['set_all_attributes_ns'] / 1e3:.2f} us setting its "
        f"{pieces['attributes_count']} attributes (the SDK's set_attributes: {pieces['sdk_set_attributes_ns'] / 1e3:.2f} us)"
    )
    print(
        f"attribution per span: {pieces['open_and_close_share_ns'] / 1e3:.2f} us ledger at start and end "
        f"(of which 2 x {pieces['thread_cpu_clock_read_ns'] / 1e3:.2f} us reading the thread's CPU clock), "
        f"{pieces['extra_attributes_ns'] / 1e3:.2f} us for the extra attributes; "
        f"exact with / without: {result['exact']['instrumented_us'] - result['exact_no_attribution']['instrumented_us']:+.2f} us"
    )
    print("(those are hot-loop timings, caches warm; inside real spans the same code costs more:)")
    for path in paths:
        exact = result[path]["exact"]
        itemized = exact["itemized"]
        items = itemized["items_us"]
        overhead_us = itemized["overhead_us"]
        print(
            f"exact span, {path} path, each piece inside real spans: 2 snapshots {items['snapshots']:.2f} us, share ledger "
            f"{items['share_ledger']:.2f} us, attribute dict {items['attribute_dict']:.2f} us, setting the attributes "
            f"{items['setting_attributes']:.2f} us, the hooks themselves {items['hooks']:.2f} us, the SDK's end of a span "
            f"with them {items['sdk_end_extra']:.2f} us more than a bare span's"
        )
        print(
            f"  itemized {itemized['itemized_us']:.2f} us against a measured overhead of {overhead_us:.2f} us in untimed "
            f"spans between the timed ones ({itemized['itemized_us'] / overhead_us:.0%} accounted for; target within 15%)"
        )
    memory = result["memory"]
    print(
        f"memory after {memory['spans']} instrumented spans (half abandoned): "
        f"{memory['bytes_after'] - memory['bytes_before']:+d} bytes ({memory['bytes_per_span']:.3f} B/span)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
