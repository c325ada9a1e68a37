"""Attribution on a written host: /proc and powercap written by the test, every share asserted exactly.

Prices in these tests: the sampler period that sets them has 100 J on the package and 20 J on
DRAM over 2 busy CPU seconds, so one CPU second costs 50 J (CPU-side) + 10 J (memory).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_joules import EnergyMeter, EnergySpanProcessor
from otel_joules.attribution import Attributor, CpuClocks, attributor_for, share_of_cpu_time
from otel_joules.attribution.registry import AttributionRegistry
from otel_joules.attribution.sampling import MIN_RATE_WINDOW_S

from tests.fakes.powercap import FakePowercap, make_powercap
from tests.fakes.procfs import FakeProcfs

PID = os.getpid()


class Host:
    """A written host: powercap + procfs, a meter, an attributor without sampler thread, a tracer."""

    def __init__(self, tmp_path: Path) -> None:
        self.powercap: FakePowercap = make_powercap(tmp_path / "sys", "one_socket")
        self.proc = FakeProcfs(tmp_path / "proc")
        self.proc.add_thread(PID, threading.get_native_id(), 0.0)
        self.meter = EnergyMeter(sysfs_root=self.powercap.sysfs_root, procfs_root=self.proc.procfs_root, gpus=[], sample=False)
        self.attributor = Attributor(self.meter, sample=False)
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(EnergySpanProcessor(self.meter, attribution=self.attributor))
        self.tracer = self.provider.get_tracer("test")

    def period(self, package_j: float = 100.0, dram_j: float = 20.0, busy_s: float = 2.0, idle_s: float = 0.0) -> None:
        """One sampler period: energy spent, host busy time, then the sample that prices CPU seconds."""
        self.powercap.zones["package_0"].advance_joules(package_j)
        self.powercap.zones["dram_0"].advance_joules(dram_j)
        self.proc.add_host(busy_s, idle_s)
        self.attributor.sample()

    def thread_cpu(self, cpu_s: float, tid: int | None = None) -> None:
        """A thread used ``cpu_s``; the host spent 100 J + 20 J per such second meanwhile (more than the
        60 J it is priced at), so no span's share is capped by what the host spent during it."""
        self.proc.add_thread(PID, tid or threading.get_native_id(), cpu_s)
        self.powercap.zones["package_0"].advance_joules(100.0 * cpu_s)
        self.powercap.zones["dram_0"].advance_joules(20.0 * cpu_s)

    def spans(self) -> dict[str, dict[str, object]]:
        return {s.name: dict(s.attributes) for s in self.exporter.get_finished_spans()}

    def close(self) -> None:
        self.provider.shutdown()
        self.meter.close()


@pytest.fixture
def host(tmp_path: Path):
    h = Host(tmp_path)
    yield h
    h.close()


def test_a_span_gets_its_threads_cpu_seconds_at_the_periods_price(host: Host) -> None:
    host.period()
    with host.tracer.start_as_current_span("work"):
        host.thread_cpu(1.5)
        host.powercap.zones["package_0"].advance_joules(7.0)
    work = host.spans()["work"]
    assert work["energy.joules"] == 1.5 * 120 + 7.0  # the host's energy during the span, unchanged
    assert work["energy.attributed.cpu.joules"] == pytest.approx(75.0, rel=1e-12)
    assert work["energy.attributed.memory.joules"] == pytest.approx(15.0, rel=1e-12)
    assert work["energy.attributed.joules"] == pytest.approx(90.0, rel=1e-12)
    assert work["energy.attributed.self.joules"] == pytest.approx(90.0, rel=1e-12)
    assert work["energy.attribution"] == "cpu_time_share/capacity"  # the default policy
    # No period long enough to give a power yet: the baseline is unknown and the whole energy counts as static
    # (capacity = busy here, no idle CPU time, so the policy's price is the period's ratio all the same).
    assert work["energy.baseline"] == "unknown"
    assert work["energy.attributed.dynamic.joules"] == 0.0
    assert "energy.attributed.gpu.joules" not in work  # no GPU measured here


