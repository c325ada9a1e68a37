"""``measure_energy``, ``EnergyContext`` and ``EnergyMeter``, as in pyJoules 0.5.1's ``pyJoules.energy_meter``.

Thin adapters over the core :class:`otel_joules.EnergyMeter` (the process-wide one from
:func:`otel_joules.get_energy_meter`): every point of a trace is one core snapshot,
every sample one core measurement between two snapshots, limited to the selected
domains. The core reads the counters, corrects wrap-arounds and converts units; this
module only turns measurements into pyJoules' samples (microjoules per domain, the GPU
included) and hands them to the handler.

Default domains: every domain the core meter measures -- RAPL packages, drams, cores,
uncores (pyJoules' order), the GPUs this process may use (``CUDA_VISIBLE_DEVICES``), and
``psys`` or the CPU/memory estimates where the core meter measures them. Configure the
shared meter before the first measurement to change that, e.g.
``otel_joules.get_energy_meter(gpus=[])`` (no GPU) or ``estimate=False``.

pyJoules bugs fixed here:

- :class:`EnergyContext` keeps its points in a list and builds the trace in a loop:
  100,000 ``record()`` calls are fine (pyJoules recursed once per point and raised
  ``RecursionError`` past about 1,000).
- Nothing measurable (no RAPL, no GPU, or only domains that do not exist here): the
  decorated function or the ``with`` block still runs and returns its value; one
  :class:`~otel_joules.pyjoules.exception.PyJoulesWarning` per decorated function or
  context says why, and the handler receives nothing. Requested domains that do not
  exist are left out with the same warning; the others are measured.
- The decorated function raises: the exception propagates unchanged, and the
  measurement up to that point is handed to the handler first.
- Each call of a decorated function has its own state (pyJoules shared one meter per
  function): calls in several threads at once, and recursive calls, are each measured.
- A handler that raises cannot replace the user's result or exception: its error is
  logged on the ``otel_joules.pyjoules`` logger.

User-written devices (pyJoules' ``Device`` subclasses; see
:mod:`otel_joules.pyjoules.device.device`) are read at every point next to the core
snapshot: their domains appear in samples (differences of ``get_energy()`` values, in
microjoules as the device's :attr:`~otel_joules.pyjoules.device.Device.energy_unit_joules`
says), handlers and spans (``energy.<domain>.joules``, counted in ``energy.joules`` unless
the device sets ``in_total = False``). A ``get_energy()`` that raises is logged once and
its domains are left out of the samples it touches, as for a failed counter.

Spans: see :mod:`otel_joules.pyjoules._spans`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from otel_joules._fork import register_fork_hook
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeasurement, EnergySnapshot
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MEASURED, SOURCE_MIXED
from otel_joules.meter.meter import EnergyMeter as CoreEnergyMeter
from otel_joules.meter.registry import get_energy_meter
from otel_joules.pyjoules._spans import SpanHandle
from otel_joules.pyjoules.device import Device, Domain
from otel_joules.pyjoules.device.device import joules_to_microjoules, reads_core_meter
from otel_joules.pyjoules.device.device_factory import DeviceFactory, Selection, check_domains, select_domains
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import HandlerTypeError, PyJoulesException, PyJoulesWarning
from otel_joules.pyjoules.handler import EnergyHandler, PrintHandler
from otel_joules.sensors.base import Method

_log = logging.getLogger("otel_joules.pyjoules")

F = TypeVar("F", bound=Callable[..., Any])

#: Name of the parent span of an :class:`EnergyContext`.
CONTEXT_SPAN_NAME = "EnergyContext"


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

    def _is_meter_started(self) -> bool:
        return bool(self._states)

    def _is_meter_stopped(self) -> bool:
        return bool(self._states) and self._states[-1].stop

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
        return EnergySample(begin.timestamp, begin.tag, measurement.duration_s, energy)

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
        duration_s, by_domain, total, total / duration_s if duration_s > 0 else 0.0, source, core.below_resolution, methods
    )


# -- selection for the decorator and the context ------------------------------------------


class _SelectionCache:
    """The domain selection of one decorated function or context, per core meter.

    The process-wide core meter is looked up at every call (it is created on first use
    and may be replaced, e.g. between tests), and the selection rebuilt when it changes;
    the warning about missing domains is given once per selection.
    """

    def __init__(self, domains: Optional[Tuple[Domain, ...]], what: str) -> None:
        self._domains = domains
        self._what = what
        self._lock = threading.Lock()
        # Held while a selection is built (it may create the core meter): renewed in a forked child.
        register_fork_hook(self, "_new_lock")
        # (selection, its devices) in one attribute, so a reader never pairs one with the other's.
        self._current: Optional[Tuple[Selection, List[Device]]] = None
        self._failed: Optional[str] = None

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def get(self, stacklevel: int) -> Tuple[Optional[Selection], List[Device]]:
        """The current selection and its devices; (None, []) when no core meter can be made."""
        try:
            core = get_energy_meter()
        except Exception as exc:  # noqa: BLE001 - a broken configuration must not stop the user's code
            with self._lock:
                first = self._failed != str(exc)
                self._failed = str(exc)
            if first:
                warnings.warn(
                    f"otel_joules.pyjoules: {self._what} runs unmeasured: the energy meter cannot be created: {exc}",
                    PyJoulesWarning,
                    stacklevel=stacklevel + 1,
                )
            return None, []
        current = self._current
        if current is not None and current[0].meter is core:
            return current
        with self._lock:
            current = self._current
            if current is None or current[0].meter is not core:
                selection = select_domains(self._domains, core)
                current = self._current = (selection, selection.devices())
                message = self._warning(selection)
                if message:
                    warnings.warn(message, PyJoulesWarning, stacklevel=stacklevel + 1)
            return current

    def _warning(self, selection: Selection) -> Optional[str]:
        if not selection.domains:
            if selection.missing:
                details = "; ".join(f"{domain}: {reason}" for domain, reason in selection.missing)
            else:
                details = "; ".join(
                    f"{u.what}: {u.reason}" + (f" (to fix: {u.remedy})" if u.remedy else "")
                    for u in selection.meter.unavailable
                ) or "no sensor found any energy domain"
            return (
                f"otel_joules.pyjoules: {self._what} runs unmeasured, and its handler receives nothing: "
                f"no requested energy domain can be measured here ({details})"
            )
        if selection.missing:
            details = "; ".join(f"{domain}: {reason}" for domain, reason in selection.missing)
            measured = ", ".join(map(str, selection.domains))
            return f"otel_joules.pyjoules: {self._what} measures only {measured}; left out: {details}"
        return None


def _check_handler(handler: EnergyHandler) -> EnergyHandler:
    if not callable(getattr(handler, "process", None)):
        raise HandlerTypeError(
            f"handler={handler!r} is not an energy handler (it has no process(trace) method); use PrintHandler(), "
            "CSVHandler('result.csv'), PandasHandler(), MongoHandler(...) or a subclass of EnergyHandler"
        )
    return handler


def _handle(handler: EnergyHandler, trace: EnergyTrace, what: str) -> None:
    try:
        handler.process(trace)
    except Exception:  # noqa: BLE001 - the user's result or exception must come through
        _log.error("otel_joules.pyjoules: the handler %r failed on the measurement of %s", handler, what, exc_info=True)


def _last_segment(meter: EnergyMeter) -> Optional[Tuple[EnergyState, EnergyState]]:
    states = meter._states
    if len(states) >= 2 and not states[-2].stop:
        return states[-2], states[-1]
    return None


# -- the decorator --------------------------------------------------------------------------

#: The default handler, as in pyJoules: one shared instance (it prints and holds nothing).
_DEFAULT_HANDLER = PrintHandler()


@overload
def measure_energy(func: F) -> F: ...


@overload
def measure_energy(
    func: None = None, handler: EnergyHandler = ..., domains: Optional[Sequence[Domain]] = None
) -> Callable[[F], F]: ...


def measure_energy(
    func: Optional[Callable[..., Any]] = None,
    handler: EnergyHandler = _DEFAULT_HANDLER,
    domains: Optional[Sequence[Domain]] = None,
) -> Any:
    """Measure the energy of every call of the decorated function.

    Use as ``@measure_energy`` or ``@measure_energy(handler=..., domains=[...])``. Each
    call hands the handler a trace of one sample tagged with the function's name.

    Args:
        func: The function (when used without parentheses).
        handler: Receives each call's trace; prints it by default.
        domains: Domains to measure; every measurable domain when None.

    Raises:
        DomainTypeError: ``domains`` holds something that is not a domain (at decoration).
        HandlerTypeError: ``handler`` has no ``process(trace)`` method (at decoration).
    """
    checked = check_domains(domains)
    _check_handler(handler)

    def decorator(function: F) -> F:
        tag = function.__name__
        selections = _SelectionCache(checked, f"{getattr(function, '__qualname__', tag)}()")

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            selection, devices = selections.get(stacklevel=2)
            span = SpanHandle.start(tag)
            meter = EnergyMeter(devices)
            meter.start(tag)
            try:
                if span is None:
                    return function(*args, **kwargs)
                with trace.use_span(span.span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
                    return function(*args, **kwargs)
            finally:
                meter.stop()
                segment = _last_segment(meter)
                measurement = meter.measure(*segment) if segment else None
                if span is not None:
                    span.end(measurement)
                if selection is not None and selection.domains and segment is not None:
                    _handle(handler, EnergyTrace([meter.sample(*segment, measurement)]), f"{tag}()")

        return wrapper  # type: ignore[return-value]

    if func is None:
        return decorator
    return decorator(func)


# -- the context manager -------------------------------------------------------------------


class _ContextSpans:
    """The parent span of one ``with EnergyContext(...)`` block and its segment spans."""

    def __init__(self, meter: EnergyMeter, parent: SpanHandle) -> None:
        self._meter = meter
        self.parent = parent
        self._parent_context = trace.set_span_in_context(parent.span)
        self._segment: Optional[SpanHandle] = None

    def on_state(self, previous: Optional[EnergyState], state: EnergyState) -> None:
        if self._segment is not None and previous is not None:
            self._segment.end(self._meter.measure(previous, state))
            self._segment = None
        if not state.stop:
            self._segment = SpanHandle.start(state.tag, context=self._parent_context)


@dataclass
class _Entered:
    meter: EnergyMeter
    selection: Optional[Selection]
    spans: Optional[_ContextSpans]
    token: Any


class EnergyContext:
    """Measure the energy of a ``with`` block, split into segments by ``record(tag)``.

    ``with EnergyContext(...) as ctx:`` gives the :class:`EnergyMeter`; ``ctx.record(tag='bar')``
    ends the current segment and begins one tagged ``bar``. At the end of the block the
    handler receives one trace with one sample per segment.

    Args:
        handler: Receives the trace; prints it by default.
        domains: Domains to measure; every measurable domain when None.
        start_tag: Tag of the first segment.

    Raises:
        DomainTypeError: ``domains`` holds something that is not a domain.
        HandlerTypeError: ``handler`` has no ``process(trace)`` method.
    """

    def __init__(
        self,
        handler: EnergyHandler = _DEFAULT_HANDLER,
        domains: Optional[Sequence[Domain]] = None,
        start_tag: str = "start",
    ) -> None:
        self.handler = _check_handler(handler)
        self.start_tag = start_tag
        self._selections = _SelectionCache(check_domains(domains), "the EnergyContext block")
        #: The meter of the innermost active ``with`` block (pyJoules' attribute).
        self.energy_meter: Optional[EnergyMeter] = None
        self._entered: List[_Entered] = []

    def __enter__(self) -> EnergyMeter:
        selection, devices = self._selections.get(stacklevel=2)
        meter = EnergyMeter(devices)
        parent = SpanHandle.start(CONTEXT_SPAN_NAME)
        spans = token = None
        if parent is not None:
            spans = _ContextSpans(meter, parent)
            meter._on_state = spans.on_state
            # The block's own spans become children of the parent span.
            token = otel_context.attach(trace.set_span_in_context(parent.span))
        self._entered.append(_Entered(meter, selection, spans, token))
        self.energy_meter = meter
        meter.start(self.start_tag)
        return meter

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], traceback: Any) -> None:
        entered = self._entered.pop()
        self.energy_meter = self._entered[-1].meter if self._entered else entered.meter
        meter = entered.meter
        try:
            if meter._is_meter_started() and not meter._is_meter_stopped():
                meter.stop()
            trace_ = meter.get_trace() if meter._is_meter_started() else EnergyTrace([])
            if entered.spans is not None:
                parent = entered.spans.parent
                if exc is not None:
                    parent.span.record_exception(exc)
                    parent.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                states = meter._states
                whole = meter.measure(states[0], states[-1]) if len(states) >= 2 else None
                parent.end(whole)
            if entered.selection is not None and entered.selection.domains and len(trace_):
                _handle(self.handler, trace_, "an EnergyContext block")
        finally:
            if entered.token is not None:
                otel_context.detach(entered.token)


__all__ = [
    "CONTEXT_SPAN_NAME",
    "DeviceFactory",
    "EnergyContext",
    "EnergyMeter",
    "EnergyMeterNotStartedError",
    "EnergyMeterNotStoppedError",
    "EnergySample",
    "EnergyState",
    "EnergyTrace",
    "NoNextStateException",
    "SampleNotFoundError",
    "StateIsNotFinalError",
    "measure_energy",
]
