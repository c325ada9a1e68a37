"""The sampler's constants and the values it reads: the host's history of energy and busy CPU time.

Every :data:`HISTORY_PERIOD_S` (longer while this process is idle: :data:`IDLE_PERIOD_MAX_S`) the
meter's sampler thread (:class:`~otel_joules.meter.sampler.MeterSampler`), for the
:class:`~otel_joules.attribution.history.PriceHistory` subscribed to it, reads the meter's snapshot,
``/proc/stat``'s busy and idle time, this process's CPU time and the GPU shares into a
:class:`HistorySample`, prices the period just ended (joules per CPU second:
CPU-side over the busy seconds, memory over the busy + idle ones; :func:`policy_prices`), adds this
process's share to its running totals, and forecasts the price of CPU time after the sample
(:data:`RATE_WINDOW`). The rules are in :mod:`otel_joules.attribution.model`'s docstring.

``/proc/stat`` is judged before it prices anything: tick counts that go backwards, or more busy or
idle time than the CPUs online can count in the time between two reads, are a fault (one message).
Such a read is taken as the counts' new base: the period ending at it prices no CPU time (its
energy is nobody's) and counting goes on from it. While ``/proc/stat`` is unreadable or
implausible, spans that end carry no share (:attr:`~.history.PriceHistory.stat_fault`): the last
forecast would price them, ever staler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_joules.attribution._prices import _NO_PRICES, _Prices
from otel_joules.config import POLICY_BUSY, POLICY_CAPACITY
from otel_joules.meter.history import HISTORY_S
from otel_joules.meter.meter import EnergySnapshot

if TYPE_CHECKING:
    from otel_joules.attribution._prices import _Period

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
        process_estimated_joules: The part of ``process_joules`` priced from standby estimates (periods while
            ``otel-joules agent`` was away), per kind: ``process.energy`` reports it as an estimate.
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
    process_estimated_joules: tuple[float, float, float] = (0.0, 0.0, 0.0)


def policy_prices(
    policy: str, cpu_j: float, cpu_static_j: float, memory_j: float, memory_static_j: float, busy: float, capacity: float
) -> _Prices:
    """The prices of CPU time over busy (and capacity) seconds for one policy (the rules: :mod:`.model`).

    The dynamic price is the dynamic energy over the busy seconds, for both kinds. The policy's:
    ``capacity``: dynamic over busy + static over the capacity (busy + idle seconds); ``busy``: the
    whole bill to the busy work (CPU-side: the whole energy over busy; memory: the whole over
    the capacity, DRAM's power being mostly refresh and background); ``dynamic``: the dynamic price.
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
