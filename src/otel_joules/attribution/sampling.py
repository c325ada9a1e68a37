"""The attributor's sampler: the host's history of energy and busy CPU time, and its prices.

Every :data:`HISTORY_PERIOD_S` (longer while this process is idle: :data:`IDLE_PERIOD_MAX_S`) the
sampler thread (a :class:`~otel_joules.meter.sampler.PeriodicThread`) reads the meter's snapshot,
``/proc/stat``'s busy and idle time, this process's CPU time and the GPU shares into a
:class:`HistorySample`, prices the period just ended (joules per CPU second:
CPU-side over the busy seconds, memory over the busy + idle ones), adds this process's share
to its running totals, and forecasts the price of CPU time after the sample
(:data:`RATE_WINDOW`). :class:`_Sampling` is that layer of
:class:`~otel_joules.attribution.attributor.Attributor`; the rules are in
:mod:`otel_joules.attribution.model`'s docstring.

``/proc/stat`` is judged before it prices anything: tick counts that go backwards, or more busy or
idle time than the CPUs online can count in the time between two reads, are a fault (one message).
Such a read is taken as the counts' new base: the period ending at it prices no CPU time (its
energy is nobody's) and counting goes on from it. While ``/proc/stat`` is unreadable or
implausible, spans that end carry no share (:attr:`_Sampling.stat_fault`): the last forecast
would price them, ever staler.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, NamedTuple

from otel_joules.attribution.baseline import Baselines
from otel_joules.attribution.procfs import CLOCK_TICKS_PER_S, CpuClocks, HostCpuTimes, ProcfsReadError
from otel_joules.config import POLICY_BUSY, POLICY_CAPACITY
from otel_joules.meter.clock import wall_offset_ns as _wall_offset_ns
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.meter.sampler import PeriodicThread
from otel_joules.semconv import ENERGY_ATTRIBUTED_NAMESPACE, ENERGY_JOULES, KIND_CPU, KIND_GPU, KIND_MEMORY

if TYPE_CHECKING:
    from otel_joules.attribution.gpu import NvmlProcessShares
    from otel_joules.meter.meter import EnergyMeter

_log = logging.getLogger("otel_joules")

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
#: Below this a period is idle: two ticks summed as floats (0.01 + 0.01 may be 0.0199...) are still two.
_IDLE_BELOW_S = MIN_BUSY_S - 1e-9
#: How far back the history reaches (spans with explicit times older than this get no energy).
HISTORY_S = 300.0
#: A span can outlive the history (a leaf span open longer than :data:`HISTORY_S`): the periods that leave
#: it are summed into buckets of this many seconds (at most a fifth of the history, at least a sampler
#: period), each keeping the
#: time-weighted mean of its periods' prices, so the span's CPU time there is priced as in the history ...
HISTORY_SUMMARY_PERIOD_S = 60.0
#: ... keeping this many buckets (a day of minutes); beyond that the oldest two are merged, so the
#: summary stays bounded and a span older than all of it is priced at the mean of everything before.
HISTORY_SUMMARY_BUCKETS = 1440
#: Once this process has been idle for :data:`IDLE_AFTER_S`, the sampler's period doubles after every
#: idle period, up to this. Idle: no span open, the process's GPU shares unchanged, and between the
#: sampler's ticks the process used at most :data:`IDLE_CPU_FRACTION` of one CPU. Nothing is then spent
#: that a share could be priced for, so fewer, longer periods price the same; a span opening wakes
#: the sampler at once, and a period spanning the gap is priced by the gap's own energy and
#: ``/proc/stat`` ticks, like any other. Two seconds keep an idle process's sampler under 0.05% of
#: a core and one wake-up a second.
IDLE_PERIOD_MAX_S = 2.0
#: The history keeps its :data:`HISTORY_PERIOD_S` samples for this long after the process's last
#: activity, so a span with explicit times stated within it is still interpolated between 0.1 s samples.
IDLE_AFTER_S = 1.0
#: The process's CPU time between the sampler's ticks (its samples' own cost left out) that still
#: counts as idle, per second.
IDLE_CPU_FRACTION = 0.005
#: /proc/stat's busy ticks between two reads, and apart from them its idle ticks, may exceed the time
#: between the reads x the CPUs online x USER_HZ by this factor ... Judged apart because the kernel
#: counts busy time by the tick and idle time exactly (NO_HZ): a tick partly idle is in both, so
#: their sum may reach twice the time, each of them not.
STAT_TICKS_TOLERANCE = 1.1
#: ... plus this many ticks per CPU: each CPU's time is counted in ticks, so its count may be a tick
#: or two ahead of the clock (and under NO_HZ idle and iowait may step back by as much).
STAT_SLACK_TICKS_PER_CPU = 2


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
        priced: False when ``/proc/stat`` read implausibly here: the CPU times of the period ending
            at this sample are unknown, so it prices no CPU time (its GPU shares stand); the
            counts are a new base for the next period.
        period: The sampler period ending here, split and priced when it entered the history
            (None for the first sample).
    """

    monotonic_ns: int
    wall_offset_ns: int
    snapshot: EnergySnapshot
    busy_s: float
    process_cpu_s: float
    idle_s: float
    process_joules: tuple[float, float, float]
    priced: bool = True
    period: "_Period | None" = None


