"""The attribution model: which part of the host's energy is this process's, and each span's.

Model ``cpu_time_share`` (what ``energy.attribution`` names):

* **CPU-side domains** (RAPL package/psys, the CPU estimate): the host's energy is shared among
  the busy work of the host in proportion to CPU time, as Scaphandre does. The price of one CPU
  second spent in a sampler period is ``joules / max(host busy CPU seconds, this process's CPU
  seconds)`` of that period alone (the second term guards against ``/proc/stat``'s tick sampling
  undercounting, so this process is never given more than the host spent). No period's energy
  is priced into another's CPU time, so the shares stay conservative across load changes.
* **Memory** (RAPL dram, the memory estimate): shared by the same CPU time, but over the host's
  whole CPU capacity (busy + idle seconds): DRAM power is mostly refresh and background, not
  caused by whichever thread happens to run, so a lone busy thread on an idle host does not
  get all of it, and the price does not jump when the host's load does.
* **Idle**: the energy of a period with fewer than :data:`MIN_BUSY_S` busy CPU seconds (two
  ticks: too few to tell who was busy), and the idle CPU seconds' part of memory energy in the
  others, belong to no process and no span.
* **Spans**: a span's CPU seconds are those of the thread it started on while it is a *leaf*
  there (open with no open child span on that thread); when several spans are leaves on one
  thread at once (asyncio tasks), the thread's CPU time is split equally among them. Each
  span's CPU seconds are priced at the periods they were spent in (a forecast for time after the
  last sample, the average over the busy ones of the last :data:`RATE_WINDOW` periods: a span
  shorter than the period is priced at the recent average), and
  its CPU-side and memory self shares are capped at what the host spent of them during it.
* **GPUs**: the process's fraction of each GPU comes from NVML (:mod:`.gpu`); within the
  process, the GPU energy during a span is split equally among the leaf spans open at each
  moment (all threads), at the power of the latest sampler period.
* ``self`` joules are what a span accrued as a leaf; ``inclusive`` = self + the inclusive
  joules of its children that ended before it. Summed over all spans, ``self`` counts every
  joule once, whatever the nesting, concurrency or remote parents.

The sampler thread reads ``/proc/stat`` and the counters every :data:`HISTORY_PERIOD_S`
and keeps :data:`HISTORY_S` seconds of history; spans only read their thread's CPU clock.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple, Sequence

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.procfs import CLOCK_TICKS_PER_S, CpuClocks, ProcfsReadError
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import ATTRIBUTION_CPU_TIME_SHARE, KIND_CPU, KIND_GPU, KIND_MEMORY
from otel_joules.sensors.base import Domain, HardwareType

if TYPE_CHECKING:
    from otel_joules.attribution.gpu import NvmlProcessShares
    from otel_joules.meter.meter import EnergyMeter

_log = logging.getLogger("otel_joules")
_new_tuple = tuple.__new__
_EDGE_TOLERANCE_NS = 1_000_000

#: How often the sampler reads ``/proc/stat``, the process's CPU time and the counters.
HISTORY_PERIOD_S = 0.1
#: The forecast price (for span CPU time after the latest sample) averages this many periods: a
#: tick of /proc/stat per CPU is 10% of a 0.1 s period on one CPU, 3% over three; longer windows
#: lag load changes more. Shares already sampled are priced period by period, never averaged.
RATE_WINDOW = 3
#: A forecast window shorter than this does not change the forecast (unless there is none yet).
MIN_RATE_WINDOW_S = 0.05
#: A period with fewer busy CPU seconds than this (two ticks) is idle: its energy is nobody's and
#: it does not change the forecast.
MIN_BUSY_S = 0.02
#: How far back the history reaches (spans with explicit times older than this get no energy).
HISTORY_S = 300.0

KINDS = (KIND_CPU, KIND_MEMORY, KIND_GPU)


def kind_of(hw_type: HardwareType) -> str:
    """The attribution kind of a domain's hardware type (psys counts as CPU-side)."""
    if hw_type is HardwareType.MEMORY:
        return KIND_MEMORY
    if hw_type is HardwareType.GPU:
        return KIND_GPU
    return KIND_CPU


def measured_kinds(domains: Iterable[Domain]) -> tuple[str, ...]:
    """The kinds (in :data:`KINDS` order) that domains adding to the host's total cover."""
    present = {kind_of(d.hw_type) for d in domains if d.in_total}
    return tuple(kind for kind in KINDS if kind in present)


class SpanAttribution(NamedTuple):
    """One span's attributed joules (inclusive of children ended before it, per kind) and its self joules."""

    cpu_joules: float
    memory_joules: float
    gpu_joules: float
    self_joules: float

    @property
    def joules(self) -> float:
        """The inclusive total over the kinds."""
        return self.cpu_joules + self.memory_joules + self.gpu_joules


