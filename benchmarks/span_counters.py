"""The span benchmark's clock-driven counters, and the accuracy they show (benchmarks.span_overhead).

A counter that advances like RAPL's (:class:`ClockCounterChannel`), the GPU stand-in read off the span path as NVML
is (:class:`ClockGpuChannel`), the same counter as seen through the agent's pushes (:class:`CoarsenedClockChannel`),
and what spans measure of them: the exact and cached modes' accuracy (:func:`measure_accuracy`) and the accuracy
cost of the agent's interval (:func:`measure_coarsening`).
"""

from __future__ import annotations

import statistics
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.config import Settings
from otel_joules.sensors.base import Channel, Domain
from otel_joules.semconv import KIND_CPU, KIND_GPU


def _settings(max_age_s: float, fast_path: bool) -> Settings:
    """A meter's settings for one mode on one span path (compiled, or its pure-Python reference)."""
    return Settings.from_env(max_snapshot_age_s=max_age_s, fast_path=fast_path)


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
