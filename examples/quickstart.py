"""Measure an example workload with OpenTelemetry spans and print the energy each span cost.

Run: ``python examples/quickstart.py``. On a machine with readable RAPL counters (or
NVIDIA GPUs) the figures are measured; elsewhere they are estimates, and the output says so.
"""

from __future__ import annotations

import hashlib
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_joules


def count_primes(limit: int) -> int:
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, limit + 1, i)))
    return sum(sieve)


def hash_chain(rounds: int) -> str:
    digest = b"otel-joules"
    for _ in range(rounds):
        digest = hashlib.sha256(digest).digest()
    return digest.hex()[:16]


def sort_numbers(n: int) -> int:
    values = [(i * 2654435761) % 1_000_003 for i in range(n)]
    return sorted(values)[n // 2]


def main() -> int:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    handle = otel_joules.instrument()  # the one line: every span below gets energy.*

    tracer = trace.get_tracer("quickstart")
    with tracer.start_as_current_span("workload"):
        with tracer.start_as_current_span("count_primes"):
            count_primes(30_000_000)
        with tracer.start_as_current_span("hash_chain"):
            hash_chain(1_500_000)
        with tracer.start_as_current_span("sort_numbers"):
            sort_numbers(1_500_000)

    meter = handle.meter
    spans = exporter.get_finished_spans()
    source = spans[-1].attributes["energy.source"]
    print("otel-joules quickstart: energy of an example workload, one span per step\n")
    if source == "estimate":
        models = "".join(f"\n  {d.id}: {d.covers}" for d in meter.domains if d.estimate_source)
        print(
            "SOURCE: ESTIMATE. No hardware energy counter is readable on this machine, so the figures come from "
            f"models:{models}\n"
            "They compare runs on this machine; they are not measurements, and each has a band (below). "
            "`otel-joules devices` says why and what to do.\n"
        )
    else:
        print(f"SOURCE: {source.upper()} (domains: {', '.join(d.id for d in meter.domains)})\n")
    # host: what the machine spent during the span; share: the part this span's own work caused.
    print(f"{'span':<14} {'duration (s)':>12} {'host (J)':>11} {'share (J)':>10} {'host power (W)':>15}")
    for span in spans:
        a = span.attributes
        duration_s = (span.end_time - span.start_time) / 1e9
        share = a.get("energy.attributed.joules", float("nan"))
        print(f"{span.name:<14} {duration_s:>12.3f} {a['energy.joules']:>11.2f} {share:>10.2f} {a['energy.watts']:>15.1f}")
    print(
        f"\nhost  = energy.joules: what the whole machine spent while the span ran ({source}), whoever used it."
        "\nshare = energy.attributed.joules: the part of it this span's own work caused (its CPU time's part);"
        "\n        add up shares (energy.attributed.self.joules) for totals per endpoint or job, never host figures."
    )
    root = spans[-1].attributes
    domains = ", ".join(
        f"{d.id} {root[f'energy.{d.id}.joules']:.2f} J" for d in meter.domains if f"energy.{d.id}.joules" in root
    )
    print(f"\nhost during the workload, by domain: {domains}")
    print(f"host during the workload: {root['energy.joules']:.2f} J = {root['energy.joules'] / 3.6e6:.3e} kWh ({source})")
    if "energy.estimate.low.joules" in root:
        print(
            f"band of that estimate: {root['energy.estimate.low.joules']:.2f} J to {root['energy.estimate.high.joules']:.2f} J "
            f"(energy.estimate.low/high.joules; models: {root['energy.estimate.source']}; docs/estimates.md)"
        )
    if "energy.attributed.joules" in root:
        share = root["energy.attributed.joules"]
        print(f"share of the workload: {share:.2f} J = {share / 3.6e6:.3e} kWh ({source}; the rest was other work or idle)")
    handle.uninstrument()
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