@dataclass(frozen=True)
class HistorySample:
    """What the sampler read at one instant.

    Attributes:
        monotonic_ns: ``time.monotonic_ns()`` of the reads.
        wall_offset_ns: ``time.time_ns() - time.monotonic_ns()`` then (spans state wall times).
        snapshot: The meter's snapshot.
        busy_s: The host's busy CPU seconds since boot.
        idle_s: The host's idle CPU seconds since boot.
        process_cpu_s: This process's CPU seconds.
        process_joules: This process's attributed joules since the attributor started, per kind.
    """

    monotonic_ns: int
    wall_offset_ns: int
    snapshot: EnergySnapshot
    busy_s: float
    process_cpu_s: float
    idle_s: float
    process_joules: tuple[float, float, float]


class _Rates(NamedTuple):
    """Prices after the latest sample: joules per CPU second (cpu, memory) and the process's GPU watts."""

    since_ns: int
    cpu_j_per_cpu_s: float
    memory_j_per_cpu_s: float
    gpu_watts: float


class _Ledger:
    """One thread's CPU clock and the joules it has accrued per leaf span (the integral trick).

    ``acc_*_j`` grows by (CPU seconds x price) / leaves at every event, so a span that is a
    leaf from event a to event b accrued ``acc(b) - acc(a)``: O(1) per event however many
    spans are open on the thread.
    """

    __slots__ = ("lock", "clock", "cpu_s", "t_ns", "acc_cpu_j", "acc_memory_j", "leaves", "generation", "owner")

    def __init__(self, clock: Callable[[], float], generation: int, owner: "Attributor") -> None:
        self.owner = owner
        self.lock = threading.Lock()
        self.clock = clock
        self.cpu_s = _read_clock(clock, 0.0)
        self.t_ns = time.monotonic_ns()
        self.acc_cpu_j = 0.0
        self.acc_memory_j = 0.0
        self.leaves = 0
        self.generation = generation


class SpanShare:
    """Per-span bookkeeping between ``open_span`` and ``close_span`` (touched under its ledger's lock).

    No ``__slots__``: the class attributes are the defaults, so opening a span sets only the four
    fields that differ (this runs for every span).
    """

    open_children = 0
    leaf = True
    ended = False
    gpu0 = own_cpu = own_memory = own_gpu = child_cpu = child_memory = child_gpu = 0.0

    def __init__(self, ledger: _Ledger, parent: "SpanShare | None", cpu0: float, memory0: float) -> None:
        self.ledger = ledger
        self.parent = parent
        self.cpu0 = cpu0
        self.memory0 = memory0

    def abandon(self, _ref: object = None) -> None:
        """Close the share of a span that was dropped without ``end()`` (a weakref callback)."""
        if not self.ended:
            try:
                self.ledger.owner.close_span(self)
            except Exception:  # noqa: BLE001 - runs inside the garbage collector: never raise
                pass


def _wall_offset_ns() -> int:
    """``time.time_ns() - time.monotonic_ns()``, from the tightest of three tries (a preemption
    between the two reads would shift every explicit span time converted with it)."""
    best_gap, best_offset = None, 0
    for _ in range(3):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        if best_gap is None or after - before < best_gap:
            best_gap, best_offset = after - before, wall - (before + after) // 2
        if best_gap < 20_000:
            break
    return best_offset


def _read_clock(clock: Callable[[], float], fallback: float) -> float:
    try:
        return clock()
    except (OSError, ValueError):
        return fallback  # the thread has exited: it spends nothing more