def test_a_span_never_gets_more_than_the_host_spent_during_it(host: Host) -> None:
    """Prices lag the load by up to a period: a span priced above what the host spent is capped, per kind."""
    host.period()  # 50 J + 10 J per CPU second
    with host.tracer.start_as_current_span("capped"):
        host.proc.add_thread(PID, threading.get_native_id(), 1.0)
        host.powercap.zones["package_0"].advance_joules(30.0)  # less than the 50 J its CPU second is priced at
        host.powercap.zones["dram_0"].advance_joules(20.0)  # more than 10 J: not capped
    capped = host.spans()["capped"]
    assert capped["energy.attributed.cpu.joules"] == pytest.approx(30.0, rel=1e-12)
    assert capped["energy.attributed.memory.joules"] == pytest.approx(10.0, rel=1e-12)
    assert capped["energy.attributed.joules"] <= capped["energy.joules"]


def test_a_sleeping_span_gets_nothing(host: Host) -> None:
    host.period()
    with host.tracer.start_as_current_span("sleep"):
        host.proc.add_host(3.0)  # others keep the host busy meanwhile
        host.powercap.zones["package_0"].advance_joules(150.0)
    sleep = host.spans()["sleep"]
    assert sleep["energy.joules"] == 150.0
    assert sleep["energy.attributed.joules"] == 0.0


def test_nested_spans_parent_inclusive_is_self_plus_children(host: Host) -> None:
    host.period()
    with host.tracer.start_as_current_span("parent"):
        host.thread_cpu(0.5)
        with host.tracer.start_as_current_span("child"):
            host.thread_cpu(1.0)
            with host.tracer.start_as_current_span("grandchild"):
                host.thread_cpu(0.25)
        host.thread_cpu(0.3)
    spans = host.spans()
    grandchild, child, parent = spans["grandchild"], spans["child"], spans["parent"]
    assert grandchild["energy.attributed.joules"] == pytest.approx(0.25 * 60, rel=1e-12)
    assert child["energy.attributed.self.joules"] == pytest.approx(1.0 * 60, rel=1e-12)
    assert child["energy.attributed.joules"] == pytest.approx(1.25 * 60, rel=1e-12)
    assert parent["energy.attributed.self.joules"] == pytest.approx(0.8 * 60, rel=1e-12)
    assert parent["energy.attributed.joules"] == pytest.approx(2.05 * 60, rel=1e-12)
    assert parent["energy.attributed.cpu.joules"] == pytest.approx(2.05 * 50, rel=1e-12)
    total_self = sum(s["energy.attributed.self.joules"] for s in spans.values())
    assert total_self == pytest.approx(parent["energy.attributed.joules"], rel=1e-12)  # nothing counted twice


def test_a_span_with_a_remote_parent_counts_its_own_share(host: Host) -> None:
    host.period()
    remote = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(remote)))
    try:
        with host.tracer.start_as_current_span("handler"):
            host.thread_cpu(1.0)
            with host.tracer.start_as_current_span("db"):
                host.thread_cpu(0.5)
    finally:
        otel_context.detach(token)
    spans = host.spans()
    assert spans["handler"]["energy.attributed.self.joules"] == pytest.approx(60.0, rel=1e-12)
    assert spans["handler"]["energy.attributed.joules"] == pytest.approx(90.0, rel=1e-12)
    assert spans["db"]["energy.attributed.joules"] == pytest.approx(30.0, rel=1e-12)
    handler = next(s for s in host.exporter.get_finished_spans() if s.name == "handler")
    assert handler.parent is not None and handler.parent.is_remote


def test_spans_interleaved_on_one_thread_split_its_cpu_time(host: Host) -> None:
    """asyncio-style: two sibling spans open on one thread share its CPU time equally while both are open."""
    host.period()
    a = host.tracer.start_span("a")
    b = host.tracer.start_span("b")
    host.thread_cpu(1.0)  # both open: 0.5 s each
    a.end()
    host.thread_cpu(1.0)  # b alone
    b.end()
    spans = host.spans()
    assert spans["a"]["energy.attributed.joules"] == pytest.approx(0.5 * 60, rel=1e-12)
    assert spans["b"]["energy.attributed.joules"] == pytest.approx(1.5 * 60, rel=1e-12)


