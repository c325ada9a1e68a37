"""Cost of an instrumented span relative to a bare span, and memory after 100k spans.

Both kinds of span run on the same TracerProvider, whose only other processor hands
spans to an exporter that drops them; the energy processor is switched on and off
between interleaved batches so machine noise hits both alike. Counters come from a
fake powercap tree with 4 domains (package, core, dram, psys) in a temp dir.

    python benchmarks/span_overhead.py [--spans N] [--json]

Target (issue 2): instrumented / bare <= 1.6. Exact counter reads at both ends plus
setting the attributes through the SDK cost about 1.5x on our machines.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Sequence

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from powercap_fake import make_powercap  # noqa: E402

from otel_joules import EnergyMeter, EnergySpanProcessor  # noqa: E402

TARGET_RATIO = 1.6


class DropExporter(SpanExporter):
    """Accepts every span and keeps none."""

    def export(self, spans: Sequence) -> SpanExportResult:  # type: ignore[override]
        return SpanExportResult.SUCCESS


def _batch_seconds(tracer, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        with tracer.start_as_current_span("op"):
            pass
    return time.perf_counter() - start


def measure_ratio(tracer, processor: EnergySpanProcessor, spans: int, batches: int = 21) -> dict[str, float]:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000, help="spans per kind for the timing")
    parser.add_argument("--memory-spans", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tree = make_powercap(Path(tmp) / "sys", "four_domains")
        meter = EnergyMeter(sysfs_root=tree.sysfs_root, gpus=[])
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
        processor = EnergySpanProcessor(meter)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("benchmark")
        timing = measure_ratio(tracer, processor, args.spans)
        processor.enabled = True
        memory = measure_memory(tracer, args.memory_spans)
        meter.close()
    result = {"domains": 4, **timing, "target_ratio": TARGET_RATIO, "memory": memory}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"bare span:         {timing['bare_us']:.2f} us")
        print(f"instrumented span: {timing['instrumented_us']:.2f} us")
        print(f"ratio:             {timing['ratio']:.2f}x (target <= {TARGET_RATIO}x)")
        print(
            f"memory after {memory['spans']} spans (half abandoned): "
            f"{memory['bytes_after'] - memory['bytes_before']:+d} bytes ({memory['bytes_per_span']:.3f} B/span)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