class Attributor:
    """Attributes a meter's energy to this process and to spans (module docstring).

    Use :func:`attributor_for` for the shared one of a meter. Tests build their own with
    ``sample=False`` and call :meth:`sample` themselves.

    Args:
        meter: Where the joules come from.
        clocks: Where CPU times come from (default: procfs under the meter's ``procfs_root``).
        gpu_shares: This process's fraction of each GPU domain; NVML's view when omitted and
            the meter measures GPUs.
        sample: Run the sampler thread (started on first use).
        period_s: Sampler period.
        history_s: How much history to keep.

    Raises:
        ProcfsReadError: ``/proc/stat`` (under the procfs root) cannot be read.
    """

    def __init__(
        self,
        meter: "EnergyMeter",
        *,
        clocks: CpuClocks | None = None,
        gpu_shares: "NvmlProcessShares | None" = None,
        sample: bool = True,
        period_s: float = HISTORY_PERIOD_S,
        history_s: float = HISTORY_S,
    ) -> None:
        self.meter = meter
        self.clocks = clocks or CpuClocks(meter.settings.procfs_root)
        self.kind_indices: dict[str, tuple[int, ...]] = {kind: () for kind in KINDS}
        for i, domain in enumerate(meter.domains):
            if domain.in_total:
                kind = kind_of(domain.hw_type)
                self.kind_indices[kind] += (i,)
        self.kinds = measured_kinds(meter.domains)
        # Capped per span (Attributor._cap). GPUs are not: their share is power x time, not a price
        # per CPU second that could lag, and a span's GPU snapshot may be the sampler's latest read.
        self._cpu_indices = self.kind_indices[KIND_CPU]
        self._memory_indices = self.kind_indices[KIND_MEMORY]
        self.has_gpu = bool(self.kind_indices[KIND_GPU])
        if gpu_shares is None and self.has_gpu:
            from otel_joules.attribution.gpu import NvmlProcessShares

            gpu_shares = NvmlProcessShares([meter.domains[i].hw_id for i in self.kind_indices[KIND_GPU]])
        self.gpu_shares = gpu_shares
        self.period_s = period_s
        self.history_s = history_s
        self._max_samples = max(2, int(history_s / period_s) + 1)
        self._sample_enabled = sample
        self._generation = 0
        self._reset_state()
        # Every attributor, shared or not: its sampler thread holds _reading_lock across reads.
        register_fork_hook(self, "_after_fork_in_child")
        self.clocks.host()  # fail now, with a clear error, rather than at the first span
        self.sample()
        # Sampling from now on, not from the first span: the first spans then find prices.
        self.ensure_sampling()

    def _reset_state(self) -> None:
        self.wall_offset_ns = _wall_offset_ns()
        self._sample_lock = threading.Lock()
        self._reading_lock = threading.Lock()
        self._local = threading.local()
        self._history: list[HistorySample] = []
        self._times: list[int] = []
        self._rates = _Rates(0, 0.0, 0.0, 0.0)
        self._process_watts = (0.0, 0.0, 0.0)
        self._late_ticks_s = 0.0
        self._gpu_lock = threading.Lock()
        self._gpu_acc_j = 0.0
        self._gpu_t_ns = time.monotonic_ns()
        self._gpu_leaves = 0
        self._sampler: _AttributionSampler | None = None
        self._closed = False
        self._failure_reported = False

    # -- the sampler side ---------------------------------------------------------------------

    def sample(self) -> HistorySample | None:
        """Read ``/proc/stat``, this process's CPU time, the counters (and GPU shares); extend the history."""
        # Two locks: the reads (NVML may be slow) serialise samplers only; the span path's
        # history lookups wait at most for the few lines under _sample_lock.
        with self._reading_lock:
            try:
                snapshot = self.meter.snapshot()
                host = self.clocks.host()
                process_cpu_s = self.clocks.process_cpu_s()
                # Not for the first sample (nothing to split yet): it is taken in instrument(),
                # where a stalled NVML's process lists must not hold the program up.
                fractions = self.gpu_shares.fractions() if self.gpu_shares is not None and self._history else []
            except (ProcfsReadError, OSError) as exc:
                self._report(exc)
                return None
            if snapshot.joules and all(j is None for j in snapshot.joules):
                self._closed = True  # the meter was closed: nothing more to sample
                return None
            with self._sample_lock:
                return self._append(snapshot, host.busy_s, host.idle_s, process_cpu_s, fractions)

    def _append(
        self, snapshot: EnergySnapshot, busy_s: float, idle_s: float, process_cpu_s: float, fractions: list[float]
    ) -> HistorySample:
        """Extend the history with one sample's reads and update the prices (``_sample_lock`` held)."""
        now_ns = snapshot.monotonic_ns
        previous = self._history[-1] if self._history else None
        process_joules = (0.0, 0.0, 0.0)
        if previous is not None:
            process_joules = self._advance_rates(previous, snapshot, busy_s, idle_s, process_cpu_s, fractions)
        sample = HistorySample(now_ns, _wall_offset_ns(), snapshot, busy_s, process_cpu_s, idle_s, process_joules)
        # time.time_ns() - time.monotonic_ns() at the latest sample, for explicit span times.
        self.wall_offset_ns = sample.wall_offset_ns
        self._history.append(sample)
        self._times.append(now_ns)
        if len(self._history) > self._max_samples:
            drop = len(self._history) - self._max_samples
            del self._history[:drop]
            del self._times[:drop]
        return sample

    def _advance_rates(
        self,
        previous: HistorySample,
        snapshot: EnergySnapshot,
        busy_s: float,
        idle_s: float,
        process_cpu_s: float,
        fractions: list[float],
    ) -> tuple[float, float, float]:
        dt_s = (snapshot.monotonic_ns - previous.monotonic_ns) / 1e9
        d_process = max(0.0, process_cpu_s - previous.process_cpu_s)
        # The process's share of this period: the period's own energy over its own busy time. Mixing
        # periods would price an idle period's energy into the busy ones next to it (not conservative).
        # /proc/stat may count a tick of work done in one period in the next: this process's CPU time
        # beyond a period's busy ticks is owed by the next period's, so the late ticks neither lower
        # this period's price (it is priced at max(busy, own CPU)) nor the next one's.
        host_busy_s = busy_s - previous.busy_s - self._late_ticks_s
        host_idle_s = idle_s - previous.idle_s
        own_cpu, own_memory = self._rates_between(previous.snapshot, snapshot, host_busy_s, host_idle_s, d_process)
        # At most a tick per CPU can be late; more means /proc/stat does not see this process's work.
        cpus = (busy_s - previous.busy_s + host_idle_s) / dt_s if dt_s > 0 else 0.0
        self._late_ticks_s = min(max(0.0, d_process - max(host_busy_s, 0.0)), max(cpus, 0.0) / CLOCK_TICKS_PER_S)
        r_cpu, r_memory = self._forward_rates(snapshot, busy_s, idle_s, process_cpu_s)
        gpu_joules = 0.0
        for i, fraction in zip(self.kind_indices[KIND_GPU], fractions):
            a, b = previous.snapshot.joules[i], snapshot.joules[i]
            if a is not None and b is not None:
                gpu_joules += (b - a) * fraction
        gpu_watts = gpu_joules / dt_s if dt_s > 0 else 0.0
        if self.has_gpu:
            self._credit_gpu(snapshot.monotonic_ns)  # close the old price's time before changing it
        self._rates = _Rates(snapshot.monotonic_ns, r_cpu, r_memory, gpu_watts)
        mine = (own_cpu * d_process, own_memory * d_process, gpu_joules)
        self._process_watts = tuple(j / dt_s for j in mine) if dt_s > 0 else (0.0, 0.0, 0.0)  # type: ignore[assignment]
        return tuple(p + m for p, m in zip(previous.process_joules, mine))  # type: ignore[return-value]

    def _forward_rates(
        self, snapshot: EnergySnapshot, busy_s: float, idle_s: float, process_cpu_s: float
    ) -> tuple[float, float]:
        """The prices for CPU time after the new sample, until the next (``_sample_lock`` held).

        Only a forecast: spans' CPU time after the latest sample is priced at it (and capped at what
        the host spent during the span); the process's share never is. Over the busy periods among
        the last :data:`RATE_WINDOW` (with the new one): a period's busy time is off by up to a tick per
        CPU, which a window shrinks; idle periods price nothing, so they are left out. Kept as they
        were when the window is too short or has no busy period.
        """
        ends = [(s.snapshot, s.busy_s, s.idle_s, s.process_cpu_s) for s in self._history[-RATE_WINDOW:]]
        ends.append((snapshot, busy_s, idle_s, process_cpu_s))
        cpu_j = memory_j = busy = capacity = 0.0
        for (a, busy_a, idle_a, process_a), (b, busy_b, idle_b, process_b) in zip(ends, ends[1:]):
            period_busy, period_capacity = _busy_and_capacity(busy_b - busy_a, idle_b - idle_a, process_b - process_a)
            if period_busy < MIN_BUSY_S:
                continue
            cpu_j += self._kind_joules(KIND_CPU, a, b)
            memory_j += self._kind_joules(KIND_MEMORY, a, b)
            busy += period_busy
            capacity += period_capacity
        window_s = (snapshot.monotonic_ns - ends[0][0].monotonic_ns) / 1e9
        if self._rates.since_ns and (window_s < MIN_RATE_WINDOW_S or busy <= 0):
            # Too short, or nothing busy, to say what a CPU second costs: keep the prices.
            return self._rates.cpu_j_per_cpu_s, self._rates.memory_j_per_cpu_s
        if busy <= 0:
            return 0.0, 0.0  # no price yet and nothing busy: CPU time now is priced as idle
        return cpu_j / busy, memory_j / capacity

    def _kind_joules(self, kind: str, a: EnergySnapshot, b: EnergySnapshot) -> float:
        total = 0.0
        for i in self.kind_indices[kind]:
            x, y = a.joules[i], b.joules[i]
            if x is not None and y is not None:
                total += y - x
        return total

    def _report(self, exc: BaseException) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.warning(
                "otel-joules: cannot attribute energy to this process and its spans (%s); spans keep energy.joules "
                "but carry no energy.attributed.*. Set OTEL_JOULES_PROCFS_ROOT to where procfs is mounted.",
                exc,
            )

    def ensure_sampling(self) -> None:
        """Start the sampler thread unless it runs, sampling is off or the attributor is closed."""
        if self._sampler is None and self._sample_enabled and not self._closed:
            with self._reading_lock:
                if self._sampler is None and not self._closed:
                    self._sampler = _AttributionSampler(self, self.period_s)
                    self._sampler.start()

    def close(self) -> None:
        """Stop the sampler thread. Idempotent."""
        self._closed = True
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()

    # -- what readers get ---------------------------------------------------------------------

    @property
    def history(self) -> tuple[HistorySample, ...]:
        """The samples kept, oldest first."""
        return tuple(self._history)

    def process_joules(self) -> dict[str, float]:
        """This process's attributed joules per kind since the attributor started (up to the latest sample)."""
        latest = self._history[-1].process_joules if self._history else (0.0, 0.0, 0.0)
        return {kind: latest[KINDS.index(kind)] for kind in self.kinds}

    def process_joules_since(self, monotonic_ns: int) -> dict[str, float] | None:
        """This process's attributed joules per kind from an instant to now (a sample is taken now).

        Counts from the sampler period holding the instant (up to one period early). None when
        the instant is older than the history, or no sample can be taken.
        """
        latest = self.sample()
        if latest is None:
            return None
        with self._sample_lock:
            history = list(self._history)
        if not history or monotonic_ns < history[0].monotonic_ns:
            return None
        # From the sample at or before the instant: the period holding it counts whole (its share
        # is not spread evenly over the period, so interpolating could drop work done after the instant).
        base = history[max(0, bisect.bisect_right([h.monotonic_ns for h in history], monotonic_ns) - 1)].process_joules
        return {kind: latest.process_joules[KINDS.index(kind)] - base[KINDS.index(kind)] for kind in self.kinds}

    def process_watts(self) -> dict[str, float]:
        """This process's attributed power per kind over the latest sampler period."""
        return {kind: self._process_watts[KINDS.index(kind)] for kind in self.kinds}

    def price(self, t0_ns: int, t1_ns: int) -> tuple[float, float]:
        """Joules per CPU second (CPU-side, memory) for CPU time spent between two monotonic instants.

        Time-weighted over the sampler periods the interval overlaps, each at its own prices; time
        after the latest sample is priced at the forecast (:meth:`_forward_rates`).
        """
        rates = self._rates
        if t0_ns >= rates.since_ns or t1_ns <= t0_ns:
            return rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s
        with self._sample_lock:
            history = self._history
            times = self._times
            weight = cpu = memory = 0.0
            start = max(0, bisect.bisect_right(times, t0_ns) - 1)
            for k in range(start, len(history) - 1):
                a, b = history[k], history[k + 1]
                lo, hi = max(t0_ns, a.monotonic_ns), min(t1_ns, b.monotonic_ns)
                if hi <= lo:
                    if a.monotonic_ns >= t1_ns:
                        break
                    continue
                r_cpu, r_memory = self._period_rates(k)
                w = hi - lo
                weight += w
                cpu += r_cpu * w
                memory += r_memory * w
            tail = t1_ns - max(t0_ns, rates.since_ns)
            if tail > 0:
                weight += tail
                cpu += rates.cpu_j_per_cpu_s * tail
                memory += rates.memory_j_per_cpu_s * tail
        if weight <= 0:
            return rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s
        return cpu / weight, memory / weight

    def _period_rates(self, k: int) -> tuple[float, float]:
        """The prices of the sampler period from sample ``k`` to ``k + 1``: its own energy over its own busy time."""
        a, b = self._history[k], self._history[k + 1]
        return self._rates_between(
            a.snapshot, b.snapshot, b.busy_s - a.busy_s, b.idle_s - a.idle_s, b.process_cpu_s - a.process_cpu_s
        )

    def _rates_between(
        self, a: EnergySnapshot, b: EnergySnapshot, busy_s: float, idle_s: float, process_cpu_s: float
    ) -> tuple[float, float]:
        """Joules per CPU second (CPU-side, memory) between two snapshots (module docstring)."""
        busy, capacity = _busy_and_capacity(busy_s, idle_s, process_cpu_s)
        if busy < MIN_BUSY_S:
            return 0.0, 0.0  # idle (too few busy ticks to tell who was busy): nobody's
        return self._kind_joules(KIND_CPU, a, b) / busy, self._kind_joules(KIND_MEMORY, a, b) / capacity

    # -- spans --------------------------------------------------------------------------------

    def _advance(self, ledger: _Ledger, now_ns: int) -> None:
        """Credit the thread's CPU time since its last event to its leaf spans (ledger lock held)."""
        try:
            cpu_s = ledger.clock()
        except (OSError, ValueError):
            cpu_s = ledger.cpu_s  # the thread has exited: it spends nothing more
        leaves = ledger.leaves
        if leaves:
            delta = cpu_s - ledger.cpu_s
            if delta > 0:
                rates = self._rates
                if ledger.t_ns >= rates[0]:
                    per_leaf = delta / leaves
                    ledger.acc_cpu_j += per_leaf * rates[1]
                    ledger.acc_memory_j += per_leaf * rates[2]
                else:
                    r_cpu, r_memory = self.price(ledger.t_ns, now_ns)
                    ledger.acc_cpu_j += delta / leaves * r_cpu
                    ledger.acc_memory_j += delta / leaves * r_memory
        ledger.cpu_s = cpu_s
        ledger.t_ns = now_ns

    def _credit_gpu(self, now_ns: int) -> None:
        """Spread the process's GPU energy since the last event over the open leaf spans (GPU lock taken here)."""
        with self._gpu_lock:
            dt_ns = now_ns - self._gpu_t_ns
            if dt_ns > 0:
                if self._gpu_leaves:
                    self._gpu_acc_j += self._rates.gpu_watts * dt_ns / 1e9 / self._gpu_leaves
                self._gpu_t_ns = now_ns

    def _leaf_off(self, share: SpanShare, ledger: _Ledger) -> None:
        share.own_cpu += ledger.acc_cpu_j - share.cpu0
        share.own_memory += ledger.acc_memory_j - share.memory0
        share.leaf = False
        ledger.leaves -= 1
        if self.has_gpu:
            with self._gpu_lock:
                share.own_gpu += self._gpu_acc_j - share.gpu0
                self._gpu_leaves -= 1

    def _leaf_on(self, share: SpanShare, ledger: _Ledger) -> None:
        share.cpu0 = ledger.acc_cpu_j
        share.memory0 = ledger.acc_memory_j
        share.leaf = True
        ledger.leaves += 1
        if self.has_gpu:
            with self._gpu_lock:
                share.gpu0 = self._gpu_acc_j
                self._gpu_leaves += 1

    def open_span(self, parent: SpanShare | None = None) -> SpanShare:
        """Start attributing to a new span on the calling thread, a child of ``parent`` if that is local."""
        try:
            ledger = self._local.ledger
        except AttributeError:
            ledger = self._local.ledger = _Ledger(self.clocks.thread_clock(), self._generation, self)
            self.ensure_sampling()
        now_ns = time.monotonic_ns()
        if self.has_gpu:
            self._credit_gpu(now_ns)
        with ledger.lock:
            if ledger.leaves or parent is not None:
                self._advance(ledger, now_ns)
                if parent is not None and parent.ledger is ledger and not parent.ended:
                    if parent.open_children == 0 and parent.leaf:
                        self._leaf_off(parent, ledger)
                    parent.open_children += 1
            else:
                # No span open on this thread: only the clock's new origin matters.
                try:
                    ledger.cpu_s = ledger.clock()
                except (OSError, ValueError):
                    pass
                ledger.t_ns = now_ns
            share = SpanShare(ledger, parent, ledger.acc_cpu_j, ledger.acc_memory_j)
            ledger.leaves += 1
        if self.has_gpu:
            with self._gpu_lock:
                share.gpu0 = self._gpu_acc_j
                self._gpu_leaves += 1
        return share

    def close_span(
        self, share: SpanShare, start: EnergySnapshot | None = None, end: EnergySnapshot | None = None
    ) -> SpanAttribution | None:
        """Stop attributing to ``share``'s span and return what it was attributed (None if already closed).

        With the span's own snapshots (``start``, ``end``), neither its CPU-side nor its memory self
        share exceeds what the host spent of that kind during the span: prices lag the load by up
        to a sampler period, and a span right after a quiet period must still not be given more
        than the host spent.
        """
        ledger = share.ledger
        if share.ended or ledger.generation != self._generation:
            return None  # closed before, or opened before a fork: its thread does not exist here
        now_ns = time.monotonic_ns()
        if self.has_gpu:
            self._credit_gpu(now_ns)
        parent = share.parent
        with ledger.lock:
            if share.ended:
                return None
            self._advance(ledger, now_ns)
            if share.leaf:
                if self.has_gpu:
                    self._leaf_off(share, ledger)
                else:  # the common case, inlined: this runs at every span end
                    share.own_cpu += ledger.acc_cpu_j - share.cpu0
                    share.own_memory += ledger.acc_memory_j - share.memory0
                    share.leaf = False
                    ledger.leaves -= 1
            share.ended = True
            if end is not None and start is not None:
                self._cap(share, start, end)
            own = share.own_cpu + share.own_memory + share.own_gpu
            cpu = share.own_cpu + share.child_cpu
            memory = share.own_memory + share.child_memory
            gpu = share.own_gpu + share.child_gpu
            if parent is not None and parent.ledger is ledger:
                if not parent.ended:
                    parent.open_children -= 1
                    if parent.open_children == 0:
                        self._leaf_on(parent, ledger)
                    parent.child_cpu += cpu
                    parent.child_memory += memory
                    parent.child_gpu += gpu
                parent = None
        if parent is not None and parent.ledger.generation == self._generation:
            with parent.ledger.lock:
                if not parent.ended:
                    parent.child_cpu += cpu
                    parent.child_memory += memory
                    parent.child_gpu += gpu
        return _new_tuple(SpanAttribution, (cpu, memory, gpu, own))

    def _cap(self, share: SpanShare, start: EnergySnapshot, end: EnergySnapshot) -> None:
        """Limit ``share``'s own CPU-side and memory joules to what the host spent of each during the span."""
        a, b = start.joules, end.joules
        cap = _spent_joules(self._cpu_indices, a, b) - share.child_cpu
        if share.own_cpu > cap:
            share.own_cpu = max(0.0, cap)
        cap = _spent_joules(self._memory_indices, a, b) - share.child_memory
        if share.own_memory > cap:
            share.own_memory = max(0.0, cap)

    # -- history for spans with explicit times -----------------------------------------------


    def wall_to_monotonic_ns(self, wall_ns: int) -> int:
        """A ``time.time_ns()`` instant on the monotonic clock (offset of the latest sample)."""
        return wall_ns - self.wall_offset_ns

    def snapshot_at(self, monotonic_ns: int, latest: EnergySnapshot) -> EnergySnapshot | None:
        """The meter's cumulative joules at a past instant, interpolated in the history.

        ``latest`` (a snapshot taken now) extends the history to the present. None when the
        instant is older than the history or later than ``latest``.
        """
        with self._sample_lock:
            points = [(s.monotonic_ns, s.snapshot) for s in self._history]
        if not points or points[-1][0] < latest.monotonic_ns:
            points.append((latest.monotonic_ns, latest))
        # Wall-to-monotonic conversion is good to microseconds: an instant just outside an end is that end.
        if points[0][0] - _EDGE_TOLERANCE_NS <= monotonic_ns < points[0][0]:
            monotonic_ns = points[0][0]
        elif points[-1][0] < monotonic_ns <= points[-1][0] + _EDGE_TOLERANCE_NS:
            monotonic_ns = points[-1][0]
        if monotonic_ns < points[0][0] or monotonic_ns > points[-1][0]:
            return None
        k = bisect.bisect_left([t for t, _ in points], monotonic_ns)
        t1, b = points[k]
        if t1 == monotonic_ns or k == 0:
            return _new_tuple(EnergySnapshot, (monotonic_ns, b.joules, ()))
        t0, a = points[k - 1]
        f = (monotonic_ns - t0) / (t1 - t0)
        joules = tuple(None if x is None or y is None else x + (y - x) * f for x, y in zip(a.joules, b.joules))
        return _new_tuple(EnergySnapshot, (monotonic_ns, joules, ()))

    @property
    def oldest_ns(self) -> int | None:
        """Monotonic time of the oldest sample kept, None before the first."""
        return self._history[0].monotonic_ns if self._history else None

    def _after_fork_in_child(self) -> None:
        # Ledgers, locks and the sampler thread belong to the parent: start those afresh, and
        # make spans opened before the fork (their ledgers' generation) end without attribution.
        # The history and prices describe the host, so the child keeps them; its own CPU time
        # restarts, so its process totals restart from the latest sample.
        self._generation += 1
        history, times, rates = self._history, self._times, self._rates
        self._reset_state()
        self._history, self._times, self._rates = list(history), list(times), rates
        if self._history:
            last = self._history[-1]
            self._history[-1] = HistorySample(
                last.monotonic_ns,
                last.wall_offset_ns,
                last.snapshot,
                last.busy_s,
                self.clocks.process_cpu_s() if self.clocks.native else last.process_cpu_s,
                last.idle_s,
                (0.0, 0.0, 0.0),
            )


