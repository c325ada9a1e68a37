"""What the training tracker returns and raises, and what its caller can read.

:class:`TrackerReadout` holds :class:`~otel_joules.training.tracker.TrainingTracker`'s
read-only properties (results, consumption, spans, the meter and intensity in use): the
tracker's state machine is in :mod:`otel_joules.training.tracker`. The error names are
carbontracker's: the same types are raised under carbontracker's API
(:class:`~otel_joules.carbontracker.tracker.CarbonTracker`) and by the trainer callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from otel_joules.errors import OtelJoulesError
from otel_joules.training.results import Consumption, EpochResult

if TYPE_CHECKING:
    from otel_joules.carbon.intensity import CarbonIntensity
    from otel_joules.carbon.refresh import RefreshingIntensity
    from otel_joules.training.console import TrackerOutput
    from otel_joules.meter.meter import EnergyMeter
    from otel_joules.training.run import TrainingRun


class CarbonTrackerError(OtelJoulesError):
    """Monitoring failed and ``ignore_errors`` is False; the message says what and what to do.

    The cause is chained (``__cause__``). What was measured before the failure is kept in
    :attr:`TrainingTracker.result` and on the spans, which are ended.
    """


class NoComponentsError(CarbonTrackerError):
    """None of the requested components (``gpu``, ``cpu``) can be measured here."""


class TrainingCancelledError(CarbonTrackerError):
    """The user answered ``n`` to ``stop_and_confirm``'s question.

    Raised from :meth:`TrainingTracker.epoch_end` after the actual consumption was
    reported and the spans were ended (carbontracker calls ``sys.exit(0)`` instead).
    """


@dataclass(frozen=True)
class TrackerResult:
    """What a training run consumed, as :meth:`TrainingTracker.stop` returns it.

    Attributes:
        actual: Consumption of the measured epochs; None until monitoring has ended.
        predicted: The prediction for all ``epochs``; None until made (or never, with
            ``epochs_before_pred=0``).
        epochs: Every measured epoch, in order.
        components: Component -> device names that were measured.
        early_stop: :meth:`TrainingTracker.stop` ended monitoring before ``monitor_epochs``.
        error: Why monitoring stopped on a failure, or None.
        std_log: The standard log file, when ``log_dir`` was given.
        output_log: The output log file, when ``log_dir`` was given.
        trace_id: The ``training`` span's trace id (32 hex digits), once it has started.
    """

    actual: Consumption | None
    predicted: Consumption | None
    epochs: tuple[EpochResult, ...]
    components: Mapping[str, tuple[str, ...]]
    early_stop: bool = False
    error: str | None = None
    std_log: Path | None = None
    output_log: Path | None = None
    trace_id: str | None = None


class TrackerReadout:
    """The read-only side of :class:`~otel_joules.training.tracker.TrainingTracker`: what the caller can read.

    A base class of the tracker, which sets every attribute declared here.
    """

    _actual: Consumption | None
    _predicted: Consumption | None
    _early_stop: bool
    _error: str | None
    _state: str
    _out: TrackerOutput
    _run: TrainingRun | None
    _intensity: RefreshingIntensity
    _tracer_provider: Any
    _meter: EnergyMeter | None

    @property
    def result(self) -> TrackerResult:
        """The results so far (``actual`` is set once monitoring has ended)."""
        writer = self._out.writer
        run = self._run
        return TrackerResult(
            actual=self._actual,
            predicted=self._predicted,
            epochs=tuple(run.results) if run is not None else (),
            components=dict(run.selection.devices) if run is not None else {},
            early_stop=self._early_stop,
            error=self._error,
            std_log=writer.std_log_path if writer is not None else None,
            output_log=writer.output_log_path if writer is not None else None,
            trace_id=run.trace_id if run is not None else None,
        )

    @property
    def actual(self) -> Consumption | None:
        """The actual consumption, once monitoring has ended."""
        return self._actual

    @property
    def predicted(self) -> Consumption | None:
        """The predicted consumption for all epochs, once made."""
        return self._predicted

    @property
    def epoch_results(self) -> tuple[EpochResult, ...]:
        """Every measured epoch so far."""
        return tuple(self._run.results) if self._run is not None else ()

    @property
    def monitoring(self) -> bool:
        """True while epochs are (or can still be) measured."""
        return self._state in ("ready", "running")

    @property
    def intensity(self) -> CarbonIntensity:
        """The carbon intensity in use now, with its source."""
        return self._intensity.current()

    @property
    def spans(self) -> tuple[Any, ...]:
        """The ended ``training`` and ``epoch`` spans (``ReadableSpan``), in the order they ended."""
        return tuple(self._run.spans) if self._run is not None else ()

    @property
    def tracer_provider(self) -> Any:
        """The tracer provider the spans went to."""
        return self._tracer_provider

    @property
    def meter(self) -> EnergyMeter | None:
        """The meter behind the measurements (None if it could not be created)."""
        return self._meter