class _Prices(NamedTuple):
    """Joules per CPU second of one period (or window): the policy's CPU-side and memory prices, and the
    dynamic price (CPU-side + memory) beside them."""

    cpu: float
    memory: float
    dynamic: float


_NO_PRICES = _Prices(0.0, 0.0, 0.0)


class _Period(NamedTuple):
    """One sampler period's energy split into static and dynamic per kind, its CPU seconds and its prices.

    ``busy_s`` and ``capacity_s`` are the prices' denominators (:func:`_busy_and_capacity`);
    ``prices`` are those of CPU time spent in it (the span path), :data:`_NO_PRICES` when its
    CPU times are unknown.
    """

    cpu_j: float
    cpu_static_j: float
    memory_j: float
    memory_static_j: float
    busy_s: float
    capacity_s: float
    prices: _Prices


class _Rates(NamedTuple):
    """Prices after the latest sample: joules per CPU second (cpu, memory: the policy's), the process's GPU
    watts (the policy's), the dynamic price per CPU second and the process's dynamic GPU watts."""

    since_ns: int
    cpu_j_per_cpu_s: float
    memory_j_per_cpu_s: float
    gpu_watts: float
    dynamic_j_per_cpu_s: float = 0.0
    gpu_dynamic_watts: float = 0.0


@dataclass(slots=True)
class _SummaryBucket:
    """Periods that left the history, summed over one :data:`HISTORY_SUMMARY_PERIOD_S` bucket.

    Attributes:
        start_ns: The bucket's aligned start (``monotonic_ns`` rounded down to the bucket length).
        lo_ns: The start of the first period summed into it (later than ``start_ns`` for the first bucket).
        hi_ns: The end of the latest period summed into it.
        cpu_j_ns: The sum of each period's CPU-side price (J per CPU second) x its nanoseconds here.
        memory_j_ns: The same for memory.
        process_joules: This process's attributed joules per kind at ``lo_ns``.
        dynamic_j_ns: The same as ``cpu_j_ns`` for the dynamic price.
    """

    start_ns: int
    lo_ns: int
    hi_ns: int
    cpu_j_ns: float
    memory_j_ns: float
    process_joules: tuple[float, float, float]
    dynamic_j_ns: float = 0.0


def _busy_and_capacity(busy_s: float, idle_s: float, process_cpu_s: float) -> tuple[float, float]:
    """A period's busy CPU seconds (never under this process's own: ticks may undercount) and its
    CPU capacity (busy + idle seconds), the denominators of the CPU-side and memory prices."""
    busy = max(busy_s, process_cpu_s, 0.0)
    return busy, max(busy_s + max(idle_s, 0.0), busy)


