"""carbontracker's ``CarbonTracker``, measured with otel-joules and reported as OpenTelemetry spans.

Switch by changing the import prefix::

    from otel_joules.carbontracker.tracker import CarbonTracker   # was: from carbontracker.tracker import ...

    tracker = CarbonTracker(epochs=max_epochs)
    for epoch in range(max_epochs):
        tracker.epoch_start()
        ...                                   # your training
        tracker.epoch_end()
    result = tracker.stop()                   # actual and predicted consumption, as dataclasses
    print(result.actual.energy_kwh, result.actual.co2eq_grams)

What is the same as carbontracker 2.4.7: the constructor's arguments and defaults (also
``set_api_keys()``), the console messages (to which we add, where they apply, which
carbon intensity source was used, that a figure is an estimate, and ignored ``sim_*``
numbers), the log files (``log_dir``) in its format --
its own parser reads them and gets our values --, PUE 1.58 by default, a prediction after
``epochs_before_pred`` epochs and the actual consumption after ``monitor_epochs`` epochs
or at :meth:`stop`. With ``interpretable=True`` (the default) each consumption block ends
with carbontracker's one "This is equivalent to:" line, km travelled by car (106.8
gCO2eq/km); with ``interpretable=False`` it has none. The other equivalents
(:func:`otel_joules.carbon.equivalents`) are in :attr:`Consumption.equivalents`, never in
the text. ``epochs=0`` (a resumed training with nothing left to do) is accepted: no
prediction is made (there is nothing to predict), and every epoch run is measured until
:meth:`stop`. The ``sim_*`` power and utilisation arguments without their ``sim_cpu`` or
``sim_gpu`` name are ignored as carbontracker ignores them (the real hardware is
measured), and the console says so once.

What is different, on purpose:

- **Energy comes from counters read at epoch boundaries** (RAPL, NVML total energy, or
  integrated NVML power; see :class:`~otel_joules.EnergyMeter`), not from power samples
  taken every ``update_interval`` seconds: epochs of any length are measured (carbontracker
  reports ``None`` for a CPU in epochs under 1 s).
- **A component's power is the sum over its devices** (two GPUs at 300 W and 100 W give
  400 W; carbontracker writes their average, 200 W).
- **No** ``sys.exit``/``os._exit``: with ``ignore_errors=False`` a failure raises
  :class:`CarbonTrackerError` in the calling (training) thread; with ``ignore_errors=True``
  monitoring stops, the error is logged and training goes on. Answering ``n`` to
  ``stop_and_confirm`` raises :class:`TrainingCancelledError` after the results are written.
- **Results reach the caller**: :meth:`CarbonTracker.stop` returns a :class:`TrackerResult`
  (also :attr:`CarbonTracker.result`) with the actual and predicted :class:`Consumption`.
- **An interrupted epoch counts**: an epoch still open at :meth:`stop` is measured and
  reported as an epoch (``interrupted=True``), so "Actual consumption for N epoch(s)" states
  every epoch its energy covers (carbontracker states one fewer).
- The CPU estimate is said to be one: where no RAPL counter is readable, the ``cpu``
  component is estimated from CPU time x per-CPU watts (and memory size x W/GB), and the console,
  the standard log and the spans (``energy.source = "estimate"``) say so.

Spans: a root span ``training`` and one child ``epoch`` per epoch, with the energy of the
chosen components only, their carbon, and the prediction as the event
``training.prediction``: see :mod:`otel_joules.training.run`, which makes them.

The tracker is the core's :class:`~otel_joules.training.tracker.TrainingTracker` (the run's
states, console and log messages, prediction and failures, which the trainer callbacks use
too) under carbontracker's name and import path; its spans' instrumentation scope is
``otel_joules.carbontracker``.

Spans go to the global tracer provider when it is an OpenTelemetry SDK provider
(``tracer_provider=`` overrides), otherwise to a private one; either way
:attr:`CarbonTracker.spans` holds them. Their energy attributes come from this tracker's
own meter even when ``otel_joules.instrument()`` is active on the same provider (its span
processor takes the tracker's measurement).

carbontracker's simulation keywords are supported as modelled components:
``sim_cpu="name", sim_cpu_tdp=W, sim_cpu_util=u`` (default 0.5) replaces the measured CPU
by a constant ``W x u`` watts, ``sim_gpu``/``sim_gpu_watts``/``sim_gpu_util`` likewise the
GPUs; their domains (``sim_cpu``, ``sim_gpu``) carry ``energy.<domain>.method = estimate``.
``update_interval`` is accepted and validated but not needed (nothing is polled).
"""

from __future__ import annotations

from otel_joules.training.outcome import (  # noqa: F401 - carbontracker's names, importable from here
    CarbonTrackerError,
    NoComponentsError,
    TrackerResult,
    TrainingCancelledError,
)
from otel_joules.training.results import Consumption, EpochResult  # noqa: F401 - as above
from otel_joules.training.tracker import TrainingTracker

#: The instrumentation scope of the tracker's spans.
INSTRUMENTATION_SCOPE = "otel_joules.carbontracker"


class CarbonTracker(TrainingTracker):
    """Track and predict the energy and carbon of a training loop (carbontracker's API).

    The arguments, methods and what the caller can read are those of
    :class:`~otel_joules.training.tracker.TrainingTracker` (see the module docstring for
    what matches carbontracker 2.4.7 and what differs on purpose).
    """

    scope = INSTRUMENTATION_SCOPE
