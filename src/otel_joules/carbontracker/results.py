"""What the carbontracker-compatible tracker returns and raises."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from otel_joules.errors import OtelJoulesError
from otel_joules.training.results import Consumption, EpochResult

__all__ = ["CarbonTrackerError", "NoComponentsError", "TrackerResult", "TrainingCancelledError"]


class CarbonTrackerError(OtelJoulesError):
    """Monitoring failed and ``ignore_errors`` is False; the message says what and what to do.

    The cause is chained (``__cause__``). What was measured before the failure is kept in
    :attr:`CarbonTracker.result` and on the spans, which are ended.
    """


class NoComponentsError(CarbonTrackerError):
    """None of the requested components (``gpu``, ``cpu``) can be measured here."""


class TrainingCancelledError(CarbonTrackerError):
    """The user answered ``n`` to ``stop_and_confirm``'s question.

    Raised from :meth:`CarbonTracker.epoch_end` after the actual consumption was
    reported and the spans were ended (carbontracker calls ``sys.exit(0)`` instead).
    """


@dataclass(frozen=True)
class TrackerResult:
    """What a training run consumed, as :meth:`CarbonTracker.stop` returns it.

    Attributes:
        actual: Consumption of the measured epochs; None until monitoring has ended.
        predicted: The prediction for all ``epochs``; None until made (or never, with
            ``epochs_before_pred=0``).
        epochs: Every measured epoch, in order.
        components: Component -> device names that were measured.
        early_stop: :meth:`CarbonTracker.stop` ended monitoring before ``monitor_epochs``.
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
