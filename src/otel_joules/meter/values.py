"""The meter's values: a snapshot of cumulative joules, and the energy measured between two."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from otel_joules.meter.outages import Outage
from otel_joules.sensors.base import Method


class EnergySnapshot(NamedTuple):
    """Cumulative joules per domain at one instant.

    A named tuple rather than a dataclass: two are taken for every span, and tuple
    construction is several times cheaper.

    Attributes:
        monotonic_ns: ``time.monotonic_ns()`` when the counters were read.
        joules: Joules since the meter started, aligned with :attr:`EnergyMeter.domains`;
            None for a domain that has failed (it is then left out of measurements).
        stale: Positions in :attr:`joules` holding a device's last known value because its
            read did not finish within :data:`~otel_joules.meter.channels.DEVICE_READ_DEADLINE_S` (a stalled NVML).
        missing: Positions in :attr:`joules` that are None because the counter failed a read and
            is being retried (not yet dropped): measurements leave them out and say so.
        jumps: Per position, how many counter moves the power bound ruled out so far (not counted
            as energy); empty while there has been none. Two snapshots whose counts differ have a
            rejected jump between them.
        outage: Where the meter stands with ``otel-joules agent`` (:class:`Outage`); None for a meter
            without standby estimates.
    """

    monotonic_ns: int
    joules: tuple[float | None, ...]
    stale: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    jumps: tuple[int, ...] = ()
    outage: Outage | None = None


@dataclass(slots=True)
class EnergyMeasurement:
    """Energy spent between two snapshots.

    Attributes:
        duration_s: Seconds between the snapshots.
        joules_by_domain: Joules per measured domain (domains that failed in between are absent).
        total_joules: Sum over the domains that do not overlap (packages, dram, GPUs,
            estimates; psys only where no package exists; never core or uncore).
        watts: ``total_joules / duration_s`` (0.0 for a zero-length interval).
        source: ``measured``, ``estimate`` or ``mixed``; ``partial`` when a domain that adds to
            the total is in :attr:`missing_domains` (the total leaves it out).
        below_resolution: True when the interval is shorter than the update period of
            a counter it includes: the values are then quantised, not wrong.
        methods_by_domain: How each domain was obtained (counter, integrated power, estimate).
        stale_domains: Domains whose value at either end is a device's last known value, not a
            fresh read (the device did not answer within :data:`~otel_joules.meter.channels.DEVICE_READ_DEADLINE_S`): the
            span's figure for them is late, not lost; the energy shows up in later spans.
        missing_domains: Domains left out because their counter failed a read at either end and
            was being retried (absent from :attr:`joules_by_domain`).
        rejected_jump_domains: Domains whose counter jumped in between by more than its power
            bound allows: the jump is not in their joules.
        agent_domains: Domains in :attr:`joules_by_domain` read through ``otel-joules agent``.
        estimated_s: Seconds estimated because the agent was away for them (``source`` is then
            ``partial``: the rest is measured); 0.0 otherwise.
        domain_kinds: ``energy.domain_kinds``: the domains counted in the total with their kinds
            (:func:`~otel_joules.sensors.base.domain_kinds`); None where the measurement cannot say
            (constant-power simulated devices, a caller's own measurement).
        estimate_band: ``(low, high)`` joules of :attr:`total_joules` where an estimated domain is in it (measured
            domains as read, estimated ones at their model's band ends); None when nothing in it is estimated.
        estimate_source: The estimated domains' models (``energy.estimate.source``), with :attr:`estimate_band`.
        platform_domain: ``energy.platform.domain``: the whole-platform reading in :attr:`joules_by_domain` beside
            the components in the total (:attr:`EnergyMeter.platform_domain`); None where there is none.

    Not frozen: one is built for every span, and a frozen dataclass's ``__init__`` costs
    several times more. Treat it as read-only.
    """

    duration_s: float
    joules_by_domain: Mapping[str, float]
    total_joules: float
    watts: float
    source: str
    below_resolution: bool
    methods_by_domain: Mapping[str, Method] = field(default_factory=dict)
    stale_domains: tuple[str, ...] = ()
    missing_domains: tuple[str, ...] = ()
    rejected_jump_domains: tuple[str, ...] = ()
    agent_domains: tuple[str, ...] = ()
    domain_kinds: tuple[str, ...] | None = None
    estimated_s: float = 0.0
    estimate_band: tuple[float, float] | None = None
    estimate_source: str | None = None
    platform_domain: str | None = None