def test_two_threads_get_their_own_cpu_time(host: Host) -> None:
    host.period()
    opened, written, done = threading.Event(), threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        host.thread_cpu(0.0)
        with host.tracer.start_as_current_span("worker"):
            opened.set()
            written.wait(10)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert opened.wait(10)
    with host.tracer.start_as_current_span("main"):
        host.thread_cpu(1.0)
        host.thread_cpu(0.5, tid=tids[0])
    written.set()
    assert done.wait(10)
    thread.join()
    spans = host.spans()
    assert spans["main"]["energy.attributed.joules"] == pytest.approx(60.0, rel=1e-12)
    assert spans["worker"]["energy.attributed.joules"] == pytest.approx(30.0, rel=1e-12)  # 2:1


def test_four_processes_get_exactly_what_their_cpu_time_entitles_them_to(host: Host) -> None:
    """Four workers' attributors on one written host, plus 1 busy second of someone else's."""
    workers = {pid: Attributor(host.meter, clocks=CpuClocks(host.proc.procfs_root, pid=pid), sample=False)
               for pid in (1001, 1002, 1003, 1004) if host.proc.add_process(pid, 0.0) is None}
    for pid, cpu_s in ((1001, 0.5), (1002, 1.0), (1003, 1.5), (1004, 1.0)):
        host.proc.add_process(pid, cpu_s)
    host.powercap.zones["package_0"].advance_joules(100.0)
    host.powercap.zones["dram_0"].advance_joules(20.0)
    host.proc.add_host(busy_s=5.0)
    for attributor in workers.values():
        attributor.sample()
    shares = {pid: a.process_joules() for pid, a in workers.items()}
    assert {pid: s["cpu"] for pid, s in shares.items()} == pytest.approx({1001: 10.0, 1002: 20.0, 1003: 30.0, 1004: 20.0})
    assert {pid: s["memory"] for pid, s in shares.items()} == pytest.approx({1001: 2.0, 1002: 4.0, 1003: 6.0, 1004: 4.0})
    attributed = sum(sum(s.values()) for s in shares.values())
    assert attributed == pytest.approx(120.0 * 4 / 5)  # the unrelated busy second keeps its fifth: conservative


def test_shares_of_every_process_plus_the_unattributed_remainder_are_the_hosts_energy(host: Host) -> None:
    """The issue's conservation rule over a run at a steady load: this process's nested spans, two other
    processes and idle CPU capacity. Self shares of every span + other processes' shares + the remainder
    (memory's idle-capacity part) = the host's energy within 2%; the attributed part never exceeds it.
    Under the ``busy`` policy, whose remainder is that part alone (every policy: tests/attribution/test_static.py)."""
    tid = threading.get_native_id()
    host.attributor.configure(policy="busy")
    others = {pid: Attributor(host.meter, clocks=CpuClocks(host.proc.procfs_root, pid=pid), sample=False, policy="busy")
              for pid in (2001, 2002) if host.proc.add_process(pid, 0.0) is None}
    everyone = [host.attributor, *others.values()]

    def period(in_spans: bool) -> None:
        """One sampler period: per busy CPU second 50 J package; dram 40 J over 4 busy + 4 idle CPU seconds."""
        time.sleep(MIN_RATE_WINDOW_S)  # a sampler period's worth of wall time, so the prices move
        host.proc.add_process(2001, 2.0)
        host.proc.add_process(2002, 1.0)
        host.proc.add_host(busy_s=4.0, idle_s=4.0)
        if in_spans:
            with host.tracer.start_as_current_span("request"):
                host.proc.add_thread(PID, tid, 0.5)
                host.powercap.zones["package_0"].advance_joules(100.0)
                host.powercap.zones["dram_0"].advance_joules(20.0)
                with host.tracer.start_as_current_span("query"):
                    host.proc.add_thread(PID, tid, 0.5)
                    host.powercap.zones["package_0"].advance_joules(100.0)
                    host.powercap.zones["dram_0"].advance_joules(20.0)
        else:
            host.proc.add_thread(PID, tid, 1.0)
            host.powercap.zones["package_0"].advance_joules(200.0)
            host.powercap.zones["dram_0"].advance_joules(40.0)
        for attributor in everyone:
            attributor.sample()

    for attributor in everyone:
        attributor.sample()
    for _ in range(3):
        period(in_spans=False)  # prices for the spans
    origin = host.meter.snapshot()
    before = {id(a): sum(a.process_joules().values()) for a in everyone}
    for _ in range(3):
        period(in_spans=True)
    host_j = host.meter.measure(origin, host.meter.snapshot()).total_joules
    assert host_j == 3 * 240.0
    spans = [dict(s.attributes) for s in host.exporter.get_finished_spans()]
    assert len(spans) == 6
    spans_self_j = sum(float(s["energy.attributed.self.joules"]) for s in spans)
    mine_j = sum(host.attributor.process_joules().values()) - before[id(host.attributor)]
    others_j = sum(sum(a.process_joules().values()) - before[id(a)] for a in others.values())
    remainder_j = 3 * 40.0 * 4 / 8  # the idle half of the memory's capacity
    assert spans_self_j == pytest.approx(3 * 55.0, rel=0.02)
    assert spans_self_j == pytest.approx(mine_j, rel=0.02)  # all this process's CPU time was in spans
    assert spans_self_j + others_j + remainder_j == pytest.approx(host_j, rel=0.02)
    assert spans_self_j + others_j <= host_j


