"""The wall clock at the edge: its offset from the monotonic clock, and its steps.

Every interval otel-joules measures is on ``CLOCK_MONOTONIC`` (snapshots, durations, the
history). The wall clock (``time.time_ns()``, what the OpenTelemetry SDK stamps spans with)
only places spans in a trace and states explicit span times; ``date -s``, an NTP or chrony step
and a VM resume move it, and nothing else. Both clocks are slewed alike by NTP, so the wall
clock's offset from the monotonic one, ``time.time_ns() - time.monotonic_ns()``, stays put
except when the wall clock steps: a move of more than :data:`STEP_TOLERANCE_NS` is a step.

:data:`WALL_CLOCK` keeps the offset last confirmed; a step is said once per process on the
``otel_joules`` logger (``WARNING``), later ones at ``DEBUG``.
"""

from __future__ import annotations

import logging
import threading
import time

from otel_joules.semconv import ENERGY_CLOCK_STEP_S

_log = logging.getLogger("otel_joules")

#: A move of the wall clock's offset from the monotonic clock larger than this is a step. Also how far a
#: span's stated start may be from when it started and still be its start. The offset is confirmed to
#: microseconds (:meth:`WallClock.settle`); a delay between a span's two reads seldom reaches this.
STEP_TOLERANCE_NS = 2_000_000


def wall_offset_ns() -> int:
    """``time.time_ns() - time.monotonic_ns()``, from the tightest of three tries (a preemption between the two
    reads would shift every wall time converted with it)."""
    best_gap, best_offset = None, 0
    for _ in range(3):
        before = time.monotonic_ns()
        wall = time.time_ns()
        after = time.monotonic_ns()
        if best_gap is None or after - before < best_gap:
            best_gap, best_offset = after - before, wall - (before + after) // 2
        if best_gap < 20_000:
            break
    return best_offset


class WallClock:
    """The wall clock's offset from the monotonic clock, as last confirmed, and the one message about its steps.

    The span path reads both clocks side by side and compares their difference with
    :attr:`offset_ns`. Within :data:`STEP_TOLERANCE_NS` it uses :attr:`offset_ns` (measured to
    microseconds); beyond, it calls :meth:`settle`: a thread preempted between its two reads (the
    GIL's switch interval is 5 ms) shows such a move too, so the offset is measured again, tightly,
    and only a move that this confirms is a step.
    """

    __slots__ = ("offset_ns", "_lock", "_steps")

    def __init__(self) -> None:
        #: ``time.time_ns() - time.monotonic_ns()`` as last confirmed.
        self.offset_ns = wall_offset_ns()
        self._lock = threading.Lock()
        self._steps = 0

    @property
    def steps(self) -> int:
        """How many steps were seen in this process."""
        return self._steps

    def settle(self) -> int:
        """The offset now, measured tightly, after a reader saw it move beyond the tolerance; a step when it did
        (the first said once)."""
        offset_ns = wall_offset_ns()
        step_ns = offset_ns - self.offset_ns
        if -STEP_TOLERANCE_NS <= step_ns <= STEP_TOLERANCE_NS:
            return self.offset_ns
        self.offset_ns = offset_ns
        with self._lock:
            self._steps += 1
            first = self._steps == 1
        (_log.warning if first else _log.debug)(
            "otel-joules: the wall clock stepped by %+.3f s (date -s, an NTP or chrony step, a VM resume?): span "
            "energy and durations are measured on the monotonic clock and stay right; spans open across a step carry "
            "%s, their start and end times are off by it%s",
            step_ns / 1e9,
            ENERGY_CLOCK_STEP_S,
            " (later steps are logged at DEBUG)" if first else "",
        )
        return offset_ns


#: The process's wall clock.
WALL_CLOCK = WallClock()
