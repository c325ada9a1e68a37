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


class EnergyPlan:
    """What :func:`energy_between` needs of a meter's domains, unpacked once.

    Args:
        domains: The meter's domains, in snapshot order.
    """

    __slots__ = ("domains", "rows", "by_id", "in_total", "_index")

    def __init__(self, domains: Sequence[Domain]) -> None:
        self.domains = tuple(domains)
        #: (adds to the total, is a measurement, update period) per position.
        self.rows = tuple((d.in_total, d.method.is_measurement, d.update_period_s) for d in self.domains)
        #: Positions sorted by domain id: the order of the flags.
        self.by_id = tuple(i for i, _ in sorted(enumerate(self.domains), key=lambda x: x[1].id))
        self.in_total = tuple(d.in_total for d in self.domains)
        self._index = {d.id: i for i, d in enumerate(self.domains)}

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
        ),
    )


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