class _AttributionSampler(threading.Thread):
    """Calls :meth:`Attributor.sample` every period; holds the attributor weakly."""

    def __init__(self, attributor: Attributor, period_s: float) -> None:
        super().__init__(name="otel-joules-attribution", daemon=True)
        self._ref = weakref.ref(attributor)
        self._period_s = period_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._period_s):
            attributor = self._ref()
            if attributor is None or attributor._closed:
                return
            attributor.sample()
            del attributor

    def stop(self) -> None:
        self._stop_event.set()
        if self is not threading.current_thread():
            self.join(timeout=5)


class AttributionRegistry:
    """One :class:`Attributor` per meter, shared by every processor and metric reading that meter.

    Holds attributors weakly (an attributor holds its meter, so a strong value would keep the
    meter key alive for ever): the processors and metric instruments using one keep it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Held across creating an attributor (it reads /proc and the counters): renewed in a child.
        register_fork_hook(self, "_new_lock")
        self._by_meter: "weakref.WeakKeyDictionary[EnergyMeter, Callable[[], Attributor | None]]" = (
            weakref.WeakKeyDictionary()
        )

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self, meter: "EnergyMeter") -> Attributor | None:
        """The meter's attributor, created on first use; None when CPU times cannot be read (said once)."""
        with self._lock:
            ref = self._by_meter.get(meter)
            if ref is not None:
                found = ref()
                if found is not None or ref is _NO_ATTRIBUTOR:
                    return found
            try:
                attributor = Attributor(meter)
            except (ProcfsReadError, OSError) as exc:
                _log.warning(
                    "otel-joules: cannot attribute energy to processes and spans (%s); spans keep energy.joules "
                    "without energy.attributed.*. Set OTEL_JOULES_PROCFS_ROOT to where procfs is mounted.",
                    exc,
                )
                self._by_meter[meter] = _NO_ATTRIBUTOR
                return None
            self._by_meter[meter] = weakref.ref(attributor)
            return attributor

    def all(self) -> list[Attributor]:
        """Every live attributor."""
        found = [ref() for ref in list(self._by_meter.values())]
        return [a for a in found if a is not None]


