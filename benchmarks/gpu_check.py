"""Check GPU energy on a real NVIDIA GPU: counter vs integrated power, update period, read cost.

Runs a fixed busy workload for ``--seconds`` (matrix multiplies on every visible GPU when
torch with CUDA is installed, else a CPU loop with the GPUs idle) inside an OpenTelemetry
span measured by :class:`~otel_joules.EnergySpanProcessor`, and prints per GPU:

* ``span_joules``: what the span attribute ``energy.nvidia_gpu_<i>.joules`` says;
* ``counter_joules``: NVML's energy counter over the workload (None without a counter);
* ``integrated_joules``: NVML's power reading integrated every ``--power-step`` seconds,
  and its difference from the counter in percent;
* ``counter_update_period_ms``: the median interval between changes of the counter,
  polled as fast as possible for ``--probe-seconds`` before the workload;
* ``energy_read_us`` / ``power_read_us``: the median cost of one read.

    python benchmarks/gpu_check.py [--seconds 10] [--gpus 0,1] [--no-torch] [--json]

With torch and CUDA it also checks ``synchronize=`` (``synchronization`` in the report): a span
that queues about 1 s of matrix multiplies and returns at once, measured once without and once
with ``synchronize="torch"``. Only the synchronised span waits for the work, so only it gets
that energy (``synchronized_joules`` near ``average_watts`` x ``queued_s``; ``unsynchronized_joules``
what the GPU spent during the launches alone). Without torch or CUDA it is skipped (None).

Without a GPU it runs against the stand-in library of the test suite
(tests/fakes/nvml_stub), which is how tests/benchmarks/test_gpu_check.py checks it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.sensors import nvml
from otel_joules.sensors.base import Method


@dataclass
class GpuFigures:
    """What the check found for one GPU."""

    domain: str
    name: str
    uuid: str
    method: str
    span_joules: float | None
    counter_joules: float | None
    integrated_joules: float
    integrated_vs_counter_percent: float | None
    average_watts: float
    counter_update_period_ms: float | None
    energy_read_us: float | None
    power_read_us: float


@dataclass
class Report:
    """The whole run."""

    workload: str
    seconds: float
    power_step_s: float
    gpus: list[GpuFigures]
    synchronization: dict | None = None


def read_cost_us(read: Callable[[], int], reads: int) -> float:
    """Median microseconds of one ``read()``, over ``reads`` calls."""
    costs_ns = []
    for _ in range(reads):
        start = time.perf_counter_ns()
        read()
        costs_ns.append(time.perf_counter_ns() - start)
    return statistics.median(costs_ns) / 1000.0


def update_period_ms(read: Callable[[], int], probe_s: float) -> float | None:
    """Median interval between changes of a counter polled as fast as possible."""
    changes = []
    last = read()
    deadline = time.monotonic() + probe_s
    while (now := time.monotonic()) < deadline:
        value = read()
        if value != last:
            changes.append(now)
            last = value
    intervals = [b - a for a, b in zip(changes, changes[1:])]
    return statistics.median(intervals) * 1000.0 if intervals else None


class PowerSampler(threading.Thread):
    """Reads integrated-power channels every ``step_s``, as the meter's sampler would."""

    def __init__(self, channels: Sequence[nvml.NvmlPowerChannel], step_s: float) -> None:
        super().__init__(name="gpu-check-power", daemon=True)
        self.channels = channels
        self.step_s = step_s
        self.stop_event = threading.Event()
        # Channels need no locking of their own (the meter serialises reads); we do the same.
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_event.wait(self.step_s):
            with self.lock:
                for channel in self.channels:
                    channel.read_uj()


def _torch_with_cuda():
    """torch when it can start CUDA here, else None (not installed, no GPU, or no driver behind NVML)."""
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        torch.cuda.init()
    except RuntimeError:  # "Found no NVIDIA driver": NVML answered (the stand-in) but CUDA cannot start
        return None
    return torch


