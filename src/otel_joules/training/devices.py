"""Which devices a training run measures: the meter's domains grouped into components (``gpu``, ``cpu``).

A training run names components, not domains: ``gpu`` is every GPU, ``cpu`` every other
domain that adds to the total (packages, DRAM, estimates). :class:`DeviceSelection` picks
those of a meter, plus simulated devices (constant power, carbontracker's ``sim_*``), and
measures an interval restricted to them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence

from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.semconv import KIND_CPU, KIND_GPU, KIND_MEMORY
from otel_joules.sensors.base import Domain, Method, domain_kinds

#: The component names, in the order carbontracker lists them.
COMPONENT_NAMES = ("gpu", "cpu")


@dataclass(frozen=True)
class SimulatedDevice:
    """A simulated device: constant power, not a measurement.

    Attributes:
        domain_id: Its domain on the spans (``sim_cpu``, ``sim_gpu``).
        component: ``cpu`` or ``gpu``.
        name: The name shown as its device.
        watts: Its constant power.
    """

    domain_id: str
    component: str
    name: str
    watts: float

    @property
    def domain(self) -> Domain:
        """The device as a domain: its component's kind, an estimate, added to the total."""
        kind = KIND_GPU if self.component == "gpu" else KIND_CPU
        return Domain(self.domain_id, kind, self.name, self.domain_id, method=Method.ESTIMATE)


def device_name(domain: Domain) -> str:
    """The device name carbontracker would print for a domain (``cpu:0``, ``dram:0``, the GPU's name)."""
    if domain.kind == KIND_GPU:
        return domain.hw_name
    if domain.method is Method.ESTIMATE:
        return "dram (estimate)" if domain.kind == KIND_MEMORY else "cpu (estimate)"
    prefix, _, number = domain.id.rpartition("_")
    if prefix == "package" and number.isdigit():
        return f"cpu:{number}"
    if prefix == "dram" and number.isdigit():
        return f"dram:{number}"
    return domain.id


@dataclass(frozen=True)
class DeviceSelection:
    """The domains and simulated devices of the chosen components.

    Attributes:
        components: The chosen component names, in :data:`COMPONENT_NAMES` order.
        domains: The meter's domains measured (core/uncore included as detail, not added).
        simulated: Simulated devices, added to every measurement at constant power.
        component_by_domain_id: Component of each domain that adds to it, simulated ones included.
        devices: Component -> its device names, for the components that have any.
    """

    components: tuple[str, ...]
    domains: tuple[Domain, ...]
    simulated: tuple[SimulatedDevice, ...]
    component_by_domain_id: Mapping[str, str]
    devices: Mapping[str, tuple[str, ...]]

    @classmethod
    def select(
        cls, meter: EnergyMeter, components: Sequence[str], simulated: Sequence[SimulatedDevice] = ()
    ) -> "DeviceSelection":
        """The meter's domains of ``components``; a component simulated is not measured."""
        sims = tuple(sim for sim in simulated if sim.component in components)
        measured = tuple(name for name in components if name not in {sim.component for sim in sims})
        selected: list[Domain] = []
        by_domain: dict[str, str] = {}
        for domain in meter.domains:
            # carbontracker's two components: gpu is the GPUs, cpu every other kind (package, dram, estimates).
            component = "gpu" if domain.kind == KIND_GPU else "cpu"
            if component not in measured:
                continue
            selected.append(domain)
            # core/uncore sit inside their package and psys beside one covers the platform: they stay on
            # the spans as detail; adding them would count energy twice.
            if domain.in_total:
                by_domain[domain.id] = component
        by_domain.update({sim.domain_id: sim.component for sim in sims})
        devices: dict[str, tuple[str, ...]] = {}
        for name in components:
            names = [sim.name for sim in sims if sim.component == name]
            names += [device_name(d) for d in selected if by_domain.get(d.id) == name]
            if names:
                devices[name] = tuple(names)
        return cls(tuple(components), tuple(selected), sims, by_domain, devices)

    @property
    def missing(self) -> tuple[str, ...]:
        """Chosen components with no device here."""
        return tuple(name for name in self.components if name not in self.devices)

    @property
    def domain_ids(self) -> frozenset[str]:
        """Ids of the measured domains."""
        return frozenset(d.id for d in self.domains)

    @property
    def constant_watts(self) -> dict[str, float]:
        """What the meter adds to every measurement for the simulated devices."""
        return {sim.domain_id: sim.watts for sim in self.simulated}

    def estimated_domain_ids(self) -> list[str]:
        """The chosen domains that are estimates (no counter) or simulated: never to be called measured."""
        return [d.id for d in self.domains if d.method is Method.ESTIMATE] + [sim.domain_id for sim in self.simulated]

    def measured_domain_ids(self) -> list[str]:
        """Domains read from hardware counters (or integrated from measured power)."""
        return [d.id for d in self.domains if d.method.is_measurement]

    def has_estimates(self) -> bool:
        """Some measured domain is an estimate (CPU time x per-CPU watts, memory size x W/GB)."""
        return any(d.method is Method.ESTIMATE for d in self.domains)

    @property
    def domain_kinds(self) -> tuple[str, ...]:
        """``energy.domain_kinds`` of this selection's measurements: the chosen domains and simulated devices
        that add to the total, each with its kind."""
        return domain_kinds((*self.domains, *(sim.domain for sim in self.simulated)))

    def measure(self, meter: EnergyMeter, start: EnergySnapshot, end: EnergySnapshot) -> EnergyMeasurement:
        """The meter's measurement restricted to these domains, plus the simulated devices."""
        measurement = meter.measure(start, end, self.domain_ids, constant_watts=self.constant_watts)
        if self.simulated:
            # The meter knows no kind for a constant-power device (it has no Domain there); this selection
            # does, so the spans carry every domain's kind and no reader has to guess one from an id.
            measurement = dataclasses.replace(measurement, domain_kinds=self.domain_kinds)
        return measurement

    def power_watts_by_component(self, measurement: EnergyMeasurement) -> dict[str, float | None]:
        """Average power of each component with devices (sum over them); None for a zero-length interval."""
        power: dict[str, float | None] = {}
        for name in self.devices:
            joules = sum(
                value
                for domain_id, value in measurement.joules_by_domain.items()
                if self.component_by_domain_id.get(domain_id) == name
            )
            power[name] = joules / measurement.duration_s if measurement.duration_s > 0 else None
        return power
