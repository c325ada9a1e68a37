"""An idle process's attribution sampler sleeps, and wakes for the first span with prices still right.

The attributor's own sampler thread runs here (``sample=True``) on a written host: powercap with
a realistic power bound (so the meter's wrap-safe read interval is minutes, not what limits the
back-off) and a written procfs, whose CPU times move only when the test says. Figures are
counts and ratios with generous bounds; the idle cost itself is benchmarks/idle_cost.py's.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from otel_joules import EnergyMeter
from otel_joules.attribution import Attributor
from otel_joules.attribution.sampling import HISTORY_PERIOD_S, IDLE_AFTER_S, IDLE_PERIOD_MAX_S
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.fakes.procfs import TICKS_PER_S, FakeProcfs

PID = os.getpid()
#: 250 W: the zones' counters wrap after ~17 minutes at full power, so the meter's wrap-safe read
#: interval (a quarter of that, capped at a minute) is far above the idle back-off's bound.
MAX_POWER_UW = 250_000_000
#: After IDLE_AFTER_S (1 s) of idleness the back-off doubles from the period: 1 + 0.2 + 0.4 + 0.8 s have
#: passed before a wait of 1.6 s ...
DOZING_AFTER_S = IDLE_AFTER_S + 1.4
#: ... which is this long.
DOZE_S = 1.6


class IdleHost:
    """A written host whose attributor runs its own sampler thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.powercap: FakePowercap = make_powercap(tmp_path / "sys", "one_socket", max_power_uw=MAX_POWER_UW)
        self.proc = FakeProcfs(tmp_path / "proc")
        self.tid = threading.get_native_id()
        self.proc.add_thread(PID, self.tid, 0.0)
        self.meter = EnergyMeter(
            sysfs_root=self.powercap.sysfs_root, procfs_root=self.proc.procfs_root, gpus=[], sample=False
        )
        self.attributor = Attributor(self.meter)

    def samples_ns(self) -> list[int]:
        return [s.monotonic_ns for s in self.attributor.history]

    def load(self, seconds: float, j_per_busy_s: float, thread_cpu_per_step_s: float = 0.0) -> None:
        """The host keeps one CPU busy for ``seconds``, at ``j_per_busy_s`` of package energy per busy CPU
        second, in 20 ms steps (two ticks each); this thread spends ``thread_cpu_per_step_s`` of each step."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if thread_cpu_per_step_s:
                self.proc.add_thread(PID, self.tid, thread_cpu_per_step_s)
            self.proc.add_host(busy_s=0.02)
            self.powercap.zones["package_0"].advance_joules(0.02 * j_per_busy_s)
            time.sleep(0.02)

    def wait_for_sample(self, timeout_s: float) -> bool:
        count = len(self.attributor.history)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.attributor.history) > count:
                return True
            time.sleep(0.002)
        return False

    def close(self) -> None:
        self.attributor.close()
        self.meter.close()


@pytest.fixture
def idle_host(tmp_path: Path):
    h = IdleHost(tmp_path)
    yield h
    h.close()


def _context_switches(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/status") as f:
        return sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)


def test_an_idle_processs_sampler_thread_backs_off_and_sleeps(idle_host: IdleHost) -> None:
    """Nothing open, no CPU spent by the process: after IDLE_AFTER_S the sampler's period doubles towards
    IDLE_PERIOD_MAX_S. Over the 1.6 s after it has backed off for 2.4 s it samples at most a few times (it
    sampled 16 times at its fixed 0.1 s period), and its thread is off the CPU meanwhile (few context
    switches)."""
    sampler = idle_host.attributor.prices.pace.thread
    assert sampler is not None and sampler.native_id is not None
    time.sleep(DOZING_AFTER_S)
    before_samples = len(idle_host.attributor.history)
    before_switches = _context_switches(sampler.native_id)
    time.sleep(DOZE_S)
    samples = len(idle_host.attributor.history) - before_samples
    switches = _context_switches(sampler.native_id) - before_switches
    assert samples <= 3, f"{samples} samples in {DOZE_S} s of idleness"
    assert switches <= 12, f"the sampler thread was switched {switches} times in {DOZE_S} s of idleness"
    gaps_s = [(b - a) / 1e9 for a, b in zip(idle_host.samples_ns(), idle_host.samples_ns()[1:])]
    assert max(gaps_s) >= 4 * HISTORY_PERIOD_S
    assert max(gaps_s) <= IDLE_PERIOD_MAX_S + 1.0  # never beyond the bound (plus a loaded machine's delay)


def test_a_span_after_an_idle_gap_wakes_the_sampler_and_is_priced_by_the_periods_it_ran_in(
    idle_host: IdleHost,
) -> None:
    """Other processes load the host at 100 J per busy CPU second while this one idles and its sampler
    dozes; just after a sample, the load's price halves and a span opens. The span wakes the sampler at
    once (it would have slept 1.6-2 s), the sampler keeps its 0.1 s period while the span is open, and
    the span's share is its CPU time at the new price (a sampler that slept on would have priced it at
    the old forecast: twice as much), as is the process's share over the same time."""
    idle_host.load(DOZING_AFTER_S + DOZE_S, j_per_busy_s=100.0)
    gaps_s = [(b - a) / 1e9 for a, b in zip(idle_host.samples_ns()[-3:], idle_host.samples_ns()[-2:])]
    assert max(gaps_s) >= 4 * HISTORY_PERIOD_S, gaps_s  # dozing
    assert idle_host.wait_for_sample(timeout_s=2 * IDLE_PERIOD_MAX_S + 1.0)
    process_before = sum(idle_host.attributor.process_joules().values())

    share = idle_host.attributor.open_span()
    opened_ns = time.monotonic_ns()
    samples_at_open = len(idle_host.attributor.history)
    idle_host.load(0.6, j_per_busy_s=50.0, thread_cpu_per_step_s=0.01)
    in_span_ns = [t for t in idle_host.samples_ns()[samples_at_open:] if t >= opened_ns]
    thread_cpu_s = idle_host.proc.process_ticks[PID] / TICKS_PER_S  # all of it spent in the span
    attributed = idle_host.attributor.close_span(share)
    idle_host.attributor.sample()
    process_j = sum(idle_host.attributor.process_joules().values()) - process_before

    assert attributed is not None
    assert thread_cpu_s >= 0.1  # a tick per 20 ms step, fewer steps on a loaded machine
    assert attributed.cpu_joules == pytest.approx(50.0 * thread_cpu_s, rel=0.1)
    assert attributed.cpu_joules == pytest.approx(process_j, rel=0.1)
    assert in_span_ns, "no sample while the span was open"
    assert (in_span_ns[0] - opened_ns) / 1e9 < 0.5  # woken, not at the end of its doze
    assert len(in_span_ns) >= 3  # 0.1 s periods while the span is open (6 on an unloaded machine)


