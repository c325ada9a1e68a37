"""The price history: the host's samples and summary, the prices and the baselines.

:class:`PriceHistory` owns all of it, and takes its samples on the meter's one sampler thread, to which
it subscribes (:mod:`.pace` says when). Each tick takes a sample (:mod:`.sampling` holds the constants,
:class:`~.sampling.HistorySample` and :func:`~.sampling.policy_prices`), splits the period's energy into
static (the domains' baselines, :mod:`.baseline`) and dynamic, prices it under the policy and publishes
the result for the span path. Readers get this process's totals and the price of CPU time spent between
two instants (each sampler period at its own price, the forecast after the latest sample: the span
path); the meter's joules at a past instant are the meter's own history's.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from otel_joules.attribution._prices import (
    _NO_PRICES,
    _NO_RATES,
    _Period,
    _Prices,
    _Rates,
    _SummaryBucket,
    _View,
    _busy_and_capacity,
    _gpu_joules_at,
)
from otel_joules.attribution.baseline import Baselines
from otel_joules.attribution.pace import SamplerPace
from otel_joules.attribution.pricing import add_to_summary, forward_prices, price_between, process_joules_base
from otel_joules.attribution.procfs import CLOCK_TICKS_PER_S, CpuClocks, ProcfsReadError
from otel_joules.attribution.sampling import (
    HISTORY_PERIOD_S,
    HISTORY_S,
    HISTORY_SUMMARY_PERIOD_S,
    RATE_WINDOW,
    HistorySample,
    policy_prices,
)
from otel_joules.attribution.stat_checks import StatChecks
from otel_joules.attribution.shares import ATTRIBUTION_KIND, KINDS, attribution_label, measured_kinds
from otel_joules.attribution.uncovered import UncoveredEnergy, uncovered_joules, uncovered_positions
from otel_joules.config import POLICY_BUSY, POLICY_CAPACITY
from otel_joules.meter.clock import wall_offset_ns as _wall_offset_ns
from otel_joules.meter.energy import energy_between
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY
from otel_joules.sensors.base import Method

if TYPE_CHECKING:
    from otel_joules.attribution.gpu import GpuProcessShares, NvmlProcessShares
    from otel_joules.meter.meter import EnergyMeter


def _no_spans_open() -> bool:
    return False


class PriceHistory:
    """The host's sampled history of energy and busy CPU time, its prices, and the sampler thread taking it.

    Owns the sampler thread, the samples and summary buckets, the prices, the policy and the domains'
    baselines. After every sample it publishes what the span path reads (:attr:`view`: the prices, the
    samples and the summary, all immutable) by one reference assignment: readers never wait for the
    sampler, whose reads (``/proc``, the counters, NVML) happen under :attr:`_reading_lock` alone.

    Args:
        meter: Where the joules come from.
        clocks: Where CPU times come from.
        gpu_shares: This process's fraction of each GPU domain (None: no GPU measured).
        sample: Run the sampler thread (started by :meth:`ensure_sampling`).
        period_s: Sampler period.
        history_s: How much history to keep.

    Attributes:
        view: The latest published prices, samples and summary.
        pace: The sampler thread and when its next sample is due (:class:`~.pace.SamplerPace`).
        spans_open: Says whether a span is open on any thread (the idle back-off asks it); the
            attributor sets its span ledger's.
        stat_checks: ``/proc/stat``'s reads judged (:class:`~.stat_checks.StatChecks`).
        policy: Who carries static energy (``config.ATTRIBUTION_POLICIES``).
        attribution_label: ``energy.attribution``'s value (``cpu_time_share/<policy>``).
        baselines: The domains' static watts (:class:`~.baseline.Baselines`).
        baseline_state: ``energy.baseline`` of the CPU-side and memory domains.
    """

    def __init__(
        self,
        meter: "EnergyMeter",
        *,
        clocks: CpuClocks,
        gpu_shares: "GpuProcessShares | NvmlProcessShares | None",
        sample: bool = True,
        period_s: float = HISTORY_PERIOD_S,
        history_s: float = HISTORY_S,
    ) -> None:
        self.meter = meter
        self.clocks = clocks
        self.kind_indices: dict[str, tuple[int, ...]] = {kind: () for kind in KINDS}
        for i, domain in enumerate(meter.domains):
            if domain.in_total:
                kind = ATTRIBUTION_KIND[domain.kind]
                self.kind_indices[kind] += (i,)
        self.kinds = measured_kinds(meter.domains)
        self.has_gpu = bool(self.kind_indices[KIND_GPU])
        self.gpu_shares = gpu_shares
        self.period_s = period_s
        self.history_s = history_s
        self._max_samples = max(2, int(history_s / period_s) + 1)
        self._history_ns = round(history_s * 1e9)
        # Spans with explicit times are measured in the meter's history, which this sampler feeds.
        meter.history.keep_at_least(history_s)
        self._summary_period_ns = max(1, round(max(period_s, min(HISTORY_SUMMARY_PERIOD_S, history_s / 5)) * 1e9))
        self._sample_enabled = sample
        order = self.kind_indices[KIND_CPU] + self.kind_indices[KIND_MEMORY] + self.kind_indices[KIND_GPU]
        #: The meter's domain indices in the baselines' order (kinds' indices, CPU-side, memory, GPU).
        self._baseline_index = {i: k for k, i in enumerate(order)}
        fitted = len(self.kind_indices[KIND_CPU]) + len(self.kind_indices[KIND_MEMORY])
        #: The baselines' positions of the CPU-side and memory domains (their ``energy.baseline``).
        self._fit_positions = tuple(range(fitted))
        # The CPU-time estimate's static part is its model's idle watts, known by construction: nothing to learn.
        self._configured_watts = {
            d.id: d.estimate_static_watts
            for d in meter.domains
            if d.in_total and d.method is Method.ESTIMATE and ATTRIBUTION_KIND[d.kind] == KIND_CPU
        }
        self._configured_watts.update(meter.settings.static_watts)
        self.baselines = Baselines(
            [meter.domains[i].id for i in order], [k < fitted for k in range(len(order))], {}, self._history_ns
        )
        #: The platform reading and the components it is compared with, where a whole-platform reading is read
        #: beside them (None otherwise): what it spends beyond them is CPU-side static energy (:mod:`.uncovered`).
        self.uncovered_positions = uncovered_positions(meter.domains, meter.standby_domain_ids)
        #: The platform's power beyond the components' over the latest periods (:data:`RATE_WINDOW`): what caps a
        #: span's share of it (a platform reading lags its components, so its value over one short span says little).
        self.uncovered_watts = 0.0
        self._uncovered_window: list[tuple[float, float]] = []
        self.policy = meter.settings.attribution_policy
        self.attribution_label = attribution_label(self.policy)
        self.spans_open: Callable[[], bool] = _no_spans_open
        self._history: list[HistorySample] = []
        self._times: list[int] = []
        #: The periods that left the history, oldest first (:data:`HISTORY_SUMMARY_PERIOD_S`).
        self._summary: list[_SummaryBucket] = []
        self._rates = _NO_RATES
        self._reset()
        self.configure()

    def _reset(self) -> None:
        """The state that is this process's, not the host's: new at start, and in a forked child."""
        self.view = _View(self._rates, tuple(self._history), tuple(self._times), tuple(self._summary))
        self.wall_offset_ns = _wall_offset_ns()
        # _sample_lock: the few lines that change the history; _reading_lock: held across a sample's reads
        # (they serialise samplers only).
        self._sample_lock = threading.Lock()
        self._reading_lock = threading.Lock()
        self._process_watts = (0.0, 0.0, 0.0)
        #: The part of the latest period's process shares priced from standby estimates, per kind.
        self._process_estimated_fraction = (0.0, 0.0, 0.0)
        self._late_ticks_s = 0.0
        #: The host's unattributed joules (CPU-side, memory) since the attributor started.
        self._unattributed_j = [0.0, 0.0]
        #: The platform's energy beyond the components', period by period (None: no platform reading beside them).
        self._uncovered = None if self.uncovered_positions is None else UncoveredEnergy(self.uncovered_positions)
        # Every sample reads every counter: the idle back-off never reads less often than the
        # meter's wrap-safe interval, so no counter can wrap twice unseen.
        #: The sampler thread and its pace (a forked child's starts afresh).
        self.pace = SamplerPace(self.period_s, self.meter.sample_period_s, self._sample_enabled)
        self._closed = False
        #: /proc/stat's reads judged, and the messages about its faults.
        self.stat_checks = StatChecks(self.clocks.procfs_root)

    def after_fork_in_child(self) -> None:
        """Start this process's state afresh in a forked child (the parent's locks and thread are not its own).

        The history and prices describe the host, so the child keeps them; its own CPU time restarts,
        so its process totals restart from the latest sample.
        """
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
                last.priced,
                last.period,
            )
        self._reset()

    def configure(self, *, policy: str | None = None, static_watts: Mapping[str, float] | None = None) -> None:
        """Set the policy and add configured static watts (by domain id; they win over the settings'), from the
        next sampler period on: what was priced stays as it was (checked by the attributor's ``configure``)."""
        with self._sample_lock:
            if policy is not None:
                self.policy = policy
                self.attribution_label = attribution_label(policy)
            if static_watts:
                self._configured_watts.update({domain: float(watts) for domain, watts in static_watts.items()})
            self.baselines.configure(self._configured_watts)
            self.baseline_state = self.baselines.state(self._fit_positions)

    # -- the sampler side ---------------------------------------------------------------------

    def sample(self, *, hold_devices: bool = False) -> HistorySample | None:
        """Read ``/proc/stat``, this process's CPU time, the counters (and GPU shares); extend the history.

        ``hold_devices``: leave the device counters (NVML) unread (:meth:`EnergyMeter.snapshot`), for an
        idle sampler: their energy since the last read counts in the next period that reads them.
        """
        # The reads (NVML may be slow) serialise samplers only: the span path reads the published view.
        with self._reading_lock:
            try:
                snapshot = self.meter.sample(hold_devices=hold_devices)
                read_ns = time.monotonic_ns()
                host = self.clocks.host()
                process_cpu_s = self.clocks.process_cpu_s()
                # Not for the first sample (nothing to split yet): it is taken in instrument(),
                # where a stalled NVML's process lists must not hold the program up.
                fractions = self.gpu_shares.fractions() if self.gpu_shares is not None and self._history else []
            except (ProcfsReadError, OSError) as exc:
                self.stat_checks.unreadable(exc)
                return None
            if self.meter.closed:
                # Nothing more to sample. Asked, not read from the snapshot: a meter without
                # domains (a tracker's simulated devices only) reads the same open or closed.
                self._closed = True
                return None
            self.pace.note_fractions(fractions)
            problem = self.stat_checks.problem(self._history[-1] if self._history else None, host, time.monotonic_ns())
            with self._sample_lock:
                sample = self._append(snapshot, host.busy_s, host.idle_s, process_cpu_s, fractions, problem is None)
            self.stat_checks.settle(read_ns, host.cpus, problem)
            return sample

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
        process_joules = estimated = (0.0, 0.0, 0.0)
        period = None
        if previous is not None:
            period = self._split_period(previous, snapshot, busy_s, idle_s, process_cpu_s, priced)
            process_joules = self._advance_rates(
                previous, snapshot, busy_s, idle_s, process_cpu_s, fractions, priced, period
            )
            estimated = self._estimated_part(previous, period, process_joules)
        sample = HistorySample(
            now_ns, _wall_offset_ns(), snapshot, busy_s, process_cpu_s, idle_s, process_joules, priced, period, estimated
        )
        # time.time_ns() - time.monotonic_ns() at the latest sample, for explicit span times.
        self.wall_offset_ns = sample.wall_offset_ns
        self._history.append(sample)
        self._times.append(now_ns)
        self._trim(now_ns)
        # One assignment: the span path sees the new prices with the samples they came from, or neither.
        self.view = _View(self._rates, tuple(self._history), tuple(self._times), tuple(self._summary))
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
            add_to_summary(self._summary, self._summary_period_ns, history[k], history[k + 1], self._period_rates(k))
        del history[:drop]
        del times[:drop]

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
        spent = self._period_joules(previous.snapshot, snapshot)
        joules = [spent[i] for i in self._baseline_index]
        baselines = self.baselines
        if priced:
            baselines.add_period(snapshot.monotonic_ns, dt_s, d_busy, joules)
        sums = self._kind_sums(joules, dt_s)
        if self._uncovered is not None:
            # Shared as static energy is, by the policy: counted whether or not the period is priced, so an
            # unpriced period's is nobody's (energy.unattributed) like the rest of its energy.
            extra_j = self._uncovered.take(spent)
            sums[0] += extra_j
            sums[1] += extra_j
            window = self._uncovered_window
            window.append((dt_s, extra_j))
            del window[:-RATE_WINDOW]
            window_s = sum(each[0] for each in window)
            self.uncovered_watts = sum(each[1] for each in window) / window_s if window_s > 0 else 0.0
        busy, capacity = _busy_and_capacity(d_busy, d_idle, max(0.0, process_cpu_s - previous.process_cpu_s))
        prices = policy_prices(self.policy, *sums, busy, capacity) if priced else _NO_PRICES
        gpu_j = tuple(joules[self._baseline_index[i]] for i in self.kind_indices[KIND_GPU])
        period = _Period(sums[0], sums[1], sums[2], sums[3], busy, capacity, prices, gpu_j, self._estimated_joules(spent))
        # What the model gives to nobody: idle capacity's static energy, idle and unpriced periods' energy.
        self._unattributed_j[0] += max(0.0, sums[0] - prices.cpu * busy)
        self._unattributed_j[1] += max(0.0, sums[2] - prices.memory * busy)
        self.baseline_state = baselines.state(self._fit_positions)
        return period

    def _estimated_joules(self, spent: Sequence[float | None]) -> tuple[float, float]:
        """The CPU-side and memory joules of a period (``spent`` per meter position) that standby estimates gave."""
        standby = self.meter.plan.standby
        if not standby:
            return (0.0, 0.0)
        cpu, memory = (
            sum(j for i in self.kind_indices[kind] if i in standby and (j := spent[i]) is not None)
            for kind in (KIND_CPU, KIND_MEMORY)
        )
        return (cpu, memory)

    def _period_joules(self, a: EnergySnapshot, b: EnergySnapshot) -> tuple[float | None, ...]:
        """Per meter position, the joules between two snapshots (None where either has no value)."""
        return energy_between(self.meter.plan, a, b).joules

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
        view = self.view
        rates = view.rates
        if rates.since_ns or not view.samples:
            return rates
        try:
            if snapshot is None:
                snapshot = self.meter.snapshot()
            host = self.clocks.host()
            process_cpu_s = self.clocks.process_cpu_s()
        except (ProcfsReadError, OSError):
            return rates
        if self.view.rates.since_ns:
            return self.view.rates  # the sampler's second sample came first
        first = view.samples[0]
        dt_s = (snapshot.monotonic_ns - first.monotonic_ns) / 1e9
        busy, _ = _busy_and_capacity(
            host.busy_s - first.busy_s, host.idle_s - first.idle_s, max(0.0, process_cpu_s - first.process_cpu_s)
        )
        # A few ticks per CPU over so short a time: the capacity is the CPUs' wall time instead.
        capacity = max(dt_s * max(host.cpus, 1), busy)
        spent = self._period_joules(first.snapshot, snapshot)
        joules = self._kind_sums([spent[i] for i in self._baseline_index], dt_s)
        if self.uncovered_positions is not None:
            extra_j = uncovered_joules(self.uncovered_positions, spent)
            joules[0] += extra_j
            joules[1] += extra_j
        prices = policy_prices(self.policy, *joules, busy, capacity)
        # Not kept: the next event prices over a longer, steadier time, until the sampler's forecast.
        return _Rates(first.monotonic_ns, prices.cpu, prices.memory, 0.0, prices.dynamic, 0.0)

    def _estimated_part(
        self, previous: HistorySample, period: _Period, process_joules: tuple[float, float, float]
    ) -> tuple[float, float, float]:
        """``process_estimated_joules`` after a period: the previous sample's, plus the process's share of the
        period in the proportion the standby estimates gave of each kind's energy (``_sample_lock`` held).
        GPUs read through the agent have no standby estimate: their share is measured or nothing."""
        cpu_fraction = period.estimated_j[0] / period.cpu_j if period.cpu_j > 0 else 0.0
        memory_fraction = period.estimated_j[1] / period.memory_j if period.memory_j > 0 else 0.0
        self._process_estimated_fraction = (cpu_fraction, memory_fraction, 0.0)
        before, earlier = process_joules, previous.process_joules
        return tuple(  # type: ignore[return-value]
            e + (now - then) * f
            for e, now, then, f in zip(previous.process_estimated_joules, before, earlier, self._process_estimated_fraction)
        )

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
        forward = forward_prices(
            self.policy, self._history[-RATE_WINDOW:], period, priced, self._rates, snapshot.monotonic_ns
        )
        gpu_joules = gpu_dynamic = 0.0
        for i, spent, fraction in zip(self.kind_indices[KIND_GPU], period.gpu_j, fractions):
            if spent is not None:
                # A GPU's processes hold all of it while they run on it: its static energy goes with their
                # fraction under capacity and busy alike; under none, only the dynamic part does.
                static = self.baselines.static_joules(self._baseline_index[i], spent, dt_s)
                gpu_joules += (spent - (static if self.policy not in (POLICY_CAPACITY, POLICY_BUSY) else 0.0)) * fraction
                gpu_dynamic += (spent - static) * fraction
        gpu_watts = gpu_joules / dt_s if dt_s > 0 else 0.0
        gpu_dynamic_watts = gpu_dynamic / dt_s if dt_s > 0 else 0.0
        # The GPU joules credited up to this sample at the old watts: the new watts count from here on.
        old_gpu_j, old_gpu_dynamic_j = _gpu_joules_at(self._rates, snapshot.monotonic_ns)
        self._rates = _Rates(
            snapshot.monotonic_ns,
            forward.cpu,
            forward.memory,
            gpu_watts,
            forward.dynamic,
            gpu_dynamic_watts,
            old_gpu_j,
            old_gpu_dynamic_j,
        )
        mine = (own_cpu * d_process, own_memory * d_process, gpu_joules)
        self._process_watts = tuple(j / dt_s for j in mine) if dt_s > 0 else (0.0, 0.0, 0.0)  # type: ignore[assignment]
        return tuple(p + m for p, m in zip(previous.process_joules, mine))  # type: ignore[return-value]

    # -- the sampler thread -------------------------------------------------------------------

    @property
    def dozing(self) -> bool:
        """True while the sampler waits longer than its period: a span that opens wakes it (:meth:`wake_sampler`)."""
        return self.pace.dozing

    @property
    def stat_fault(self) -> bool:
        """True while /proc/stat's latest read failed or was implausible: spans that end get no share."""
        return self.stat_checks.fault

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called or the meter closed (no more samples)."""
        return self._closed

    def wake_sampler(self) -> None:
        """A span opened while the sampler dozed: sample now, and at :attr:`period_s` while spans are open."""
        self.pace.wake()

    def ensure_sampling(self) -> None:
        """Sample on the meter's sampler thread unless it does, sampling is off or the attributor is closed."""
        self.pace.ensure_running(self)

    def close(self) -> None:
        """Stop sampling. Idempotent."""
        self._closed = True
        self.pace.stop(self)

    def on_sampler_tick(self) -> bool | float:
        """The meter's sampler thread's tick while this history is subscribed: one sample, then the seconds until
        the next; False once the history is closed."""
        if self._closed:
            return False
        return self.pace.tick(self)

    # -- what readers get ---------------------------------------------------------------------


    # -- what readers get ---------------------------------------------------------------------

    @property
    def history(self) -> tuple[HistorySample, ...]:
        """The samples kept, oldest first."""
        return self.view.samples

    def process_joules(self) -> dict[str, float]:
        """This process's attributed joules per kind since the attributor started (up to the latest sample)."""
        samples = self.view.samples
        latest = samples[-1].process_joules if samples else (0.0, 0.0, 0.0)
        return {kind: latest[KINDS.index(kind)] for kind in self.kinds}

    def process_joules_since(self, monotonic_ns: int) -> dict[str, float] | None:
        """This process's attributed joules per kind from an instant to now (a sample is taken now).

        Counts from the sampler period holding the instant (up to one period early); for an instant
        older than the history, from the summary bucket holding it (up to a bucket, a minute, early:
        a training run longer than the history). None when the instant is older than the summary
        too, or no sample can be taken.
        """
        latest = self.sample()
        base = None if latest is None else process_joules_base(self.view, monotonic_ns)
        if latest is None or base is None:
            return None
        return {kind: latest.process_joules[KINDS.index(kind)] - base[KINDS.index(kind)] for kind in self.kinds}

    def process_joules_estimated(self) -> dict[str, float]:
        """The part of :meth:`process_joules` priced from standby estimates (``otel-joules agent`` away), per kind."""
        samples = self.view.samples
        latest = samples[-1].process_estimated_joules if samples else (0.0, 0.0, 0.0)
        return {kind: latest[KINDS.index(kind)] for kind in self.kinds}

    def process_watts(self) -> dict[str, float]:
        """This process's attributed power per kind over the latest sampler period."""
        return {kind: self._process_watts[KINDS.index(kind)] for kind in self.kinds}

    def process_watts_estimated(self) -> dict[str, float]:
        """The part of :meth:`process_watts` priced from standby estimates, per kind."""
        with self._sample_lock:
            watts, fractions = self._process_watts, self._process_estimated_fraction
        return {kind: watts[KINDS.index(kind)] * fractions[KINDS.index(kind)] for kind in self.kinds}

    def unattributed_joules(self) -> dict[str, float]:
        """The host's joules the model gave to no process since the attributor started, for the CPU-side and
        memory kinds measured (up to the latest sample): the static energy of idle capacity (all of it under
        ``none``), and idle or unpriced periods' energy."""
        with self._sample_lock:
            cpu, memory = self._unattributed_j
        return {kind: value for kind, value in ((KIND_CPU, cpu), (KIND_MEMORY, memory)) if kind in self.kinds}

    def baseline_watts(self) -> list[tuple[int, float | None, str]]:
        """(the meter's domain index, static watts or None while nothing is known, ``energy.baseline``) of every
        domain that adds to the total."""
        with self._sample_lock:
            watts, states = self.baselines.watts, self.baselines.states
        return [(i, watts[k], states[k]) for i, k in self._baseline_index.items()]

    def price(self, t0_ns: int, t1_ns: int) -> tuple[float, float, float]:
        """Joules per CPU second (CPU-side, memory: the policy's; dynamic) for CPU time spent between two
        monotonic instants (:func:`~.pricing.price_between` of the published view)."""
        return price_between(self.view, t0_ns, t1_ns)

    # -- history for spans with explicit times -----------------------------------------------

    def snapshot_at(self, monotonic_ns: int, latest: EnergySnapshot) -> EnergySnapshot | None:
        """The meter's cumulative joules at a past instant: the meter's history keeps them
        (:meth:`~otel_joules.meter.history.SnapshotHistory.snapshot_at`), fed by this sampler's samples."""
        return self.meter.history.snapshot_at(monotonic_ns, latest)

    @property
    def oldest_ns(self) -> int | None:
        """Monotonic time of the oldest sample kept, None before the first."""
        samples = self.view.samples
        return samples[0].monotonic_ns if samples else None
