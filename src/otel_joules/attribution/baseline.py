"""Each measured domain's static (idle) power: learned from the history, configured, or not known yet.

A domain's energy in a sampler period is split into **static** (its baseline watts x the
period's seconds, never more than the period's energy) and **dynamic** (the rest). The baseline:

* **configured**: ``OTEL_JOULES_STATIC_WATTS`` (``package_0=10,dram_0=3``: the domain ids spans
  carry in ``energy.<domain>.joules``) or ``instrument(static_watts=...)``;
* **learned** (CPU-side and memory domains): the intercept of a least-squares fit of the domain's
  period power against the host's busy cores (busy CPU seconds / period seconds) over the
  periods in the history (:data:`~.sampling.HISTORY_S`), each weighted by its seconds. The sums
  are kept running: a period's are added when it enters the history and subtracted when it
  leaves (O(1) per period; refreshed from scratch once per history length against rounding).
  The intercept is clamped to [0, the floor] (the floor: the domain's lowest power in the history,
  each power averaged over :data:`FLOOR_PERIODS` consecutive periods, so a counter's update
  jitter in one period does not pull it down). It counts as learned once the fit holds :data:`MIN_FIT_PERIODS` periods of at least
  :data:`MIN_FIT_PERIOD_S` whose busy cores spread (standard deviation) at least
  :data:`MIN_FIT_SPREAD_CORES`: without such spread, static and dynamic power cannot be told apart;
* **unknown** (until then, and for GPUs unless configured): the floor. The floor is an upper bound
  of the true baseline (a period's power is its static plus some dynamic), so the dynamic part
  and the ``capacity`` share are never overstated; before any period of at least
  :data:`MIN_FIT_PERIOD_S`, the period's whole energy counts as static.

Periods shorter than :data:`MIN_FIT_PERIOD_S` (two samples moments apart: a metric collection
beside the sampler's) neither enter the fit nor the floor: their busy ticks and counter updates
are too coarse to give a power.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Mapping, Sequence

from otel_joules.semconv import BASELINE_CONFIGURED, BASELINE_LEARNED, BASELINE_UNKNOWN

#: A period shorter than this gives no power for the fit or the floor.
MIN_FIT_PERIOD_S = 0.05
#: The floor's powers are averages over this many consecutive periods (1 s of 0.1 s periods): any such
#: average is still at least the static power, and a counter's update jitter is a tenth of one period's.
FLOOR_PERIODS = 10
#: The fit's fewest periods (3 s of 0.1 s periods) before its intercept is the baseline.
MIN_FIT_PERIODS = 30
#: The least spread of busy cores (weighted standard deviation) over the fit's periods: a
#: /proc/stat tick is 0.1 core in a 0.1 s period, so below this the slope is mostly tick noise.
MIN_FIT_SPREAD_CORES = 0.25


class BaselineFit:
    """One domain's running weighted sums of (busy cores, watts) and its floor."""

    __slots__ = ("sw", "swx", "swy", "swxx", "swxy", "n", "floor", "window", "window_s", "window_j")

    def __init__(self) -> None:
        self.sw = self.swx = self.swy = self.swxx = self.swxy = 0.0
        self.n = 0
        #: (period end ns, watts), watts increasing: the front is the lowest power in the history.
        self.floor: deque[tuple[int, float]] = deque()
        #: The latest FLOOR_PERIODS periods' (seconds, joules), and their sums.
        self.window: deque[tuple[float, float]] = deque()
        self.window_s = self.window_j = 0.0

    def floor_watts(self, dt_s: float, joules: float) -> float:
        """The average power of the latest :data:`FLOOR_PERIODS` periods, this one included."""
        window = self.window
        window.append((dt_s, joules))
        self.window_s += dt_s
        self.window_j += joules
        if len(window) > FLOOR_PERIODS:
            old_s, old_j = window.popleft()
            self.window_s -= old_s
            self.window_j -= old_j
        return self.window_j / self.window_s

    def add(self, w: float, x: float, y: float, sign: int) -> None:
        self.sw += sign * w
        self.swx += sign * w * x
        self.swy += sign * w * y
        self.swxx += sign * w * x * x
        self.swxy += sign * w * x * y
        self.n += sign

    def intercept(self) -> float | None:
        """The fit's intercept (watts at 0 busy cores), or None without enough periods or spread."""
        if self.n < MIN_FIT_PERIODS or self.sw <= 0:
            return None
        mean_x = self.swx / self.sw
        var_x = self.swxx / self.sw - mean_x * mean_x
        if not var_x >= MIN_FIT_SPREAD_CORES**2:
            return None
        slope = (self.swxy / self.sw - mean_x * self.swy / self.sw) / var_x
        return self.swy / self.sw - slope * mean_x


