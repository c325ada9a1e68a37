"""A /proc/stat that cannot be read, or reads but is wrong (issue 24): no share is priced from it.

A written host with 4 CPUs whose sampler periods take real time (0.1 s), so its tick counts are
plausible until a test makes them not: counts that go backwards, counts its CPUs cannot have
spent, a file that is gone. Real spans through an EnergySpanProcessor; every period spends 2 J
on the package and 0.4 J on DRAM while the host is busy 0.2 CPU s and idle 0.2 CPU s, so one
CPU second costs 10 J + 1 J and a span's 0.05 CPU s is worth 0.55 J.
"""

from __future__ import annotations

import logging
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

from tests.fakes.powercap import make_powercap
from tests.fakes.procfs import TICKS_PER_S, FakeProcfs

PID = os.getpid()
PERIOD_S = 0.1
SPAN_CPU_S = 0.05
#: The share of a span that spends SPAN_CPU_S in one healthy period: 0.05 x (2 J / 0.2 s + 0.4 J / 0.4 s).
HEALTHY_SHARE_J = 0.55


class _Host:
    """Powercap + a 4-CPU procfs, an attributor sampled by hand every 0.1 s of real time, a tracer.

    Under the ``busy`` policy: the shares are the periods' plain ratios (HEALTHY_SHARE_J) whatever the baseline."""

    def __init__(self, tmp_path: Path) -> None:
        self.powercap = make_powercap(tmp_path / "sys", "one_socket")
        self.proc = FakeProcfs(tmp_path / "proc", cpus=4)
        self.tid = threading.get_native_id()
        self.proc.add_thread(PID, self.tid, 0.0)
        self.meter = EnergyMeter(
            sysfs_root=self.powercap.sysfs_root, procfs_root=self.proc.procfs_root, gpus=[], sample=False
        )
        self.attributor = Attributor(self.meter, sample=False, policy="busy")
        self.sampled_at = time.monotonic()
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.provider.add_span_processor(EnergySpanProcessor(self.meter, attribution=self.attributor))
        self.tracer = self.provider.get_tracer("test")

    def period(self, ticks: tuple[int, int] | None = None) -> None:
        """0.1 s: the host spends 2 J + 0.4 J and 0.2 busy + 0.2 idle CPU s (or reads ``ticks``), then a sample."""
        self.powercap.zones["package_0"].advance_joules(2.0)
        self.powercap.zones["dram_0"].advance_joules(0.4)
        if ticks is None:
            self.proc.add_host(0.2, 0.2)
        else:
            self.proc.set_host_ticks(*ticks)
        time.sleep(max(0.0, self.sampled_at + PERIOD_S - time.monotonic()))
        self.sampled_at = time.monotonic()
        self.attributor.sample()

    def work(self, ticks: tuple[int, int] | None = None) -> None:
        """A span that uses 0.05 CPU s during one period and ends right after its sample."""
        with self.tracer.start_as_current_span("work"):
            self.proc.add_thread(PID, self.tid, SPAN_CPU_S)
            self.period(ticks)

    def shares(self) -> list[float | None]:
        """Each finished span's energy.attributed.joules (None: it has none), oldest first."""
        spans = sorted(self.exporter.get_finished_spans(), key=lambda s: s.end_time)
        result = [s.attributes.get("energy.attributed.joules") for s in spans]
        self.exporter.clear()
        return result

    def close(self) -> None:
        self.provider.shutdown()
        self.meter.close()


@pytest.fixture
def host(tmp_path: Path):
    h = _Host(tmp_path)
    for _ in range(3):
        h.period()  # a history, and a forecast, of healthy periods
    yield h
    h.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_joules" and r.levelno >= logging.WARNING]


def test_healthy_periods_price_a_span_exactly(host: _Host) -> None:
    for _ in range(3):
        host.work()
    assert host.shares() == pytest.approx([HEALTHY_SHARE_J] * 3, rel=1e-3)