def test_conservation_holds_across_abrupt_load_changes(host: Host) -> None:
    """The issue's conservation rule over busy -> idle -> half-busy -> idle, three periods each, with this
    process's spans and two other processes. Per busy CPU second a half-busy period costs more than a busy
    one (the package's static power is shared by fewer busy seconds), and idle periods spend energy with a
    single stray tick of busy time (below the two-tick floor: idle). Every process's share + the energy of
    the idle periods + memory's idle-capacity part = the host's energy within 2%, never more; the spans'
    self shares are this process's share. Under the ``busy`` policy, whose remainder that is (every policy:
    tests/attribution/test_conservation.py)."""
    tid = threading.get_native_id()
    host.attributor.configure(policy="busy")
    others = {pid: Attributor(host.meter, clocks=CpuClocks(host.proc.procfs_root, pid=pid), sample=False, policy="busy")
              for pid in (3001, 3002) if host.proc.add_process(pid, 0.0) is None}
    everyone = [host.attributor, *others.values()]
    # (this process's, 3001's, 3002's CPU seconds, host busy, host idle, package J, dram J) per period
    busy = (2.0, 4.0, 2.0, 8.0, 0.0, 400.0, 40.0)
    idle = (0.0, 0.0, 0.01, 0.01, 7.99, 15.0, 5.0)
    half = (1.0, 2.0, 1.0, 4.0, 4.0, 250.0, 30.0)
    phases = [busy] * 3 + [idle] * 3 + [half] * 3 + [idle] * 3
    for attributor in everyone:
        attributor.sample()
    origin = host.meter.snapshot()
    before = {id(a): sum(a.process_joules().values()) for a in everyone}
    remainder_j = 0.0
    for mine, p3001, p3002, busy_s, idle_s, package_j, dram_j in phases:
        # A span per period, closed just after the period's sample: its CPU seconds are priced by the
        # period they were spent in (spans closed before the sample are priced at the previous periods').
        span = host.tracer.start_span("request") if mine else None
        time.sleep(MIN_RATE_WINDOW_S)  # a sampler period's worth of wall time
        host.proc.add_thread(PID, tid, mine)
        host.proc.add_process(3001, p3001)
        host.proc.add_process(3002, p3002)
        host.proc.add_host(busy_s=busy_s, idle_s=idle_s)
        host.powercap.zones["package_0"].advance_joules(package_j)
        host.powercap.zones["dram_0"].advance_joules(dram_j)
        for attributor in everyone:
            attributor.sample()
        if span is not None:
            span.end()
        # Idle (fewer busy seconds than two ticks): nobody's. Otherwise memory's idle-capacity part.
        remainder_j += package_j + dram_j if busy_s < 0.02 else dram_j * idle_s / (busy_s + idle_s)
    host_j = host.meter.measure(origin, host.meter.snapshot()).total_joules
    assert host_j == pytest.approx(3 * 440.0 + 3 * 280.0 + 6 * 20.0)
    spans = [dict(s.attributes) for s in host.exporter.get_finished_spans()]
    assert len(spans) == 6
    spans_self_j = sum(float(s["energy.attributed.self.joules"]) for s in spans)
    mine_j = sum(host.attributor.process_joules().values()) - before[id(host.attributor)]
    others_j = sum(sum(a.process_joules().values()) - before[id(a)] for a in others.values())
    assert mine_j + others_j + remainder_j == pytest.approx(host_j, rel=0.02)
    assert mine_j + others_j <= host_j
    assert spans_self_j + others_j <= host_j
    assert spans_self_j == pytest.approx(mine_j, rel=0.02)


