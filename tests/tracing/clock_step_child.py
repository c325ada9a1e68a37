"""Child of test_clock_steps.py: instrumented spans while its wall clock steps (tests/fakes/wall_clock.py).

Usage: ``python clock_step_child.py STEP_S SPANS_JSONL``, with ``OTEL_JOULES_SYSFS_ROOT`` a fake
powercap tree (tests/fakes/powercap.py, package zone at ``intel-rapl:0``, counter at 0). Exports
every span with the JSON-lines exporter and prints, as its last line, each span's truth by name:
the joules this script put on the package counter while the span was open, and the span's
interval on the monotonic clock (read just outside it).

The script is the only writer of the counter, at chosen instants: inside spans (their energy) and
between them (energy no span may get: an interval shifted by a step would take it). So the truth
is exact whatever the machine's load.

The cells, one after the other:

- ``across``: a 0.6 s span; the wall clock steps by STEP_S in its middle.
- ``after_<k>``: the wall clock steps by STEP_S again, then at once eight back-to-back spans of
  10 ms, all within the sampler's 0.1 s period after the step.
- ``explicit``: a span whose explicit start and end are wall-clock times read 0.3 s before it
  starts and 0.05 s before it ends; a third step comes between the two. No energy comes within
  0.3 s of either stated end, so the meter's history (0.1 s samples) holds both exactly.
- ``stamped_before_step``: a fourth step comes after the SDK stamped the span's start and before
  the energy processor's ``on_start`` runs (a processor added before it steps the clock).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_joules
from otel_joules.config import OTEL_JOULES_SYSFS_ROOT
from otel_joules.exporters import JsonLinesSpanExporter
from tests.fakes.powercap import INTEL_RANGE_UJ, FakeZone
from tests.fakes.wall_clock import SteppedWallClock


class _StepOnStart(SpanProcessor):
    """Steps the wall clock when a span of the given name starts (runs before the energy processor's ``on_start``)."""

    def __init__(self, clock: SteppedWallClock, step_s: float, name: str) -> None:
        self._clock, self._step_s, self._name = clock, step_s, name

    def on_start(self, span, parent_context=None) -> None:  # type: ignore[no-untyped-def]
        if span.name == self._name:
            self._clock.step(self._step_s)


def main() -> None:
    step_s, path = float(sys.argv[1]), sys.argv[2]
    clock = SteppedWallClock.from_env()
    zone = Path(os.environ[OTEL_JOULES_SYSFS_ROOT]) / "class" / "powercap" / "intel-rapl:0"
    package = FakeZone(zone, "package-0", INTEL_RANGE_UJ)

    provider = TracerProvider()
    # Exported off the span path, so the intervals measured around spans hold only the spans.
    provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(path)))
    provider.add_span_processor(_StepOnStart(clock, step_s, "stamped_before_step"))
    trace.set_tracer_provider(provider)
    otel_joules.instrument(metrics_enabled=False)
    tracer = trace.get_tracer("clock-steps")
    truth: dict[str, dict[str, object]] = {}

    def record(name: str, joules: float, t0_ns: int) -> None:
        truth[name] = {"joules": joules, "monotonic_ns": [t0_ns, time.monotonic_ns()]}

    time.sleep(0.15)
    package.advance_joules(7.0)  # before any span
    time.sleep(0.15)

    t0 = time.monotonic_ns()
    with tracer.start_as_current_span("across"):
        time.sleep(0.15)
        package.advance_joules(10.0)
        time.sleep(0.15)
        clock.step(step_s)
        time.sleep(0.15)
        package.advance_joules(12.0)
        time.sleep(0.15)
    record("across", 22.0, t0)

    time.sleep(0.1)
    package.advance_joules(5.0)  # between spans
    time.sleep(0.15)  # the sampler has seen the first step
    clock.step(step_s)
    for k in range(8):
        t0 = time.monotonic_ns()
        with tracer.start_as_current_span(f"after_{k}"):
            time.sleep(0.005)
            package.advance_joules(1.0)
            time.sleep(0.005)
        record(f"after_{k}", 1.0, t0)

    time.sleep(0.3)
    t0, start_time = time.monotonic_ns(), time.time_ns()
    time.sleep(0.3)
    span = tracer.start_span("explicit", start_time=start_time)
    package.advance_joules(6.0)
    time.sleep(0.05)
    clock.step(step_s)
    time.sleep(0.25)
    t1, end_time = time.monotonic_ns(), time.time_ns()
    time.sleep(0.05)
    span.end(end_time=end_time)
    truth["explicit"] = {"joules": 6.0, "monotonic_ns": [t0, t1]}

    time.sleep(0.25)
    t0 = time.monotonic_ns()
    with tracer.start_as_current_span("stamped_before_step"):
        time.sleep(0.05)
        package.advance_joules(2.0)
        time.sleep(0.05)
    record("stamped_before_step", 2.0, t0)

    provider.shutdown()
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
