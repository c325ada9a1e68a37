"""The compiled span ledger (otel_joules.attribution._fastledger) does what its pure-Python reference does.

Two span ledgers, one bound to the compiled methods and one running the Python ones, take the same random
events in lockstep: spans opened and closed on two threads (parents on the same thread and on the other one,
children that outlive their parent, spans closed twice), their threads' CPU clocks moving or failing, the
published prices changing (before the first sample, a period that ended since a thread's last event), the
process's GPU energy growing, and ``/proc/stat`` faults. After every event every share, every ledger and the
GPU accounts must be the same, float for float, and so must what ``close_span`` returns. The price history is
a scripted stand-in: it is the ledger's input, and the comparison needs the same prices on both sides.
"""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from otel_joules.attribution import spans as spans_module
from otel_joules.attribution._prices import _Prices, _Rates
from otel_joules.attribution.spans import SpanLedger, SpanShare
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY

needs_compiled = pytest.mark.skipif(
    spans_module._fastledger is None, reason="otel_joules.attribution._fastledger is not built here (no C compiler)"
)

SHARE_FIELDS = (
    "cpu0", "memory0", "dynamic0", "gpu0", "gpu_dynamic0", "own_cpu", "own_memory", "own_gpu", "own_dynamic",
    "child_cpu", "child_memory", "child_gpu", "child_dynamic", "open_children", "leaf", "ended",
)
LEDGER_FIELDS = ("cpu_s", "acc_cpu_j", "acc_memory_j", "acc_dynamic_j", "leaves")
ACCOUNTS = ("_gpu_acc_j", "_gpu_dynamic_acc_j", "_gpu_seen_j", "_gpu_seen_dynamic_j", "_gpu_leaves")


