"""A measured interval: :func:`open_interval` at its start, :func:`close_interval` at its end, one :class:`Interval`.

The meter owns an interval's time. Both ends are read on the monotonic clock (every figure comes from
snapshots on it); the wall clock (``time.time_ns()``, what the OpenTelemetry SDK stamps spans with) is
read beside each end, only to tell a stated time from now and to convert it:

- A stated wall time within :data:`EXPLICIT_TIME_TOLERANCE_NS` of the wall clock when the end is read
  is that end; one further away is explicit, converted to the monotonic clock with the wall clock's
  offset then, and measured between the meter's sampled snapshots interpolated at it
  (:class:`~otel_joules.meter.history.SnapshotHistory`); older than that history, later than now, or
  an end before the start: no energy, and :attr:`Interval.unavailable_reason` says why. A start up to
  :data:`START_LAG_TOLERANCE_NS` before the opening that the history does not hold (stamped, then opened late;
  a meter that samples nothing) is measured from the opening.
- A wall-clock step (``date -s``, NTP, a VM resume) changes no interval's energy: the offsets read at
  the two ends differ by it, :attr:`Interval.clock_step_ns`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Mapping, NamedTuple

from otel_joules.meter.clock import STEP_TOLERANCE_NS, WALL_CLOCK
from otel_joules.meter.energy import Energy, energy_between
from otel_joules.meter.fastpath import COMPILED
from otel_joules.meter.history import HISTORY_S
from otel_joules.meter.values import EnergyMeasurement, EnergySnapshot

if TYPE_CHECKING:
    from otel_joules.meter.meter import EnergyMeter

#: A stated time further than this from the wall clock when its end was read is explicit (its energy comes
#: from the meter's history). The same bound tells a wall-clock step during an interval.
EXPLICIT_TIME_TOLERANCE_NS = STEP_TOLERANCE_NS
#: How long before its opening a start may have been stamped and still be measured from the opening where the
#: history does not hold it: the SDK stamps a span's start, then runs its processors, and a thread waiting for
#: the GIL (5 ms a switch, more with several threads) or a garbage collection in between opens it that much
#: later. Such a start loses at most that much of its interval instead of all of it.
START_LAG_TOLERANCE_NS = 50_000_000
_new_tuple = tuple.__new__
_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns


class Opening(NamedTuple):
    """An interval's start, from :func:`open_interval`; closed by :func:`close_interval`.

    Attributes:
        snapshot: The meter's snapshot when it opened.
        offset_ns: The wall clock's offset from the monotonic clock then, as confirmed.
        stated_start_ns: The explicit start on the monotonic clock; None when it started at the opening.
    """

    snapshot: EnergySnapshot
    offset_ns: int
    stated_start_ns: int | None


class Interval(NamedTuple):
    """One measured interval: its two ends on the meter, or why its energy is unknown; frozen.

    Its figures (per-domain joules, total, watts, source and flags) are those of :meth:`measure`, computed
    from :attr:`start` and :attr:`end` by :func:`~otel_joules.meter.energy.energy_between`, as every figure
    of the meter is. Built by :func:`close_interval` (or :meth:`of_measurement` for a caller's own figures).

    Attributes:
        meter: The meter whose snapshots these are.
        opened: The snapshot taken when the interval was opened (None for a caller's measurement).
        closed: The snapshot taken when it was closed; None when it was not read (a caller's measurement,
            or the caller asked for none).
        start: The interval's start: :attr:`opened`, or the stated start interpolated in the meter's
            history; None when its energy is unknown.
        end: Its end likewise.
        given: A measurement the caller took itself, which stands for the snapshots' figures.
        unavailable_reason: Why the interval has no energy (``energy.unavailable_reason``); None otherwise.
        clock_step_ns: How far the wall clock stepped while it was open (0: not beyond the tolerance).
        end_wall_ns: The wall clock when it was closed, beside :attr:`closed`.
        explicit: Whether a stated time set either end.
    """

    meter: "EnergyMeter | None"
    opened: EnergySnapshot | None
    closed: EnergySnapshot | None
    start: EnergySnapshot | None
    end: EnergySnapshot | None
    given: EnergyMeasurement | None
    unavailable_reason: str | None
    clock_step_ns: int
    end_wall_ns: int
    explicit: bool

    @classmethod
    def of_measurement(cls, measurement: EnergyMeasurement, meter: "EnergyMeter | None" = None) -> "Interval":
        """An interval whose figures are a caller's own measurement (no snapshots), taken on ``meter`` where
        given (a share's per-kind attributes are those of the kinds it measures)."""
        return _new_tuple(cls, (meter, None, None, None, None, measurement, None, 0, _time_ns(), False))

    @property
    def clock_step_s(self) -> float:
        """:attr:`clock_step_ns` in seconds (``energy.clock_step_s``)."""
        return self.clock_step_ns / 1e9

    @property
    def energy(self) -> Energy | None:
        """The energy between :attr:`start` and :attr:`end` by position in the meter's domains; None without both."""
        start, end, meter = self.start, self.end, self.meter
        if start is None or end is None or meter is None:
            return None
        return energy_between(meter.plan, start, end)

    def measure(self) -> EnergyMeasurement | None:
        """The interval's figures by domain id (:attr:`given`, else the meter's measurement between its ends);
        None when its energy is unknown."""
        if self.given is not None:
            return self.given
        start, end, meter = self.start, self.end, self.meter
        if start is None or end is None or meter is None:
            return None
        return meter.measure(start, end)

    @property
    def measured(self) -> bool:
        """Whether it has energy to report (:func:`has_energy`)."""
        measurement = self.measure()
        return measurement is not None and has_energy(measurement)

    @property
    def duration_s(self) -> float | None:
        """Seconds between its ends (None when unknown)."""
        measurement = self.measure()
        return None if measurement is None else measurement.duration_s

    @property
    def joules_by_domain(self) -> Mapping[str, float]:
        """Joules per domain id (empty when unknown)."""
        measurement = self.measure()
        return {} if measurement is None else measurement.joules_by_domain

    @property
    def total_joules(self) -> float | None:
        """The total over the domains that add to the host's (None when unknown)."""
        measurement = self.measure()
        return None if measurement is None else measurement.total_joules

    @property
    def watts(self) -> float | None:
        """``total_joules / duration_s`` (None when unknown)."""
        measurement = self.measure()
        return None if measurement is None else measurement.watts

    @property
    def source(self) -> str | None:
        """``measured``, ``estimate``, ``mixed`` or ``partial`` (None when unknown)."""
        measurement = self.measure()
        return None if measurement is None else measurement.source

    @property
    def below_resolution(self) -> bool:
        """Shorter than the update period of a counter it includes."""
        measurement = self.measure()
        return measurement is not None and measurement.below_resolution


def has_energy(measurement: EnergyMeasurement) -> bool:
    """Whether a measurement has energy attributes to set: a domain's joules, or a domain it says is missing."""
    return bool(measurement.joules_by_domain or measurement.missing_domains)


def open_interval(
    meter: "EnergyMeter", stated_wall_ns: int | None = None, synchronize: Callable[[], object] | None = None
) -> Opening:
    """Open an interval on ``meter`` now, or at ``stated_wall_ns`` (a wall-clock time; explicit only when it is
    not now, see the module docstring). ``synchronize`` runs just before the snapshot (waiting for a device's
    queued work); the clocks are read first, as close as possible to a caller's own stamp of ``stated_wall_ns``."""
    mono_ns = _monotonic_ns()
    wall_ns = _time_ns()
    tolerance_ns = EXPLICIT_TIME_TOLERANCE_NS
    offset_ns = previous_ns = WALL_CLOCK.offset_ns
    if not -tolerance_ns <= wall_ns - mono_ns - previous_ns <= tolerance_ns:
        offset_ns = WALL_CLOCK.settle()
    stated_start_ns = None
    if stated_wall_ns is not None and not -tolerance_ns <= stated_wall_ns - wall_ns <= tolerance_ns:
        if -tolerance_ns <= stated_wall_ns - previous_ns - mono_ns <= tolerance_ns:
            # Stamped just before a step (it matches the offset before it): not explicit, and on the clock as
            # it was then.
            offset_ns = previous_ns
        else:
            stated_start_ns = stated_wall_ns - offset_ns
    if synchronize is not None:
        synchronize()
    return _new_tuple(Opening, (meter.snapshot(), offset_ns, stated_start_ns))


def close_interval(
    meter: "EnergyMeter",
    opening: Opening,
    stated_wall_ns: int | None = None,
    synchronize: Callable[[], object] | None = None,
    given: EnergyMeasurement | None = None,
    read: bool = True,
) -> Interval:
    """Close ``opening`` now, or at ``stated_wall_ns`` (an explicit wall-clock end, always taken as stated).

    ``synchronize`` runs just before the closing snapshot. ``given``: the caller's own measurement of the
    interval, which stands for the snapshots' figures (no closing snapshot is taken); ``read`` False takes
    none either (the interval's times and clock step only).
    """
    closed = None
    if given is None and read:
        if synchronize is not None:
            synchronize()
        closed = meter.snapshot()
    # Read just after the closing snapshot: a caller's end stamp read now is on the clock its offset says,
    # so the step between the two offsets is how far the interval's wall times are off.
    wall_ns = _time_ns()
    offset_ns = WALL_CLOCK.offset_ns
    moved_ns = wall_ns - (_monotonic_ns() if closed is None else closed[0]) - offset_ns
    if not -EXPLICIT_TIME_TOLERANCE_NS <= moved_ns <= EXPLICIT_TIME_TOLERANCE_NS:
        offset_ns = WALL_CLOCK.settle()
    step_ns = offset_ns - opening[1]
    stated_start_ns = opening[2]
    opened = opening[0]
    if stated_start_ns is None and stated_wall_ns is None:
        return _new_tuple(Interval, (meter, opened, closed, opened, closed, given, None, step_ns, wall_ns, False))
    start = end = reason = None
    if given is None and closed is not None:
        stated_end_ns = None if stated_wall_ns is None else stated_wall_ns - offset_ns
        start, end, reason = _stated_ends(meter, opened, closed, stated_start_ns, stated_end_ns)
    return _new_tuple(Interval, (meter, opened, closed, start, end, given, reason, step_ns, wall_ns, True))


def _stated_ends(
    meter: "EnergyMeter",
    opened: EnergySnapshot,
    closed: EnergySnapshot,
    stated_start_ns: int | None,
    stated_end_ns: int | None,
) -> tuple[EnergySnapshot | None, EnergySnapshot | None, str | None]:
    """The snapshots at an interval's stated ends (the opening's or closing one where not stated), or the reason
    they are not known. Stated times are on the monotonic clock and looked up in the meter's history."""
    t0 = opened[0] if stated_start_ns is None else stated_start_ns
    # An end stated by the caller is honoured even when close to now (the history interpolates).
    t1 = closed[0] if stated_end_ns is None else stated_end_ns
    if t1 < t0:
        return None, None, "end_time is before start_time"
    if t1 > closed[0] + EXPLICIT_TIME_TOLERANCE_NS:
        return None, None, "end_time is in the future: energy not yet spent is unknown"
    history = meter.history
    first = opened if stated_start_ns is None else history.snapshot_at(t0, closed)
    if first is None and stated_start_ns is not None and 0 <= opened[0] - stated_start_ns <= START_LAG_TOLERANCE_NS:
        first = opened  # stamped just before it was opened: the opening is the nearest known reading
    last = closed if stated_end_ns is None else history.snapshot_at(min(t1, closed[0]), closed)
    if first is None or last is None:
        return None, None, (
            f"the stated interval starts before the energy meter's history (it keeps {history.history_s:g} s; "
            f"default {HISTORY_S:g} s)"
        )
    return first, last, None


if COMPILED is not None:
    # What the compiled twins of open_interval and close_interval use (bound to each meter on the compiled path).
    COMPILED.bind_interval(WALL_CLOCK, EXPLICIT_TIME_TOLERANCE_NS, Opening, Interval)
