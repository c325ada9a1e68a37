"""The span processor that puts energy on every span of a tracer provider."""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable, Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import get_current_span

from otel_joules.attribution.attributor import Attributor, check_attribution_options
from otel_joules.attribution.registry import attributor_for, attributor_from
from otel_joules.attribution.shares import SpanAttribution
from otel_joules.attribution.spans import SpanLedger, SpanShare
from otel_joules.meter.interval import Interval, Opening, has_energy
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter
from otel_joules.meter.registry import get_energy_meter
from otel_joules.meter.sync import Synchronize, resolve_synchronizer
from otel_joules.tracing._sdk import set_clean_attributes
from otel_joules.tracing.attributes import span_attributes
from otel_joules.tracing.ranks import job_rank

_log = logging.getLogger("otel_joules")

_UNSET = object()


class EnergySpanProcessor(SpanProcessor):
    """Adds energy attributes (``energy.joules`` and friends) to every span it sees.

    The SDK hands ``on_end`` a span whose attributes are already frozen, so the
    processor instead wraps each span's ``end`` in ``on_start``: the closing snapshot
    and the attributes are taken just before the SDK freezes the span, and every
    processor and exporter of the provider, including those added before this one,
    sees them.

    Four steps per span: ``on_start`` opens the span's interval on the meter
    (:meth:`EnergyMeter.open_interval <otel_joules.meter.meter.EnergyMeter.open_interval>`) and its
    share; the wrapped ``end`` closes both (one :class:`~otel_joules.meter.interval.Interval`) and sets
    :func:`~otel_joules.tracing.attributes.span_attributes`. The wrapper holds only a weak reference
    to its span, so ended and abandoned spans leave nothing behind.

    ``energy.joules`` is machine-level: concurrent or nested spans each get everything the
    machine spent during their own interval, so their values overlap. The span's share,
    ``energy.attributed.joules`` (inclusive of children) and ``energy.attributed.self.joules``,
    comes from the meter's :class:`~otel_joules.attribution.Attributor` and adds up.

    A span started or ended with an explicit time gets the energy of its stated interval from
    the meter's history, or no ``energy.joules`` and ``energy.unavailable_reason``, whether or not
    shares are attributed. The meter owns those times (:mod:`otel_joules.meter.interval`): every
    interval is on the monotonic clock, an explicit time is one that differs from the wall clock
    when the span starts or ends, and a wall-clock step changes no span's energy; a span open
    across one carries ``energy.clock_step_s``, by how much its wall times are off.

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
        #: Called with ``(span, measurement)`` before a measured span ends (None: no hook).
        self.on_measurement = on_measurement
        self.enabled = True
        self._failure_reported = False
        # The shared attributor (True) waits for the meter, which may be created on first use.
        self._attributor: Any = (
            _UNSET
            if attribution is True
            else attributor_from(attribution, meter, policy=attribution_policy, static_watts=static_watts)
        )
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
        """Open the span's interval and its share, and arrange for both to close before the span freezes."""
        if not self.enabled:
            return
        try:
            meter = self._meter or self.meter
            # The SDK stamped the start just before: the meter tells an explicit start from it.
            opening = meter.open_interval(span.start_time, self._synchronize)
            attributor = self._attributor
            if attributor is _UNSET:
                attributor = self.attributor
            share = None
            if attributor is not None:
                # A measured parent's ``end`` is its MeasuringEnd (an instance attribute, found before the class's method).
                parent_end = get_current_span(parent_context).end
                # The attributor's span ledger itself (Attributor.open_span's own work): one frame fewer per span.
                share = attributor.ledger.open_span(parent_end.share if type(parent_end) is MeasuringEnd else None)
        except Exception as exc:  # noqa: BLE001 - a failing meter must not break the span
            self.report_failure(exc)
            return
        span.end = MeasuringEnd(  # type: ignore[method-assign]
            span, self._self_ref, meter, self._synchronize, opening, None if attributor is None else attributor.ledger, share
        )
        if self._rank_attributes is not None:
            set_clean_attributes(span, dict(self._rank_attributes))

    def start_history(self, meter: EnergyMeter) -> None:
        """Have the meter's history sampled (for a span with explicit times, by :class:`MeasuringEnd`): the shared
        attributor's sampling feeds it whether or not this processor attributes shares, so both modes give a span
        the same energy."""
        if self._attributor is None:
            attributor_for(meter)

    def set_span_attributes(self, span: Span, interval: Interval, attribution: SpanAttribution | None) -> None:
        """Set the span's energy and share attributes, then call ``on_measurement`` (for :class:`MeasuringEnd`,
        before the span ends)."""
        try:
            attributes = span_attributes(interval, attribution)
            if attributes:
                set_clean_attributes(span, attributes)
            if self.on_measurement is not None:
                measurement = interval.measure()  # once: each call measures between the interval's ends again
                if measurement is not None and has_energy(measurement):
                    self.on_measurement(span, measurement)
        except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
            self.report_failure(exc)

    def report_failure(self, exc: Exception) -> None:
        """Say once that spans end without energy attributes because the meter failed (``WARNING``)."""
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


