"""The process-wide meter: one per process, created on first use, closed at exit."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any

from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.meter.notice import announce_estimates


class MeterRegistry:
    """Holds the shared :class:`EnergyMeter` of this process.

    The first :meth:`get` creates the meter with the options it is given; later calls
    return the same meter, and asking for other options then is an error (construct
    an own :class:`EnergyMeter` for a different configuration).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meter: EnergyMeter | None = None
        self._options: dict[str, Any] = {}
        self._atexit_registered = False
        if hasattr(os, "register_at_fork"):
            # A thread of the parent may hold the lock at fork time (creating the meter):
            # the child would wait for it forever. Weak: a registry must stay collectable.
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _new_lock_in_child(ref))

    def get(self, **options: Any) -> EnergyMeter:
        """Return the shared meter, creating it with ``options`` (EnergyMeter keywords) on first use."""
        with self._lock:
            if self._meter is None:
                self._meter = EnergyMeter(**options)
                self._options = dict(options)
                # Every front door on the shared meter (instrument(), zero-code, pyJoules) says it here.
                announce_estimates(self._meter)
                if not self._atexit_registered:
                    atexit.register(self.close)
                    self._atexit_registered = True
            elif options and any(self._options.get(k) != v for k, v in options.items()):
                raise ConfigurationError(
                    f"the shared energy meter already runs with {self._options or 'default options'}; "
                    f"it cannot switch to {options}. Create your own otel_joules.EnergyMeter(...) for that."
                )
            return self._meter

    def peek(self) -> EnergyMeter | None:
        """The shared meter if it exists, without creating it."""
        return self._meter

    def close(self) -> None:
        """Close the shared meter; the next :meth:`get` creates a new one."""
        with self._lock:
            meter, self._meter = self._meter, None
            self._options = {}
        if meter is not None:
            meter.close()


def _new_lock_in_child(ref: "weakref.ref[MeterRegistry]") -> None:
    registry = ref()
    if registry is not None:
        registry._lock = threading.Lock()


_registry = MeterRegistry()


def get_energy_meter(**options: Any) -> EnergyMeter:
    """The process-wide :class:`EnergyMeter` (created lazily; see :class:`MeterRegistry`)."""
    return _registry.get(**options)


def default_registry() -> MeterRegistry:
    """The registry behind :func:`get_energy_meter` (tests and the CLI reset it)."""
    return _registry