def test_a_process_never_gets_more_than_the_host_spent(host: Host) -> None:
    """/proc/stat's tick sampling may show less busy time than the process's own clock: cap at everything."""
    host.proc.add_process(PID, 1.0)
    host.period(busy_s=0.5)
    assert host.attributor.process_joules() == pytest.approx({"cpu": 100.0, "memory": 20.0})



def test_a_tick_counted_a_period_late_is_not_lost(host: Host) -> None:
    """This process alone keeps the host busy; /proc/stat counts one of its ticks a period late. Each
    period's share is capped at what the host spent in it, and the late tick is owed by the next period:
    the process gets all of both periods' energy (both had no other busy work), not 1/1.1 of the second."""
    host.proc.add_process(PID, 1.0)
    host.period(package_j=100.0, dram_j=0.0, busy_s=0.99)
    host.proc.add_process(PID, 1.0)
    host.period(package_j=100.0, dram_j=0.0, busy_s=1.01)
    assert host.attributor.process_joules()["cpu"] == pytest.approx(200.0, rel=1e-12)

def test_idle_energy_belongs_to_nobody(host: Host) -> None:
    host.period(package_j=40.0, dram_j=8.0, busy_s=0.0, idle_s=4.0)
    with host.tracer.start_as_current_span("idle"):
        host.thread_cpu(0.3)  # CPU after an idle period is priced at that period's rate: 0
    assert host.spans()["idle"]["energy.attributed.joules"] == 0.0
    assert host.attributor.process_joules() == {"cpu": 0.0, "memory": 0.0}



def test_an_idle_periods_energy_is_not_forecast_onto_the_next_spans(host: Host) -> None:
    """CPU time after the latest sample is priced at a forecast over the recent busy periods: an idle
    period in between (its 40 J + 8 J are nobody's) neither lowers nor raises it."""
    host.period()  # 50 J + 10 J per CPU second
    time.sleep(MIN_RATE_WINDOW_S)  # long enough for the forecast to be recomputed
    host.period(package_j=40.0, dram_j=8.0, busy_s=0.0, idle_s=4.0)
    with host.tracer.start_as_current_span("after idle"):
        host.thread_cpu(1.0)
    assert host.spans()["after idle"]["energy.attributed.joules"] == pytest.approx(60.0, rel=1e-12)

def test_cpu_spent_across_periods_is_priced_by_the_periods_it_was_spent_in(host: Host) -> None:
    host.period()
    with host.tracer.start_as_current_span("long"):
        time.sleep(0.01)
        host.period(package_j=20.0, dram_j=0.0, busy_s=2.0)  # 10 J per CPU second in this period
        time.sleep(0.01)
        host.period()  # 60 J per CPU second in this one
        host.thread_cpu(2.0)
    attributed = host.spans()["long"]["energy.attributed.joules"]
    # The span's CPU seconds are priced time-weighted over the periods the span covers: strictly between.
    assert 2 * 10.0 < attributed < 2 * 60.0