def _no_attributor() -> None:
    return None


_NO_ATTRIBUTOR: Callable[[], None] = _no_attributor


_registry = AttributionRegistry()


def attributor_for(meter: "EnergyMeter") -> Attributor | None:
    """The shared :class:`Attributor` of ``meter`` (see :class:`AttributionRegistry`)."""
    return _registry.get(meter)


def _busy_and_capacity(busy_s: float, idle_s: float, process_cpu_s: float) -> tuple[float, float]:
    """A period's busy CPU seconds (never under this process's own: ticks may undercount) and its
    CPU capacity (busy + idle seconds), the denominators of the CPU-side and memory prices."""
    busy = max(busy_s, process_cpu_s, 0.0)
    return busy, max(busy_s + max(idle_s, 0.0), busy)


def share_of_cpu_time(joules: float, cpu_s: float, busy_s: float) -> float:
    """``joules`` x ``cpu_s`` / ``busy_s``, never more than ``joules`` (0 when nothing was busy).

    The model's rule for one interval and one consumer: used for a whole command's share
    (``otel-joules run``) where the consumer is another process tree.
    """
    denominator = max(busy_s, cpu_s)
    if denominator <= 0 or joules <= 0:
        return 0.0
    return joules * max(cpu_s, 0.0) / denominator