def test_the_back_off_never_reads_a_counter_less_often_than_its_wrap_safe_interval(tmp_path: Path) -> None:
    """A counter that wraps after 2 s at its zone's 250 W bound must be read every 0.5 s (four reads per
    wrap): the sampler's ticks, driven here one by one, back off to that and no further, also for a meter
    that does not sample itself."""
    powercap = make_powercap(tmp_path / "sys", "amd", max_power_uw=MAX_POWER_UW, range_uj=500_000_000)
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(PID, 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    attributor = Attributor(meter, sample=False)
    try:
        assert meter.sample_period_s == pytest.approx(0.5)
        delays_s = []
        end = time.monotonic() + IDLE_AFTER_S + 0.2
        while time.monotonic() < end or len(delays_s) < 40:
            delays_s.append(attributor.prices.pace.tick(attributor.prices))
            time.sleep(0.03)
    finally:
        attributor.close()
        meter.close()
    assert max(delays_s) == pytest.approx(0.5)
    assert delays_s[-1] == pytest.approx(0.5)


def test_a_process_working_outside_spans_keeps_its_sampler_at_its_period(tmp_path: Path) -> None:
    """No span open, but the process spends CPU time between the sampler's ticks (a tick of it every 0.1 s,
    10% of a CPU): its share is priced period by period, so the ticks, driven here one by one, never back off."""
    powercap = make_powercap(tmp_path / "sys", "one_socket", max_power_uw=MAX_POWER_UW)
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(PID, 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    attributor = Attributor(meter, sample=False)
    try:
        delays_s = []
        end = time.monotonic() + IDLE_AFTER_S + 0.5
        while time.monotonic() < end:
            proc.add_process(PID, 0.01)
            delays_s.append(attributor.prices.pace.tick(attributor.prices))
            time.sleep(HISTORY_PERIOD_S)
    finally:
        attributor.close()
        meter.close()
    # Each wait runs to the next multiple of the period on the monotonic clock (every process's sampler samples
    # at the same instants), half a period to one and a half away: never a back-off.
    assert all(HISTORY_PERIOD_S / 2 <= d <= 1.5 * HISTORY_PERIOD_S for d in delays_s), delays_s


def test_a_meter_and_its_attributor_share_one_sampler_thread(tmp_path: Path) -> None:
    """The attributor subscribes to the meter's sampler thread instead of running one of its own: one thread
    samples for both, the attributor's samples land in the meter's history, and once the attributor closes the
    same thread goes on with the meter's own sampling until the meter closes."""
    powercap = make_powercap(tmp_path / "sys", "one_socket", max_power_uw=MAX_POWER_UW)
    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(PID, 0.0)
    before = set(threading.enumerate())
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[])
    attributor = Attributor(meter)
    try:
        meter.snapshot()  # the meter's own sampling starts with its first snapshot
        time.sleep(4 * HISTORY_PERIOD_S)
        started = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert [t.name for t in started] == ["otel-joules-sampler"]
        assert len(attributor.history) >= 3  # the first sample, then the thread's
        assert attributor.prices.pace.thread is started[0] is meter.sampler.thread
        assert len(meter.history) >= len(attributor.history)
        attributor.close()
        assert meter.sampler.thread is started[0] and started[0].is_alive()
    finally:
        attributor.close()
        meter.close()
    started[0].join(5)
    assert not started[0].is_alive()
