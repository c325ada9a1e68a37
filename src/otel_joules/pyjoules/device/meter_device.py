"""Domains the core meter measures that pyJoules had no class for: ``psys`` and the estimates.

``psys`` is the RAPL platform zone (the whole SoC and more: never added to packages).
``cpu_estimate`` and ``memory_estimate`` are the core meter's model-based figures where
no RAPL zone can be read (CPU time x per-CPU watts, memory size x W/GB): estimates, not
measurements, and named so in every output. They are part of the default domains
exactly when the core meter measures them (see :class:`otel_joules.EnergyMeter`'s
``estimate`` option).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from otel_joules.pyjoules.device.device import Device
from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.exception import DomainTypeError


@dataclass(frozen=True, eq=False, repr=False)
class MeterDomain(Domain):
    """Any core meter domain by its id (``psys``, ``cpu_estimate``, ``memory_estimate``).

    Attributes:
        name: The core meter's domain id.
    """

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DomainTypeError(f"MeterDomain({self.name!r}): give a domain id such as 'psys'")

    @property
    def domain_id(self) -> str:
        """The id itself."""
        return self.name

    def get_device_type(self) -> "type[MeterDevice]":
        """:class:`MeterDevice`."""
        return MeterDevice

    def __lt__(self, other: Any) -> bool:
        if isinstance(other, MeterDomain):
            return self.name < other.name
        raise ValueError(f"cannot order {self!r} and {other!r}")

    def __gt__(self, other: Any) -> bool:
        if isinstance(other, MeterDomain):
            return self.name > other.name
        raise ValueError(f"cannot order {self!r} and {other!r}")

    __hash__ = Domain.__hash__


class MeterDevice(Device):
    """The core meter's domains that are neither RAPL sockets nor NVIDIA GPUs."""

    domain_types = (MeterDomain,)
