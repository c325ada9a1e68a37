"""``EnergyHandler``: receives the trace of every measurement (pyJoules' ``pyJoules.handler``).

Differences from pyJoules 0.5.1, all on purpose:

- :meth:`EnergyHandler.process` may be called from several threads at once (decorated
  functions running in parallel): traces are appended under a lock.
- Handlers that write somewhere (CSV, MongoDB) write what they still hold at
  interpreter exit (:meth:`EnergyHandler._flush_at_exit`), instead of losing the
  measurements of a script that forgot ``save_data()``.
- After ``os.fork()`` the child gets a new lock (a parent thread may hold it while
  writing at that moment), and a handler that writes forgets the traces the parent
  still holds: the parent saves them, so no measurement is written twice.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Callable, List

# The span exporters' exit hook (re-exported here, where pyJoules-style handlers find it).
from otel_joules._fork import register_fork_hook
from otel_joules.exporters._retrying import register_exit_hook
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import PyJoulesException

_log = logging.getLogger("otel_joules.pyjoules")


class UnconsistantSamplesError(PyJoulesException):
    """Samples to be written together measure different domains (the message lists both sets).

    The name keeps pyJoules' spelling so existing ``except`` clauses still match.
    """


class EnergyHandler:
    """Collects the traces of measurements; subclasses write or show them.

    Attributes:
        traces: The traces received and not yet saved, oldest first.
    """

    #: Whether :meth:`save_data` runs at interpreter exit for traces still held.
    flushes_at_exit: bool = False
    #: Fallback for subclasses written for pyJoules that do not call ``EnergyHandler.__init__``;
    #: every properly initialised handler has its own.
    _lock: "threading.RLock" = threading.RLock()  # type: ignore[valid-type]

    def __init__(self) -> None:
        self.traces: List[EnergyTrace] = []
        self._lock = threading.RLock()
        if self.flushes_at_exit:
            self._exit_hook: Callable[[], None] | None = register_exit_hook(self, "_flush_at_exit")
        else:
            self._exit_hook = None
        register_fork_hook(self, "_after_fork_in_child")

    def _after_fork_in_child(self) -> None:
        self._lock = threading.RLock()
        if self.flushes_at_exit:
            self.traces = []

    def process(self, trace: EnergyTrace) -> None:
        """Keep ``trace`` (thread-safe)."""
        with self._lock:
            self.traces.append(trace)

    def _take_samples(self) -> List[EnergySample]:
        """Every sample held, in order (the traces stay held until the caller clears them)."""
        with self._lock:
            return [sample for trace in self.traces for sample in trace]

    def _flaten_trace(self) -> EnergyTrace:
        """All held traces as one (pyJoules' name, kept for subclasses that call it)."""
        return EnergyTrace(self._take_samples())

    def _forget(self, count: int) -> None:
        """Drop the ``count`` oldest traces (those just saved), keeping any that arrived meanwhile."""
        with self._lock:
            del self.traces[:count]

    def save_data(self) -> None:
        """Write the held traces somewhere; the base class holds them only."""

    def _flush_at_exit(self) -> None:
        with self._lock:
            pending = len(self.traces)
        if not pending:
            return
        try:
            self.save_data()
        except Exception as exc:  # noqa: BLE001 - nothing may escape an exit hook
            _log.error(
                "%s: %d measurement trace(s) could not be saved at interpreter exit and are lost: %s",
                type(self).__name__,
                pending,
                exc,
            )


def _new_fallback_lock() -> None:
    EnergyHandler._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    # The class-level fallback lock (handlers that skip EnergyHandler.__init__) is shared;
    # a thread holding it at a fork would leave it held in the child.
    os.register_at_fork(after_in_child=_new_fallback_lock)