def test_ticks_that_go_backwards_or_that_the_cpus_cannot_have_spent_are_rejected_with_one_message(
    host: _Host, caplog
) -> None:
    # Backwards: busy 1 s lower than the last read (the old code priced the period at the span's own CPU
    # time: 2.39 J, 4.35x). Absurd: 2 busy CPU s in 0.1 s on 4 CPUs, 5x what they can (the old code priced
    # it at 2 J / 2 s: 0.059 J, 0.11x).
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        host.work()
        busy, idle = host.proc.busy_ticks, host.proc.idle_ticks
        host.work(ticks=(busy - TICKS_PER_S, idle + 20))
        for _ in range(2):
            host.work()  # counted on from the new, lower counts
        busy, idle = host.proc.busy_ticks, host.proc.idle_ticks
        host.work(ticks=(busy + 2 * TICKS_PER_S, idle + 20))
        for _ in range(2):
            host.work()
    healthy, backwards, after_backwards, after_backwards_2, absurd, after_absurd, after_absurd_2 = host.shares()
    print(f"shares: healthy {healthy:.3f} J, backwards {backwards}, absurd {absurd}")
    assert healthy == pytest.approx(HEALTHY_SHARE_J, rel=1e-3)
    assert backwards is None and absurd is None  # no share rather than one priced from wrong counts
    for share in (after_backwards, after_backwards_2, after_absurd, after_absurd_2):
        assert share == pytest.approx(HEALTHY_SHARE_J, rel=1e-3)
    (message,) = _warnings(caplog)  # both faults, one message
    assert "went backwards" in message
    assert "spans that end while /proc/stat reads implausibly keep energy.joules but carry no energy.attributed.*" in message
    # The rejected periods' energy is nobody's: the process's total counts only the healthy periods.
    process_j = sum(host.attributor.process_joules().values())
    assert process_j == pytest.approx(HEALTHY_SHARE_J * 5, rel=1e-3)


def test_absurd_counts_alone_are_said_and_name_the_cpus(host: _Host, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        busy, idle = host.proc.busy_ticks, host.proc.idle_ticks
        host.work(ticks=(busy + 20, idle + 3 * TICKS_PER_S))  # idle time no 4 CPUs have in 0.1 s
        host.work()
    first, second = host.shares()
    assert first is None and second == pytest.approx(HEALTHY_SHARE_J, rel=1e-3)
    (message,) = _warnings(caplog)
    assert "0.20 busy and 3.00 idle CPU seconds" in message and "its 4 CPUs" in message


def test_busy_and_idle_together_may_reach_twice_the_time(host: _Host, caplog) -> None:
    # 0.35 busy + 0.35 idle CPU s in 0.1 s on 4 CPUs (0.7 of 0.4): each within what they can count, and a
    # kernel counting busy time by the tick and idle time exactly can count a tick in both.
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        busy, idle = host.proc.busy_ticks, host.proc.idle_ticks
        host.work(ticks=(busy + 35, idle + 35))
    (share,) = host.shares()
    # Priced by the period (the few microseconds after its sample at the forecast of the healthy ones).
    assert share == pytest.approx(SPAN_CPU_S * (2.0 / 0.35 + 0.4 / 0.7), rel=1e-2)
    assert not _warnings(caplog)


def test_an_unreadable_proc_stat_gives_the_spans_meanwhile_no_share_as_its_message_says(host: _Host, caplog) -> None:
    # Five periods without /proc/stat. The old code gave each span ending meanwhile a share priced at the
    # last forecast, while the message said spans carried none.
    stat = host.proc.root / "stat"
    with caplog.at_level(logging.WARNING, logger="otel_joules"):
        with host.tracer.start_as_current_span("across"):  # open through the whole outage
            host.work()
            stat.unlink()
            for _ in range(5):
                with host.tracer.start_as_current_span("work"):
                    host.proc.add_thread(PID, host.tid, SPAN_CPU_S)
                    host.proc.busy_ticks += round(0.2 * TICKS_PER_S)  # the host goes on; nobody can read it
                    host.proc.idle_ticks += round(0.2 * TICKS_PER_S)
                    host.powercap.zones["package_0"].advance_joules(2.0)
                    host.powercap.zones["dram_0"].advance_joules(0.4)
                    time.sleep(max(0.0, host.sampled_at + PERIOD_S - time.monotonic()))
                    host.sampled_at = time.monotonic()
                    host.attributor.sample()
            host.work(ticks=(host.proc.busy_ticks + 20, host.proc.idle_ticks + 20))  # readable again
            host.work()
    spans = sorted(host.exporter.get_finished_spans(), key=lambda s: s.end_time)
    shares = [s.attributes.get("energy.attributed.joules") for s in spans]
    before, during, after, across = shares[0], shares[1:6], shares[6:8], shares[8]
    print(f"shares: before {before:.3f} J, during {during}, after {after}")
    assert before == pytest.approx(HEALTHY_SHARE_J, rel=1e-3)
    assert during == [None] * 5
    assert all("energy.joules" in s.attributes for s in spans[1:6])  # the host's energy is still measured
    # The period after the outage covers it, priced by its own energy over its own ticks (12 J / 1.2 busy s,
    # 2.4 J / 2.4 CPU s: as healthy, since the host went on as before).
    assert after == pytest.approx([HEALTHY_SHARE_J] * 2, rel=1e-3)
    # The span open across the outage ended after it: its inclusive share counts its children's, those that
    # ended meanwhile included (their CPU time priced at the forecast, as CPU time after a sample always is).
    assert across == pytest.approx(HEALTHY_SHARE_J * 8, rel=1e-3)
    (message,) = _warnings(caplog)
    assert "spans that end while /proc/stat cannot be read keep energy.joules but carry no energy.attributed.*" in message
