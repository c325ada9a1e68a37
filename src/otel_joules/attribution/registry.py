"""The registry of attributors: one :class:`~.attributor.Attributor` per meter, shared.

Every span processor and metric instrument reading a meter gets the same attributor from
:func:`attributor_for` (one sampler thread per meter, one history), created on first use.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Callable, Mapping

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.procfs import ProcfsReadError
from otel_joules.errors import ConfigurationError

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

_log = logging.getLogger("otel_joules")


class AttributionRegistry:
    """One :class:`Attributor` per meter, shared by every processor and metric reading that meter.

    Holds attributors weakly (an attributor holds its meter, so a strong value would keep the
    meter key alive for ever): the processors and metric instruments using one keep it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Held across creating an attributor (it reads /proc and the counters): renewed in a child.
        register_fork_hook(self, "_new_lock")
        self._by_meter: "weakref.WeakKeyDictionary[EnergyMeter, Callable[[], Attributor | None]]" = (
            weakref.WeakKeyDictionary()
        )

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self, meter: "EnergyMeter") -> Attributor | None:
        """The meter's attributor, created on first use; None when CPU times cannot be read (said once)."""
        with self._lock:
            ref = self._by_meter.get(meter)
            if ref is not None:
                found = ref()
                if found is not None or ref is _NO_ATTRIBUTOR:
                    return found
            try:
                attributor = Attributor(meter)
            except (ProcfsReadError, OSError) as exc:
                _log.warning(
                    "otel-joules: cannot attribute energy to processes and spans (%s); spans keep energy.joules "
                    "without energy.attributed.*. Set OTEL_JOULES_PROCFS_ROOT to where procfs is mounted.",
                    exc,
                )
                self._by_meter[meter] = _NO_ATTRIBUTOR
                return None
            self._by_meter[meter] = weakref.ref(attributor)
            return attributor

    def all(self) -> list[Attributor]:
        """Every live attributor."""
        found = [ref() for ref in list(self._by_meter.values())]
        return [a for a in found if a is not None]


def _no_attributor() -> None:
    return None


_NO_ATTRIBUTOR: Callable[[], None] = _no_attributor


_registry = AttributionRegistry()


def attributor_for(meter: "EnergyMeter") -> Attributor | None:
    """The shared :class:`Attributor` of ``meter`` (see :class:`AttributionRegistry`)."""
    return _registry.get(meter)


def check_attribution(attribution: object) -> None:
    """Raise :class:`ConfigurationError` unless ``attribution`` is True, False or an :class:`Attributor`."""
    if not isinstance(attribution, (bool, Attributor)):
        raise ConfigurationError(
            f"attribution={attribution!r} is not True (the meter's shared attributor), False (no attribution) "
            "or an otel_joules.attribution.Attributor"
        )


def attributor_from(
    attribution: "bool | Attributor",
    meter: "EnergyMeter | None",
    *,
    policy: str | None = None,
    static_watts: "Mapping[str, float] | None" = None,
) -> Attributor | None:
    """What ``attribution=`` means wherever it is taken, the one place it is resolved: True the meter's shared
    attributor (:func:`attributor_for`; None when CPU times cannot be read), an :class:`Attributor` that one,
    False none. ``policy`` and ``static_watts``, when given, are set on the attributor found
    (:meth:`Attributor.configure`). ``meter`` is read only for True.

    Raises:
        ConfigurationError: ``attribution`` is none of those, or the options are not valid.
    """
    check_attribution(attribution)
    if attribution is False:
        return None
    if isinstance(attribution, Attributor):
        found: Attributor | None = attribution
    else:
        if meter is None:
            raise ConfigurationError("attribution=True needs the meter whose shared attributor it means")
        found = attributor_for(meter)
    if found is not None and (policy is not None or static_watts is not None):
        found.configure(policy=policy, static_watts=static_watts)
    return found
