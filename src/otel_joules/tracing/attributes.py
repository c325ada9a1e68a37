"""Span attributes from an interval and a share: the values; the names are in :mod:`otel_joules.semconv`.

:func:`span_attributes` is the one builder of a span's energy attributes, from the meter's
:class:`~otel_joules.meter.interval.Interval` and the span's share. Between two snapshots it takes
the meter's plan (:class:`MeterAttributes`, built once per meter; compiled where the meter's fast
path is on); for a caller's own measurement, ``_measurement_part``; for the share, ``_share_part``:
the pieces it puts together, private to it.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

from otel_joules.attribution.shares import SpanAttribution, measured_kinds
from otel_joules.meter.energy import EnergyPlan, energy_between
from otel_joules.meter.interval import Interval, has_energy
from otel_joules.meter.fastpath import COMPILED
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.semconv import (
    ATTRIBUTED_KIND_KEYS,
    ENERGY_ATTRIBUTED_CPU_JOULES,
    ENERGY_ATTRIBUTED_DYNAMIC_JOULES,
    ENERGY_ATTRIBUTED_DYNAMIC_SELF_JOULES,
    ENERGY_ATTRIBUTED_GPU_JOULES,
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_MEMORY_JOULES,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_AGENT_DOMAINS,
    ENERGY_ATTRIBUTION,
    ENERGY_BASELINE,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CLOCK_STEP_S,
    ENERGY_DOMAIN_KINDS,
    ENERGY_ESTIMATED_S,
    ENERGY_ESTIMATE_HIGH_JOULES,
    ENERGY_ESTIMATE_LOW_JOULES,
    ENERGY_ESTIMATE_SOURCE,
    ENERGY_JOULES,
    ENERGY_PLATFORM_DOMAIN,
    ENERGY_SOURCE,
    ENERGY_UNAVAILABLE_REASON,
    ENERGY_WATTS,
    KIND_CPU,
    SOURCE_ESTIMATE,
    SOURCE_MEASURED,
    SOURCE_MIXED,
    KIND_GPU,
    KIND_MEMORY,
    domain_joules_key,
    domain_method_key,
    domain_missing_key,
    domain_rejected_jump_key,
    domain_stale_key,
)
from otel_joules.sensors.base import Domain, Method

#: ``hw.type`` values with an ``energy.attributed.<kind>.joules`` attribute.
ATTRIBUTED_KINDS = tuple(ATTRIBUTED_KIND_KEYS)


def attributed_kind_key(kind: str) -> str:
    """``energy.attributed.<kind>.joules`` for ``cpu``, ``memory`` or ``gpu``."""
    return ATTRIBUTED_KIND_KEYS[kind]


#: ``(energy.<domain>.joules, energy.<domain>.method)`` by domain id, filled on first use.
_domain_keys: dict[str, tuple[str, str]] = {}


def _domain_key_pair(domain_id: str) -> tuple[str, str]:
    pair = _domain_keys[domain_id] = (domain_joules_key(domain_id), domain_method_key(domain_id))
    return pair


def span_attributes(interval: Interval, share: SpanAttribution | None) -> dict[str, Any] | None:
    """A span's energy attributes: the interval's figures (or ``energy.unavailable_reason``), its share's
    (``energy.attributed.*``, per kind for the kinds the meter measures) and ``energy.clock_step_s``; None
    when there is none. The one builder of span attribute dicts."""
    # One unpacking: this runs for every span.
    meter, _, _, start, end, given, unavailable_reason, clock_step_ns, _, _ = interval
    attributes: dict[str, Any] | None
    if given is None and end is not None and start is not None:
        # The span path's common case: straight from the two snapshots, planned once per meter.
        plan = _plans.get(meter.plan) or _plan_for(meter)
        direct = plan.direct
        # Compiled, without the plan's frame; the plan's method for the rest (NotImplemented: a case the C code leaves
        # to the reference, such as a stale or missing domain).
        if direct is None or (attributes := direct(start, end, share)) is NotImplemented:
            attributes = plan.span_attributes(start, end, share)
    else:
        attributes = {}
        if given is not None:
            if has_energy(given):
                attributes = _measurement_part(given)
        elif unavailable_reason is not None:
            attributes[ENERGY_UNAVAILABLE_REASON] = unavailable_reason
        if share is not None:
            kinds = () if meter is None else (_plans.get(meter.plan) or _plan_for(meter)).kinds
            _share_part(share, kinds, attributes)
    if clock_step_ns:
        attributes = {} if attributes is None else attributes
        attributes[ENERGY_CLOCK_STEP_S] = clock_step_ns / 1e9
    return attributes or None


#: Each meter's planned attributes (:class:`MeterAttributes`), by the meter's own plan (``EnergyMeter.plan``, one
#: per meter, hashed by identity: an attribute load, no call, per span); dropped when the meter is.
_plans: dict[EnergyPlan, "MeterAttributes"] = {}


def _items_with(domain: Domain, platform_domain: str | None) -> tuple[tuple[str, str], ...]:
    """The (key, value) attributes a span carries with ``domain``'s joules: its method but for a counter's, and
    ``energy.platform.domain`` where it is the platform reading the meter names."""
    items = () if domain.method is Method.COUNTER else ((domain_method_key(domain.id), domain.method.value),)
    return (items + ((ENERGY_PLATFORM_DOMAIN, domain.id),)) if domain.id == platform_domain else items


def _plan_for(meter: EnergyMeter) -> "MeterAttributes":
    plan = _plans[meter.plan] = MeterAttributes(meter, measured_kinds(meter.domains))
    weakref.finalize(meter, _plans.pop, meter.plan, None)
    return plan


def _measurement_part(measurement: EnergyMeasurement) -> dict[str, float | str | bool | tuple[str, ...]]:
    """The energy part of :func:`span_attributes` for a caller's own measurement (its per-domain joules, total,
    watts, source and flags)."""
    attributes: dict[str, float | str | bool] = {
        ENERGY_JOULES: measurement.total_joules,
        ENERGY_WATTS: measurement.watts,
        ENERGY_SOURCE: measurement.source,
    }
    if measurement.domain_kinds is not None:
        attributes[ENERGY_DOMAIN_KINDS] = measurement.domain_kinds
    if measurement.platform_domain is not None:
        attributes[ENERGY_PLATFORM_DOMAIN] = measurement.platform_domain
    methods = measurement.methods_by_domain
    keys = _domain_keys
    for domain_id, joules in measurement.joules_by_domain.items():
        # A plain dict lookup: this runs for every domain of every span.
        pair = keys.get(domain_id) or _domain_key_pair(domain_id)
        attributes[pair[0]] = joules
        method = methods[domain_id]
        if method is not Method.COUNTER:
            attributes[pair[1]] = method.value
    if measurement.below_resolution:
        attributes[ENERGY_BELOW_RESOLUTION] = True
    for domain_id in measurement.stale_domains:
        attributes[domain_stale_key(domain_id)] = True
    for domain_id in measurement.missing_domains:
        attributes[domain_missing_key(domain_id)] = True
    for domain_id in measurement.rejected_jump_domains:
        attributes[domain_rejected_jump_key(domain_id)] = True
    if measurement.agent_domains:
        attributes[ENERGY_AGENT_DOMAINS] = measurement.agent_domains
    if measurement.estimated_s:
        attributes[ENERGY_ESTIMATED_S] = measurement.estimated_s
    if measurement.estimate_band is not None:
        attributes[ENERGY_ESTIMATE_LOW_JOULES], attributes[ENERGY_ESTIMATE_HIGH_JOULES] = measurement.estimate_band
        if measurement.estimate_source:
            attributes[ENERGY_ESTIMATE_SOURCE] = measurement.estimate_source
    return attributes


def _share_part(
    attribution: SpanAttribution, kinds: tuple[str, ...], into: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The share part of :func:`span_attributes` (added to ``into`` when given); per-kind values only
    for the kinds the meter measures."""
    attributes: dict[str, Any] = {} if into is None else into
    attributes[ENERGY_ATTRIBUTED_JOULES] = attribution.cpu_joules + attribution.memory_joules + attribution.gpu_joules
    attributes[ENERGY_ATTRIBUTED_SELF_JOULES] = attribution.self_joules
    attributes[ENERGY_ATTRIBUTED_DYNAMIC_JOULES] = attribution.dynamic_joules
    attributes[ENERGY_ATTRIBUTED_DYNAMIC_SELF_JOULES] = attribution.dynamic_self_joules
    attributes[ENERGY_ATTRIBUTION] = attribution.attribution
    attributes[ENERGY_BASELINE] = attribution.baseline
    if KIND_CPU in kinds:
        attributes[ENERGY_ATTRIBUTED_CPU_JOULES] = attribution.cpu_joules
    if KIND_MEMORY in kinds:
        attributes[ENERGY_ATTRIBUTED_MEMORY_JOULES] = attribution.memory_joules
    if KIND_GPU in kinds:
        attributes[ENERGY_ATTRIBUTED_GPU_JOULES] = attribution.gpu_joules
    return attributes


