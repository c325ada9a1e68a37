"""The training-run model: root span ``training``, one ``epoch`` span per epoch, per-epoch
measurement and the prediction of the whole run (used by the carbontracker-compatible tracker)."""

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