def test_abandoned_spans_stop_diluting_the_threads_others(host: Host) -> None:
    host.period()
    for _ in range(50):
        host.tracer.start_span("never ended")
    gc.collect()
    with host.tracer.start_as_current_span("work"):
        host.thread_cpu(1.0)
    assert host.spans()["work"]["energy.attributed.joules"] == pytest.approx(60.0, rel=1e-12)


def test_spans_stated_interval_comes_from_the_history(host: Host) -> None:
    first = host.attributor.history[-1]
    host.powercap.zones["package_0"].advance_joules(10.0)
    time.sleep(0.05)
    host.attributor.sample()
    host.powercap.zones["package_0"].advance_joules(4.0)
    time.sleep(0.05)
    second = host.attributor.sample()
    assert second is not None
    host.powercap.zones["package_0"].advance_joules(3.0)
    start_ns = first.monotonic_ns + first.wall_offset_ns
    end_ns = second.monotonic_ns + second.wall_offset_ns
    span = host.tracer.start_span("past", start_time=start_ns)
    host.powercap.zones["package_0"].advance_joules(100.0)  # while start()..end() run: not the stated interval
    span.end(end_time=end_ns)
    past = host.spans()["past"]
    assert past["energy.joules"] == pytest.approx(14.0, rel=1e-3)  # wall-to-monotonic conversion jitters by µs
    assert "energy.unavailable_reason" not in past


def test_a_stated_interval_older_than_the_history_has_no_energy_and_says_why(host: Host) -> None:
    span = host.tracer.start_span("ancient", start_time=time.time_ns() - 3600 * 10**9)
    span.end()
    ancient = host.spans()["ancient"]
    assert "energy.joules" not in ancient
    assert "history" in ancient["energy.unavailable_reason"]
    assert "300 s" in ancient["energy.unavailable_reason"]
    assert "energy.attributed.joules" in ancient  # the share still adds up with the others


def test_an_end_time_in_the_future_has_no_energy(host: Host) -> None:
    span = host.tracer.start_span("future")
    span.end(end_time=time.time_ns() + 60 * 10**9)
    assert "future" in host.spans()["future"]["energy.unavailable_reason"]


def test_unreadable_procfs_keeps_energy_and_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, procfs_root=str(tmp_path / "no-proc"), gpus=[], sample=False)
    registry = AttributionRegistry()
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        assert registry.get(meter) is None
        assert registry.get(meter) is None
    assert caplog.text.count("OTEL_JOULES_PROCFS_ROOT") == 1
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(EnergySpanProcessor(meter, attribution=False))
    with provider.get_tracer("t").start_as_current_span("x"):
        pc.zones["package_0"].advance_joules(1.0)
    (span,) = exporter.get_finished_spans()
    assert span.attributes["energy.joules"] == 1.0
    assert not any(k.startswith("energy.attributed") for k in span.attributes)
    meter.close()


def test_procfs_root_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = FakeProcfs(tmp_path / "proc", busy_ticks=12_300)
    monkeypatch.setenv("OTEL_JOULES_PROCFS_ROOT", proc.procfs_root)
    pc = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    assert meter.settings.procfs_root == proc.procfs_root
    assert CpuClocks(meter.settings.procfs_root).host().busy_s == pytest.approx(12_300 / os.sysconf("SC_CLK_TCK"))
    meter.close()


def test_share_of_cpu_time_rule() -> None:
    assert share_of_cpu_time(100.0, 1.0, 4.0) == 25.0
    assert share_of_cpu_time(100.0, 2.0, 1.0) == 100.0  # never more than the host spent
    assert share_of_cpu_time(100.0, 0.0, 0.0) == 0.0  # idle
    assert share_of_cpu_time(-1.0, 1.0, 1.0) == 0.0


def test_shared_attributor_per_meter(tmp_path: Path) -> None:
    pc = make_powercap(tmp_path / "sys", "one_socket")
    meter = EnergyMeter(sysfs_root=pc.sysfs_root, gpus=[], sample=False)
    first = attributor_for(meter)
    assert first is not None and attributor_for(meter) is first
    first.close()
    meter.close()
