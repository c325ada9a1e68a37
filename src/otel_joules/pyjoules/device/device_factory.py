"""``DeviceFactory``: devices configured for a list of domains, as in pyJoules 0.5.1.

Also the lenient selection the decorator and :class:`EnergyContext` use
(:func:`select_domains`): they must never fail the user's code because a domain is
missing, so they measure what exists and report the rest in one warning.

Domains of user-written devices (see :mod:`otel_joules.pyjoules.device.device`) are
grouped with their device type like ours, and that device is constructed the pyJoules
way (``device_type()``, then ``configure(domains)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence

from otel_joules.meter.registry import get_energy_meter
from otel_joules.pyjoules.device.device import Device, domain_for, pyjoules_order, reads_core_meter, why_not_measured
from otel_joules.pyjoules.device.domain import Domain
from otel_joules.pyjoules.device.meter_device import MeterDevice
from otel_joules.pyjoules.device.nvidia_device import NvidiaGPUDevice
from otel_joules.pyjoules.device.rapl_device import RaplDevice
from otel_joules.pyjoules.exception import DomainTypeError, NoSuchDeviceError, NoSuchDomainError  # noqa: F401 - pyJoules' names

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter

#: Device classes in the order their domains appear by default (pyJoules: RAPL, then GPUs).
DEVICE_TYPES: tuple["type[Device]", ...] = (RaplDevice, NvidiaGPUDevice, MeterDevice)


def check_domains(domains: Optional[Iterable[Domain]]) -> Optional[tuple[Domain, ...]]:
    """``domains`` as a tuple without repeats, or None; anything but domain objects is refused.

    Raises:
        DomainTypeError: an entry is not a domain object, or ``domains`` is a single domain or string.
    """
    if domains is None:
        return None
    if isinstance(domains, (str, Domain)):
        raise DomainTypeError(f"domains={domains!r} must be a list of domains, e.g. [RaplPackageDomain(0)]")
    checked: list[Domain] = []
    for domain in domains:
        if not isinstance(domain, Domain):
            raise DomainTypeError(
                f"domains entry {domain!r} is not a domain; use RaplPackageDomain(0), RaplDramDomain(0), "
                "RaplCoreDomain(0), RaplUncoreDomain(0) or NvidiaGPUDomain(0)"
            )
        if domain not in checked:
            checked.append(domain)
    return tuple(checked)


def all_available_domains(meter: "CoreEnergyMeter") -> List[Domain]:
    """Every domain ``meter`` measures, grouped by device in pyJoules' order."""
    found = [domain_for(d) for d in meter.domains]
    ordered: List[Domain] = []
    for device_type in DEVICE_TYPES:
        ordered += sorted((d for d in found if isinstance(d, device_type.domain_types)), key=pyjoules_order)
    return ordered


def group_by_device(domains: Sequence[Domain]) -> Dict["type[Device]", List[Domain]]:
    """Domains grouped by device type, groups in order of first appearance (as pyJoules groups them)."""
    grouped: Dict["type[Device]", List[Domain]] = {}
    for domain in domains:
        grouped.setdefault(domain.get_device_type(), []).append(domain)
    return grouped


@dataclass(frozen=True)
class Selection:
    """What a decorator or context measures with one core meter.

    Attributes:
        meter: The core meter.
        domains: The measured domains, in output order (grouped by device as pyJoules orders them).
        missing: Requested domains the meter does not measure, with the reason for each.
        user_devices: The configured user-written devices among :attr:`domains`' device types.
    """

    meter: "CoreEnergyMeter"
    domains: tuple[Domain, ...]
    missing: tuple[tuple[Domain, str], ...] = ()
    user_devices: tuple[Device, ...] = ()

    def devices(self) -> List[Device]:
        """One configured device per device type of :attr:`domains` (user-written ones as configured already)."""
        built = {type(device): device for device in self.user_devices}
        devices: List[Device] = []
        for device_type, group in group_by_device(self.domains).items():
            if device_type in built:
                devices.append(built[device_type])
                continue
            device = device_type(meter=self.meter)
            device.configure(group)
            devices.append(device)
        return devices


def select_domains(domains: Optional[Sequence[Domain]], meter: "CoreEnergyMeter") -> Selection:
    """The domains of ``domains`` (all measurable ones when None) that ``meter`` measures, and the others."""
    if domains is None:
        return Selection(meter, tuple(all_available_domains(meter)))
    measured = {d.id for d in meter.domains}
    reasons: Dict[str, str] = {}
    user_devices: List[Device] = []
    for device_type, group in group_by_device(domains).items():
        if reads_core_meter(device_type):
            reasons.update((d.domain_id, why_not_measured(d, meter)) for d in group if d.domain_id not in measured)
            continue
        try:
            device = device_type()
            device.configure(group)
        except Exception as exc:  # noqa: BLE001 - a user's device must not stop the user's code
            reasons.update((d.domain_id, f"{device_type.__name__}: {type(exc).__name__}: {exc}") for d in group)
            continue
        user_devices.append(device)
    present = [d for d in domains if d.domain_id not in reasons]
    missing = tuple((d, reasons[d.domain_id]) for d in domains if d.domain_id in reasons)
    ordered = [d for group in group_by_device(present).values() for d in group]
    return Selection(meter, tuple(ordered), missing, tuple(user_devices))


class DeviceFactory:
    """Creates configured devices for a list of domains."""

    @staticmethod
    def create_devices(domains: Optional[Sequence[Domain]] = None, *, meter: "Optional[CoreEnergyMeter]" = None) -> List[Device]:
        """One device per device type, configured with its domains.

        Args:
            domains: Domains to measure; every measurable domain when None.
            meter: The core meter; the process-wide one when omitted.

        Returns:
            The devices, in order of their domains' first appearance; an empty list when
            ``domains`` is None and nothing can be measured here.

        Raises:
            NoSuchDeviceError: a requested domain's device (RAPL, the NVIDIA GPUs, ...) has
                no measurable domain here at all, as in pyJoules (the message says why).
            NoSuchDomainError: the device exists but not this domain (e.g. ``RaplPackageDomain(1)``
                on one socket; the message says why).
        """
        checked = check_domains(domains)
        if checked is None:
            return select_domains(None, meter if meter is not None else get_energy_meter()).devices()
        devices: List[Device] = []
        for device_type, group in group_by_device(checked).items():
            if not reads_core_meter(device_type):
                # A user-written device: constructed and configured as pyJoules does, its own errors raised.
                device = device_type()
            else:
                meter = meter if meter is not None else get_energy_meter()
                try:
                    device_type.available_domains(meter)
                except NoSuchDeviceError as exc:
                    raise NoSuchDeviceError(f"{exc}; asked for {group[0]}: {why_not_measured(group[0], meter)}") from None
                device = device_type(meter=meter)
            device.configure(group)
            devices.append(device)
        return devices
