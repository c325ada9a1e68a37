"""RAPL domains and device (``pyJoules.device.rapl_device``), read through the core meter.

``RaplPackageDomain(n)`` is the zone named ``package-n``; ``RaplDramDomain(n)``,
``RaplCoreDomain(n)`` and ``RaplUncoreDomain(n)`` are the ``dram``, ``core`` and
``uncore`` sub-zones of that package. Their names (``package_0``, ``dram_0``, ...) are
pyJoules' and the core meter's domain ids. Unlike pyJoules, counters are read through
the core meter, which corrects wrap-arounds and finds zones under
``OTEL_JOULES_SYSFS_ROOT`` (for containers that mount the host's ``/sys`` elsewhere).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, ClassVar, Dict

from otel_joules.pyjoules.device.device import Device, NotConfiguredDeviceException  # noqa: F401 - pyJoules' names
from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.exception import DomainTypeError, NoSuchDeviceError  # noqa: F401 - pyJoules' names
from otel_joules.semconv import KIND_CPU, KIND_MEMORY


@dataclass(frozen=True, eq=False, repr=False)
class RaplDomain(Domain):
    """A RAPL domain of one CPU socket (package number ``socket``).

    Attributes:
        socket: The package number, as in the zone name ``package-<socket>``.
    """

    socket: int
    #: The domain name without socket number (``package``, ``dram``, ``core``, ``uncore``).
    name: ClassVar[str] = ""
    #: The core meter's kind of the domains of this name (``Domain.kind``).
    kind: ClassVar[str] = ""
    #: Its place in pyJoules' order within a socket list: every package, then every dram, core, uncore.
    rank: ClassVar[int] = 0

    @classmethod
    def named(cls, domain_id: str, kind: str) -> "RaplDomain | None":
        """The RAPL domain of a core meter domain of ``kind`` whose id is its pyJoules name (``dram_0``), else None.

        The kind, the sensor's, decides whether the domain can be RAPL's at all; the name
        (:attr:`domain_id`'s format, inverted) only says which one.
        """
        name, _, socket = domain_id.rpartition("_")
        domain_class = RAPL_DOMAIN_CLASSES.get(name)
        if domain_class is None or domain_class.kind != kind or not socket.isdigit():
            return None
        return domain_class(int(socket))

    def __post_init__(self) -> None:
        try:
            socket = operator.index(self.socket)
        except TypeError:
            raise DomainTypeError(f"{type(self).__name__}(socket={self.socket!r}): socket must be a whole number such as 0") from None
        if isinstance(self.socket, bool):
            raise DomainTypeError(f"{type(self).__name__}(socket={self.socket!r}): socket must be a whole number such as 0")
        # A negative socket is accepted here, as pyJoules accepts it: no machine has it, so
        # looking its device up (DeviceFactory, configure) raises NoSuchDomainError.
        object.__setattr__(self, "socket", socket)

    @property
    def domain_id(self) -> str:
        """``<name>_<socket>``, e.g. ``package_0``."""
        return f"{self.name}_{self.socket}"

    def get_domain_name(self) -> str:
        """The domain name without socket number."""
        return self.name

    def get_device_type(self) -> "type[RaplDevice]":
        """:class:`RaplDevice`."""
        return RaplDevice

    def __lt__(self, other: Any) -> bool:
        return self.domain_id < self._id_to_order_by(other)

    def __gt__(self, other: Any) -> bool:
        return self.domain_id > self._id_to_order_by(other)

    def _id_to_order_by(self, other: Any) -> str:
        if isinstance(other, RaplDomain):
            return other.domain_id
        raise ValueError(f"cannot order {self!r} and {other!r}: only RAPL domains order among themselves")

    # A frozen dataclass would otherwise define no hash; the base class's is by name.
    __hash__ = Domain.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class RaplPackageDomain(RaplDomain):
    """The whole CPU package (socket): cores, caches, integrated GPU."""

    name: ClassVar[str] = "package"
    kind: ClassVar[str] = KIND_CPU
    rank: ClassVar[int] = 0


@dataclass(frozen=True, eq=False, repr=False)
class RaplDramDomain(RaplDomain):
    """The memory attached to the socket."""

    name: ClassVar[str] = "dram"
    kind: ClassVar[str] = KIND_MEMORY
    rank: ClassVar[int] = 1


@dataclass(frozen=True, eq=False, repr=False)
class RaplCoreDomain(RaplDomain):
    """The CPU cores of the socket (part of the package)."""

    name: ClassVar[str] = "core"
    kind: ClassVar[str] = KIND_CPU
    rank: ClassVar[int] = 2


@dataclass(frozen=True, eq=False, repr=False)
class RaplUncoreDomain(RaplDomain):
    """The integrated GPU and other uncore parts of the socket (part of the package)."""

    name: ClassVar[str] = "uncore"
    kind: ClassVar[str] = KIND_CPU
    rank: ClassVar[int] = 3


#: Domain class by RAPL domain name (each class's own ``name``).
RAPL_DOMAIN_CLASSES: Dict[str, "type[RaplDomain]"] = {
    cls.name: cls for cls in (RaplPackageDomain, RaplDramDomain, RaplCoreDomain, RaplUncoreDomain)
}


class RaplDevice(Device):
    """The CPU sockets' RAPL domains the core meter measures.

    Raises:
        NoSuchDeviceError: no RAPL domain can be read here (the message says why:
            no powercap driver, counters readable only by root, ...).
    """

    domain_types = (RaplDomain,)
