"""One thread's ledger of CPU time and the joules its leaf spans accrue (the span ledger's per-thread state),
and the fields every span's share carries.

Where the C extension is built (:mod:`otel_joules.attribution._fastledger`), the fields are C structs
(``LedgerFields``, ``ShareFields``, and ``SpanLedgerFields`` for the span ledger's own) that the compiled span
methods read directly, and the ledgers' locks are
its ``Mutex``, which they take without a Python call; the pure-Python methods read and write the same fields
as attributes and take the same locks with ``with``. Without it, :class:`_PyLedgerFields`,
:class:`_PyShareFields`, :class:`_PySpanLedgerFields` and ``threading.Lock`` stand in.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from otel_joules.attribution.spans import SpanLedger


class _PyLedgerFields:
    """The numbers of one thread's ledger, for an install without the C extension."""

    __slots__ = ("lock", "clock", "cpu_s", "t_ns", "acc_cpu_j", "acc_memory_j", "acc_dynamic_j", "leaves", "generation", "owner")


class _PyShareFields:
    """The numbers of one span's share, for an install without the C extension.

    No ``__slots__``: the class attributes are the defaults, so opening a span sets only the five fields
    that differ (this runs for every span).
    """

    open_children = 0
    leaf = True
    ended = False
    gpu0 = gpu_dynamic0 = own_cpu = own_memory = own_gpu = child_cpu = child_memory = child_gpu = 0.0
    own_dynamic = child_dynamic = 0.0


class _PySpanLedgerFields:
    """The span ledger's own numbers, for an install without the C extension (attributes of the instance)."""


try:
    from otel_joules.attribution import _fastledger
except ImportError:  # built without a C compiler
    _fastledger = None  # type: ignore[assignment]

if _fastledger is not None:
    _LedgerFields = _fastledger.LedgerFields
    _ShareFields = _fastledger.ShareFields
    _SpanLedgerFields = _fastledger.SpanLedgerFields
    _new_lock = _fastledger.Mutex
else:
    _LedgerFields = _PyLedgerFields  # type: ignore[assignment,misc]
    _ShareFields = _PyShareFields  # type: ignore[assignment,misc]
    _SpanLedgerFields = _PySpanLedgerFields  # type: ignore[assignment,misc]
    _new_lock = threading.Lock  # type: ignore[assignment,misc]


class _Ledger(_LedgerFields):  # type: ignore[misc,valid-type]
    """One thread's CPU clock and the joules it has accrued per leaf span (the integral trick).

    ``acc_*_j`` grows by (CPU seconds x price) / leaves at every event, so a span that is a
    leaf from event a to event b accrued ``acc(b) - acc(a)``: O(1) per event however many
    spans are open on the thread. ``acc_dynamic_j`` does the same at the dynamic price.
    """

    __slots__ = ("__weakref__",)

    def __init__(self, clock: Callable[[], float], generation: int, owner: "SpanLedger") -> None:
        self.owner = owner
        self.lock = _new_lock()
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
