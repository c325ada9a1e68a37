"""Which metric family each domain's readings go to, so that every plain sum counts each joule once.

A host's domains overlap: RAPL's core and uncore zones lie inside their package, psys covers the
whole platform, packages included. The OpenTelemetry hardware conventions sum ``hw.energy`` by
``hw.type`` and take a host's total from ``hw.host.energy``; estimates must never be added to
measurements. Each domain therefore goes to exactly one family, fixed for the whole run:

``component``  measured, top-level, not the platform (packages, DRAM, GPUs): ``hw.energy``/``hw.power``
``host``       the first measured whole-platform meter (psys): ``hw.host.energy``/``hw.host.power``
``nested``     measured, inside another's energy (core, uncore; a second platform meter): ``energy.nested``
``estimate``   modelled (CPU time x per-CPU watts, memory size x W/GB): ``energy.estimate``
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

from otel_joules.sensors.base import Domain
from otel_joules.semconv import (
    ENERGY_DOMAIN,
    ENERGY_ESTIMATE_SOURCE,
    ENERGY_METHOD,
    ENERGY_SOURCE,
    HW_ID,
    HW_NAME,
    HW_PARENT,
    HW_TYPE,
    HW_VENDOR,
    KIND_PLATFORM,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
)


class Family(enum.Enum):
    """The metric family a domain's readings are published under (never a name a backend sees)."""

    COMPONENT = enum.auto()
    HOST = enum.auto()
    NESTED = enum.auto()
    ESTIMATE = enum.auto()


@dataclass(frozen=True)
class DomainSeries:
    """One domain's place in the metrics: its position in the meter's snapshots, family and fixed attributes."""

    index: int
    domain: Domain
    family: Family
    attributes: dict[str, str]


def families(domains: Sequence[Domain]) -> list[Family]:
    """The family of each domain, aligned with ``domains``: one whole-platform meter is the host's, the rest nest."""
    out: list[Family] = []
    host_taken = False
    for domain in domains:
        if not domain.method.is_measurement:
            out.append(Family.ESTIMATE)
        elif domain.kind == KIND_PLATFORM and not host_taken:
            host_taken = True
            out.append(Family.HOST)
        elif domain.kind == KIND_PLATFORM or not domain.in_total:
            # Not in the total: inside another domain (core, uncore); DRAM is a sub-zone
            # in the powercap tree (hw.parent) but not inside the package's energy.
            out.append(Family.NESTED)
        else:
            out.append(Family.COMPONENT)
    return out


def domain_series(domains: Sequence[Domain], host_id: str) -> list[DomainSeries]:
    """Every domain with its family and the attributes of its series (constant for the run)."""
    return [
        DomainSeries(i, domain, family, _attributes(domain, family, host_id))
        for i, (domain, family) in enumerate(zip(domains, families(domains)))
    ]


def _attributes(domain: Domain, family: Family, host_id: str) -> dict[str, str]:
    """A series' attributes: the device, how it is obtained, and the domain id that spans use."""
    if family is Family.HOST:
        # hw.host.*: the host is the device; energy.domain says which meter reads it.
        return {
            HW_ID: host_id,
            HW_NAME: host_id,
            ENERGY_SOURCE: SOURCE_MEASURED,
            ENERGY_METHOD: domain.method.value,
            ENERGY_DOMAIN: domain.id,
        }
    attributes = device_attributes(domain)
    if family is Family.NESTED and domain.kind == KIND_PLATFORM:
        attributes[HW_PARENT] = host_id  # a second platform meter lies inside the host's
    return attributes


def device_attributes(domain: Domain) -> dict[str, str]:
    """A domain's attributes as a device: ``hw.*``, whether it is measured and how, its domain id."""
    attributes = {
        HW_ID: domain.hw_id,
        HW_TYPE: domain.hw_type.value,
        HW_NAME: domain.hw_name,
        ENERGY_SOURCE: SOURCE_MEASURED if domain.method.is_measurement else SOURCE_ESTIMATE,
        # counter, power_integration or estimate: a GPU without an energy counter
        # is measured, but by integrating its power sensor, and says so here.
        ENERGY_METHOD: domain.method.value,
        ENERGY_DOMAIN: domain.id,
    }
    if domain.hw_parent:
        attributes[HW_PARENT] = domain.hw_parent
    if domain.estimate_source:
        attributes[ENERGY_ESTIMATE_SOURCE] = domain.estimate_source
    if domain.vendor:
        attributes[HW_VENDOR] = domain.vendor
    return attributes


def missing_attributes(series: DomainSeries) -> dict[str, str]:
    """``energy.missing``'s attributes for a domain: which device, of which type, under which domain id."""
    domain = series.domain
    return {HW_ID: domain.hw_id, HW_TYPE: domain.hw_type.value, ENERGY_DOMAIN: domain.id}
