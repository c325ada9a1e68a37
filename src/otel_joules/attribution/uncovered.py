"""The host's energy that no component counter covers, where a whole-platform reading shows it.

A whole-platform reading (an ACPI power meter, a BMC, RAPL's psys) read beside component counters (CPU
packages, DRAM, GPUs) is left out of ``energy.joules`` (:mod:`otel_joules.sensors.overlap`): the
components count. What the platform spent beyond them (fans, disks, NICs, the board, the supplies'
losses) is the *uncovered* energy. The price history adds it, period by period, to the CPU-side kind's
energy and to its static part, so each policy shares it as it shares static energy: ``busy`` gives it to
the busy CPU time, ``capacity`` over busy + idle CPU time (idle capacity's part is ``energy.unattributed``),
``dynamic`` to nobody. The shares and the unattributed remainder then add up to the platform's reading.
"""

from __future__ import annotations

from typing import Collection, Sequence

from otel_joules.semconv import KIND_PLATFORM
from otel_joules.sensors.base import Domain


def uncovered_positions(domains: Sequence[Domain], standby: Collection[str] = ()) -> tuple[int, tuple[int, ...]] | None:
    """(the platform reading's position, the positions of the domains adding to the total) where a measured
    whole-platform reading is read beside them and left out of the total; None otherwise.

    ``standby``: the meter's standby estimates (``EnergyMeter.standby_domain_ids``), which are not components:
    they have values only while the agent is away, and then its domains (the BMC's platform reading with them)
    are frozen, so nothing is uncovered; counted as components, their missing values would leave nothing
    uncovered ever.

    The first such reading is the broadest (the meter orders them: :func:`~otel_joules.sensors.overlap.settle_platforms`).
    A platform reading that itself adds to the total (nothing else is measured) leaves nothing uncovered.
    """
    components = tuple(i for i, d in enumerate(domains) if d.in_total and d.id not in standby)
    if not components:
        return None
    for i, domain in enumerate(domains):
        if domain.kind == KIND_PLATFORM and not domain.in_total and domain.method.is_measurement:
            return i, components
    return None


def uncovered_joules(positions: tuple[int, tuple[int, ...]], joules: Sequence[float | None]) -> float:
    """The platform's joules beyond the components' in one interval (``joules`` per meter position), never
    negative; 0 where the platform or a component has no value in it (a part unread is not uncovered)."""
    platform, components = positions
    spent = joules[platform]
    if spent is None:
        return 0.0
    for i in components:
        part = joules[i]
        if part is None:
            return 0.0
        spent -= part
    return max(spent, 0.0)


class UncoveredEnergy:
    """Period by period, the platform's energy beyond the components', never negative and never counted twice.

    A platform reading lags its components (a power reading averaged over a second, a BMC polled every few):
    a period where it reads less than they do is *owed*, and later periods' excess pays that back before any
    of it is uncovered. So the sum over periods is the platform's energy minus the components' (where that is
    positive), as ``energy.uncovered`` counts it, and no period is given a negative share.

    Args:
        positions: :func:`uncovered_positions`' answer.
    """

    def __init__(self, positions: tuple[int, tuple[int, ...]]) -> None:
        self.positions = positions
        #: Joules by which earlier periods' platform reading fell short of their components'.
        self._owed_j = 0.0

    def take(self, joules: Sequence[float | None]) -> float:
        """The uncovered joules of the next period (``joules`` per meter position)."""
        platform, components = self.positions
        spent = joules[platform]
        if spent is None or any(joules[i] is None for i in components):
            return 0.0  # a part unread: nothing known of this period's gap
        excess = spent - sum(joules[i] for i in components)  # type: ignore[misc]
        excess -= self._owed_j
        if excess < 0.0:
            self._owed_j = -excess
            return 0.0
        self._owed_j = 0.0
        return excess