def torch_workload(seconds: float) -> str | None:
    """Matrix multiplies on every visible GPU; None when torch with CUDA is not available."""
    torch = _torch_with_cuda()
    if torch is None:
        return None
    size = 8192
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    operands = [(torch.randn(size, size, device=d, dtype=torch.float16), torch.randn(size, size, device=d, dtype=torch.float16)) for d in devices]
    for d in devices:
        torch.cuda.synchronize(d)
    iterations = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(10):
            for a, b in operands:
                torch.matmul(a, b)
        for d in devices:
            torch.cuda.synchronize(d)
        iterations += 10
    return f"torch fp16 matmul {size}x{size} on {len(devices)} GPU(s), {iterations} rounds"


def sync_check(gpu_uuids: Sequence[str], queued_s: float = 1.0) -> dict | None:
    """A span that queues ``queued_s`` of GPU work and returns at once, without and with ``synchronize="torch"``.

    None when torch with CUDA is not available.
    """
    torch = _torch_with_cuda()
    if torch is None:
        return None
    size = 16384  # ~10 ms per multiply on current GPUs: a second of work fits CUDA's launch queue
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    torch.matmul(a, b)
    torch.cuda.synchronize()
    started = time.monotonic()
    for _ in range(5):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    per_op_s = (time.monotonic() - started) / 5
    launches = max(1, round(queued_s / per_op_s))
    result: dict = {"queued_s": launches * per_op_s, "launches": launches}
    for label, option in (("unsynchronized", None), ("synchronized", "torch")):
        meter = EnergyMeter(gpus=list(gpu_uuids), host=False)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(EnergySpanProcessor(meter, attribution=False, synchronize=option))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        time.sleep(0.3)  # the counters settle on idle before the span
        with provider.get_tracer("gpu_check").start_as_current_span("gpu_check.queued"):
            for _ in range(launches):
                torch.matmul(a, b)
        torch.cuda.synchronize()  # the work ends after the span either way
        time.sleep(0.3)
        meter.close()
        span = exporter.get_finished_spans()[0]
        gpu_j = sum(
            float(v) for k, v in (span.attributes or {}).items() if k.startswith("energy.nvidia_gpu_") and k.endswith(".joules")
        )
        result[f"{label}_joules"] = gpu_j
        result[f"{label}_span_s"] = (span.end_time - span.start_time) / 1e9
    return result


def cpu_workload(seconds: float) -> str:
    """A CPU loop; the GPUs stay idle."""
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        total += sum(range(1000))
    return "CPU loop (GPUs idle)"


