"""The training-run model: root span ``training``, one ``epoch`` span per epoch, per-epoch
measurement and the prediction of the whole run, and the tracker that runs it (which
carbontracker's ``CarbonTracker`` and the trainer callbacks both wrap).

Modules: :mod:`~otel_joules.training.tracker` (:class:`TrainingTracker`: the run's states,
console and log messages, prediction and failures; its arguments checked in
:mod:`~otel_joules.training.options`, its results and errors in
:mod:`~otel_joules.training.outcome`, its messages in :mod:`~otel_joules.training.console`,
:mod:`~otel_joules.training.logwrite` and :mod:`~otel_joules.training.formatting`),
:mod:`~otel_joules.training.run` (:class:`TrainingRun`, the spans),
:mod:`~otel_joules.training.devices` (components -> the meter's domains),
:mod:`~otel_joules.training.results` (:class:`EpochResult`, :class:`Consumption`),
:mod:`~otel_joules.training.logformat`, :mod:`~otel_joules.training.logread` and
:mod:`~otel_joules.training.logfiles` (the carbontracker log format such runs are written in,
and reading it back, for ``otel-joules report``).

The names below load their module on first use (PEP 562): reading logs
(``logformat``, ``logread``, ``logfiles``) must not load the meter, the sensors or the OpenTelemetry SDK.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it.
_EXPORTS = {
    "COMPONENT_NAMES": "otel_joules.training.devices",
    "DeviceSelection": "otel_joules.training.devices",
    "SimulatedDevice": "otel_joules.training.devices",
    "Consumption": "otel_joules.training.results",
    "ConsumptionKind": "otel_joules.training.results",
    "EpochResult": "otel_joules.training.results",
    "TrainingRun": "otel_joules.training.run",
    "TrainingTracker": "otel_joules.training.tracker",
    "TrackerResult": "otel_joules.training.outcome",
    "CarbonTrackerError": "otel_joules.training.outcome",
    "default_tracer_provider": "otel_joules.training.run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