def policy_prices(
    policy: str, cpu_j: float, cpu_static_j: float, memory_j: float, memory_static_j: float, busy: float, capacity: float
) -> _Prices:
    """The prices of CPU time over busy (and capacity) seconds for one policy (the rules: :mod:`.model`).

    The dynamic price is the dynamic energy over the busy seconds, for both kinds. The policy's:
    ``capacity``: dynamic over busy + static over the capacity (busy + idle seconds); ``busy``: the
    whole bill to the busy work (CPU-side: the whole energy over busy; memory: the whole over
    the capacity, DRAM's power being mostly refresh and background); ``none``: the dynamic price.
    """
    if busy < _IDLE_BELOW_S:
        return _NO_PRICES  # idle (too few busy ticks to tell who was busy): nobody's
    cpu_dynamic = max(cpu_j - cpu_static_j, 0.0) / busy
    memory_dynamic = max(memory_j - memory_static_j, 0.0) / busy
    if policy == POLICY_CAPACITY:
        cpu, memory = cpu_dynamic + cpu_static_j / capacity, memory_dynamic + memory_static_j / capacity
    elif policy == POLICY_BUSY:
        cpu, memory = max(cpu_j, 0.0) / busy, max(memory_j, 0.0) / capacity
    else:
        cpu, memory = cpu_dynamic, memory_dynamic
    return _Prices(cpu, memory, cpu_dynamic + memory_dynamic)