def run(seconds: float, gpus: Sequence[int | str] | None, power_step_s: float, probe_s: float, reads: int, use_torch: bool) -> Report:
    """Measure the workload; see the module docstring."""
    found = nvml.discover(gpus=gpus)
    if not found.channels:
        reasons = "; ".join(f"{u.what}: {u.reason}" for u in found.unavailable) or "no GPU selected"
        raise SystemExit(f"gpu_check: no GPU can be measured: {reasons}")
    session = nvml.default_session()
    counters = {c.domain.id: c for c in found.channels if c.domain.method is Method.COUNTER}
    # A power channel for every GPU, also those with a counter, to compare the two.
    integrators = {
        c.domain.id: nvml.NvmlPowerChannel(c.domain, c.gpu, session)  # type: ignore[attr-defined]
        for c in found.channels
    }
    periods = {i: update_period_ms(c.read_uj, probe_s) for i, c in counters.items()}
    energy_costs = {i: read_cost_us(c.read_uj, reads) for i, c in counters.items()}
    power_costs = {i: read_cost_us(c.read_uj, reads) for i, c in integrators.items()}

    meter = EnergyMeter(gpus=[c.gpu.uuid for c in found.channels], host=False)  # type: ignore[attr-defined]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(EnergySpanProcessor(meter))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("gpu_check")

    sampler = PowerSampler(list(integrators.values()), power_step_s)
    sampler.start()
    with tracer.start_as_current_span("gpu_check.workload"):
        # Counter and integral read back to back, so both cover the same interval.
        with sampler.lock:
            counter_start = {i: c.read_uj() for i, c in counters.items()}
            integrated_start = {i: c.read_uj() for i, c in integrators.items()}
        started = time.monotonic()
        workload = (torch_workload(seconds) if use_torch else None) or cpu_workload(seconds)
        elapsed = time.monotonic() - started
        with sampler.lock:
            counter_end = {i: c.read_uj() for i, c in counters.items()}
            integrated_end = {i: c.read_uj() for i, c in integrators.items()}
    sampler.stop_event.set()
    sampler.join()
    meter.close()
    attributes = exporter.get_finished_spans()[0].attributes or {}

    figures = []
    for channel in found.channels:
        domain = channel.domain.id
        counter_j = (counter_end[domain] - counter_start[domain]) / 1e6 if domain in counters else None
        integrated_j = (integrated_end[domain] - integrated_start[domain]) / 1e6
        span_j = attributes.get(f"energy.{domain}.joules")
        figures.append(
            GpuFigures(
                domain=domain,
                name=channel.domain.hw_name,
                uuid=channel.domain.hw_id,
                method=channel.domain.method.value,
                span_joules=float(span_j) if span_j is not None else None,
                counter_joules=counter_j,
                integrated_joules=integrated_j,
                integrated_vs_counter_percent=(integrated_j / counter_j - 1) * 100 if counter_j else None,
                average_watts=(counter_j if counter_j is not None else integrated_j) / elapsed,
                counter_update_period_ms=periods.get(domain),
                energy_read_us=energy_costs.get(domain),
                power_read_us=power_costs[domain],
            )
        )
    synchronization = sync_check([c.gpu.uuid for c in found.channels]) if use_torch else None  # type: ignore[attr-defined]
    return Report(workload=workload, seconds=elapsed, power_step_s=power_step_s, gpus=figures, synchronization=synchronization)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="workload duration (default 10)")
    parser.add_argument("--gpus", default=None, help="NVML indices or UUIDs, comma-separated (default: the visible GPUs)")
    parser.add_argument("--power-step", type=float, default=nvml.POWER_SAMPLE_PERIOD_S, help="power integration step in seconds (default 0.1)")
    parser.add_argument("--probe-seconds", type=float, default=2.0, help="how long to poll the counter for its update period (default 2)")
    parser.add_argument("--reads", type=int, default=1000, help="reads timed for the read cost (default 1000)")
    parser.add_argument("--no-torch", action="store_true", help="CPU loop even when torch is installed")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    report = run(args.seconds, args.gpus, args.power_step, args.probe_seconds, args.reads, not args.no_torch)
    if args.json:
        print(json.dumps(asdict(report)))
        return 0
    print(f"workload: {report.workload}, {report.seconds:.2f} s; power integrated every {report.power_step_s * 1000:.0f} ms")
    for gpu in report.gpus:
        print(f"{gpu.domain} {gpu.name} {gpu.uuid} ({gpu.method})")
        print(f"  span attribute     {_fmt(gpu.span_joules, '.3f')} J")
        print(f"  energy counter     {_fmt(gpu.counter_joules, '.3f')} J  (average {gpu.average_watts:.1f} W)")
        print(f"  integrated power   {gpu.integrated_joules:.3f} J  ({_fmt(gpu.integrated_vs_counter_percent, '+.2f')} % vs counter)")
        print(f"  counter updates every {_fmt(gpu.counter_update_period_ms, '.1f')} ms")
        print(f"  one read costs     energy {_fmt(gpu.energy_read_us, '.1f')} us, power {gpu.power_read_us:.1f} us")
    sync = report.synchronization
    if sync is None:
        print("synchronize=: skipped (needs torch with CUDA)")
    else:
        print(f"synchronize=: a span queueing {sync['queued_s']:.2f} s of GPU work ({sync['launches']} multiplies) and returning")
        print(f"  without: {sync['unsynchronized_joules']:.3f} J over {sync['unsynchronized_span_s']:.3f} s")
        print(f"  with synchronize='torch': {sync['synchronized_joules']:.3f} J over {sync['synchronized_span_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