class ScriptedClock:
    """A thread's CPU clock whose seconds the test sets (or makes fail, as a thread that exited)."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.fails = False

    def __call__(self) -> float:
        if self.fails:
            raise OSError("the thread has exited")
        return self.cpu_s


class ScriptedPrices:
    """The price history as the span ledger reads it, with the prices the test publishes.

    ``view.rates`` is what the sampler published; ``price`` answers for CPU time in periods that ended since
    a thread's last event, ``first_forecast`` before the first sample (``since_ns`` 0). The GPU's watts are 0
    so the process's GPU joules are ``gpu_j`` at any instant: both ledgers see the same energy, whenever
    they read it.
    """

    def __init__(self, clocks: dict[int, ScriptedClock], has_gpu: bool, uncovered: bool) -> None:
        self.kind_indices = {KIND_CPU: (0, 2), KIND_MEMORY: (1,), KIND_GPU: (3,) if has_gpu else ()}
        self.uncovered_positions = (2,) if uncovered else None
        self.has_gpu = has_gpu
        self.uncovered_watts = 3.5
        self.view = SimpleNamespace(rates=_Rates(1, 2.0, 0.5, 0.0, 1.25, 0.0, 0.0, 0.0))
        self.forecast = _Rates(1, 1.5, 0.25, 0.0, 1.0)
        self.prices = _Prices(3.0, 0.75, 2.0)
        self.stat_checks = SimpleNamespace(fault=False)
        self.attribution_label = "cpu-time/capacity"
        self.baseline_state = "measured"
        self.pace = SimpleNamespace(dozing=False, wake=self._wake)
        self.wakes = 0
        self.first_forecasts = self.price_calls = 0
        self._clocks = clocks

    def _wake(self) -> None:
        self.wakes += 1
        self.pace.dozing = False

    @property
    def clocks(self) -> Any:
        return SimpleNamespace(thread_clock=lambda: self._clocks[threading.get_ident()])

    def ensure_sampling(self) -> None:
        """Nothing to start: the test publishes the prices."""

    def first_forecast(self, snapshot: EnergySnapshot | None = None) -> _Rates:
        self.first_forecasts += 1
        return self.forecast

    def price(self, t0_ns: int, t1_ns: int) -> _Prices:
        self.price_calls += 1
        return self.prices


def _snapshot(rng: random.Random, t_ns: int) -> EnergySnapshot:
    joules = tuple(None if rng.random() < 0.05 else rng.uniform(0.0, 40.0) for _ in range(4))
    return EnergySnapshot(t_ns, joules, (), (), (0, 0, 0, 0), None)


class Lockstep:
    """The same events on the compiled ledger and on the reference, each on the thread it names."""

    def __init__(self, rng: random.Random, has_gpu: bool, uncovered: bool) -> None:
        self.rng = rng
        self.workers = [ThreadPoolExecutor(1) for _ in range(2)]
        self.idents = [worker.submit(threading.get_ident).result() for worker in self.workers]
        self.clocks = {side: {ident: ScriptedClock() for ident in self.idents} for side in ("compiled", "reference")}
        self.prices = {side: ScriptedPrices(self.clocks[side], has_gpu, uncovered) for side in self.clocks}
        self.ledgers = {
            "compiled": SpanLedger(self.prices["compiled"], compiled=True),
            "reference": SpanLedger(self.prices["reference"], compiled=False),
        }
        assert self.ledgers["compiled"].compiled and not self.ledgers["reference"].compiled
        #: Pairs of shares (compiled, reference) for the same span, and the thread each opened on.
        self.spans: list[tuple[SpanShare, SpanShare, int]] = []

    def close(self) -> None:
        for worker in self.workers:
            worker.shutdown()

    def on_both(self, thread: int, action: Callable[[str], Any]) -> dict[str, Any]:
        return {side: self.workers[thread].submit(action, side).result() for side in self.ledgers}

    def set(self, change: Callable[[ScriptedPrices, dict[int, ScriptedClock]], None]) -> None:
        for side in self.ledgers:
            change(self.prices[side], self.clocks[side])

    def check(self) -> None:
        for compiled, reference, _ in self.spans:
            for field in SHARE_FIELDS:
                assert getattr(compiled, field) == getattr(reference, field), field
                assert type(getattr(compiled, field)) is type(getattr(reference, field)), field
        for field in ACCOUNTS:
            assert getattr(self.ledgers["compiled"], field) == getattr(self.ledgers["reference"], field), field
        seen: set[int] = set()
        for compiled, reference, _ in self.spans:
            if id(compiled.ledger) not in seen:
                seen.add(id(compiled.ledger))
                for field in LEDGER_FIELDS:
                    assert getattr(compiled.ledger, field) == getattr(reference.ledger, field), field

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3 or not self.spans:
            thread = rng.randrange(2)
            open_spans = [s for s in self.spans if not s[0].ended]
            parent = rng.choice(open_spans) if open_spans and rng.random() < 0.8 else None

            def open_one(side: str) -> SpanShare:
                share = None if parent is None else parent[0 if side == "compiled" else 1]
                return self.ledgers[side].open_span(share)

            opened = self.on_both(thread, open_one)
            self.spans.append((opened["compiled"], opened["reference"], thread))
        elif roll < 0.6:
            compiled, reference, thread = rng.choice(self.spans)  # may have ended: closing again gives None
            thread = thread if rng.random() < 0.8 else 1 - thread  # spans may end on another thread
            t0 = rng.randrange(1, 10**12)
            start, end = _snapshot(rng, t0), _snapshot(rng, t0 + rng.randrange(0, 10**9))
            with_snapshots = rng.random() < 0.8

            def close_one(side: str) -> Any:
                share = compiled if side == "compiled" else reference
                if with_snapshots:
                    return self.ledgers[side].close_span(share, start, end)
                return self.ledgers[side].close_span(share)

            closed = self.on_both(thread, close_one)
            assert closed["compiled"] == closed["reference"]
            assert type(closed["compiled"]) is type(closed["reference"])
        elif roll < 0.8:
            ident = rng.choice(self.idents)
            seconds = rng.choice((0.0, rng.uniform(0.0, 0.01), rng.uniform(0.0, 2.0)))
            fails = rng.random() < 0.05

            def move(prices: ScriptedPrices, clocks: dict[int, ScriptedClock]) -> None:
                clocks[ident].cpu_s += seconds
                clocks[ident].fails = fails

            self.set(move)
        else:
            choice = rng.randrange(5)
            scale = rng.uniform(0.1, 5.0)
            gpu_j = rng.uniform(0.0, 1.0)

            def publish(prices: ScriptedPrices, clocks: dict[int, ScriptedClock]) -> None:
                rates = prices.view.rates
                if choice == 0:  # before the first sample
                    prices.view = SimpleNamespace(rates=rates._replace(since_ns=0))
                elif choice == 1:  # a sample after every thread's last event: its periods are priced by price()
                    prices.view = SimpleNamespace(rates=rates._replace(since_ns=2**62))
                elif choice == 2:
                    prices.view = SimpleNamespace(rates=rates._replace(
                        since_ns=1, cpu_j_per_cpu_s=2.0 * scale, memory_j_per_cpu_s=0.4 * scale,
                        dynamic_j_per_cpu_s=1.1 * scale))
                elif choice == 3:  # the process's GPU energy grows
                    prices.view = SimpleNamespace(rates=rates._replace(
                        gpu_j=rates.gpu_j + gpu_j, gpu_dynamic_j=rates.gpu_dynamic_j + gpu_j / 2))
                else:
                    prices.stat_checks.fault = not prices.stat_checks.fault
                    prices.pace.dozing = True

            self.set(publish)
        self.check()


@needs_compiled
@pytest.mark.parametrize("has_gpu, uncovered", [(True, True), (False, False)])
def test_the_compiled_ledger_agrees_with_the_reference_float_for_float(has_gpu: bool, uncovered: bool) -> None:
    rng = random.Random(20261207 + has_gpu)
    lockstep = Lockstep(rng, has_gpu, uncovered)
    try:
        for _ in range(2500):
            lockstep.step()
    finally:
        lockstep.close()
    compiled, reference = lockstep.prices["compiled"], lockstep.prices["reference"]
    # Every rare case was taken, on both sides alike.
    assert compiled.first_forecasts == reference.first_forecasts > 0
    assert compiled.price_calls == reference.price_calls > 0
    assert compiled.wakes == reference.wakes > 0
    ended = [c for c, _, _ in lockstep.spans if c.ended]
    assert len(ended) > 100 and any(c.own_cpu > 0 for c in ended)
    assert any(c.parent is not None and c.parent.ledger is not c.ledger for c, _, _ in lockstep.spans)
    if has_gpu:
        assert any(c.own_gpu > 0 for c in ended)


@needs_compiled
def test_the_compiled_methods_refuse_objects_that_are_not_their_shares() -> None:
    lockstep = Lockstep(random.Random(1), has_gpu=False, uncovered=False)
    try:
        ledger = lockstep.ledgers["compiled"]
        with pytest.raises(TypeError, match="not a SpanShare"):
            ledger.open_span(object())
        with pytest.raises(TypeError, match="not a SpanShare"):
            ledger.close_span(SimpleNamespace(ended=False))
    finally:
        lockstep.close()


def test_a_span_processor_takes_the_compiled_ledger_where_the_meter_takes_the_fast_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from otel_joules import EnergyMeter
    from otel_joules.attribution import Attributor
    from otel_joules.config import OTEL_JOULES_FAST_PATH
    from tests.fakes.powercap import make_powercap
    from tests.fakes.procfs import FakeProcfs

    tree = make_powercap(tmp_path / "sys", "four_domains")
    proc = FakeProcfs(tmp_path / "proc", cpus=2)
    proc.add_thread(os.getpid(), threading.get_native_id(), 0.0)
    for flag, expected in (("1", spans_module._fastledger is not None), ("0", False)):
        monkeypatch.setenv(OTEL_JOULES_FAST_PATH, flag)
        with EnergyMeter(sysfs_root=tree.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False) as meter:
            attributor = Attributor(meter, sample=False)
            assert attributor.ledger.compiled is expected
            share = attributor.open_span()
            assert isinstance(share, SpanShare)
            attribution = attributor.close_span(share, meter.snapshot(), meter.snapshot())
            assert attribution is not None and attribution.self_joules >= 0.0
            attributor.close()


@needs_compiled
def test_the_ledgers_mutex_takes_the_calls_a_threading_lock_takes() -> None:
    # Code that holds or probes the ledgers' locks (fork safety, tests) calls them as threading.Lock.
    from otel_joules.attribution._ledger import _new_lock

    lock = _new_lock()
    assert lock.acquire(timeout=2) is True and lock.locked()
    assert lock.acquire(False) is False and lock.acquire(timeout=0.01) is False
    waited = []
    other = threading.Thread(target=lambda: waited.append(lock.acquire(timeout=5)))
    other.start()
    lock.release()
    other.join(5)
    assert waited == [True] and lock.locked()
    lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="unlocked"):
        lock.release()
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
