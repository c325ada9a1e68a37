"""The history's arithmetic over its published values: the price of CPU time between two instants, the
forecast after a sample, the summary of the periods that left the history, and the process's joules at an
instant.

Plain functions of immutable values (:mod:`._prices`, :class:`~.sampling.HistorySample`):
:class:`~.history.PriceHistory` keeps the state and calls them.
"""

from __future__ import annotations

import bisect
from typing import Sequence

from otel_joules.attribution._prices import _NO_PRICES, _Period, _Prices, _Rates, _SummaryBucket, _View
from otel_joules.attribution.sampling import (
    _IDLE_BELOW_S,
    HISTORY_SUMMARY_BUCKETS,
    MIN_RATE_WINDOW_S,
    HistorySample,
    policy_prices,
)


def price_between(view: _View, t0_ns: int, t1_ns: int) -> tuple[float, float, float]:
    """Joules per CPU second (CPU-side, memory: the policy's; dynamic) for CPU time spent between two
    monotonic instants, in a published view of the history.

    Time-weighted over the sampler periods the interval overlaps, each at its own prices; time
    after the latest sample is priced at the forecast (:func:`forward_prices`), time before the
    history at its summary buckets' mean prices (:data:`~.sampling.HISTORY_SUMMARY_PERIOD_S`).
    """
    rates = view.rates
    if t0_ns >= rates.since_ns or t1_ns <= t0_ns:
        return rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s, rates.dynamic_j_per_cpu_s
    history, times = view.samples, view.times
    weight = cpu = memory = dynamic = 0.0
    if view.summary and history and t0_ns < times[0]:
        weight, cpu, memory, dynamic = _summary_price(view.summary, t0_ns, min(t1_ns, times[0]))
    start = max(0, bisect.bisect_right(times, t0_ns) - 1)
    for k in range(start, len(history) - 1):
        a, b = history[k], history[k + 1]
        lo, hi = max(t0_ns, a.monotonic_ns), min(t1_ns, b.monotonic_ns)
        if hi <= lo:
            if a.monotonic_ns >= t1_ns:
                break
            continue
        r_cpu, r_memory, r_dynamic = _NO_PRICES if b.period is None else b.period.prices
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


def _summary_price(summary: tuple[_SummaryBucket, ...], t0_ns: int, t1_ns: int) -> tuple[float, float, float, float]:
    """(nanoseconds, CPU-side, memory and dynamic J/CPU-s x ns) of the summary between two instants."""
    weight = cpu = memory = dynamic = 0.0
    for bucket in reversed(summary):
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


def forward_prices(
    policy: str,
    window: Sequence[HistorySample],
    period: _Period,
    priced: bool,
    rates: _Rates,
    now_ns: int,
) -> _Prices:
    """The prices for CPU time after a new sample at ``now_ns``, until the next.

    Only a forecast: spans' CPU time after the latest sample is priced at it (and capped at what
    the host spent during the span); the process's share never is. Over the busy periods among
    ``window`` (the last :data:`~.sampling.RATE_WINDOW` samples) and the new ``period``: a period's
    busy time is off by up to a tick per CPU, which a window shrinks; idle periods price nothing, so
    they are left out, and so are periods whose CPU times are unknown (not priced). ``rates`` (the
    current forecast) are kept when the window is too short or has no busy period.
    """
    periods = [(s.period, s.priced) for s in window[1:]] + [(period, priced)]
    sums = [0.0] * 6  # CPU-side, its static, memory, its static, busy, capacity
    for each, known in periods:
        if each is None or not known or each.busy_s < _IDLE_BELOW_S:
            continue
        for k, value in enumerate(each[:6]):
            sums[k] += value
    window_s = (now_ns - window[0].monotonic_ns) / 1e9 if window else 0.0
    if rates.since_ns and (window_s < MIN_RATE_WINDOW_S or sums[4] <= 0):
        # Too short, or nothing busy, to say what a CPU second costs: keep the prices.
        return _Prices(rates.cpu_j_per_cpu_s, rates.memory_j_per_cpu_s, rates.dynamic_j_per_cpu_s)
    if sums[4] <= 0:
        return _NO_PRICES  # no price yet and nothing busy: CPU time now is priced as idle
    return policy_prices(policy, *sums)


def add_to_summary(
    summary: list[_SummaryBucket], bucket_ns: int, a: HistorySample, b: HistorySample, rates: _Prices
) -> None:
    """Add the period from ``a`` to ``b``, at its prices, to the summary buckets of ``bucket_ns`` it overlaps
    (at most :data:`~.sampling.HISTORY_SUMMARY_BUCKETS`: beyond, the oldest two are merged)."""
    lo = a.monotonic_ns
    while lo < b.monotonic_ns:
        start = lo - lo % bucket_ns
        hi = min(b.monotonic_ns, start + bucket_ns)
        ns = hi - lo
        last = summary[-1] if summary else None
        if last is not None and last.start_ns == start:
            summary[-1] = last._replace(
                hi_ns=hi,
                cpu_j_ns=last.cpu_j_ns + rates[0] * ns,
                memory_j_ns=last.memory_j_ns + rates[1] * ns,
                dynamic_j_ns=last.dynamic_j_ns + rates[2] * ns,
            )
        else:
            summary.append(_SummaryBucket(start, lo, hi, rates[0] * ns, rates[1] * ns, a.process_joules, rates[2] * ns))
        lo = hi
    while len(summary) > HISTORY_SUMMARY_BUCKETS:
        first, second = summary[0], summary[1]
        summary[1] = second._replace(
            lo_ns=first.lo_ns,
            process_joules=first.process_joules,
            cpu_j_ns=second.cpu_j_ns + first.cpu_j_ns,
            memory_j_ns=second.memory_j_ns + first.memory_j_ns,
            dynamic_j_ns=second.dynamic_j_ns + first.dynamic_j_ns,
        )
        del summary[0]


def process_joules_base(view: _View, monotonic_ns: int) -> tuple[float, float, float] | None:
    """The process's attributed joules per kind counted before the sampler period holding an instant (for an
    instant older than the history, before the summary bucket holding it); None when the instant is older than
    the summary too, or there is no sample.

    The period holding the instant counts whole after it: its share is not spread evenly over the
    period, so interpolating could drop work done after the instant.
    """
    history = view.samples
    if not history:
        return None
    if monotonic_ns < history[0].monotonic_ns:
        older = [bucket.process_joules for bucket in view.summary if bucket.lo_ns <= monotonic_ns]
        return older[-1] if older else None
    return history[max(0, bisect.bisect_right(view.times, monotonic_ns) - 1)].process_joules
