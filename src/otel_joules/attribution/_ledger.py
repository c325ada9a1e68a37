"""One thread's ledger of CPU time and the joules its leaf spans accrue (the span ledger's per-thread state)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from otel_joules.attribution.spans import SpanLedger


class _Ledger:
    """One thread's CPU clock and the joules it has accrued per leaf span (the integral trick).

    ``acc_*_j`` grows by (CPU seconds x price) / leaves at every event, so a span that is a
    leaf from event a to event b accrued ``acc(b) - acc(a)``: O(1) per event however many
    spans are open on the thread. ``acc_dynamic_j`` does the same at the dynamic price.
    """

    __slots__ = (
        "lock", "clock", "cpu_s", "t_ns", "acc_cpu_j", "acc_memory_j", "acc_dynamic_j", "leaves", "generation", "owner",
        "__weakref__",
    )

    def __init__(self, clock: Callable[[], float], generation: int, owner: "SpanLedger") -> None:
        self.owner = owner
        self.lock = threading.Lock()
        self.clock = clock
        self.cpu_s = _read_clock(clock, 0.0)
        self.t_ns = time.monotonic_ns()
        self.acc_cpu_j = 0.0
        self.acc_memory_j = 0.0
        self.acc_dynamic_j = 0.0
        self.leaves = 0
        self.generation = generation


def _read_clock(clock: Callable[[], float], fallback: float) -> float:
    try:
        return clock()
    except (OSError, ValueError):
        return fallback  # the thread has exited: it spends nothing more
