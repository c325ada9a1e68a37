"""The training-run model: root span ``training``, one ``epoch`` span per epoch, per-epoch
measurement and the prediction of the whole run (used by the carbontracker-compatible tracker).

Modules: :mod:`~otel_joules.training.run` (:class:`TrainingRun`, the spans),
:mod:`~otel_joules.training.devices` (components -> the meter's domains),
:mod:`~otel_joules.training.results` (:class:`EpochResult`, :class:`Consumption`),
:mod:`~otel_joules.training.logformat` and :mod:`~otel_joules.training.logread` (the
carbontracker log format such runs are written in, and reading it back, for ``otel-joules report``).
"""

from otel_joules.training.devices import COMPONENT_NAMES, DeviceSelection, SimulatedDevice
from otel_joules.training.results import Consumption, ConsumptionKind, EpochResult
from otel_joules.training.run import TrainingRun, default_tracer_provider

__all__ = [
    "COMPONENT_NAMES",
    "Consumption",
    "ConsumptionKind",
    "DeviceSelection",
    "EpochResult",
    "SimulatedDevice",
    "TrainingRun",
    "default_tracer_provider",
]