class MeasuringEnd:
    """Stands in for one span's ``end``: measures, sets the attributes, then really ends it.

    Set by :meth:`EnergySpanProcessor.on_start` as the span's ``end``; not made by hand.

    Holds its span and processor weakly (a strong reference would make span -> end ->
    span a cycle) and calls the span class's own ``end`` function. A span dropped without
    ``end()`` closes its share when it is collected, so it stops diluting the thread's others.
    The meter is the processor's (resolved before the first span starts).
    """

    __slots__ = ("_span_ref", "_processor_ref", "_meter", "_synchronize", "_opening", "_ledger", "share")

    def __init__(
        self,
        span: Span,
        processor_ref: "weakref.ReferenceType[EnergySpanProcessor]",
        meter: EnergyMeter,
        synchronize: Callable[[], object] | None,
        opening: Opening,
        ledger: SpanLedger | None,
        share: SpanShare | None,
    ) -> None:
        self._span_ref = weakref.ref(span) if share is None else weakref.ref(span, share.abandon)
        self._processor_ref = processor_ref
        self._meter = meter
        #: The processor's wait for queued device work, before the closing snapshot (None: none).
        self._synchronize = synchronize
        #: The span's interval as opened (its snapshot, the wall clock's offset, an explicit start).
        self._opening = opening
        #: The attributor's span ledger, which closes the share (None without attribution).
        self._ledger = ledger
        #: The span's open share (None without attribution): its children's shares open inside it.
        self.share = share

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
            opening = self._opening
            meter = self._meter
            if not enabled:
                interval = meter.close_interval(opening, end_time, None, measurement, False)
            else:
                if end_time is not None or opening[2] is not None:
                    processor.start_history(meter)  # type: ignore[union-attr]
                try:
                    interval = meter.close_interval(opening, end_time, self._synchronize, measurement)
                except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
                    processor.report_failure(exc)  # type: ignore[union-attr]
                    interval = meter.close_interval(opening, end_time, None, measurement, False)
            if end_time is None:
                # The wall clock read beside the closing snapshot: the SDK's end time.
                sdk_end_time = interval.end_wall_ns
            # Closed even when the processor is off: an open share would dilute the thread's others.
            share = self.share
            attribution = None if share is None else self._ledger.close_span(share, opening[0], interval.closed)  # type: ignore[union-attr]
            if enabled:
                if processor.on_measurement is None:  # type: ignore[union-attr]
                    # The common case, without the hook's frame: the attributes straight onto the span.
                    try:
                        attributes = span_attributes(interval, attribution)
                        if attributes:
                            set_clean_attributes(span, attributes)
                    except Exception as exc:  # noqa: BLE001 - the user's span must end whatever happens here
                        processor.report_failure(exc)  # type: ignore[union-attr]
                else:
                    processor.set_span_attributes(span, interval, attribution)  # type: ignore[union-attr]
            else:
                # The caller's own measurement is its to report, whether or not this processor still measures.
                attributes = span_attributes(interval, None)
                if attributes:
                    span.set_attributes(attributes)
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
        energy_attributes = span_attributes(Interval.of_measurement(measurement), None)
        if energy_attributes:
            span.set_attributes(energy_attributes)
        if attributes:
            span.set_attributes(attributes)
    span.end(end_time)
