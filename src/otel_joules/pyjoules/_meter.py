"""pyJoules' manual meter over the core meter: ``EnergyMeter``, its points (``EnergyState``) and its errors.

Every point of a trace is one core snapshot, limited to the meter's domains, next to the
``get_energy()`` of each user-written device; every sample is one core measurement between
two points, plus the user devices' domains. :mod:`otel_joules.pyjoules.energy_meter`
(pyJoules' module path, where users import these names from) builds the decorator and the
context manager on this meter.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeasurement, EnergySnapshot
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED, SOURCE_MIXED
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.pyjoules.device import Device, Domain
from otel_joules.pyjoules.device.device import joules_to_microjoules, reads_core_meter
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import PyJoulesException
from otel_joules.sensors.base import Method

_log = logging.getLogger("otel_joules.pyjoules")


class NoNextStateException(PyJoulesException):
    """Kept for imports from pyJoules (a state without a next state has no duration)."""


class StateIsNotFinalError(PyJoulesException):
    """Kept for imports from pyJoules."""


class EnergyMeterNotStartedError(PyJoulesException):
    """``record()`` or ``stop()`` was called on an :class:`EnergyMeter` that was not started."""


class EnergyMeterNotStoppedError(PyJoulesException):
    """``get_trace()`` or ``resume()`` was called on an :class:`EnergyMeter` that was not stopped."""


class SampleNotFoundError(PyJoulesException):
    """Kept for imports from pyJoules."""


@dataclass(frozen=True)
class EnergyState:
    """One point of a trace: when, which tag starts here, and the core snapshot.

    Attributes:
        timestamp: ``time.time()`` at the snapshot.
        tag: Tag of the sample that begins at this point.
        snapshot: The core meter's snapshot, limited to the meter's domains.
        stop: True for the point written by ``stop()`` (no sample begins there).
        user_values: Each user-written device's ``get_energy()`` at this point, in the
            meter's device order; None for a device whose read failed.
    """

    timestamp: float
    tag: str
    snapshot: EnergySnapshot
    stop: bool = False
    user_values: Tuple[Optional[Tuple[Optional[float], ...]], ...] = ()


class EnergyMeter:
    """Records the energy of devices between points tagged by the user (pyJoules' manual API).

    Args:
        devices: Configured devices (:meth:`DeviceFactory.create_devices`, or user-written
            ``Device`` subclasses, configured); ours must read the same core meter.
        default_tag: Tag of a point given no tag.

    Raises:
        ConfigurationError: the devices read different core meters.
    """

    def __init__(self, devices: Sequence[Device], default_tag: str = "") -> None:
        self.devices = list(devices)
        self.default_tag = default_tag
        #: User-written devices, read through their own get_energy() at every point.
        self._user_devices: List[Device] = [device for device in self.devices if not reads_core_meter(device)]
        self._user_failed: set[int] = set()
        cores = {id(device.meter): device.meter for device in self.devices if device.meter is not None}
        if len(cores) > 1:
            raise ConfigurationError("the devices read different otel_joules meters; create them with the same meter")
        self._core: Optional[CoreEnergyMeter] = next(iter(cores.values()), None)
        self._domains: List[Domain] = [d for device in self.devices for d in device.get_configured_domains()]
        self._names = [d.domain_id for d in self._domains]
        wanted = set(self._names)
        self._keep: Tuple[bool, ...] = tuple(d.id in wanted for d in self._core.domains) if self._core else ()
        self._states: List[EnergyState] = []
        # Called with (previous point or None, new point) after every point; EnergyContext's spans.
        self._on_state: Optional[Callable[[Optional[EnergyState], EnergyState], None]] = None

    # -- points ---------------------------------------------------------------------------

    def _snapshot(self) -> EnergySnapshot:
        if self._core is None:
            return EnergySnapshot(time.monotonic_ns(), ())
        snapshot = self._core.snapshot()
        # Domains not selected read as "not measured", so core measurements cover the selection only.
        return EnergySnapshot(
            snapshot.monotonic_ns,
            tuple(j if keep else None for j, keep in zip(snapshot.joules, self._keep)),
            snapshot.stale,
        )

    def _read_user_devices(self) -> Tuple[Optional[Tuple[Optional[float], ...]], ...]:
        values: List[Optional[Tuple[Optional[float], ...]]] = []
        for index, device in enumerate(self._user_devices):
            try:
                values.append(tuple(None if v is None else float(v) for v in device.get_energy()))
            except Exception as exc:  # noqa: BLE001 - a user's device must not break the measured code
                values.append(None)
                if index not in self._user_failed:
                    self._user_failed.add(index)
                    _log.warning(
                        "otel_joules.pyjoules: %s.get_energy() failed (%s: %s); its domains are left out of the "
                        "samples this read touches",
                        type(device).__name__,
                        type(exc).__name__,
                        exc,
                    )
        return tuple(values)

    def _add_state(self, tag: Optional[str], stop: bool = False) -> None:
        timestamp = time.time()
        user_values = self._read_user_devices() if self._user_devices else ()
        state = EnergyState(timestamp, self.default_tag if tag is None else tag, self._snapshot(), stop, user_values)
        previous = self._states[-1] if self._states else None
        self._states.append(state)
        if self._on_state is not None:
            self._on_state(previous, state)

    @property
    def states(self) -> Tuple[EnergyState, ...]:
        """The points of the current trace, oldest first (empty before :meth:`start`)."""
        return tuple(self._states)

    @property
    def started(self) -> bool:
        """:meth:`start` was called (a trace is under way or ended)."""
        return bool(self._states)

    @property
    def stopped(self) -> bool:
        """The current trace ended with :meth:`stop`."""
        return bool(self._states) and self._states[-1].stop

    def on_state(self, callback: Optional[Callable[[Optional[EnergyState], EnergyState], None]]) -> None:
        """Call ``callback(previous point or None, new point)`` after every point from now on (None: no one)."""
        self._on_state = callback

    # pyJoules' own names for the two tests above.
    def _is_meter_started(self) -> bool:
        return self.started

    def _is_meter_stopped(self) -> bool:
        return self.stopped

    def start(self, tag: Optional[str] = None) -> None:
        """Begin a new trace (forgetting any previous one) with a sample tagged ``tag``."""
        self._states = []
        self._add_state(tag)

    def record(self, tag: Optional[str] = None) -> None:
        """End the current sample and begin one tagged ``tag``.

        Raises:
            EnergyMeterNotStartedError: :meth:`start` was not called.
        """
        if not self._states:
            raise EnergyMeterNotStartedError("record() needs a started meter: call start() first")
        self._add_state(tag)

    def resume(self, tag: Optional[str] = None) -> None:
        """Begin a new sample after :meth:`stop` (or start a trace if none was started).

        Raises:
            EnergyMeterNotStoppedError: the meter is running (not stopped).
        """
        if not self._states:
            self.start(tag)
            return
        if not self._is_meter_stopped():
            raise EnergyMeterNotStoppedError("resume() continues a stopped meter; this one is running")
        self._add_state(tag)

    def stop(self) -> None:
        """End the current sample.

        Raises:
            EnergyMeterNotStartedError: :meth:`start` was not called.
        """
        if not self._states:
            raise EnergyMeterNotStartedError("stop() needs a started meter: call start() first")
        self._add_state(None, stop=True)

    # -- results --------------------------------------------------------------------------

    def _user_microjoules(self, begin: EnergyState, end: EnergyState) -> Dict[str, Tuple[float, bool]]:
        """(microjoules, adds to the total) per domain of the user-written devices between two points."""
        result: Dict[str, Tuple[float, bool]] = {}
        for device, before, after in zip(self._user_devices, begin.user_values, end.user_values):
            if before is None or after is None:
                continue
            # Multiplied by the unit's size in microjoules (exactly 1.0 for pyJoules' default unit),
            # so a device's own numbers come through unchanged.
            scale = device.energy_unit_joules * 1e6
            for domain, a, b in zip(device.get_configured_domains(), before, after):
                if a is not None and b is not None:
                    result[domain.domain_id] = ((b - a) * scale, device.in_total)
        return result

    def measure(self, begin: EnergyState, end: EnergyState) -> EnergyMeasurement:
        """The measurement of this meter's domains between two points (core domains and user-written devices)."""
        if self._core is None:
            duration_s = max(0, end.snapshot.monotonic_ns - begin.snapshot.monotonic_ns) / 1e9
            core = EnergyMeasurement(duration_s, {}, 0.0, 0.0, SOURCE_MEASURED, False)
        else:
            core = self._core.measure(begin.snapshot, end.snapshot)
        if not self._user_devices:
            return core
        return _with_user_domains(core, self._user_microjoules(begin, end))

    def sample(self, begin: EnergyState, end: EnergyState, measurement: Optional[EnergyMeasurement] = None) -> EnergySample:
        """The sample from ``begin`` to ``end``: microjoules per domain, in this meter's domain order."""
        if measurement is None:
            measurement = self.measure(begin, end)
        joules = measurement.joules_by_domain
        user = self._user_microjoules(begin, end) if self._user_devices else {}
        energy: Dict[str, float] = {}
        for name in self._names:
            if name in user:
                energy[name] = user[name][0]
            elif name in joules:
                energy[name] = joules_to_microjoules(joules[name])
        return EnergySample(begin.timestamp, begin.tag, measurement.duration_s, energy, measurement.below_resolution)

    def _segments(self) -> Iterator[Tuple[EnergyState, EnergyState]]:
        states = self._states
        for index in range(len(states) - 1):
            if not states[index].stop:
                yield states[index], states[index + 1]

    def get_trace(self) -> EnergyTrace:
        """The samples of the last trace (empty if never started).

        Raises:
            EnergyMeterNotStoppedError: the meter is still running.
        """
        if not self._states:
            return EnergyTrace([])
        if not self._is_meter_stopped():
            raise EnergyMeterNotStoppedError("get_trace() needs a stopped meter: call stop() first")
        return EnergyTrace([self.sample(begin, end) for begin, end in self._segments()])

    def gen_idle(self, trace: EnergyTrace) -> List[Dict[str, float]]:
        """Measure, for each sample of ``trace``, the energy spent while sleeping as long (idle energy).

        Returns:
            One dict of microjoules per domain per sample, for :meth:`EnergyTrace.remove_idle`.
        """
        self._states = []
        for sample in trace:
            self.resume()
            # pyJoules divided the duration (seconds) by 1e9 here and so never slept.
            time.sleep(max(0.0, sample.duration))
            self.stop()
        return [sample.energy for sample in self.get_trace()]

    @property
    def domains(self) -> List[Domain]:
        """The domains this meter reports, in order."""
        return list(self._domains)

    def __repr__(self) -> str:
        return f"EnergyMeter(domains={self._names})"


def _with_user_domains(core: EnergyMeasurement, user: Dict[str, Tuple[float, bool]]) -> EnergyMeasurement:
    """``core`` plus the user-written devices' domains: read from their counters, so measured."""
    if not user:
        return core
    by_domain = dict(core.joules_by_domain)
    methods = dict(core.methods_by_domain)
    total = core.total_joules
    adds = False
    for domain_id, (microjoules, in_total) in user.items():
        joules = microjoules / 1e6
        by_domain[domain_id] = joules
        methods[domain_id] = Method.COUNTER
        if in_total:
            total += joules
            adds = True
    source = core.source
    if adds and source == SOURCE_ESTIMATE and any(not m.is_measurement for m in core.methods_by_domain.values()):
        source = SOURCE_MIXED
    duration_s = core.duration_s
    return EnergyMeasurement(
        duration_s,
        by_domain,
        total,
        total / duration_s if duration_s > 0 else 0.0,
        source,
        core.below_resolution,
        methods,
        core.stale_domains,
        core.missing_domains,
        core.rejected_jump_domains,
    )