def command_attribution(
    meter: "EnergyMeter",
    start: EnergySnapshot,
    end: EnergySnapshot,
    command_cpu_s: float,
    host_busy_s: float,
    host_idle_s: float = 0.0,
) -> SpanAttribution:
    """The share of a command run as a child process (``otel-joules run``) between two snapshots.

    The model's rules over one interval: CPU-side joules by :func:`share_of_cpu_time` of the
    command's CPU seconds (its and its reaped descendants') in the host's busy seconds, memory
    in the host's busy + idle seconds; the measured GPUs, which the command was given, count
    whole as its own.
    """
    joules = {kind: 0.0 for kind in KINDS}
    for i, domain in enumerate(meter.domains):
        a, b = start.joules[i], end.joules[i]
        if domain.in_total and a is not None and b is not None:
            joules[kind_of(domain.hw_type)] += b - a
    cpu = share_of_cpu_time(joules[KIND_CPU], command_cpu_s, host_busy_s)
    memory = share_of_cpu_time(joules[KIND_MEMORY], command_cpu_s, host_busy_s + max(host_idle_s, 0.0))
    gpu = max(joules[KIND_GPU], 0.0)
    return SpanAttribution(cpu, memory, gpu, cpu + memory + gpu)


__all__ = [
    "Attributor",
    "AttributionRegistry",
    "HISTORY_PERIOD_S",
    "HISTORY_S",
    "HistorySample",
    "KINDS",
    "SpanAttribution",
    "SpanShare",
    "attributor_for",
    "command_attribution",
    "kind_of",
    "measured_kinds",
    "share_of_cpu_time",
]


def _spent_joules(indices: Sequence[int], start: tuple[float | None, ...], end: tuple[float | None, ...]) -> float:
    """Joules the domains at ``indices`` spent between two snapshots' values (failed domains left out)."""
    spent = 0.0
    for i in indices:
        x, y = start[i], end[i]
        if x is not None and y is not None:
            spent += y - x
    return spent
