"""The device base class: reads a group of domains from the core :class:`otel_joules.EnergyMeter`.

A device opens no file and calls no NVML function itself: it asks the core meter, which
reads every counter once per snapshot, corrects wrap-arounds and converts units. A
device's values are therefore cumulative microjoules since the *meter* started, and
only their differences mean anything (as with pyJoules' raw counters).

Devices written by users, as pyJoules documents them (a subclass of :class:`Device`
that overrides ``available_domains()`` -- a static method without arguments --,
``get_energy()`` and optionally ``configure()``, with a :class:`Domain` subclass whose
``get_device_type()`` returns it), read their own energy source: :class:`Device` sees
that the subclass has no core-meter domain types (:func:`reads_core_meter`) and
constructs it the pyJoules way. ``EnergyMeter``, ``measure_energy`` and
``EnergyContext`` then call its ``get_energy()`` at every point of a trace, next to the
core meter's snapshot, and report its domains in samples, handlers and spans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, List, Optional, Sequence

from otel_joules.meter.registry import get_energy_meter
from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.exception import NoSuchDeviceError, NoSuchDomainError, PyJoulesException
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY
from otel_joules.sensors.base import Method

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
    from otel_joules.sensors.base import Domain as CoreDomain


class NotConfiguredDeviceException(PyJoulesException):
    """A device method that needs :meth:`Device.configure` was called before it."""


def joules_to_microjoules(joules: float) -> float:
    """Microjoules, as the whole number the sensors counted (every channel counts integer uJ).

    The core meter keeps integer microjoules and hands out joules (``uJ / 1e6``);
    rounding undoes that division exactly, so a 1.5 J counter delta is ``1500000.0``,
    not ``1499999.9999999998``.
    """
    return float(round(joules * 1e6))


def domain_for(core: "CoreDomain") -> Domain:
    """The pyJoules domain object for a core meter domain.

    Its family comes from what the sensor says the domain is (``Domain.kind`` and its method), never
    from the id: a measured GPU is an :class:`NvidiaGPUDomain`, a measured CPU or memory domain a RAPL
    one. Within the family the domain is found by its name, which pyJoules' API defines as the core
    id (``package_0`` is ``RaplPackageDomain(0)``, :mod:`otel_joules.pyjoules.device.domain`); a domain
    the family has no name for (an Intel GPU, an AMD core, an estimate, the platform) is a
    :class:`MeterDomain` under its id.
    """
    # Imported here: the device modules import this one.
    from otel_joules.pyjoules.device.meter_device import MeterDomain
    from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
    from otel_joules.pyjoules.device.rapl_device import RaplDomain

    found: Domain | None = None
    if core.method is not Method.ESTIMATE:
        if core.kind == KIND_GPU:
            found = NvidiaGPUDomain.named(core.id)
        elif core.kind in (KIND_CPU, KIND_MEMORY):
            found = RaplDomain.named(core.id, core.kind)
    return found if found is not None else MeterDomain(core.id)


def pyjoules_order(domain: Domain) -> tuple[int, int, str]:
    """Sort key giving pyJoules' default order within a device: packages, drams, cores, uncores; GPUs by index."""
    from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
    from otel_joules.pyjoules.device.rapl_device import RaplDomain

    if isinstance(domain, RaplDomain):
        return (domain.rank, domain.socket, "")
    if isinstance(domain, NvidiaGPUDomain):
        return (0, domain.device_id, "")
    return (0, 0, domain.domain_id)


def why_not_measured(domain: Domain, meter: "CoreEnergyMeter") -> str:
    """Why ``meter`` does not measure ``domain``, from what its sensors reported, and what to do."""
    from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
    from otel_joules.pyjoules.device.rapl_device import RaplDomain

    domain_id = domain.domain_id
    reasons = [
        f"{entry.reason}" + (f" (to fix: {entry.remedy})" if entry.remedy else "")
        for entry in meter.unavailable
        if entry.what == domain_id or entry.what.startswith(domain_id + " ")
    ]
    if not reasons:
        # What a sensor reports about a whole family (no readable RAPL, no NVML) applies to each of its domains.
        family = "nvidia_gpu" if isinstance(domain, NvidiaGPUDomain) else "RAPL" if isinstance(domain, RaplDomain) else None
        reasons = [
            f"{entry.reason}" + (f" (to fix: {entry.remedy})" if entry.remedy else "")
            for entry in meter.unavailable
            if family is not None and entry.what == family
        ]
    measured = ", ".join(d.id for d in meter.domains) or "nothing"
    if reasons:
        return "; ".join(reasons)
    if isinstance(domain, NvidiaGPUDomain):
        return _why_gpu_not_measured(domain.device_id, meter, measured)
    return f"this machine has no such domain (measured here: {measured})"


def _why_gpu_not_measured(index: int, meter: "CoreEnergyMeter", measured: str) -> str:
    """Advice that works when followed: a GPU that does not exist is not to be asked for."""
    from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDomain
    from otel_joules.sensors.nvml_session import gpu_indices

    indices = gpu_indices()
    if indices is not None and index not in indices:
        seen = ", ".join(str(i) for i in indices) if indices else "none"
        return (
            f"there is no GPU with NVML index {index} on this machine (NVML indices here: {seen}; `nvidia-smi -L` "
            "lists them). NvidiaGPUDomain(i) takes an NVML index: use one of those"
        )
    measured_gpus = [g.device_id for d in meter.domains if isinstance(g := domain_for(d), NvidiaGPUDomain)]
    wanted = ", ".join(str(i) for i in sorted({*measured_gpus, index}))
    return (
        f"this process's energy meter does not measure it (it measures: {measured}). NvidiaGPUDomain({index}) is "
        f"the GPU with NVML index {index}, as nvidia-smi numbers them. The process-wide meter keeps the GPUs it "
        f"was created with, so call otel_joules.get_energy_meter(gpus=[{wanted}]) at the start of the program, "
        "before anything measures"
    )


