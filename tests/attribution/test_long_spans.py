"""A span longer than the attributor's history is priced by the periods it ran in, summarised once they leave it.

The history is configured short (``history_s=0.5``: five 0.1 s periods) so a span outlives it in
seconds; the host's load changes while the span runs, so the price of a CPU second does too.
The written host is tests/attribution/test_model.py's: powercap and procfs written by the test,
no sampler thread (the test samples at the end of each period). Under the ``busy`` policy (a CPU
second carries its period's whole CPU-side energy over the busy seconds), so the prices are the
periods' plain ratios whatever the baseline.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import Attributor
from otel_joules.attribution.sampling import HISTORY_SUMMARY_BUCKETS
from tests.fakes.powercap import make_powercap
from tests.fakes.procfs import FakeProcfs

PID = os.getpid()
HISTORY_S = 0.5
PERIOD_S = 0.1


class LongHost:
    """A written host with a short history."""

    def __init__(self, tmp_path: Path) -> None:
        self.powercap = make_powercap(tmp_path / "sys", "one_socket")
        self.proc = FakeProcfs(tmp_path / "proc")
        self.tid = threading.get_native_id()
        self.proc.add_thread(PID, self.tid, 0.0)
        self.meter = EnergyMeter(
            sysfs_root=self.powercap.sysfs_root, procfs_root=self.proc.procfs_root, gpus=[], sample=False
        )
        self.attributor = Attributor(self.meter, sample=False, history_s=HISTORY_S, policy="busy")
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(EnergySpanProcessor(self.meter, attribution=self.attributor))
        self.tracer = self.provider.get_tracer("test")

    def period(self, thread_cpu_s: float, busy_s: float, idle_s: float, package_j: float, dram_j: float) -> None:
        """One sampler period of wall time: this thread's CPU time, the host's, the energy, then the sample."""
        time.sleep(PERIOD_S)
        self.proc.add_thread(PID, self.tid, thread_cpu_s)
        self.proc.add_host(busy_s, idle_s)
        self.powercap.zones["package_0"].advance_joules(package_j)
        self.powercap.zones["dram_0"].advance_joules(dram_j)
        self.attributor.sample()

    def close(self) -> None:
        self.provider.shutdown()
        self.meter.close()


@pytest.fixture
def long_host(tmp_path: Path):
    h = LongHost(tmp_path)
    yield h
    h.close()


def test_a_leaf_span_longer_than_the_history_keeps_the_processs_share_while_the_load_changes(
    long_host: LongHost,
) -> None:
    """A 2 s leaf span (four times the history) keeps its thread busy throughout, the process's only work.
    For its first second the host's other work is light (a CPU second costs 100 J on the package), then it
    doubles (50 J). The span's share must match the process's over the same time within 5%: pricing the
    periods that left the history at the history's average gave it the second half's price (about 0.67x)."""
    long_host.attributor.sample()
    before = long_host.attributor.process_joules()
    with long_host.tracer.start_as_current_span("long"):
        for _ in range(10):
            long_host.period(thread_cpu_s=0.5, busy_s=1.0, idle_s=3.0, package_j=100.0, dram_j=20.0)
        for _ in range(10):
            long_host.period(thread_cpu_s=0.5, busy_s=2.0, idle_s=2.0, package_j=100.0, dram_j=20.0)
    after = long_host.attributor.process_joules()
    span = {s.name: dict(s.attributes) for s in long_host.exporter.get_finished_spans()}["long"]
    process_j = {kind: after[kind] - before[kind] for kind in after}

    # The process's share, period by period: 10 x 0.5 s at 100 J + 10 x 0.5 s at 50 J; memory 5 J per CPU second.
    assert process_j["cpu"] == pytest.approx(750.0, rel=1e-9)
    assert process_j["memory"] == pytest.approx(50.0, rel=1e-9)
    assert span["energy.attributed.cpu.joules"] == pytest.approx(process_j["cpu"], rel=0.05)
    assert span["energy.attributed.memory.joules"] == pytest.approx(process_j["memory"], rel=0.05)
    assert span["energy.attributed.joules"] == pytest.approx(sum(process_j.values()), rel=0.05)


def test_the_summary_stays_bounded_and_still_prices_a_span_older_than_all_of_it(tmp_path: Path) -> None:
    """With a 1 ms sampler period and a 5 ms history (1 ms summary buckets), 400 periods fill more than
    HISTORY_SUMMARY_BUCKETS buckets: the oldest are merged, so the summary stays at that bound, and a
    leaf span open across all of them is still priced at their price (100 J per CPU second throughout)."""
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    proc = FakeProcfs(tmp_path / "proc", cpus=4)
    tid = threading.get_native_id()
    proc.add_thread(PID, tid, 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    attributor = Attributor(meter, sample=False, period_s=0.001, history_s=0.005, policy="busy")
    periods = 0
    try:
        attributor.sample()
        share = attributor.open_span()
        while periods < 400 or len(attributor.prices.view.summary) < HISTORY_SUMMARY_BUCKETS:
            time.sleep(0.002)
            proc.add_thread(PID, tid, 0.01)
            proc.add_host(busy_s=0.05)
            powercap.zones["package_0"].advance_joules(5.0)
            attributor.sample()
            periods += 1
        attributed = attributor.close_span(share)
        summary_buckets = len(attributor.prices.view.summary)
    finally:
        meter.close()
    assert summary_buckets == HISTORY_SUMMARY_BUCKETS
    assert len(attributor.history) < periods
    assert attributed is not None
    assert attributed.cpu_joules == pytest.approx(periods * 0.01 * 100.0, rel=0.01)


def test_the_processs_share_since_an_instant_older_than_the_history_comes_from_the_summary(
    long_host: LongHost,
) -> None:
    """A training run longer than the history asks for the process's share since its start: it counts from
    the summary bucket holding the start (the process was idle before it, so exactly), where it had none."""
    for _ in range(5):
        long_host.period(thread_cpu_s=0.0, busy_s=1.0, idle_s=3.0, package_j=100.0, dram_j=20.0)
    start_ns = long_host.attributor.history[-1].monotonic_ns
    before = long_host.attributor.process_joules()
    for _ in range(10):
        long_host.period(thread_cpu_s=0.5, busy_s=1.0, idle_s=3.0, package_j=100.0, dram_j=20.0)
    assert start_ns < long_host.attributor.history[0].monotonic_ns  # the start has left the history
    since = long_host.attributor.process_joules_since(start_ns)
    after = long_host.attributor.process_joules()
    assert since is not None
    assert since == pytest.approx({kind: after[kind] - before[kind] for kind in after}, rel=1e-9)
    assert since["cpu"] == pytest.approx(500.0, rel=1e-9)
