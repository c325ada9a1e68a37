"""The meter's one sampler thread (:class:`MeterSampler`): it reads often enough that no counter wraps twice
unseen, and feeds the meter's history; an attributor subscribes to it instead of running a thread of its own.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Callable, Iterable, TypeVar, Union

from otel_joules.meter.history import HISTORY_GAP_S
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

    The meter's sampler thread (:class:`MeterSampler`) is one of these.

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
        #: A new wait asked for by :meth:`reschedule` (None: tick when woken).
        self._rescheduled_s: float | None = None
        # Set by stop(), wake() and reschedule(): each ends the wait for the next tick early.
        self._wake_event = threading.Event()

    def run(self) -> None:
        delay_s = self._period_s
        while True:
            self._wake_event.wait(delay_s)
            # Cleared before the tick: a wake() from now on is served by a tick after it.
            self._wake_event.clear()
            if self._stopping:
                return
            rescheduled_s, self._rescheduled_s = self._rescheduled_s, None
            if rescheduled_s is not None:
                delay_s = rescheduled_s
                continue
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

    def reschedule(self, delay_s: float) -> None:
        """Tick ``delay_s`` seconds from now instead of at the end of the current wait (from any thread)."""
        self._rescheduled_s = delay_s
        self._wake_event.set()

    def stop(self) -> None:
        """End the thread after its current tick, waiting up to 5 s for that tick (not from the thread itself)."""
        self._stopping = True
        self._wake_event.set()
        if self is not threading.current_thread():
            self.join(timeout=5)


#: What a subscriber's tick returns: seconds until its next tick, or False to unsubscribe.
TickResult = Union[bool, float]


class MeterSampler:
    """The meter's one sampler thread: it samples the meter (:meth:`EnergyMeter.sample`), or lets a subscriber do it.

    On its own it reads every :attr:`period_s` (the meter's wrap-safe interval), keeping a snapshot in the
    meter's history at most every :data:`~otel_joules.meter.history.HISTORY_GAP_S`. A subscriber (the
    attributor's price history) takes over the ticks: it reads the meter at least every :attr:`period_s`
    itself, with whatever it reads beside the counters, at its own pace; when it unsubscribes (or its
    owner is collected) the meter's own sampling resumes, or the thread ends where the meter needs none.

    Args:
        period_s: The meter's wrap-safe read interval; None: its counters need no sampling.
        enabled: Whether the meter samples on its own (``EnergyMeter(sample=...)``).
    """

    def __init__(self, period_s: float | None, enabled: bool) -> None:
        self.period_s = period_s
        #: Whether the meter needs the thread without a subscriber.
        self.own = enabled and period_s is not None
        #: The thread (None while none runs).
        self.thread: PeriodicThread | None = None
        self._subscriber: "weakref.WeakMethod[Callable[[], TickResult]] | None" = None
        self._closed = False
        self._reset_locks()

    def _reset_locks(self) -> None:
        # _lock: the thread and the subscriber change together; _tick_lock: held across a subscriber's tick, so
        # unsubscribing waits for one under way.
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()

    def ensure_running(self, meter: "EnergyMeter", first_delay_s: float | None = None) -> None:
        """Start the thread (first tick after ``first_delay_s``, else :attr:`period_s`) unless it runs or nothing
        needs it."""
        with self._lock:
            if self.thread is not None or self._closed or not (self.own or self._subscriber is not None):
                return
            delay_s = first_delay_s if first_delay_s is not None else self.period_s
            self.thread = PeriodicThread(meter, _tick, delay_s or 0.1, "otel-joules-sampler")
            self.thread.start()

    def subscribe(self, meter: "EnergyMeter", tick: Callable[[], TickResult], first_delay_s: float) -> None:
        """Let ``tick`` (a bound method, held weakly) take the meter's samples from ``first_delay_s`` on: it must
        read the meter at least every :attr:`period_s` and return the seconds until its next tick."""
        with self._lock:
            self._subscriber = weakref.WeakMethod(tick)  # type: ignore[arg-type]
            thread = self.thread
        if thread is not None:
            thread.reschedule(first_delay_s)
        else:
            self.ensure_running(meter, first_delay_s)

    def unsubscribe(self, tick: Callable[[], TickResult]) -> None:
        """Stop calling ``tick``, after its tick under way if any (waiting up to 5 s); the meter's own sampling
        resumes, or the thread ends. Idempotent."""
        with self._lock:
            subscriber = self._subscriber
            if subscriber is None or subscriber() != tick:
                return
            self._subscriber = None
            thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            if self._tick_lock.acquire(timeout=5):
                self._tick_lock.release()
            thread.reschedule(0.0 if not self.own else self.period_s)  # type: ignore[arg-type]

    def wake(self) -> None:
        """Tick now (a subscriber's span opened while it dozed)."""
        thread = self.thread
        if thread is not None:
            thread.wake()

    def tick(self, meter: "EnergyMeter") -> TickResult:
        """One tick of the thread: the subscriber's, else the meter's own sample; False ends the thread."""
        subscriber = self._subscriber
        tick = None if subscriber is None else subscriber()
        if tick is not None:
            with self._tick_lock:
                result = tick()
            if result is not False:
                return result
            with self._lock:
                if self._subscriber is subscriber:
                    self._subscriber = None
        with self._lock:
            if tick is None and subscriber is not None and self._subscriber is subscriber:
                # Its owner was collected without unsubscribing: the meter's own sampling resumes (kept, the dead
                # subscriber had this thread tick again at once, forever, at 100% of a core).
                self._subscriber = None
            if self._subscriber is not None:
                return 0.0  # subscribed meanwhile: its tick next
            if not self.own or self._closed:
                self.thread = None
                return False
        meter.sample(min_gap_s=HISTORY_GAP_S)
        return self.period_s  # type: ignore[return-value]

    def stop(self) -> None:
        """End the thread for good (the meter is closing), waiting up to 5 s for its current tick."""
        with self._lock:
            self._closed = True
            thread, self.thread = self.thread, None
        if thread is not None:
            thread.stop()

    def after_fork_in_child(self) -> None:
        """The thread does not exist in a forked child, and the locks may have been held by a thread not copied."""
        self.thread = None
        self._reset_locks()


def _tick(meter: "EnergyMeter") -> TickResult:
    """The sampler thread's tick (its :class:`PeriodicThread`, which holds the meter weakly)."""
    return meter.sampler.tick(meter)
