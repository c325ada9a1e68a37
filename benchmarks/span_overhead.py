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
is to cost no more than with direct reads. Its meter is discovered as a user's is (the agent's zones and the
standby estimates that stand in while it is away, no GPU stand-in: the agent would read the GPUs).
``--coarsening`` measures what the agent's ``--min-interval-ms`` costs spans in accuracy: spans of 50 ms,
200 ms and 1 s against a counter whose readings arrive only every interval, at a random phase (as the
agent's pushes do).

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
import dataclasses
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
from otel_joules.attribution.procfs import CpuClocks
from otel_joules.config import Settings
from otel_joules.meter.fastpath import COMPILED
from otel_joules.sensors import rapl
from otel_joules.sensors.base import Channel
from otel_joules.tracing._sdk import set_clean_attributes
from tests.fakes.powercap import ConstantPower, make_powercap

from benchmarks.span_counters import (
    COARSENING_INTERVALS_MS,
    COARSENING_SPANS,
    ClockGpuChannel,
    _settings,
    measure_accuracy,
    measure_coarsening,
)
from benchmarks.span_pieces import batch_seconds, measure_itemized, measure_pieces

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


def measure_ratio(tracer, processor: EnergySpanProcessor | FloorProcessor, spans: int, batches: int = 21) -> dict[str, float]:
    """Median per-span seconds with ``processor`` on and off, in interleaved batches, and their ratio."""
    per_batch = max(1, spans // batches)
    bare: list[float] = []
    instrumented: list[float] = []
    for i in range(batches):
        for enabled in ((False, True) if i % 2 == 0 else (True, False)):
            processor.enabled = enabled
            seconds = batch_seconds(tracer, per_batch)
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
        batch_seconds(tracer, spans)
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
    batch_seconds(floor_tracer, max(2000, spans // 10))  # warm-up, untimed
    per_batch = max(1, spans // batches)
    times: dict[str, list[float]] = {"bare": [], "exact": [], "floor": []}
    runs = ("bare", "exact", "floor")
    for i in range(batches):
        for run in runs[i % 3:] + runs[: i % 3]:
            processor.enabled = run == "exact"
            times[run].append(batch_seconds(floor_tracer if run == "floor" else tracer, per_batch) / per_batch)
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


def _agent_meter(tree: Any, tmp: str, settings: Settings) -> tuple[EnergyMeter, Any]:
    """A meter as a user's reading through the agent is discovered (the tree's zones through a real agent process,
    and the standby estimates that stand in while it is away), and that process (stopped by the caller)."""
    import subprocess

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
    meter = EnergyMeter(settings=dataclasses.replace(settings, sysfs_root=tree.sysfs_root, agent_socket=socket_path), gpus=[])
    if not meter.agent_domain_ids or not meter.standby_domain_ids:
        meter.close()
        process.kill()
        raise SystemExit(f"no agent domains or standby estimates: {meter.domains}, {meter.unavailable}")
    return meter, process


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
        batch_seconds(tracer, max(2000, spans // 10))  # warm-up (and the framework's import), untimed
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(batches):
            for synchronized in ((False, True) if i % 2 == 0 else (True, False)):
                processor._synchronize = synchronizer if synchronized else None
                times[synchronized].append(batch_seconds(tracer, per_batch) / per_batch)
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
        "domains": (
            "4 RAPL through the agent + 2 standby estimates" if args.source == "agent"
            else "4 RAPL" if args.no_gpu else "4 RAPL + 1 GPU"
        ),
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
                    meter, agent_process = _agent_meter(tree, tmp, _settings(max_age_s, path == "compiled"))
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
