"""What readers get from the attributor's history: process totals, past prices, past snapshots.

This process's attributed joules and watts (the metric instruments), the price of CPU time
spent between two instants (each sampler period at its own price, the forecast after the
latest sample: the span path), and the meter's joules at a past instant (spans with explicit
start and end times). :class:`_History` is that part of
:class:`~otel_joules.attribution.attributor.Attributor`, over :class:`~.sampling._Sampling`.
"""

from __future__ import annotations

import bisect

from otel_joules.attribution.sampling import HistorySample, _Sampling
from otel_joules.attribution.shares import KINDS
from otel_joules.meter.meter import EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_MEMORY

_new_tuple = tuple.__new__
_EDGE_TOLERANCE_NS = 1_000_000


class _History(_Sampling):
    """Reads the sampled history: process totals, prices of past intervals, snapshots at past instants."""

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

        Counts from the sampler period holding the instant (up to one period early); for an instant
        older than the history, from the summary bucket holding it (up to a bucket, a minute, early:
        a training run longer than the history). None when the instant is older than the summary
        too, or no sample can be taken.
        """
        latest = self.sample()
        if latest is None:
            return None
        with self._sample_lock:
            history = list(self._history)
            older = None  # the summary's bases at or before an instant older than the history
            if history and monotonic_ns < history[0].monotonic_ns:
                older = [bucket.process_joules for bucket in self._summary if bucket.lo_ns <= monotonic_ns]
        if not history:
            return None
        # From the sample (or bucket) at or before the instant: the period holding it counts whole (its
        # share is not spread evenly over the period, so interpolating could drop work done after the instant).
        if older is not None:
            if not older:
                return None
            base = older[-1]
        else:
            base = history[max(0, bisect.bisect_right([h.monotonic_ns for h in history], monotonic_ns) - 1)].process_joules
        return {kind: latest.process_joules[KINDS.index(kind)] - base[KINDS.index(kind)] for kind in self.kinds}

    def process_watts(self) -> dict[str, float]:
        """This process's attributed power per kind over the latest sampler period."""
        return {kind: self._process_watts[KINDS.index(kind)] for kind in self.kinds}

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
        monotonic instants.

        Time-weighted over the sampler periods the interval overlaps, each at its own prices; time
        after the latest sample is priced at the forecast (:meth:`_forward_rates`), time before the
        history at its summary buckets' mean prices (:data:`~.sampling.HISTORY_SUMMARY_PERIOD_S`).
        """
        rates = self._rates
        if t0_ns >= rates.since_ns or t1_ns <= t0_ns:
            return rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s, rates.dynamic_j_per_cpu_s
        with self._sample_lock:
            history = self._history
            times = self._times
            weight = cpu = memory = dynamic = 0.0
            if self._summary and history and t0_ns < times[0]:
                weight, cpu, memory, dynamic = self._summary_price(t0_ns, min(t1_ns, times[0]))
            start = max(0, bisect.bisect_right(times, t0_ns) - 1)
            for k in range(start, len(history) - 1):
                a, b = history[k], history[k + 1]
                lo, hi = max(t0_ns, a.monotonic_ns), min(t1_ns, b.monotonic_ns)
                if hi <= lo:
                    if a.monotonic_ns >= t1_ns:
                        break
                    continue
                r_cpu, r_memory, r_dynamic = self._period_rates(k)
                w = hi - lo
                weight += w
                cpu += r_cpu * w
                memory += r_memory * w
                dynamic += r_dynamic * w
            tail = t1_ns - max(t0_ns, rates.since_ns)
            if tail > 0:
                weight += tail
                cpu += rates.cpu_j_per_cpu_s * tail
                memory += rates.memory_j_per_cpu_s * tail
                dynamic += rates.dynamic_j_per_cpu_s * tail
        if weight <= 0:
            return rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s, rates.dynamic_j_per_cpu_s
        return cpu / weight, memory / weight, dynamic / weight

    def _summary_price(self, t0_ns: int, t1_ns: int) -> tuple[float, float, float, float]:
        """(nanoseconds, CPU-side, memory and dynamic J/CPU-s x ns) of the summary between two instants
        (``_sample_lock`` held)."""
        weight = cpu = memory = dynamic = 0.0
        for bucket in reversed(self._summary):
            if bucket.hi_ns <= t0_ns:
                break
            ns = min(t1_ns, bucket.hi_ns) - max(t0_ns, bucket.lo_ns)
            if ns > 0:
                span_ns = bucket.hi_ns - bucket.lo_ns
                weight += ns
                cpu += bucket.cpu_j_ns / span_ns * ns
                memory += bucket.memory_j_ns / span_ns * ns
                dynamic += bucket.dynamic_j_ns / span_ns * ns
        return weight, cpu, memory, dynamic

    # -- history for spans with explicit times -----------------------------------------------

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
            return _new_tuple(EnergySnapshot, (monotonic_ns, b.joules, (), b.missing, b.jumps))
        t0, a = points[k - 1]
        f = (monotonic_ns - t0) / (t1 - t0)
        joules = tuple(None if x is None or y is None else x + (y - x) * f for x, y in zip(a.joules, b.joules))
        # A domain missing at either sample is missing here too; the jumps counted are the later
        # sample's, so a jump inside the period counts as before the instant.
        missing = tuple(sorted({*a.missing, *b.missing})) if a.missing or b.missing else ()
        return _new_tuple(EnergySnapshot, (monotonic_ns, joules, (), missing, b.jumps))

    @property
    def oldest_ns(self) -> int | None:
        """Monotonic time of the oldest sample kept, None before the first."""
        return self._history[0].monotonic_ns if self._history else None
