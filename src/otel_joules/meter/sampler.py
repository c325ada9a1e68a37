"""Background threads: the meter's sampler reads often enough that no counter wraps twice unseen (:class:`PeriodicThread`)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Callable, Iterable, TypeVar

from otel_joules.sensors.base import Channel

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

_Owner = TypeVar("_Owner")

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


class PeriodicThread(threading.Thread):
    """Calls ``tick(owner)`` every ``period_s`` until :meth:`stop`, the owner is collected, or ``tick`` returns False.

    The meter's sampler (no counter wraps twice unseen, power integrated) and the attributor's
    (the host's busy-time history) are both one of these.

    Args:
        owner: Held weakly: an owner nobody uses any more must be collectable though its thread still runs.
        tick: The periodic work; False ends the thread, True waits ``period_s`` for the next tick, a
            number of seconds waits that long instead (the attributor's back-off while idle).
        period_s: Seconds between ticks.
        name: The thread's name.
    """

    def __init__(self, owner: _Owner, tick: Callable[[_Owner], bool | float], period_s: float, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._owner_ref = weakref.ref(owner)
        self._tick = tick
        self._period_s = period_s
        self._stopping = False
        # Set by stop() and wake(): either ends the wait for the next tick early.
        self._wake_event = threading.Event()

    def run(self) -> None:
        delay_s = self._period_s
        while True:
            self._wake_event.wait(delay_s)
            # Cleared before the tick: a wake() from now on is served by a tick after it.
            self._wake_event.clear()
            if self._stopping:
                return
            owner = self._owner_ref()
            if owner is None:
                return
            result = self._tick(owner)
            del owner
            if result is False:
                return
            delay_s = self._period_s if result is True else float(result)

    def wake(self) -> None:
        """Tick now instead of at the end of the current wait (from any thread; cheap)."""
        self._wake_event.set()

    def stop(self) -> None:
        """End the thread after its current tick, waiting up to 5 s for that tick (not from the thread itself)."""
        self._stopping = True
        self._wake_event.set()
        if self is not threading.current_thread():
            self.join(timeout=5)


def sample_meter(meter: EnergyMeter) -> bool:
    """The meter's periodic tick: one snapshot, which reads every counter."""
    meter.snapshot()
    return True
