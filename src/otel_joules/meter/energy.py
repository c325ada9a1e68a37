"""The one function that turns two snapshots into energy: :func:`energy_between`.

Spans (:class:`~otel_joules.tracing.attributes.MeterAttributes`), :meth:`EnergyMeter.measure
<otel_joules.meter.meter.EnergyMeter.measure>` and through it the metrics, the pyJoules layer and
CarbonTracker, all compute joules, totals, watts and flags here, so they cannot disagree. It works
on positions (the meter's domain order), planned once per meter (:class:`EnergyPlan`), so the span
path pays no lookups by domain id; :func:`spent_joules` sums selected positions (per-kind sums).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, NamedTuple, Sequence

from otel_joules.errors import ConfigurationError
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED, SOURCE_MIXED, SOURCE_PARTIAL
from otel_joules.sensors.base import Domain

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergySnapshot

_new_tuple = tuple.__new__


class Energy(NamedTuple):
    """Energy spent between two snapshots, by position in the meter's domains.

    A named tuple: one is built for every span.

    Attributes:
        duration_s: Seconds between the snapshots.
        joules: Joules per position; None for a domain without a value at either end (failed,
            missing, away) or not selected.
        total_joules: Sum over the selected domains that add to the host's total (``in_total``).
        watts: ``total_joules / duration_s`` (0.0 for a zero-length interval).
        source: ``measured``, ``estimate`` or ``mixed``; ``partial`` when a domain that adds to the
            total is in :attr:`missing`.
        below_resolution: The interval is shorter than the update period of a counter it includes.
        stale: Positions with a value whose either end is a device's last known value, by domain id.
        missing: Selected positions whose counter failed a read at either end and was being
            retried, by domain id.
        jumped: Selected positions whose counter jumped in between beyond its power bound, by domain id.
        estimated_s: Seconds of the interval estimated because ``otel-joules agent`` was away for them
            (``source`` is then ``partial``); 0.0 otherwise.
    """

    duration_s: float
    joules: tuple[float | None, ...]
    total_joules: float
    watts: float
    source: str
    below_resolution: bool
    stale: tuple[int, ...]
    missing: tuple[int, ...]
    jumped: tuple[int, ...]
    estimated_s: float = 0.0


class EnergyPlan:
    """What :func:`energy_between` needs of a meter's domains, unpacked once.

    Args:
        domains: The meter's domains, in snapshot order.
        standby: Positions of the standby estimates that stand in for the agent's domains while it is away.
    """

    __slots__ = ("domains", "rows", "by_id", "in_total", "_index", "standby", "agent", "estimate_bands", "estimate_source")

    def __init__(self, domains: Sequence[Domain], standby: Sequence[int] = ()) -> None:
        self.domains = tuple(domains)
        #: Positions of the standby estimates, and of the domains read through the agent.
        self.standby = tuple(standby)
        self.agent = tuple(i for i, d in enumerate(self.domains) if d.via_agent)
        #: (adds to the total, is a measurement, update period) per position.
        self.rows = tuple((d.in_total, d.method.is_measurement, d.update_period_s) for d in self.domains)
        #: Positions sorted by domain id: the order of the flags.
        self.by_id = tuple(i for i, _ in sorted(enumerate(self.domains), key=lambda x: x[1].id))
        self.in_total = tuple(d.in_total for d in self.domains)
        self._index = {d.id: i for i, d in enumerate(self.domains)}
        #: (position, low factor, high factor) of the estimated domains that add to the total (:func:`estimate_band`).
        self.estimate_bands = tuple(
            (i, d.estimate_band[0], d.estimate_band[1])
            for i, d in enumerate(self.domains)
            if d.in_total and not d.method.is_measurement
        )
        #: ``energy.estimate.source``: the estimated domains' models, sorted, or '' when none is estimated.
        self.estimate_source = " ".join(
            sorted({d.estimate_source for d in self.domains if not d.method.is_measurement and d.estimate_source})
        )

    def selection(self, domain_ids: Collection[str]) -> tuple[bool, ...]:
        """Per position, whether its domain is in ``domain_ids`` (for :func:`energy_between`'s ``selected``).

        Raises:
            ConfigurationError: ``domain_ids`` names a domain these domains do not include.
        """
        for domain_id in domain_ids:
            if domain_id not in self._index:
                known = ", ".join(self._index) or "none"
                raise ConfigurationError(f"domain {domain_id!r} is not measured here (measured: {known})")
        return tuple(d.id in domain_ids for d in self.domains)

    def positions(self, domain_ids: Collection[str]) -> tuple[int, ...]:
        """Positions of ``domain_ids`` (for :func:`spent_joules`)."""
        return tuple(i for i, keep in enumerate(self.selection(domain_ids)) if keep)


def energy_between(
    plan: EnergyPlan, start: EnergySnapshot, end: EnergySnapshot, selected: tuple[bool, ...] | None = None
) -> Energy:
    """Energy between two snapshots (:class:`~otel_joules.meter.meter.EnergySnapshot`) of one meter.

    Args:
        plan: The meter's plan (``EnergyMeter.plan``).
        start: The earlier snapshot.
        end: The later snapshot.
        selected: Per position, whether it counts (:meth:`EnergyPlan.selection`); None: all.
    """
    duration_s = max(0, end[0] - start[0]) / 1e9
    a_joules, b_joules = start[1], end[1]
    estimated_s = 0.0
    if plan.standby and len(start) > 5 and len(end) > 5 and start[5] is not None and end[5] is not None:
        a_joules, b_joules, estimated_s = _across_outages(plan, start[5], end[5], a_joules, b_joules)
    if selected is not None:
        a_joules = tuple(j if keep else None for j, keep in zip(a_joules, selected))
    joules: list[float | None] = []
    append = joules.append
    total = 0.0
    measured = estimated = False
    slowest_update_s = 0.0
    for (in_total, is_measurement, update_period_s), a, b in zip(plan.rows, a_joules, b_joules):
        if a is None or b is None:
            append(None)
            continue
        spent = b - a
        append(spent)
        if in_total:
            total += spent
            if is_measurement:
                measured = True
            else:
                estimated = True
        if update_period_s > slowest_update_s:
            slowest_update_s = update_period_s
    source = SOURCE_MIXED if measured and estimated else SOURCE_ESTIMATE if estimated else SOURCE_MEASURED
    if estimated_s and measured:
        source = SOURCE_PARTIAL  # measured while the agent was there, estimated for the rest
    stale: tuple[int, ...] = ()
    if start[2] or end[2]:
        flagged = {*start[2], *end[2]}
        stale = tuple(i for i in plan.by_id if i in flagged and joules[i] is not None)
    missing: tuple[int, ...] = ()
    if start[3] or end[3]:
        flagged = {*start[3], *end[3]}
        missing = tuple(i for i in plan.by_id if i in flagged and (selected is None or selected[i]))
        in_total_of = plan.in_total
        if any(in_total_of[i] for i in missing):
            source = SOURCE_PARTIAL
    jumped: tuple[int, ...] = ()
    if start[4] != end[4]:
        before, after = start[4], end[4]
        jumped = tuple(
            i
            for i in plan.by_id
            if (before[i] if before else 0) != (after[i] if after else 0) and (selected is None or selected[i])
        )
    return _new_tuple(
        Energy,
        (
            duration_s,
            tuple(joules),
            total,
            total / duration_s if duration_s > 0 else 0.0,
            source,
            duration_s < slowest_update_s,
            stale,
            missing,
            jumped,
            estimated_s if measured else 0.0,
        ),
    )


def _across_outages(plan: EnergyPlan, a_outage, b_outage, a_joules, b_joules):  # type: ignore[no-untyped-def]
    """The ends' joules as an interval across the agent's outages counts them; and the seconds estimated.

    Both ends with the agent there: measured (a gap between them was bridged by its counters), the
    standby estimates left out. Both away: the estimates alone. A loss in between: measured up to
    the loss (the agent's domains hold their last measurement), estimated after it. A return in
    between: estimated up to the return, measured from the joules at the return on.
    """
    if not a_outage[0] and not b_outage[0]:
        return _without(a_joules, plan.standby), b_joules, 0.0
    if a_outage[0] and b_outage[0]:
        return _without(a_joules, plan.agent), b_joules, 0.0
    estimated_s = max(0.0, b_outage[1] - a_outage[1])
    if a_outage[0]:
        returned = b_outage[2]
        a_joules = tuple(returned[i] if i in plan.agent else j for i, j in enumerate(a_joules))
    return a_joules, b_joules, estimated_s


def _without(joules: tuple[float | None, ...], positions: tuple[int, ...]) -> tuple[float | None, ...]:
    if not positions:
        return joules
    return tuple(None if i in positions else j for i, j in enumerate(joules))


def spent_joules(positions: Sequence[int], start: EnergySnapshot, end: EnergySnapshot) -> float:
    """Joules the domains at ``positions`` spent between two snapshots (those without a value at either end left
    out): :func:`energy_between`'s per-position joules summed, without building an :class:`Energy`, for the
    attribution's per-kind caps on every span's end."""
    a_joules, b_joules = start[1], end[1]
    spent = 0.0
    for i in positions:
        a, b = a_joules[i], b_joules[i]
        if a is not None and b is not None:
            spent += b - a
    return spent


def estimate_band(plan: EnergyPlan, joules: Sequence[float | None], total_joules: float) -> tuple[float, float] | None:
    """``(low, high)`` of ``total_joules`` (an :class:`Energy`'s, with its per-position ``joules``): the measured
    domains as read, each estimated one at the ends of its model's band; None when no estimated domain has a value."""
    low = high = total_joules
    found = False
    for i, low_factor, high_factor in plan.estimate_bands:
        spent = joules[i]
        if spent is None:
            continue
        found = True
        low += spent * (low_factor - 1.0)
        high += spent * (high_factor - 1.0)
    return (low, high) if found else None
