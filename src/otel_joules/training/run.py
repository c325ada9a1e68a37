"""A training run as OpenTelemetry spans: root span ``training``, one child ``epoch`` per epoch.

:class:`TrainingRun` measures each epoch between two snapshots of an
:class:`~otel_joules.EnergyMeter` (restricted to a :class:`~otel_joules.training.devices.DeviceSelection`),
prices it with a :class:`~otel_joules.carbon.accounting.CarbonAccounting` at the intensity in
use when it ends, and predicts the whole run's consumption from the epochs measured so far.
Spans end through :func:`otel_joules.tracing.processor.end_span_with_measurement`, so an
:class:`~otel_joules.tracing.EnergySpanProcessor` on the same provider uses this run's
measurement (its chosen components) instead of taking one of its own.

The run is a root span ``training``; each epoch is a child span ``epoch`` with
``training.epoch.number`` = its number. Both carry the energy attributes of
:mod:`otel_joules.tracing.attributes` (``energy.joules`` etc., of the chosen components
only) plus:

=====================================  =====================================================
``energy.co2eq.grams``                 ``energy.joules / 3.6e6 x carbon.pue x intensity``
``carbon.intensity.gco2eq_per_kwh``    the intensity used (for ``training``: the
                                       energy-weighted average over its epochs)
``carbon.intensity.source``            ``explicit``, ``electricitymaps``, ``offline``,
                                       ``world_average``, ... (see :mod:`otel_joules.carbon`)
``carbon.pue``                         the PUE applied
``training.epochs``                    (``training``) epochs measured
``training.epochs.planned``            (``training``) the ``epochs`` argument
``training.early_stop``                (``training``) true when the run was stopped early
``training.epoch.interrupted``         (``epoch``) true for an epoch still open when the run stopped
``training.step``                      (``step``) the trainer's global step of a sampled step
                                       span, child of its epoch (:meth:`TrainingRun.start_step`)
=====================================  =====================================================

The prediction is the event ``training.prediction`` on the root span (attributes
``training.epochs``, ``training.duration_s``, ``energy.joules``, ``energy.kwh``,
``energy.co2eq.grams``, ``carbon.intensity.gco2eq_per_kwh``, ``carbon.pue``). The
``training`` span covers the first epoch's start to the last measured epoch's end, so
time between epochs (validation, checkpoints) is in its ``energy.joules`` but, as in
carbontracker, not in the actual consumption (the sum over epochs).

It holds no lock and prints nothing: callers (:class:`~otel_joules.training.tracker.TrainingTracker`)
serialise calls and say what happened.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Mapping

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from otel_joules.attribution.attributor import Attributor
from otel_joules.attribution.registry import attributor_for
from otel_joules.carbon.accounting import CarbonAccounting
from otel_joules.carbon.equivalents import equivalents
from otel_joules.carbon.intensity import CarbonIntensity
from otel_joules.carbon.refresh import RefreshingIntensity
from otel_joules.carbon.units import validate_pue
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_INTENSITY_SOURCE,
    CARBON_PUE,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    ENERGY_KWH,
    EVENT_TRAINING_PREDICTION,
    SPAN_EPOCH,
    SOURCE_MEASURED,
    SPAN_STEP,
    SPAN_TRAINING,
    TRAINING_DURATION_S,
    TRAINING_EARLY_STOP,
    TRAINING_EPOCH_NUMBER,
    TRAINING_EPOCH_INTERRUPTED,
    TRAINING_EPOCHS_COUNT,
    TRAINING_EPOCHS_PLANNED,
    TRAINING_STEP,
)
from otel_joules.tracing.processor import end_span_with_measurement
from otel_joules.training.devices import DeviceSelection
from otel_joules.training.results import Consumption, ConsumptionKind, EpochResult

#: Stands for "nothing measured" where a span must end without a measurement (a failure
#: before the closing snapshot): no energy attributes, and no processor measures instead.
_NOTHING_MEASURED = EnergyMeasurement(0.0, {}, 0.0, 0.0, SOURCE_MEASURED, False)


def default_tracer_provider() -> Any:
    """The global tracer provider if it is an SDK one (spans reach the user's exporters); else a private one."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "add_span_processor"):
        return provider
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


class TrainingRun:
    """The spans and measurements of one training run (see the module docstring).

    Args:
        meter: The meter to read.
        selection: Which of its domains (and simulated devices) count.
        intensity: The carbon intensity in use (read when each epoch ends).
        pue: Data-centre PUE applied to kWh and CO2eq.
        tracer_provider: Where the spans go.
        planned_epochs: ``training.epochs.planned`` on the root span.
        scope: The instrumentation scope name of the spans.
        parent: Make no root span: the epochs are children of this span context (another
            process's ``training`` span: a rank above 0 of a multi-rank job).
        span_attributes: Put on every span of the run (a rank's ``training.rank``, ...).
    """

    def __init__(
        self,
        meter: EnergyMeter,
        selection: DeviceSelection,
        intensity: RefreshingIntensity,
        pue: float,
        tracer_provider: Any,
        planned_epochs: int,
        scope: str,
        parent: Any = None,
        span_attributes: Mapping[str, Any] | None = None,
    ) -> None:
        self.meter = meter
        self._parent = parent
        self._span_attributes = dict(span_attributes or {})
        self.selection = selection
        self.intensity = intensity
        self.pue = validate_pue(pue)
        self.planned_epochs = planned_epochs
        self._tracer = tracer_provider.get_tracer(scope)
        # Keeps the history the process share needs (this process's part of the host's energy).
        self._attributor: Attributor | None = attributor_for(meter)
        self.epoch = 0
        self.epoch_open = False
        self.results: list[EpochResult] = []
        self.spans: list[Any] = []
        self.trace_id: str | None = None
        self.root_start: EnergySnapshot | None = None
        self._root_span: Any = None
        self._root_context: Any = None
        self._epoch_span: Any = None
        self._epoch_start: EnergySnapshot | None = None
        self._epoch_token: object | None = None
        self._epoch_thread: int | None = None
        self._step_span: Any = None
        self._step_start: EnergySnapshot | None = None
        self._step_token: object | None = None

    @property
    def root_span_context(self) -> Any:
        """The ``training`` span's context once the first epoch started (None before, or with ``parent``)."""
        return None if self._root_span is None else self._root_span.get_span_context()

    # -- measuring ----------------------------------------------------------------------------

    def snapshot(self) -> EnergySnapshot:
        """A snapshot of the meter now."""
        return self.meter.snapshot()

    def measure(self, start: EnergySnapshot, end: EnergySnapshot) -> EnergyMeasurement:
        """The measurement of the selected devices between two snapshots."""
        return self.selection.measure(self.meter, start, end)

    def accounting(self) -> CarbonAccounting:
        """The carbon accounting at the intensity in use now."""
        return CarbonAccounting(self.intensity.current(), self.pue)

    # -- epochs -------------------------------------------------------------------------------

    def start_epoch(self) -> bool:
        """Start the next epoch's span (and the root span first); True when this started the run."""
        snapshot = self.snapshot()
        started_run = self.root_start is None
        if started_run:
            self.root_start = snapshot
            if self._parent is None:
                self._root_span = self._tracer.start_span(
                    SPAN_TRAINING,
                    # A training run is a trace of its own, whatever span is current.
                    context=otel_context.Context(),
                    attributes={**self._span_attributes, TRAINING_EPOCHS_PLANNED: self.planned_epochs},
                )
            root = self._root_span if self._root_span is not None else trace.NonRecordingSpan(self._parent)
            self._root_context = trace.set_span_in_context(root, otel_context.Context())
            self.trace_id = format(root.get_span_context().trace_id, "032x")
        self.epoch += 1
        self._epoch_span = self._tracer.start_span(
            SPAN_EPOCH,
            context=self._root_context,
            attributes={**self._span_attributes, TRAINING_EPOCH_NUMBER: self.epoch},
        )
        # The user's own spans inside the epoch become its children.
        self._epoch_token = otel_context.attach(trace.set_span_in_context(self._epoch_span))
        self._epoch_thread = threading.get_ident()
        self._epoch_start = snapshot
        self.epoch_open = True
        return started_run

    def end_epoch(self, *, interrupted: bool = False) -> tuple[EpochResult, EnergySnapshot]:
        """Measure and end the open epoch; its result and the closing snapshot."""
        assert self._epoch_start is not None
        self.abandon_step()
        end = self.snapshot()
        measurement = self.measure(self._epoch_start, end)
        accounting = self.accounting()
        result = EpochResult(
            epoch=self.epoch,
            duration_s=measurement.duration_s,
            energy_joules=measurement.total_joules,
            joules_by_domain=dict(measurement.joules_by_domain),
            power_watts_by_component=self.selection.power_watts_by_component(measurement),
            co2eq_grams=accounting.co2eq_grams(measurement.total_joules),
            intensity_gco2eq_per_kwh=accounting.intensity.gco2eq_per_kwh,
            source=measurement.source,
            below_resolution=measurement.below_resolution,
            interrupted=interrupted,
        )
        self.results.append(result)
        span, self._epoch_span = self._epoch_span, None
        self.epoch_open = False
        self._detach_epoch_context()
        attributes: dict[str, Any] = accounting.span_attributes(measurement.total_joules)
        attributes[TRAINING_EPOCH_NUMBER] = result.epoch
        if interrupted:
            attributes[TRAINING_EPOCH_INTERRUPTED] = True
        self._end_span(span, attributes, measurement)
        return result, end

    # -- steps (the trainer callbacks' sampled step spans) -------------------------------------

    def start_step(self, step: int) -> None:
        """Start a ``step`` span (``training.step`` = ``step``), child of the open epoch; ends an open one unmeasured first."""
        if not self.epoch_open:
            return
        self.abandon_step()
        self._step_start = self.snapshot()
        self._step_span = self._tracer.start_span(
            SPAN_STEP,
            context=trace.set_span_in_context(self._epoch_span),
            attributes={**self._span_attributes, TRAINING_STEP: step},
        )
        self._step_token = otel_context.attach(trace.set_span_in_context(self._step_span))

    def end_step(self) -> None:
        """Measure and end the open step span (nothing when none is open)."""
        span, self._step_span = self._step_span, None
        if span is None or self._step_start is None:
            return
        measurement = self.measure(self._step_start, self.snapshot())
        self._detach(self._step_token)
        self._step_token = None
        self._end_span(span, self.accounting().span_attributes(measurement.total_joules), measurement, keep=False)

    def abandon_step(self) -> None:
        """End an open step span unmeasured (its epoch ended first, or the next step started)."""
        span, self._step_span = self._step_span, None
        if span is None:
            return
        self._detach(self._step_token)
        self._step_token = None
        self._end_span(span, {}, None, keep=False)

    def abandon_epoch(self, error: str) -> None:
        """End the open epoch's span unmeasured, as interrupted by ``error`` (a failure)."""
        if not self.epoch_open:
            return
        self.abandon_step()
        span, self._epoch_span = self._epoch_span, None
        self.epoch_open = False
        self._detach_epoch_context()
        self._end_span(span, {TRAINING_EPOCH_NUMBER: self.epoch, TRAINING_EPOCH_INTERRUPTED: True}, None, error=error)

    # -- consumption ----------------------------------------------------------------------

    def _consumption(
        self, kind: ConsumptionKind, epochs: int, duration_s: float, joules: float, co2: float, accounting: CarbonAccounting
    ) -> Consumption:
        return Consumption(
            kind=kind.value,
            epochs=epochs,
            duration_s=duration_s,
            energy_joules=joules,
            pue=self.pue,
            energy_kwh=accounting.kwh(joules),
            co2eq_grams=co2,
            intensity_gco2eq_per_kwh=accounting.intensity.gco2eq_per_kwh,
            intensity_source=accounting.intensity.source,
            equivalents=equivalents(co2),
        )

    def actual(self) -> Consumption:
        """The consumption of the measured epochs (their sum), at their energy-weighted intensity."""
        results = self.results
        joules = sum(r.energy_joules for r in results)
        co2 = sum(r.co2eq_grams for r in results)
        duration = sum(r.duration_s for r in results)
        current = self.intensity.current()
        weight = sum(CarbonAccounting.it_joules(r.energy_joules) for r in results)
        # The energy-weighted average: the intensity the epochs' grams add up to.
        average = (
            sum(CarbonAccounting.it_joules(r.energy_joules) * r.intensity_gco2eq_per_kwh for r in results) / weight
            if weight > 0
            else current.gco2eq_per_kwh
        )
        accounting = CarbonAccounting(dataclasses.replace(current, gco2eq_per_kwh=average), self.pue)
        return self._consumption(ConsumptionKind.ACTUAL, len(results), duration, joules, co2, accounting)

    def predict(self, epochs: int, intensity: CarbonIntensity | None = None) -> Consumption:
        """The consumption of ``epochs`` epochs like the measured ones' mean, at ``intensity`` (default: now).

        Also added to the root span as the event ``training.prediction``.
        """
        results = self.results
        count = len(results)
        joules = sum(r.energy_joules for r in results) / count * epochs
        duration = sum(r.duration_s for r in results) / count * epochs
        accounting = CarbonAccounting(intensity, self.pue) if intensity is not None else self.accounting()
        predicted = self._consumption(
            ConsumptionKind.PREDICTED, epochs, duration, joules, accounting.co2eq_grams(joules), accounting
        )
        if self._root_span is not None:
            self._root_span.add_event(
                EVENT_TRAINING_PREDICTION,
                attributes={
                    TRAINING_EPOCHS_COUNT: predicted.epochs,
                    TRAINING_DURATION_S: predicted.duration_s,
                    ENERGY_JOULES: predicted.energy_joules,
                    ENERGY_KWH: predicted.energy_kwh,
                    ENERGY_CO2EQ_GRAMS: predicted.co2eq_grams,
                    CARBON_INTENSITY_GCO2EQ_PER_KWH: predicted.intensity_gco2eq_per_kwh,
                    CARBON_INTENSITY_SOURCE: predicted.intensity_source,
                    CARBON_PUE: predicted.pue,
                },
            )
        return predicted

    def process_share_joules(self, host_joules: float) -> float | None:
        """This process's share of the run's energy since its start, at most ``host_joules``; None if unknown."""
        if self._attributor is None or self.root_start is None:
            return None
        share = self._attributor.process_joules_since(self.root_start.monotonic_ns)
        if share is None:
            return None
        # The history counts from the sampler period holding the start (up to 0.1 s early), so on a
        # short run the share could read more than the epochs' total: a share is never more than the host's.
        return min(CarbonAccounting.it_joules(sum(share.values())), CarbonAccounting.it_joules(host_joules))

    # -- the end ----------------------------------------------------------------------------

    def end(
        self, end: EnergySnapshot | None, *, early_stop: bool, actual: Consumption | None = None, error: str | None = None
    ) -> None:
        """End the root span: the run's epochs, and its energy from the first epoch's start to ``end``.

        ``actual`` (default: :meth:`actual`) gives the intensity: the epochs' energy-weighted
        one also applies to the time between them.
        """
        span, self._root_span = self._root_span, None
        if span is None:
            return
        attributes: dict[str, Any] = {TRAINING_EPOCHS_COUNT: len(self.results), TRAINING_EARLY_STOP: early_stop}
        measurement = None
        if end is not None and self.root_start is not None:
            measurement = self.measure(self.root_start, end)
            actual = actual if actual is not None else self.actual()
            intensity = dataclasses.replace(self.intensity.current(), gco2eq_per_kwh=actual.intensity_gco2eq_per_kwh)
            attributes.update(CarbonAccounting(intensity, self.pue).span_attributes(measurement.total_joules))
        self._end_span(span, attributes, measurement, error=error)

    def close_attribution(self) -> None:
        """Stop the meter's attributor (its ``otel-joules-attribution`` thread) now.

        Only for a caller that owns the meter and is about to close it: the attributor is
        shared by everything reading that meter. Idempotent.
        """
        if self._attributor is not None:
            self._attributor.close()

    # -- spans ------------------------------------------------------------------------------

    def _end_span(
        self,
        span: Any,
        attributes: Mapping[str, Any],
        measurement: EnergyMeasurement | None,
        *,
        error: str | None = None,
        keep: bool = True,
    ) -> None:
        if span is None:
            return
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        # An EnergySpanProcessor (otel_joules.instrument()) on the same provider takes this
        # measurement, of the chosen components, instead of measuring all domains itself; the
        # run's own attributes (its carbon at its intensity and PUE) are set after that
        # processor's hooks, so instrument()'s carbon settings cannot overwrite them.
        end_span_with_measurement(
            span, measurement if measurement is not None else _NOTHING_MEASURED, attributes=dict(attributes)
        )
        if keep:  # step spans are not kept: a long run has many
            self.spans.append(span)

    def _detach_epoch_context(self) -> None:
        token, self._epoch_token = self._epoch_token, None
        self._detach(token)

    def _detach(self, token: object | None) -> None:
        # A context token can only be detached in the thread (context) that attached it.
        if token is not None and self._epoch_thread == threading.get_ident():
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - a foreign context must not break training
                pass
