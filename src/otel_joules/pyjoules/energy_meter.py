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

Spans: see :mod:`otel_joules.pyjoules._spans`. The manual meter (``EnergyMeter``, its points
and errors) is in :mod:`otel_joules.pyjoules._meter`; this module builds the decorator and the
context manager on it and is where pyJoules' names are imported from.
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from otel_joules._fork import register_fork_hook
from otel_joules.meter.registry import get_energy_meter
from otel_joules.pyjoules._meter import (  # noqa: F401 - pyJoules' names, importable from this module as in pyJoules
    EnergyMeter,
    EnergyMeterNotStartedError,
    EnergyMeterNotStoppedError,
    EnergyState,
    NoNextStateException,
    SampleNotFoundError,
    StateIsNotFinalError,
)
from otel_joules.pyjoules._spans import SpanHandle
from otel_joules.pyjoules.device import Device, Domain
from otel_joules.pyjoules.device.device_factory import DeviceFactory, Selection, check_domains, select_domains
from otel_joules.pyjoules.energy_trace import EnergySample, EnergyTrace
from otel_joules.pyjoules.exception import HandlerTypeError, PyJoulesException, PyJoulesWarning  # noqa: F401 - as in pyJoules
from otel_joules.pyjoules.handler import EnergyHandler, PrintHandler

_log = logging.getLogger("otel_joules.pyjoules")

F = TypeVar("F", bound=Callable[..., Any])

#: Name of the parent span of an :class:`EnergyContext`.
CONTEXT_SPAN_NAME = "EnergyContext"



# -- selection for the decorator and the context ------------------------------------------


class SelectionCache:
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
    states = meter.states
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
        selections = SelectionCache(checked, f"{getattr(function, '__qualname__', tag)}()")

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


class ContextSpans:
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
class EnteredContext:
    """What entering one ``EnergyContext`` set up, for its exit to undo: meter, selection, spans, context token."""

    meter: EnergyMeter
    selection: Optional[Selection]
    spans: Optional[ContextSpans]
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
        self._selections = SelectionCache(check_domains(domains), "the EnergyContext block")
        #: The meter of the innermost active ``with`` block (pyJoules' attribute).
        self.energy_meter: Optional[EnergyMeter] = None
        self._entered: List[EnteredContext] = []

    def __enter__(self) -> EnergyMeter:
        selection, devices = self._selections.get(stacklevel=2)
        meter = EnergyMeter(devices)
        parent = SpanHandle.start(CONTEXT_SPAN_NAME)
        spans = token = None
        if parent is not None:
            spans = ContextSpans(meter, parent)
            meter.on_state(spans.on_state)
            # The block's own spans become children of the parent span.
            token = otel_context.attach(trace.set_span_in_context(parent.span))
        self._entered.append(EnteredContext(meter, selection, spans, token))
        self.energy_meter = meter
        meter.start(self.start_tag)
        return meter

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], traceback: Any) -> None:
        entered = self._entered.pop()
        self.energy_meter = self._entered[-1].meter if self._entered else entered.meter
        meter = entered.meter
        try:
            if meter.started and not meter.stopped:
                meter.stop()
            trace_ = meter.get_trace() if meter.started else EnergyTrace([])
            if entered.spans is not None:
                parent = entered.spans.parent
                if exc is not None:
                    parent.span.record_exception(exc)
                    parent.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                states = meter.states
                whole = meter.measure(states[0], states[-1]) if len(states) >= 2 else None
                parent.end(whole)
            if entered.selection is not None and entered.selection.domains and len(trace_):
                _handle(self.handler, trace_, "an EnergyContext block")
        finally:
            if entered.token is not None:
                otel_context.detach(entered.token)