class Baselines:
    """The static watts of a meter's domains that add to the total (module docstring).

    Args:
        ids: Domain ids, one per index the attributor prices.
        fitted: Per index, whether it is fitted against busy cores (CPU-side, memory) or only floored (GPUs).
        configured: Watts by domain id, where configuration states them.
        history_ns: How long a period stays in the fit.
    """

    def __init__(
        self, ids: Sequence[str], fitted: Sequence[bool], configured: Mapping[str, float], history_ns: int
    ) -> None:
        self.ids = tuple(ids)
        self._fitted = tuple(fitted)
        self._fits = [BaselineFit() for _ in self.ids]
        self._configured = tuple(configured.get(i) for i in self.ids)
        self._history_ns = history_ns
        #: (end ns, weight s, busy cores, watts per domain (None: no value)) of the periods in the fit.
        self._periods: deque[tuple[int, float, float, tuple[float | None, ...]]] = deque()
        self._since_refresh = 0
        self.watts: tuple[float | None, ...] = tuple(self._configured)
        self.states: tuple[str, ...] = ()
        self._decide()

    def configure(self, configured: Mapping[str, float]) -> None:
        """Replace the configured watts (by domain id); the others stay learned or unknown."""
        self._configured = tuple(configured.get(i) for i in self.ids)
        self._decide()

    def add_period(self, end_ns: int, dt_s: float, busy_s: float, joules: Sequence[float | None]) -> None:
        """A sampler period entered the history: ``joules`` per index (None: no value)."""
        if dt_s < MIN_FIT_PERIOD_S:
            return
        x = max(busy_s, 0.0) / dt_s
        watts = tuple(None if j is None else j / dt_s for j in joules)
        self._periods.append((end_ns, dt_s, x, watts))
        for fit, fitted, y in zip(self._fits, self._fitted, watts):
            if y is None:
                continue
            if fitted:
                fit.add(dt_s, x, y, 1)
            low = fit.floor_watts(dt_s, y * dt_s)
            floor = fit.floor
            while floor and floor[-1][1] >= low:
                floor.pop()
            floor.append((end_ns, low))
        self._expire(end_ns - self._history_ns)
        self._since_refresh += 1
        if self._since_refresh > 2 * len(self._periods) + 64:
            self._refresh()
        self._decide()

    def _expire(self, horizon_ns: int) -> None:
        periods = self._periods
        while periods and periods[0][0] <= horizon_ns:
            _, w, x, watts = periods.popleft()
            for fit, fitted, y in zip(self._fits, self._fitted, watts):
                if y is not None and fitted:
                    fit.add(w, x, y, -1)
        for fit in self._fits:
            while fit.floor and fit.floor[0][0] <= horizon_ns:
                fit.floor.popleft()

    def _refresh(self) -> None:
        """Recompute the sums from the periods kept (adding and subtracting for hours drifts by rounding)."""
        self._since_refresh = 0
        for fit in self._fits:
            fit.sw = fit.swx = fit.swy = fit.swxx = fit.swxy = 0.0
            fit.n = 0
        for _, w, x, watts in self._periods:
            for fit, fitted, y in zip(self._fits, self._fitted, watts):
                if y is not None and fitted:
                    fit.add(w, x, y, 1)

    def _decide(self) -> None:
        watts: list[float | None] = []
        states: list[str] = []
        for fit, fitted, configured in zip(self._fits, self._fitted, self._configured):
            floor = fit.floor[0][1] if fit.floor else None
            if configured is not None:
                watts.append(configured)
                states.append(BASELINE_CONFIGURED)
                continue
            intercept = fit.intercept() if fitted else None
            if intercept is not None and floor is not None and math.isfinite(intercept):
                watts.append(min(max(intercept, 0.0), max(floor, 0.0)))
                states.append(BASELINE_LEARNED)
            else:
                watts.append(None if floor is None else max(floor, 0.0))
                states.append(BASELINE_UNKNOWN)
        self.watts = tuple(watts)
        self.states = tuple(states)

    def static_joules(self, k: int, joules: float, dt_s: float) -> float:
        """The static part of index ``k``'s ``joules`` over ``dt_s`` seconds (all of it while nothing is known)."""
        if joules <= 0:
            return 0.0
        watts = self.watts[k]
        if watts is None:
            return joules
        return min(watts * max(dt_s, 0.0), joules)

    def state(self, indices: Sequence[int]) -> str:
        """One word for the given indices: ``configured`` when all are, ``unknown`` when any is, else ``learned``."""
        chosen = [self.states[k] for k in indices]
        if not chosen or any(s == BASELINE_UNKNOWN for s in chosen):
            return BASELINE_UNKNOWN
        if all(s == BASELINE_CONFIGURED for s in chosen):
            return BASELINE_CONFIGURED
        return BASELINE_LEARNED