def reads_core_meter(device: "Device | type[Device]") -> bool:
    """True for the devices backed by the core meter (RAPL, NVIDIA, psys/estimates); False for user-written ones.

    Ours name the domain classes they read in :attr:`Device.domain_types`; a pyJoules-style
    subclass written by a user does not, and reads its own source through ``get_energy()``.
    """
    return bool(device.domain_types)


class Device:
    """Reads the energy of some domains from the core meter.

    Subclass it to add an energy source of your own, as in pyJoules: override
    ``available_domains()`` (a static method without arguments), ``get_energy()``
    (cumulative values, one per configured domain, in the order of
    ``get_configured_domains()``), and call ``Device.__init__(self)`` from ``__init__``.
    Values are taken as microjoules, pyJoules' unit; set :attr:`energy_unit_joules` when
    your counter counts something else (``1e-3`` for millijoules, ``1.0`` for joules).

    Args:
        meter: The core meter to read; the process-wide one
            (:func:`otel_joules.get_energy_meter`) when omitted. Not used by user-written devices.

    Raises:
        NoSuchDeviceError: the meter measures no domain of this device (user-written
            devices: whatever their ``available_domains()`` raises).
    """

    #: Domain classes this device reads from the core meter (set by our subclasses; empty
    #: for user-written devices, which read their own source).
    domain_types: ClassVar[tuple[type[Domain], ...]] = ()
    #: Joules per unit of a user-written device's ``get_energy()`` values (pyJoules' unit: microjoules).
    energy_unit_joules: ClassVar[float] = 1e-6
    #: Whether a user-written device's domains add to a span's ``energy.joules``. Set False
    #: for a source that overlaps others (a wall-plug meter that already includes the CPU).
    in_total: ClassVar[bool] = True

    def __init__(self, *, meter: "Optional[CoreEnergyMeter]" = None) -> None:
        self._configured_domains: Optional[List[Domain]] = None
        if not reads_core_meter(self):
            # pyJoules' contract for user devices: available_domains() takes no argument.
            self._meter: "Optional[CoreEnergyMeter]" = None
            self._available_domains = list(self.available_domains())
            return
        self._meter = meter if meter is not None else get_energy_meter()
        self._available_domains = self.available_domains(self._meter)

    @property
    def meter(self) -> "Optional[CoreEnergyMeter]":
        """The core meter this device reads; None for a user-written device."""
        return self._meter

    @classmethod
    def available_domains(cls, meter: "Optional[CoreEnergyMeter]" = None) -> List[Domain]:
        """The domains of this device the meter measures, in pyJoules' order.

        Args:
            meter: The core meter; the process-wide one when omitted.

        Raises:
            NoSuchDeviceError: there is none (the message says why).
        """
        if not reads_core_meter(cls):
            raise NotImplementedError(
                f"{cls.__name__}.available_domains() must be overridden: return the domains your device can measure"
            )
        meter = meter if meter is not None else get_energy_meter()
        found = [domain_for(d) for d in meter.domains]
        mine = sorted((d for d in found if isinstance(d, cls.domain_types)), key=pyjoules_order)
        if not mine:
            reasons = "; ".join(f"{u.what}: {u.reason}" for u in meter.unavailable) or "no sensor found one"
            raise NoSuchDeviceError(f"{cls.__name__}: no domain of this device can be measured here ({reasons})")
        return mine

    def configure(self, domains: Optional[Sequence[Domain]] = None) -> None:
        """Choose the domains :meth:`get_energy` reports (all available ones when None).

        Raises:
            NoSuchDomainError: a domain cannot be measured (the message says why).
        """
        if domains is None:
            self._configured_domains = list(self._available_domains)
            return
        chosen = list(domains)
        for domain in chosen:
            if domain not in self._available_domains:
                if self._meter is None:
                    listed = ", ".join(map(str, self._available_domains)) or "nothing"
                    raise NoSuchDomainError(
                        domain, f"{type(self).__name__}.available_domains() does not list it (it lists: {listed})"
                    )
                raise NoSuchDomainError(domain, why_not_measured(domain, self._meter))
        self._configured_domains = chosen

    def get_configured_domains(self) -> List[Domain]:
        """The domains given to :meth:`configure`.

        Raises:
            NotConfiguredDeviceException: :meth:`configure` was not called.
        """
        if self._configured_domains is None:
            raise NotConfiguredDeviceException(f"{type(self).__name__}.configure() must be called first")
        return self._configured_domains

    def get_energy(self) -> List[Optional[float]]:
        """Cumulative microjoules of each configured domain since the meter started, in configured order.

        A domain whose counter has failed is None. Only differences between two calls mean anything.

        Raises:
            NotImplementedError: a user-written device that does not override it.
        """
        if self._meter is None:
            raise NotImplementedError(
                f"{type(self).__name__}.get_energy() must be overridden: return one cumulative value per configured domain"
            )
        snapshot = self._meter.snapshot()
        values: List[Optional[float]] = []
        for domain in self.get_configured_domains():
            joules = snapshot.joules[self._meter.domain_index(domain.domain_id)]
            values.append(None if joules is None else joules_to_microjoules(joules))
        return values