class _Sampling:
    """Takes the samples, keeps the history and sets the prices (the sampler side of an attributor).

    The state is set up by :class:`~otel_joules.attribution.attributor.Attributor`; the
    annotations say what this side reads and writes.
    """

    meter: "EnergyMeter"
    clocks: CpuClocks
    gpu_shares: "NvmlProcessShares | None"
    kind_indices: dict[str, tuple[int, ...]]
    kinds: tuple[str, ...]
    has_gpu: bool
    period_s: float
    wall_offset_ns: int
    _max_samples: int
    _sample_enabled: bool
    _sample_lock: threading.Lock
    _reading_lock: threading.Lock
    _history: list[HistorySample]
    _times: list[int]
    #: The periods that left the history, oldest first (:data:`HISTORY_SUMMARY_PERIOD_S`).
    _summary: list[_SummaryBucket]
    _history_ns: int
    _summary_period_ns: int
    _rates: _Rates
    _process_watts: tuple[float, float, float]
    _late_ticks_s: float
    _sampler: "PeriodicThread | None"
    #: The back-off's bound (:data:`IDLE_PERIOD_MAX_S`, never beyond the meter's wrap-safe read interval).
    _idle_period_max_s: float
    #: The back-off's current period, and (sample, the process's and the sampler thread's CPU seconds just
    #: after it) at the thread's last tick.
    _idle_period_s: float
    #: When the process's idleness began (the sample before the first idle tick), None while it is not idle.
    _idle_since_ns: int | None
    _tick_last: "tuple[HistorySample, float, float] | None"
    #: True while the sampler waits longer than its period: a span that opens wakes it (_SpanPath.open_span).
    _dozing: bool
    #: The GPU fractions of the latest sample, and whether they changed since the sampler's last tick.
    _fractions: list[float]
    _fractions_changed: bool
    #: Weak references to every thread's ledger (spans.py), under their lock: the open spans.
    _ledgers: list
    _ledgers_alive: int
    _ledgers_lock: threading.Lock
    _closed: bool
    _failure_reported: bool
    _implausible_reported: bool
    #: True while /proc/stat's latest read failed or was implausible: spans that end get no share.
    stat_fault: bool
    #: When the latest /proc/stat read that became a sample started, and how many CPUs it listed.
    _stat_read_ns: int
    _stat_cpus: int
    # The span side's: the GPU energy at the old price is credited before the price changes.
    _credit_gpu: Callable[[int], None]
    #: Who carries static energy (``config.ATTRIBUTION_POLICIES``) and the domains' baselines.
    policy: str
    baselines: Baselines
    #: The attributor's domain indices in the baselines' order (kinds' indices, CPU-side, memory, GPU).
    _baseline_index: dict[int, int]
    #: The host's unattributed joules (CPU-side, memory) since the attributor started.
    _unattributed_j: list[float]
    #: The baselines' positions of the CPU-side and memory domains, and their word (``energy.baseline``).
    _fit_positions: tuple[int, ...]
    baseline_state: str

    # -- the sampler side ---------------------------------------------------------------------

    def sample(self) -> HistorySample | None:
        """Read ``/proc/stat``, this process's CPU time, the counters (and GPU shares); extend the history."""
        # Two locks: the reads (NVML may be slow) serialise samplers only; the span path's
        # history lookups wait at most for the few lines under _sample_lock.
        with self._reading_lock:
            try:
                snapshot = self.meter.snapshot()
                read_ns = time.monotonic_ns()
                host = self.clocks.host()
                process_cpu_s = self.clocks.process_cpu_s()
                # Not for the first sample (nothing to split yet): it is taken in instrument(),
                # where a stalled NVML's process lists must not hold the program up.
                fractions = self.gpu_shares.fractions() if self.gpu_shares is not None and self._history else []
            except (ProcfsReadError, OSError) as exc:
                self.stat_fault = True
                self._report(exc)
                return None
            if self.meter.closed:
                # Nothing more to sample. Asked, not read from the snapshot: a meter without
                # domains (a tracker's simulated devices only) reads the same open or closed.
                self._closed = True
                return None
            if fractions != self._fractions:
                self._fractions, self._fractions_changed = fractions, True
            problem = self._implausible(host, time.monotonic_ns())
            with self._sample_lock:
                sample = self._append(snapshot, host.busy_s, host.idle_s, process_cpu_s, fractions, problem is None)
            self._stat_read_ns, self._stat_cpus = read_ns, host.cpus
            self.stat_fault = problem is not None
            if problem is not None:
                self._report_implausible(problem)
            return sample

    def _implausible(self, host: HostCpuTimes, read_end_ns: int) -> str | None:
        """What is wrong with ``/proc/stat``'s counts against the latest sample's, or None when they are plausible."""
        if not self._history:
            return None
        previous = self._history[-1]
        # The most time that can have passed between the two reads: from the start of the last to
        # the end of this one (a read delayed by the scheduler only widens it).
        elapsed_s = max(0, read_end_ns - self._stat_read_ns) / 1e9
        cpus = max(host.cpus, self._stat_cpus)  # a CPU taken offline meanwhile counted until then
        slack_s = cpus * STAT_SLACK_TICKS_PER_CPU / CLOCK_TICKS_PER_S
        d_busy_s, d_idle_s = host.busy_s - previous.busy_s, host.idle_s - previous.idle_s
        if d_busy_s < -slack_s or d_idle_s < -slack_s:
            return (
                f"its CPU times went backwards (busy {previous.busy_s:.2f} s -> {host.busy_s:.2f} s, "
                f"idle {previous.idle_s:.2f} s -> {host.idle_s:.2f} s)"
            )
        limit_s = cpus * elapsed_s * STAT_TICKS_TOLERANCE + slack_s
        if cpus and (d_busy_s > limit_s or d_idle_s > limit_s):
            return (
                f"it counts {d_busy_s:.2f} busy and {d_idle_s:.2f} idle CPU seconds in {elapsed_s:.3f} s, where its "
                f"{cpus} CPUs can count at most {limit_s:.2f} s of each"
            )
        return None

    def _append(
        self,
        snapshot: EnergySnapshot,
        busy_s: float,
        idle_s: float,
        process_cpu_s: float,
        fractions: list[float],
        priced: bool = True,
    ) -> HistorySample:
        """Extend the history with one sample's reads and update the prices (``_sample_lock`` held).

        ``priced`` False: the host's CPU times since the previous sample are unknown (an implausible
        /proc/stat): the period prices nothing, and its counts are the next period's base.
        """
        now_ns = snapshot.monotonic_ns
        previous = self._history[-1] if self._history else None
        process_joules = (0.0, 0.0, 0.0)
        period = None
        if previous is not None:
            period = self._split_period(previous, snapshot, busy_s, idle_s, process_cpu_s, priced)
            process_joules = self._advance_rates(
                previous, snapshot, busy_s, idle_s, process_cpu_s, fractions, priced, period
            )
        sample = HistorySample(
            now_ns, _wall_offset_ns(), snapshot, busy_s, process_cpu_s, idle_s, process_joules, priced, period
        )
        # time.time_ns() - time.monotonic_ns() at the latest sample, for explicit span times.
        self.wall_offset_ns = sample.wall_offset_ns
        self._history.append(sample)
        self._times.append(now_ns)
        self._trim(now_ns)
        return sample

    def _trim(self, now_ns: int) -> None:
        """Move the periods older than the history (or beyond its sample count) into the summary (``_sample_lock`` held).

        The history keeps the latest sample at or before ``now - history_s``, so it reaches back that far.
        """
        history, times = self._history, self._times
        drop = max(0, len(history) - self._max_samples)
        horizon_ns = now_ns - self._history_ns
        while drop + 2 < len(history) and times[drop + 1] <= horizon_ns:
            drop += 1
        if not drop:
            return
        for k in range(drop):
            self._summarise(history[k], history[k + 1], self._period_rates(k))
        del history[:drop]
        del times[:drop]

    def _summarise(self, a: HistorySample, b: HistorySample, rates: _Prices) -> None:
        """Add the period from ``a`` to ``b``, at its prices, to the summary buckets it overlaps."""
        summary, bucket_ns = self._summary, self._summary_period_ns
        lo = a.monotonic_ns
        while lo < b.monotonic_ns:
            start = lo - lo % bucket_ns
            hi = min(b.monotonic_ns, start + bucket_ns)
            ns = hi - lo
            last = summary[-1] if summary else None
            if last is not None and last.start_ns == start:
                last.hi_ns = hi
                last.cpu_j_ns += rates[0] * ns
                last.memory_j_ns += rates[1] * ns
                last.dynamic_j_ns += rates[2] * ns
            else:
                summary.append(
                    _SummaryBucket(start, lo, hi, rates[0] * ns, rates[1] * ns, a.process_joules, rates[2] * ns)
                )
            lo = hi
        while len(summary) > HISTORY_SUMMARY_BUCKETS:
            first, second = summary[0], summary[1]
            second.lo_ns, second.process_joules = first.lo_ns, first.process_joules
            second.cpu_j_ns += first.cpu_j_ns
            second.memory_j_ns += first.memory_j_ns
            second.dynamic_j_ns += first.dynamic_j_ns
            del summary[0]

    def _period_rates(self, k: int) -> _Prices:
        """The prices of the sampler period from sample ``k`` to ``k + 1``, as set when it entered the history:
        its own energy over its own CPU seconds (none where its CPU times are unknown: its energy is nobody's)."""
        period = self._history[k + 1].period
        return _NO_PRICES if period is None else period.prices

    def _split_period(
        self,
        previous: HistorySample,
        snapshot: EnergySnapshot,
        busy_s: float,
        idle_s: float,
        process_cpu_s: float,
        priced: bool,
    ) -> _Period:
        """The period from ``previous`` to the new reads: into the baselines' fit, split, priced, and its
        unattributed energy counted (``_sample_lock`` held)."""
        dt_s = (snapshot.monotonic_ns - previous.monotonic_ns) / 1e9
        d_busy, d_idle = busy_s - previous.busy_s, idle_s - previous.idle_s
        joules = self._period_joules(previous.snapshot, snapshot)
        baselines = self.baselines
        if priced:
            baselines.add_period(snapshot.monotonic_ns, dt_s, d_busy, joules)
        sums = self._kind_sums(joules, dt_s)
        busy, capacity = _busy_and_capacity(d_busy, d_idle, max(0.0, process_cpu_s - previous.process_cpu_s))
        prices = policy_prices(self.policy, *sums, busy, capacity) if priced else _NO_PRICES
        period = _Period(sums[0], sums[1], sums[2], sums[3], busy, capacity, prices)
        # What the model gives to nobody: idle capacity's static energy, idle and unpriced periods' energy.
        self._unattributed_j[0] += max(0.0, sums[0] - prices.cpu * busy)
        self._unattributed_j[1] += max(0.0, sums[2] - prices.memory * busy)
        self.baseline_state = baselines.state(self._fit_positions)
        return period

    def _period_joules(self, a: EnergySnapshot, b: EnergySnapshot) -> list[float | None]:
        """Per baseline index, the joules between two snapshots (None where either has no value)."""
        x, y = a.joules, b.joules
        return [None if x[i] is None or y[i] is None else y[i] - x[i] for i in self._baseline_index]  # type: ignore[operator]

    def _kind_sums(self, joules: list[float | None], dt_s: float) -> list[float]:
        """CPU-side joules, their static part, memory joules and theirs, of ``joules`` over ``dt_s`` seconds."""
        index, baselines = self._baseline_index, self.baselines
        sums = [0.0, 0.0, 0.0, 0.0]
        for kind, offset in ((KIND_CPU, 0), (KIND_MEMORY, 2)):
            for i in self.kind_indices[kind]:
                j = joules[index[i]]
                if j is not None:
                    sums[offset] += j
                    sums[offset + 1] += baselines.static_joules(index[i], j, dt_s)
        return sums

    def first_forecast(self, snapshot: EnergySnapshot | None = None) -> _Rates:
        """The forecast before the sampler's second sample: the prices since its first sample, read now.

        The periods start at the first sample (taken in ``instrument()``); until the second there is
        no forecast, and a span ending meanwhile (the first request, moments after start-up) would
        be priced at nothing. Its CPU time is priced instead over the time since the first sample, by
        the same rules as a period. The history is not extended, so every process's periods stay on
        the aligned instants. Costs a ``/proc/stat`` read per span event until a forecast exists (at
        most the first sampler period), and a counter read unless ``snapshot`` (read now) is given;
        GPUs' shares start with the second sample.
        """
        rates = self._rates
        if rates.since_ns or not self._history:
            return rates
        try:
            if snapshot is None:
                snapshot = self.meter.snapshot()
            host = self.clocks.host()
            process_cpu_s = self.clocks.process_cpu_s()
        except (ProcfsReadError, OSError):
            return rates
        with self._sample_lock:
            if self._rates.since_ns or not self._history:
                return self._rates  # the sampler's second sample came first
            first = self._history[0]
            dt_s = (snapshot.monotonic_ns - first.monotonic_ns) / 1e9
            busy, _ = _busy_and_capacity(
                host.busy_s - first.busy_s, host.idle_s - first.idle_s, max(0.0, process_cpu_s - first.process_cpu_s)
            )
            # A few ticks per CPU over so short a time: the capacity is the CPUs' wall time instead.
            capacity = max(dt_s * max(host.cpus, 1), busy)
            joules = self._kind_sums(self._period_joules(first.snapshot, snapshot), dt_s)
        prices = policy_prices(self.policy, *joules, busy, capacity)
        # Not kept: the next event prices over a longer, steadier time, until the sampler's forecast.
        return _Rates(first.monotonic_ns, prices.cpu, prices.memory, 0.0, prices.dynamic, 0.0)

    def _advance_rates(
        self,
        previous: HistorySample,
        snapshot: EnergySnapshot,
        busy_s: float,
        idle_s: float,
        process_cpu_s: float,
        fractions: list[float],
        priced: bool,
        period: _Period,
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
        if priced:
            busy, capacity = _busy_and_capacity(host_busy_s, host_idle_s, d_process)
            own_cpu, own_memory, _ = policy_prices(
                self.policy, period.cpu_j, period.cpu_static_j, period.memory_j, period.memory_static_j, busy, capacity
            )
            # At most a tick per CPU can be late; more means /proc/stat does not see this process's work.
            cpus = (busy_s - previous.busy_s + host_idle_s) / dt_s if dt_s > 0 else 0.0
            self._late_ticks_s = min(max(0.0, d_process - max(host_busy_s, 0.0)), max(cpus, 0.0) / CLOCK_TICKS_PER_S)
        else:
            own_cpu = own_memory = self._late_ticks_s = 0.0  # unknown CPU times: the period's energy is nobody's
        forward = self._forward_rates(snapshot, period, priced)
        gpu_joules = gpu_dynamic = 0.0
        for i, fraction in zip(self.kind_indices[KIND_GPU], fractions):
            a, b = previous.snapshot.joules[i], snapshot.joules[i]
            if a is not None and b is not None:
                # A GPU's processes hold all of it while they run on it: its static energy goes with their
                # fraction under capacity and busy alike; under none, only the dynamic part does.
                static = self.baselines.static_joules(self._baseline_index[i], b - a, dt_s)
                gpu_joules += (b - a - (static if self.policy not in (POLICY_CAPACITY, POLICY_BUSY) else 0.0)) * fraction
                gpu_dynamic += (b - a - static) * fraction
        gpu_watts = gpu_joules / dt_s if dt_s > 0 else 0.0
        gpu_dynamic_watts = gpu_dynamic / dt_s if dt_s > 0 else 0.0
        if self.has_gpu:
            self._credit_gpu(snapshot.monotonic_ns)  # close the old price's time before changing it
        self._rates = _Rates(
            snapshot.monotonic_ns, forward.cpu, forward.memory, gpu_watts, forward.dynamic, gpu_dynamic_watts
        )
        mine = (own_cpu * d_process, own_memory * d_process, gpu_joules)
        self._process_watts = tuple(j / dt_s for j in mine) if dt_s > 0 else (0.0, 0.0, 0.0)  # type: ignore[assignment]
        return tuple(p + m for p, m in zip(previous.process_joules, mine))  # type: ignore[return-value]

    def _forward_rates(self, snapshot: EnergySnapshot, period: _Period, priced: bool = True) -> _Prices:
        """The prices for CPU time after the new sample, until the next (``_sample_lock`` held).

        Only a forecast: spans' CPU time after the latest sample is priced at it (and capped at what
        the host spent during the span); the process's share never is. Over the busy periods among
        the last :data:`RATE_WINDOW` (with the new one): a period's busy time is off by up to a tick per
        CPU, which a window shrinks; idle periods price nothing, so they are left out, and so are
        periods whose CPU times are unknown (not priced). Kept as they were when the window is too
        short or has no busy period.
        """
        window = self._history[-RATE_WINDOW:]
        periods = [(s.period, s.priced) for s in window[1:]] + [(period, priced)]
        sums = [0.0] * 6  # CPU-side, its static, memory, its static, busy, capacity
        for each, known in periods:
            if each is None or not known or each.busy_s < _IDLE_BELOW_S:
                continue
            for k, value in enumerate(each[:6]):
                sums[k] += value
        window_s = (snapshot.monotonic_ns - window[0].monotonic_ns) / 1e9 if window else 0.0
        rates = self._rates
        if rates.since_ns and (window_s < MIN_RATE_WINDOW_S or sums[4] <= 0):
            # Too short, or nothing busy, to say what a CPU second costs: keep the prices.
            return _Prices(rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s, rates.dynamic_j_per_cpu_s)
        if sums[4] <= 0:
            return _NO_PRICES  # no price yet and nothing busy: CPU time now is priced as idle
        return policy_prices(self.policy, *sums)

    def _report(self, exc: BaseException) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.warning(
                "otel-joules: cannot attribute energy to this process and its spans (%s): spans that end while "
                "/proc/stat cannot be read keep %s but carry no %s*; shares resume, the gap priced, once it reads "
                "again. Set OTEL_JOULES_PROCFS_ROOT to where procfs is mounted.",
                exc,
                ENERGY_JOULES,
                ENERGY_ATTRIBUTED_NAMESPACE,
            )

    def _report_implausible(self, problem: str) -> None:
        if not self._implausible_reported:
            self._implausible_reported = True
            _log.warning(
                "otel-joules: %s is implausible: %s. Not used: the sampler period ending there prices no CPU time "
                "(its energy is nobody's) and counting goes on from the new counts; spans that end while /proc/stat "
                "reads implausibly keep %s but carry no %s* (said once).",
                os.path.join(self.clocks.procfs_root, "stat"),
                problem,
                ENERGY_JOULES,
                ENERGY_ATTRIBUTED_NAMESPACE,
            )

    # -- the sampler thread's pace ----------------------------------------------------------

    def _tick(self) -> float:
        """The sampler thread's tick: one sample, then the seconds until the next (the idle back-off)."""
        # The process's CPU time around the sample: what the sample itself costs (this thread's reads,
        # and a GPU's reader thread's) is not the process's work, so only the time between ticks
        # counts, less this thread's own share of it (its wait and wake-up).
        own_before_s = time.thread_time() if self.clocks.native else 0.0
        before_s = self._process_cpu_s()
        sample = self.sample()
        after_s = self._process_cpu_s()
        own_after_s = time.thread_time() if self.clocks.native else 0.0
        others_s = None
        last = self._tick_last
        if last is not None and before_s is not None:
            others_s = (before_s - last[1]) - (own_before_s - last[2])
        self._tick_last = None if sample is None or after_s is None else (sample, after_s, own_after_s)
        return self._next_period_s(sample, None if last is None else last[0], others_s)

    def _process_cpu_s(self) -> float | None:
        try:
            return self.clocks.process_cpu_s()
        except (ProcfsReadError, OSError):
            return None

    def _next_period_s(
        self, sample: HistorySample | None, last_sample: HistorySample | None, others_cpu_s: float | None
    ) -> float:
        """:attr:`period_s`, or longer while this process is idle (:data:`IDLE_PERIOD_MAX_S`).

        ``last_sample``: the sampler thread's previous sample; ``others_cpu_s``: the process's CPU
        seconds since, outside the samples and the sampler thread (None: unknown).

        Wrap safety is not at stake: every sample reads every counter, and the back-off stops at
        the meter's wrap-safe read interval (``EnergyMeter.sample_period_s``: a quarter of the time
        the fastest counter needs to wrap at its zone's maximum power), so even a meter that does not
        sample itself is read at least four times per wrap while this process is idle.
        """
        changed, self._fractions_changed = self._fractions_changed, False
        if (
            sample is None
            or last_sample is None
            or others_cpu_s is None
            or changed
            or self._idle_period_max_s <= self.period_s
        ):
            return self._awake()
        elapsed_s = (sample.monotonic_ns - last_sample.monotonic_ns) / 1e9
        if others_cpu_s > IDLE_CPU_FRACTION * elapsed_s:
            return self._awake()
        # Said before looking for open spans: a span opening meanwhile either is seen here or sees
        # this and wakes the thread (the GIL orders the two).
        self._dozing = True
        if self._spans_open():
            return self._awake()
        if self._idle_since_ns is None:
            self._idle_since_ns = last_sample.monotonic_ns
        if sample.monotonic_ns - self._idle_since_ns < IDLE_AFTER_S * 1e9:
            self._dozing = False  # not yet: the period stays (a span opening meanwhile needs no wake)
            return self._aligned_period_s()
        self._idle_period_s = min(self._idle_period_s * 2, self._idle_period_max_s)
        return self._idle_period_s

    def _awake(self) -> float:
        self._dozing = False
        self._idle_since_ns = None
        self._idle_period_s = self.period_s
        return self._aligned_period_s()

    def _aligned_period_s(self) -> float:
        """The wait until the next multiple of :attr:`period_s` on the monotonic clock at least half a period away.

        Every process's sampler on a host then samples at nearly the same instants (CLOCK_MONOTONIC is the
        host's): their periods are the same periods at the same prices, so the shares of all processes and
        the unattributed remainder add up to the host's energy period by period, whatever the policy.
        """
        period_ns = round(self.period_s * 1e9)
        if period_ns <= 0:
            return self.period_s
        now_ns = time.monotonic_ns()
        target_ns = ((now_ns + period_ns // 2) // period_ns + 1) * period_ns
        return (target_ns - now_ns) / 1e9

    def _register_ledger(self, ledger: object) -> None:
        """Keep a new thread's ledger in view of :meth:`_spans_open` (once per thread; threads that ended are pruned)."""
        with self._ledgers_lock:
            self._ledgers.append(weakref.ref(ledger))
            if len(self._ledgers) > 2 * self._ledgers_alive + 16:
                self._prune_ledgers()

    def _prune_ledgers(self) -> list:
        """The live ledgers; forget those of threads that ended (``_ledgers_lock`` held)."""
        ledgers = [ledger for ledger in (ref() for ref in self._ledgers) if ledger is not None]
        self._ledgers[:] = [weakref.ref(ledger) for ledger in ledgers]
        self._ledgers_alive = len(ledgers)
        return ledgers

    def _spans_open(self) -> bool:
        """Whether a span is open on any thread (a thread with an open span has a leaf on its ledger)."""
        with self._ledgers_lock:
            ledgers = self._prune_ledgers()
        return any(ledger.leaves for ledger in ledgers)

    def _wake_sampler(self) -> None:
        """A span opened while the sampler dozed: sample now, and at :attr:`period_s` while spans are open."""
        self._dozing = False
        sampler = self._sampler
        if sampler is not None:
            sampler.wake()

    def ensure_sampling(self) -> None:
        """Start the sampler thread unless it runs, sampling is off or the attributor is closed."""
        if self._sampler is None and self._sample_enabled and not self._closed:
            with self._reading_lock:
                if self._sampler is None and not self._closed:
                    self._sampler = PeriodicThread(self, _sample_attributor, self.period_s, "otel-joules-attribution")
                    self._sampler.start()

    def close(self) -> None:
        """Stop the sampler thread. Idempotent."""
        self._closed = True
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()



def _sample_attributor(attributor: _Sampling) -> bool | float:
    """The attributor's periodic tick (its :class:`PeriodicThread`): seconds to the next; ends once the attributor is closed."""
    if attributor._closed:
        return False
    return attributor._tick()
