"""The span processor that puts energy on every span of a tracer provider."""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, Callable, Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import get_current_span

from otel_joules.attribution.attributor import Attributor, check_attribution_options
from otel_joules.attribution.registry import attributor_for, attributor_from
from otel_joules.attribution.sampling import HISTORY_S
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.attribution.spans import SpanShare
from otel_joules.meter.clock import STEP_TOLERANCE_NS, WALL_CLOCK
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.meter.registry import get_energy_meter
from otel_joules.meter.sync import Synchronize, resolve_synchronizer
from otel_joules.tracing._sdk import set_clean_attributes
from otel_joules.tracing.attributes import MeterAttributes, attribution_attributes, measurement_attributes
from otel_joules.tracing.ranks import job_rank
from otel_joules.semconv import ENERGY_CLOCK_STEP_S, ENERGY_UNAVAILABLE_REASON

_log = logging.getLogger("otel_joules")

#: A span start time further than this from the wall clock when ``start()`` ran was stated
#: explicitly (an explicit end time is always known as such): its energy comes from the meter's
#: history. The same bound tells a wall-clock step during a span (``energy.clock_step_s``).
EXPLICIT_TIME_TOLERANCE_NS = STEP_TOLERANCE_NS
_UNSET = object()
_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns


class EnergySpanProcessor(SpanProcessor):
    """Adds energy attributes (``energy.joules`` and friends) to every span it sees.

    The SDK hands ``on_end`` a span whose attributes are already frozen, so the
    processor instead wraps each span's ``end`` in ``on_start``: the closing snapshot
    and the attributes are taken just before the SDK freezes the span, and every
    processor and exporter of the provider, including those added before this one,
    sees them.

    The wrapper holds only a weak reference to its span and the opening snapshot, so
    ended and abandoned spans leave nothing behind.

    ``energy.joules`` is machine-level: concurrent or nested spans each get everything the
    machine spent during their own interval, so their values overlap. The span's share,
    ``energy.attributed.joules`` (inclusive of children) and ``energy.attributed.self.joules``,
    comes from the meter's :class:`~otel_joules.attribution.Attributor` and adds up.

    A span started or ended with an explicit time gets the energy of its stated interval from
    the meter's history, or no ``energy.joules`` and ``energy.unavailable_reason``, whether or not
    shares are attributed (the meter's shared attributor keeps that history).

    Every interval is on the monotonic clock. The wall clock (the SDK's span times) is read
    beside it at a span's start and end: an explicit time is one that differs from the wall
    clock then, and is converted to the monotonic clock with the offset measured then. A
    wall-clock step (``date -s``, NTP, a VM resume) therefore changes no span's energy; a span
    open across one carries ``energy.clock_step_s``, by how much its wall times are off.

    The energy and attribution attributes are set on the live span before
    ``on_measurement`` runs, so a hook can read them from ``span.attributes``.

    In a multi-rank job (torchrun's ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``, or Slurm's
    ``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_NTASKS``) every span also gets
    ``training.rank``, ``training.local_rank`` and ``training.world_size`` at its start
    (:mod:`otel_joules.tracing.ranks`), so the ranks' spans are told apart.

    Args:
        meter: The meter to read; the process-wide shared meter when omitted.
        on_measurement: Called with ``(span, measurement)`` before the span ends, for
            layers that add attributes of their own (carbon, for instance).
        attribution: Attribute shares to spans: True (default) uses the meter's shared
            :class:`~otel_joules.attribution.Attributor`, False none, or give one.
        synchronize: Wait for queued accelerator work before every span's opening and closing
            snapshot: ``"torch"``, ``"jax"``, ``"cupy"``, ``"auto"`` or a callable (see
            :mod:`otel_joules.meter.sync`). Off by default: it stalls the host at every span
            boundary, so pipelines that overlap host and device work lose that overlap.
        attribution_policy: Who carries static energy in shares (``capacity``, ``busy``, ``dynamic``), set
            on the attributor (shared by the meter's processors and metrics); None: the settings'.
        static_watts: Static watts by domain id, set on the attributor the same way.
    """

    def __init__(
        self,
        meter: EnergyMeter | None = None,
        *,
        on_measurement: Callable[[Span, EnergyMeasurement], None] | None = None,
        attribution: bool | Attributor = True,
        synchronize: Synchronize = None,
        attribution_policy: str | None = None,
        static_watts: Mapping[str, float] | None = None,
    ) -> None:
        attribution_policy = check_attribution_options(attribution_policy, static_watts)
        self._attribution_options = (attribution_policy, static_watts)
        self._meter = meter
        self._synchronize = resolve_synchronizer(synchronize)
        #: This process's rank attributes, read once (None outside a multi-rank job).
        self._rank_attributes = job_rank().span_attributes() or None
        self._on_measurement = on_measurement
        self.enabled = True
        self._failure_reported = False
        # The shared attributor (True) waits for the meter, which may be created on first use.
        self._attributor: Any = (
            _UNSET
            if attribution is True
            else attributor_from(attribution, meter, policy=attribution_policy, static_watts=static_watts)
        )
        #: The meter's attributes planned once (keys per domain, kinds), built with the meter.
        self._plan: MeterAttributes | None = None
        self._self_ref = weakref.ref(self)

    @property
    def meter(self) -> EnergyMeter:
        """The meter this processor reads (the shared one is created on first use)."""
        if self._meter is None:
            self._meter = get_energy_meter()
        return self._meter

    @property
    def attributor(self) -> Attributor | None:
        """The meter's attributor (None when attribution is off or CPU times cannot be read)."""
        if self._attributor is _UNSET:
            policy, static_watts = self._attribution_options
            self._attributor = attributor_from(True, self.meter, policy=policy, static_watts=static_watts)
        return self._attributor  # type: ignore[no-any-return]

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Take the opening snapshot, open the span's share, and arrange for the closing one before the span freezes."""
        if not self.enabled:
            return
        # The two clocks first, as close as possible to the SDK's own wall-clock read of the start.
        mono_ns = _monotonic_ns()
        wall_ns = _time_ns()
        tolerance_ns = EXPLICIT_TIME_TOLERANCE_NS
        offset_ns = previous_ns = WALL_CLOCK.offset_ns
        if not -tolerance_ns <= wall_ns - mono_ns - previous_ns <= tolerance_ns:
            offset_ns = WALL_CLOCK.settle()
        stated_ns = span.start_time
        stated_start_ns = None
        if stated_ns is not None and not -tolerance_ns <= stated_ns - wall_ns <= tolerance_ns:
            if -tolerance_ns <= stated_ns - previous_ns - mono_ns <= tolerance_ns:
                # The SDK read the start just before a step (it matches the offset before it): not
                # explicit, and stamped on the clock as it was then.
                offset_ns = previous_ns
            else:
                stated_start_ns = stated_ns - offset_ns
        try:
            meter = self._meter or self.meter
            if self._synchronize is not None:
                self._synchronize()  # what the device queued before the span is not the span's
            start = meter.snapshot()
            attributor = self._attributor
            if attributor is _UNSET:
                attributor = self.attributor
            share = None
            if attributor is not None:
                # A measured parent's ``end`` is its MeasuringEnd (an instance attribute, found before the class's method).
                parent_end = get_current_span(parent_context).end
                share = attributor.open_span(parent_end.share if type(parent_end) is MeasuringEnd else None)
        except Exception as exc:  # noqa: BLE001 - a failing meter must not break the span
            self._report_failure(exc)
            return
        span.end = MeasuringEnd(  # type: ignore[method-assign]
            span, self._self_ref, start, attributor, share, offset_ns, stated_start_ns
        )
        if self._rank_attributes is not None:
            set_clean_attributes(span, dict(self._rank_attributes))

    def _planned(self, meter: EnergyMeter, attributor: Attributor | None) -> MeterAttributes:
        plan = self._plan
        if plan is None:
            plan = self._plan = MeterAttributes(meter, attributor.kinds if attributor is not None else ())
        return plan

    def end_snapshot(self) -> EnergySnapshot | None:
        """A span's closing snapshot, after the device finished its queued work (None if the meter failed:
        said once). For :class:`MeasuringEnd`, once the processor's meter is resolved by :meth:`on_start`."""
        try:
            if self._synchronize is not None:
                self._synchronize()
            return self._meter.snapshot()  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
            self._report_failure(exc)
            return None

    def finish_span(
        self,
        span: Span,
        start: EnergySnapshot,
        end: EnergySnapshot | None,
        measurement: EnergyMeasurement | None,
        attribution: SpanAttribution | None,
        end_time: int | None,
        stated_start_ns: int | None = None,
        end_offset_ns: int = 0,
        clock_step_ns: int = 0,
    ) -> None:
        """Set the span's attributes (for :class:`MeasuringEnd`, before the span ends). ``stated_start_ns``: its explicit start on the monotonic clock (None:
        the start snapshot's); ``end_offset_ns``: the wall clock's offset when it ended, for an explicit
        ``end_time``; ``clock_step_ns``: how far the wall clock stepped while it was open (0: not beyond
        the tolerance)."""
        try:
            # Both resolved by on_start before the span could end.
            meter: EnergyMeter = self._meter  # type: ignore[assignment]
            attributor: Attributor | None = self._attributor
            if measurement is None and end is None:
                end = meter.snapshot()
            if (
                self._on_measurement is None
                and measurement is None
                and end_time is None
                and stated_start_ns is None
            ):
                # The common case: no hook wants the measurement and the span's interval is the
                # snapshots' (no explicit times): one dict straight from the snapshots.
                plan = self._plan or self._planned(meter, attributor)
                attributes = plan.span_attributes(start, end, attribution)  # type: ignore[arg-type]
                if clock_step_ns:
                    attributes = {} if attributes is None else attributes
                    attributes[ENERGY_CLOCK_STEP_S] = clock_step_ns / 1e9
                if attributes:
                    set_clean_attributes(span, attributes)
                return
            reason = None
            if measurement is None:
                if end_time is not None or stated_start_ns is not None:
                    stated_end_ns = None if end_time is None else end_time - end_offset_ns
                    # Explicit times are looked up in the meter's history, kept by its shared attributor
                    # whether or not this processor attributes shares: both modes give a span the same energy.
                    history = attributor if attributor is not None else attributor_for(meter)
                    measurement, reason = _stated_interval(
                        meter, history, start, end, stated_start_ns, stated_end_ns  # type: ignore[arg-type]
                    )
                else:
                    measurement = meter.measure(start, end)  # type: ignore[arg-type]
            measured = measurement is not None and _has_energy(measurement)
            if measured:
                plan = self._plan or self._planned(meter, attributor)
                attributes = measurement_attributes(measurement)  # type: ignore[arg-type]
            else:
                attributes = {} if reason is None else {ENERGY_UNAVAILABLE_REASON: reason}
            if attribution is not None and attributor is not None:
                attribution_attributes(attribution, attributor.kinds, attributes)
            if clock_step_ns:
                attributes[ENERGY_CLOCK_STEP_S] = clock_step_ns / 1e9
            if not attributes:
                return
            set_clean_attributes(span, attributes)
            if self._on_measurement is not None and measured:
                self._on_measurement(span, measurement)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
            self._report_failure(exc)

    def _report_failure(self, exc: Exception) -> None:
        if not self._failure_reported:
            self._failure_reported = True
            _log.warning("otel-joules: could not measure energy for spans (%s); spans end without energy attributes", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Nothing to do: the attributes were set before the span froze."""

    def shutdown(self) -> None:
        """Stop adding energy to spans started from now on."""
        self.enabled = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here."""
        return True


def _has_energy(measurement: EnergyMeasurement) -> bool:
    """Whether the measurement has energy attributes to set: a domain's joules, or a domain it says is missing."""
    return bool(measurement.joules_by_domain or measurement.missing_domains)


def _stated_interval(
    meter: EnergyMeter,
    attributor: Attributor | None,
    start: EnergySnapshot,
    end: EnergySnapshot,
    stated_start_ns: int | None,
    stated_end_ns: int | None,
) -> tuple[EnergyMeasurement | None, str | None]:
    """The measurement of the span's stated interval, or None and the reason it is not known.

    ``stated_start_ns`` and ``stated_end_ns`` are the explicit times on the monotonic clock (None
    where not stated: the snapshot taken at ``start()`` or ``end()`` stands); explicit times are
    looked up in the attributor's history (None: the meter keeps none, CPU times being unreadable).
    """
    explicit_start = stated_start_ns is not None
    explicit_end = stated_end_ns is not None
    if not explicit_start and not explicit_end:
        return meter.measure(start, end), None
    t0 = start.monotonic_ns if stated_start_ns is None else stated_start_ns
    # An end stated by the caller is honoured even when close to now (the history interpolates).
    t1 = end.monotonic_ns if stated_end_ns is None else stated_end_ns
    if t1 < t0:
        return None, "end_time is before start_time"
    if t1 > end.monotonic_ns + EXPLICIT_TIME_TOLERANCE_NS:
        return None, "end_time is in the future: energy not yet spent is unknown"
    if attributor is None:
        return None, "the energy meter keeps no history here (CPU times cannot be read), so explicit span times have none"
    first = attributor.snapshot_at(t0, end) if explicit_start else start
    last = attributor.snapshot_at(min(t1, end.monotonic_ns), end) if explicit_end else end
    if first is None or last is None:
        return None, (
            f"the stated interval starts before the energy meter's history (it keeps {attributor.history_s:g} s; "
            f"default {HISTORY_S:g} s)"
        )
    return meter.measure(first, last), None


class MeasuringEnd:
    """Stands in for one span's ``end``: measures, sets the attributes, then really ends it.

    Set by :meth:`EnergySpanProcessor.on_start` as the span's ``end``; not made by hand.

    Holds its span and processor weakly (a strong reference would make span -> end ->
    span a cycle) and calls the span class's own ``end`` function. A span dropped without
    ``end()`` closes its share when it is collected, so it stops diluting the thread's others.
    The meter is the processor's (resolved before the first span starts).
    """

    __slots__ = ("_span_ref", "_processor_ref", "_start", "_attributor", "share", "_offset_ns", "_stated_start_ns")

    def __init__(
        self,
        span: Span,
        processor_ref: "weakref.ReferenceType[EnergySpanProcessor]",
        start: EnergySnapshot,
        attributor: Attributor | None,
        share: SpanShare | None,
        offset_ns: int,
        stated_start_ns: int | None,
    ) -> None:
        self._span_ref = weakref.ref(span) if share is None else weakref.ref(span, share.abandon)
        self._processor_ref = processor_ref
        self._start = start
        self._attributor = attributor
        #: The span's open share (None without attribution): its children's shares open inside it.
        self.share = share
        #: The wall clock's offset from the monotonic clock when the span started.
        self._offset_ns = offset_ns
        #: The span's explicit start on the monotonic clock; None when it started at ``start()``.
        self._stated_start_ns = stated_start_ns

    def _end(
        self,
        end_time: int | None = None,
        measurement: EnergyMeasurement | None = None,
        final_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        span = self._span_ref()
        if span is None:
            return
        sdk_end_time = end_time
        if span.end_time is None:
            processor = self._processor_ref()
            enabled = processor is not None and processor.enabled
            end = processor.end_snapshot() if enabled and measurement is None else None  # type: ignore[union-attr]
            # The wall clock beside the end snapshot's monotonic time (read microseconds before): what
            # is read here is the SDK's end time, so the step between the span's two offsets is
            # exactly how far its wall times are off.
            wall_ns = _time_ns()
            tolerance_ns = EXPLICIT_TIME_TOLERANCE_NS
            offset_ns = WALL_CLOCK.offset_ns
            if not -tolerance_ns <= wall_ns - (_monotonic_ns() if end is None else end[0]) - offset_ns <= tolerance_ns:
                offset_ns = WALL_CLOCK.settle()
            if end_time is None:
                sdk_end_time = wall_ns
            # Both offsets are ones the clock confirmed: equal unless a step came between.
            step_ns = offset_ns - self._offset_ns
            # Closed even when the processor is off: an open share would dilute the thread's others.
            share = self.share
            attribution = None if share is None else self._attributor.close_span(share, self._start, end)  # type: ignore[union-attr]
            if enabled:
                processor.finish_span(  # type: ignore[union-attr]
                    span, self._start, end, measurement, attribution, end_time,
                    self._stated_start_ns, offset_ns, step_ns,
                )
            else:
                if measurement is not None and _has_energy(measurement):
                    # The caller's own measurement is its to report, whether or not this processor still measures.
                    span.set_attributes(measurement_attributes(measurement))
                if step_ns:
                    span.set_attribute(ENERGY_CLOCK_STEP_S, step_ns / 1e9)
            if final_attributes:
                span.set_attributes(final_attributes)
        type(span).end(span, sdk_end_time)

    # ``span.end(end_time)`` lands here directly: one Python frame fewer on every span.
    __call__ = _end


def end_span_with_measurement(
    span: Any,
    measurement: EnergyMeasurement,
    end_time: int | None = None,
    *,
    attributes: Mapping[str, Any] | None = None,
) -> None:
    """End ``span`` carrying ``measurement``, taken by the caller, instead of a second measurement.

    The one way to end a span with energy besides ``span.end()`` itself. For adapters that
    measure an interval themselves (the pyJoules API hands the same numbers to its handlers, a
    training run measures only its chosen components): the span gets exactly those energy
    attributes, and an :class:`EnergySpanProcessor` on the span's provider uses them, hooks
    included, rather than reading the counters again.

    ``attributes`` are set last, after the processor's and its hooks' (``instrument()``'s
    carbon, for instance): a caller that prices the interval itself (a training run at its own
    intensity and PUE) has the final word on its span.
    """
    end = getattr(span, "end", None)
    if type(end) is MeasuringEnd:
        end._end(end_time, measurement, attributes)
        return
    if span.is_recording():
        if _has_energy(measurement):
            span.set_attributes(measurement_attributes(measurement))
        if attributes:
            span.set_attributes(attributes)
    span.end(end_time)