class MeterAttributes:
    """:func:`span_attributes`' route between two of a meter's snapshots, planned once per meter.

    ``span_attributes(start, end, share)`` equals the route through a measurement,
    ``span_attributes(Interval.of_measurement(meter.measure(start, end), meter), share)`` (same keys, same
    order, same floats), without the measurement's two dicts and object and without computing each domain's
    keys and method per span: the span processor's path for every span that needs no
    :class:`EnergyMeasurement` (no hook, no explicit times); compiled where the meter's fast path is on
    (:mod:`otel_joules.meter.fastpath`).

    Args:
        meter: The meter whose snapshots are given; its domains are fixed once it is built.
        kinds: The attribution kinds the meter measures (``Attributor.kinds``).
    """

    __slots__ = (
        "_plan", "_rows", "_stale_keys", "_missing_keys", "_jump_keys", "_kind_positions", "_agent_positions",
        "domain_kinds", "_compiled", "_spec", "_band_keys", "kinds", "direct",
    )

    def __init__(self, meter: EnergyMeter, kinds: tuple[str, ...] = ()) -> None:
        self._plan = meter.plan
        #: The attribution kinds whose ``energy.attributed.<kind>.joules`` a share gets.
        self.kinds = kinds
        #: (energy.<domain>.joules, the (key, value) items set with it) per position: its energy.<domain>.method but
        #: for a counter, and energy.platform.domain on the platform reading the meter names (EnergyMeter.platform_domain).
        self._rows = tuple((domain_joules_key(d.id), _items_with(d, meter.platform_domain)) for d in meter.domains)
        self._stale_keys = tuple(domain_stale_key(d.id) for d in meter.domains)
        self._missing_keys = tuple(domain_missing_key(d.id) for d in meter.domains)
        self._jump_keys = tuple(domain_rejected_jump_key(d.id) for d in meter.domains)
        #: (position, id) of the domains read through the agent, by id (``energy.agent.domains``).
        self._agent_positions = tuple(
            (i, d.id) for i, d in sorted(enumerate(meter.domains), key=lambda x: x[1].id) if d.via_agent
        )
        #: ``energy.domain_kinds``, the meter's tuple: one dict entry per span, nothing built.
        self.domain_kinds = meter.domain_kinds
        #: (attribute key, position in SpanAttribution) for each kind measured, in _share_part's order.
        self._kind_positions = tuple(
            (ATTRIBUTED_KIND_KEYS[kind], position)
            for position, kind in enumerate((KIND_CPU, KIND_MEMORY, KIND_GPU))
            if kind in kinds
        )
        #: (energy.<domain>.joules, low factor, high factor) of the estimated domains in the total: the band is added
        #: from the attributes either path wrote, so the compiled path needs no change for it.
        self._band_keys = tuple((self._rows[i][0], low, high) for i, low, high in self._plan.estimate_bands)
        #: The compiled span_attributes and what it needs of this plan, unpacked once; None: the reference here.
        self._compiled = COMPILED.span_attributes if meter.fast_path else None  # type: ignore[union-attr]
        self._spec = (
            self._plan.rows,
            tuple(key for key, _ in self._rows),
            tuple(items for _, items in self._rows),
            self.domain_kinds,
            self._kind_positions,
            (SOURCE_MEASURED, SOURCE_ESTIMATE, SOURCE_MIXED),
            (
                ENERGY_JOULES, ENERGY_WATTS, ENERGY_SOURCE, ENERGY_DOMAIN_KINDS, ENERGY_BELOW_RESOLUTION,
                ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_ATTRIBUTED_DYNAMIC_JOULES,
                ENERGY_ATTRIBUTED_DYNAMIC_SELF_JOULES, ENERGY_ATTRIBUTION, ENERGY_BASELINE,
            ),
            (self._plan.standby, self._agent_positions, ENERGY_AGENT_DOMAINS),
        )
        #: The compiled function bound to this plan, for :func:`span_attributes` to call without this object's
        #: frame: None where the reference runs, or an estimate's band may be added (:meth:`span_attributes`). The
        #: standby estimates' band never is: the compiled function answers only while the agent is there, when
        #: they are left out.
        standby = set(self._plan.standby)
        banded = any(i not in standby for i, _, _ in self._plan.estimate_bands)
        self.direct = partial(self._compiled, self._spec) if self._compiled is not None and not banded else None

    def span_attributes(self, start: EnergySnapshot, end: EnergySnapshot, attribution: SpanAttribution | None) -> dict[str, Any] | None:
        """The energy between the two snapshots, with the share's attributes when one is given (a dict of the
        share alone where the snapshots give none); None when neither gives an attribute."""
        compiled = self._compiled
        attributes = NotImplemented if compiled is None else compiled(self._spec, start, end, attribution)
        if attributes is NotImplemented:
            attributes = self._measured(start, end)
            if attribution is not None:
                attributes = _share_part(attribution, self.kinds, {} if attributes is None else attributes)
        if self._band_keys and attributes is not None:
            self._add_band(attributes)
        return attributes  # type: ignore[no-any-return]

    def _add_band(self, attributes: dict[str, Any]) -> None:
        """``energy.estimate.low/high.joules`` and ``energy.estimate.source`` from the estimated domains' joules."""
        total = attributes.get(ENERGY_JOULES)
        if total is None:
            return
        low = high = total
        found = False
        for key, low_factor, high_factor in self._band_keys:
            spent = attributes.get(key)
            if spent is None:
                continue
            found = True
            low += spent * (low_factor - 1.0)
            high += spent * (high_factor - 1.0)
        if found:
            attributes[ENERGY_ESTIMATE_LOW_JOULES] = low
            attributes[ENERGY_ESTIMATE_HIGH_JOULES] = high
            if self._plan.estimate_source:
                attributes[ENERGY_ESTIMATE_SOURCE] = self._plan.estimate_source

    def _measured(self, start: EnergySnapshot, end: EnergySnapshot) -> dict[str, Any] | None:
        """:meth:`attributes` without the estimate's band (added last, after a share where there is one)."""
        energy = energy_between(self._plan, start, end)
        attributes: dict[str, Any] = {
            ENERGY_JOULES: energy[2],
            ENERGY_WATTS: energy[3],
            ENERGY_SOURCE: energy[4],
            ENERGY_DOMAIN_KINDS: self.domain_kinds,
        }
        present = False
        for (key, items), joules in zip(self._rows, energy[1]):
            if joules is None:
                continue
            present = True
            attributes[key] = joules
            for item_key, value in items:
                attributes[item_key] = value
        stale, missing, jumped = energy[6], energy[7], energy[8]
        if not present and not missing:
            return None
        if energy[5]:
            attributes[ENERGY_BELOW_RESOLUTION] = True
        for i in stale:
            attributes[self._stale_keys[i]] = True
        for i in missing:
            attributes[self._missing_keys[i]] = True
        for i in jumped:
            attributes[self._jump_keys[i]] = True
        if self._agent_positions:
            joules_at_position = energy[1]
            through_agent = tuple(domain_id for i, domain_id in self._agent_positions if joules_at_position[i] is not None)
            if through_agent:
                attributes[ENERGY_AGENT_DOMAINS] = through_agent
            if energy[9]:
                attributes[ENERGY_ESTIMATED_S] = energy[9]
        return attributes
