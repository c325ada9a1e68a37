"""The background sampler: reads the meter often enough that no counter wraps twice unseen."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Iterable

from otel_joules.sensors.base import Channel

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

#: The sampler never reads more often than this (it would cost CPU for nothing) ...
SAMPLER_FLOOR_S = 0.01
#: ... and never less often than this, so cached power stays fresh for metrics.
SAMPLER_CEILING_S = 60.0


def _sample_period_s(channels: Iterable[Channel]) -> float | None:
    """Sampler period: the tightest channel bound, within floor and ceiling; None if no channel needs one."""
    bounds = [c.max_read_interval_s for c in channels if c.max_read_interval_s is not None]
    if not bounds:
        return None
    return min(max(min(bounds), SAMPLER_FLOOR_S), SAMPLER_CEILING_S)


class _Sampler(threading.Thread):
    """Reads the meter periodically so no counter wraps twice unseen and power is integrated."""

    def __init__(self, meter: EnergyMeter, period_s: float) -> None:
        super().__init__(name="otel-joules-sampler", daemon=True)
        # A weak reference: a meter nobody uses any more must be collectable even
        # though its sampler thread still runs.
        self._meter_ref = weakref.ref(meter)
        self._period_s = period_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self._period_s):
            meter = self._meter_ref()
            if meter is None:
                return
            meter.snapshot()
            del meter

    def stop(self) -> None:
        self._stop_event.set()
        if self is not threading.current_thread():
            self.join(timeout=5)
