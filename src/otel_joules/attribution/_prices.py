"""The price history's immutable values: a period's split and prices, the prices after a sample, and what
the sampler publishes for the span path (:class:`_View`).

Every value here is immutable: the sampler thread builds a new one and publishes it by one reference
assignment (:attr:`~otel_joules.attribution.sampling.PriceHistory.view`), so the span path reads the
prices and the history without a lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from otel_joules.attribution.sampling import HistorySample


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
    #: Each GPU's joules in the period (the meter's GPU positions' order; None: no value at either end).
    gpu_j: tuple[float | None, ...] = ()
    #: The part of ``cpu_j`` and of ``memory_j`` that the standby estimates gave (the agent away).
    estimated_j: tuple[float, float] = (0.0, 0.0)


class _Rates(NamedTuple):
    """Prices after the latest sample: joules per CPU second (cpu, memory: the policy's), the process's GPU
    watts (the policy's), the dynamic price per CPU second and the process's dynamic GPU watts.

    ``gpu_j`` and ``gpu_dynamic_j``: the process's GPU joules (the policy's, the dynamic ones) credited to
    spans up to ``since_ns``, each earlier period at its own watts. With the watts they make a cumulative
    function of time (:func:`_gpu_joules_at`) that the span path differences, so a new price changes nothing
    credited before it and the sampler never touches the span side's accounts.
    """

    since_ns: int
    cpu_j_per_cpu_s: float
    memory_j_per_cpu_s: float
    gpu_watts: float
    dynamic_j_per_cpu_s: float = 0.0
    gpu_dynamic_watts: float = 0.0
    gpu_j: float = 0.0
    gpu_dynamic_j: float = 0.0


_NO_RATES = _Rates(0, 0.0, 0.0, 0.0)


def _gpu_joules_at(rates: _Rates, now_ns: int) -> tuple[float, float]:
    """The process's cumulative GPU joules (the policy's, the dynamic ones) at ``now_ns`` by ``rates``."""
    dt_s = (now_ns - rates.since_ns) / 1e9 if rates.since_ns else 0.0
    return rates.gpu_j + rates.gpu_watts * dt_s, rates.gpu_dynamic_j + rates.gpu_dynamic_watts * dt_s


class _SummaryBucket(NamedTuple):
    """Periods that left the history, summed over one ``HISTORY_SUMMARY_PERIOD_S`` bucket.

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


class _View(NamedTuple):
    """What the span path and the readers see of the price history, published whole after every sample.

    ``rates`` are the prices after the latest of ``samples``; ``times`` the samples' ``monotonic_ns``;
    ``summary`` the buckets of the periods that left the history, oldest first.
    """

    rates: _Rates
    samples: "tuple[HistorySample, ...]"
    times: tuple[int, ...]
    summary: tuple[_SummaryBucket, ...]


_EMPTY_VIEW = _View(_NO_RATES, (), (), ())


def _busy_and_capacity(busy_s: float, idle_s: float, process_cpu_s: float) -> tuple[float, float]:
    """A period's busy CPU seconds (never under this process's own: ticks may undercount) and its
    CPU capacity (busy + idle seconds), the denominators of the CPU-side and memory prices."""
    busy = max(busy_s, process_cpu_s, 0.0)
    return busy, max(busy_s + max(idle_s, 0.0), busy)
