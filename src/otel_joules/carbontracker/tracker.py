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
  component is estimated from CPU time x TDP (and memory size x W/GB), and the console,
  the standard log and the spans (``energy.source = "estimate"``) say so.

Spans: the run is a root span ``training``; each epoch is a child span ``epoch`` with
``training.epoch`` = its number. Both carry the energy attributes of
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
``training.early_stop``                (``training``) true when :meth:`stop` ended it early
``training.epoch.interrupted``         (``epoch``) true for an epoch still open at stop()
=====================================  =====================================================

The prediction is the event ``training.prediction`` on the root span (attributes
``training.epochs``, ``training.duration_s``, ``energy.joules``, ``energy.kwh``,
``energy.co2eq.grams``, ``carbon.intensity.gco2eq_per_kwh``, ``carbon.pue``). The
``training`` span covers the first epoch's start to the last measured epoch's end, so
time between epochs (validation, checkpoints) is in its ``energy.joules`` but, as in
carbontracker, not in the actual consumption (the sum over epochs).

Spans go to the global tracer provider when it is an OpenTelemetry SDK provider
(``tracer_provider=`` overrides), otherwise to a private one; either way
:attr:`CarbonTracker.spans` holds them. Their energy attributes come from this tracker's
own meter even when ``otel_joules.instrument()`` is active on the same provider.

carbontracker's simulation keywords are supported as modelled components:
``sim_cpu="name", sim_cpu_tdp=W, sim_cpu_util=u`` (default 0.5) replaces the measured CPU
by a constant ``W x u`` watts, ``sim_gpu``/``sim_gpu_watts``/``sim_gpu_util`` likewise the
GPUs; their domains (``sim_cpu``, ``sim_gpu``) carry ``energy.<domain>.method = estimate``.
``update_interval`` is accepted and validated but not needed (nothing is polled).
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from otel_joules._fork import register_fork_hook
from otel_joules.attribution.model import Attributor, attributor_for
from otel_joules.carbon.equivalents import Equivalent, equivalents
from otel_joules.carbon.intensity import CarbonIntensity, resolve_carbon_intensity
from otel_joules.carbon.providers import (
    EnergiDataServiceProvider,
    LiveProvider,
    UKCarbonIntensityProvider,
    providers_from_env,
)
from otel_joules.carbon.units import JOULES_PER_KWH, validate_pue
from otel_joules.carbontracker.logs import (
    BELOW_RESOLUTION_LOG_PREFIX,
    CARBONTRACKER_PUE,
    CARBONTRACKER_PUE_SOURCE,
    DEFAULT_DECIMAL_PRECISION,
    DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
    ESTIMATE_LOG_PREFIX,
    MEASURED_LOG_PREFIX,
    PROCESS_SHARE_LOG_PREFIX,
    MESSAGE_PREFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogWriter,
    ConsumptionKind,
    format_components_line,
    format_consumption,
)
from otel_joules.errors import ConfigurationError, OtelJoulesError
from otel_joules.meter.meter import EnergyMeasurement, EnergyMeter, EnergySnapshot
from otel_joules.sensors.base import Domain, HardwareType, Method
from otel_joules.tracing.attributes import measurement_attributes
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH as ATTR_INTENSITY,
    CARBON_INTENSITY_SOURCE as ATTR_INTENSITY_SOURCE,
    CARBON_PUE as ATTR_PUE,
    ENERGY_CO2EQ_GRAMS as ATTR_CO2EQ_GRAMS,
    ENERGY_JOULES,
)

__all__ = [
    "CarbonTracker",
    "CarbonTrackerError",
    "Consumption",
    "EpochResult",
    "NoComponentsError",
    "TrackerResult",
    "TrainingCancelledError",
    "parse_components",
]

#: carbontracker's component names, in the order it lists them.
COMPONENT_NAMES = ("gpu", "cpu")
#: carbontracker 2.4.7's default ``update_interval`` (seconds).
DEFAULT_UPDATE_INTERVAL_SECONDS = 1
#: carbontracker's default utilisation of a simulated CPU or GPU.
DEFAULT_SIM_UTILISATION = 0.5
#: The equivalents carbontracker 2.4.7 prints with ``interpretable=True`` (its conversion
#: table's latest row: km travelled by car); keys of :data:`otel_joules.carbon.equivalents.FACTORS`.
PRINTED_EQUIVALENT_KEYS = ("km_by_car",)
#: carbontracker's API key names, each selecting a live carbon-intensity service.
KNOWN_API_KEYS = ("electricitymaps", "carbonintensityGB", "energidataservice")

# Span and event attribute names this module adds to the core and carbon ones
# (those are imported from otel_joules.tracing.attributes above).
ATTR_EPOCH = "training.epoch"
ATTR_EPOCH_INTERRUPTED = "training.epoch.interrupted"
ATTR_EPOCHS = "training.epochs"
ATTR_EPOCHS_PLANNED = "training.epochs.planned"
ATTR_EARLY_STOP = "training.early_stop"
ATTR_DURATION_S = "training.duration_s"
ATTR_ENERGY_KWH = "energy.kwh"
EVENT_PREDICTION = "training.prediction"
SPAN_TRAINING = "training"
SPAN_EPOCH = "epoch"


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


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class EpochResult:
    """One measured epoch.

    Attributes:
        epoch: Its number (1-based).
        duration_s: Seconds between ``epoch_start()`` and ``epoch_end()``.
        energy_joules: IT energy of the chosen components (no PUE).
        joules_by_domain: Joules per measured domain (``package_0``, ``nvidia_gpu_1``, ...).
        power_watts_by_component: Average power of each component (``gpu``, ``cpu``): the
            sum over its devices; None when the epoch had no duration.
        co2eq_grams: ``energy_joules / 3.6e6 x pue x intensity_gco2eq_per_kwh``.
        intensity_gco2eq_per_kwh: The carbon intensity applied to this epoch.
        source: ``measured``, ``estimate`` or ``mixed`` (as ``energy.source``).
        below_resolution: The epoch was shorter than a counter's update period.
        interrupted: The epoch was still running when :meth:`CarbonTracker.stop` was called.
    """

    epoch: int
    duration_s: float
    energy_joules: float
    joules_by_domain: Mapping[str, float]
    power_watts_by_component: Mapping[str, float | None]
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float
    source: str
    below_resolution: bool = False
    interrupted: bool = False


@dataclass(frozen=True)
class Consumption:
    """A consumption block: what carbontracker prints as "Actual/Predicted consumption".

    Attributes:
        kind: ``"actual"`` (measured epochs) or ``"predicted"`` (the whole training).
        epochs: Epochs it covers.
        duration_s: Seconds (sum of epoch durations, or the predicted total).
        energy_joules: IT energy in joules, without PUE.
        pue: The PUE applied.
        energy_kwh: ``energy_joules x pue / 3.6e6``: facility energy, what carbontracker
            prints as ``Energy: ... kWh``.
        co2eq_grams: Grams of CO2eq.
        intensity_gco2eq_per_kwh: The intensity behind ``co2eq_grams`` (for actual
            consumption the energy-weighted average over the epochs).
        intensity_source: Where it came from (:data:`otel_joules.carbon.SOURCES`).
        equivalents: ``co2eq_grams`` as km by car and more, each with its source figure
            (always computed; ``interpretable=False`` only keeps them out of the text).
    """

    kind: str
    epochs: int
    duration_s: float
    energy_joules: float
    pue: float
    energy_kwh: float
    co2eq_grams: float
    intensity_gco2eq_per_kwh: float
    intensity_source: str
    equivalents: tuple[Equivalent, ...] = ()

    @property
    def equivalents_by_unit(self) -> dict[str, float]:
        """``{"km travelled by car": 0.0024, ...}``: the amounts keyed by carbontracker's unit phrase."""
        return {item.unit: item.amount for item in self.equivalents}

    def as_carbontracker_dict(self) -> dict[str, Any]:
        """The shape of ``carbontracker.parser.get_consumption``'s dictionaries."""
        return {
            "epochs": self.epochs,
            "duration (s)": self.duration_s,
            "energy (kWh)": self.energy_kwh,
            "co2eq (g)": self.co2eq_grams,
            "equivalents": self.equivalents_by_unit or None,
        }


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


# -------------------------------------------------------------------------- validation


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_number(name: str, value: object, *, upper: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ConfigurationError(f"{name}={value!r} must be a finite number")
    number = float(value)
    if number <= 0 or (upper is not None and number > upper):
        bound = f" and at most {upper:g}" if upper is not None else ""
        raise ConfigurationError(f"{name}={value!r} must be greater than 0{bound}")
    return number


def parse_components(components: str) -> tuple[str, ...]:
    """``"all"`` -> ``("gpu", "cpu")``; ``"cpu"``, ``"gpu"``, ``"gpu,cpu"`` as given, in carbontracker's order.

    Raises:
        ConfigurationError: not a string, empty, or naming an unknown component.
    """
    if not isinstance(components, str):
        raise ConfigurationError(f"components={components!r} must be a string: 'all', 'gpu', 'cpu' or 'gpu,cpu'")
    names = [name.strip().lower() for name in components.split(",") if name.strip()]
    if not names:
        raise ConfigurationError("components='' names nothing; use 'all', 'gpu', 'cpu' or 'gpu,cpu'")
    if "all" in names:
        return COMPONENT_NAMES
    unknown = [name for name in names if name not in COMPONENT_NAMES]
    if unknown:
        raise ConfigurationError(
            f"components={components!r}: unknown component {unknown[0]!r}; use 'all', 'gpu', 'cpu' or 'gpu,cpu'"
        )
    return tuple(name for name in COMPONENT_NAMES if name in names)


@dataclass(frozen=True)
class _Simulated:
    """A carbontracker-style simulated device: constant power, not a measurement."""

    domain_id: str
    component: str
    name: str
    watts: float


def _simulated(
    kind: str, name: object, watts: object, util: object, watts_keyword: str
) -> _Simulated | None:
    if name is None:
        # carbontracker simulates only when the name is given and ignores the numbers
        # otherwise; so do we (the tracker says so once, see _ignored_sim_arguments).
        return None
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"sim_{kind}={name!r} must be the simulated {kind.upper()}'s name, e.g. 'Xeon 8380'")
    if watts is None:
        # carbontracker's own message.
        raise ConfigurationError(
            f"When using simulated {kind.upper()} (sim_{kind}), you must also specify the {kind.upper()} "
            f"{'TDP' if kind == 'cpu' else 'power consumption'} ({watts_keyword})"
        )
    power = _positive_number(watts_keyword, watts)
    utilisation = DEFAULT_SIM_UTILISATION if util is None else _positive_number(f"sim_{kind}_util", util, upper=1.0)
    return _Simulated(f"sim_{kind}", kind, f"{name.strip()} (simulated)", power * utilisation)


def _device_name(domain: Domain) -> str:
    """The device name carbontracker would print for a domain (``cpu:0``, ``dram:0``, the GPU's name)."""
    if domain.hw_type is HardwareType.GPU:
        return domain.hw_name
    if domain.method is Method.ESTIMATE:
        return "dram (estimate)" if domain.hw_type is HardwareType.MEMORY else "cpu (estimate)"
    prefix, _, number = domain.id.rpartition("_")
    if prefix == "package" and number.isdigit():
        return f"cpu:{number}"
    if prefix == "dram" and number.isdigit():
        return f"dram:{number}"
    return domain.id


def _component_of(domain: Domain) -> str | None:
    """``gpu`` for GPUs; ``cpu`` for every other domain that adds to the total (package, dram, estimates)."""
    if not domain.in_total:
        # core/uncore are inside their package, psys covers the platform: adding them
        # would count energy twice.
        return None
    return "gpu" if domain.hw_type is HardwareType.GPU else "cpu"


# ------------------------------------------------------------------------------ tracker


class CarbonTracker:
    """Track and predict the energy and carbon of a training loop (carbontracker's API).

    Args:
        epochs: Total epochs of the training loop (>= 0; 0, e.g. a resumed training with
            none left: no prediction, every epoch run is measured until :meth:`stop`).
        epochs_before_pred: Epochs to measure before printing the prediction for all
            ``epochs``; ``-1``: after all epochs; ``0``: no prediction.
        monitor_epochs: Epochs to measure; the actual consumption is reported when reached.
            ``-1``: all ``epochs``. Must not be 0 or below ``epochs_before_pred``.
        update_interval: carbontracker's power polling interval (s). Validated (> 0) and
            otherwise unused: energy comes from counters, nothing is polled.
        interpretable: Also print CO2eq as equivalents (km by car, ...).
        stop_and_confirm: After the prediction, ask on standard input whether to continue.
            Without a terminal on stdin, training continues and the console says so.
        ignore_errors: True: a failure stops monitoring and training goes on. False: it
            raises :class:`CarbonTrackerError` in the training thread.
        components: ``"all"``, ``"gpu"``, ``"cpu"`` or ``"gpu,cpu"``.
        devices_by_pid: Measure only GPUs running a process of this process tree.
        log_dir: Directory for carbontracker-format logs; None: no files.
        log_file_prefix: Put in front of the log file names.
        verbose: 0: no console output (errors are still printed to stderr); >= 1: print.
        decimal_precision: Decimals of the printed kWh, g and equivalents.
        api_keys: carbontracker's ``{"electricitymaps": KEY}`` (zone from ``country`` or
            ``OTEL_JOULES_COUNTRY``); ``"carbonintensityGB"`` and ``"energidataservice"``
            keys select those (keyless) services.
        sim_cpu, sim_cpu_tdp, sim_cpu_util, sim_gpu, sim_gpu_watts, sim_gpu_util: Simulated
            components (see the module docstring); the numbers without their name are
            ignored, as by carbontracker, and the console says so.
        pue: Power usage effectiveness applied to kWh and CO2eq (carbontracker's 1.58).
        intensity_gco2eq_per_kwh: Use this carbon intensity (wins over everything).
        country: ISO 3166 code for the offline yearly average (else ``OTEL_JOULES_COUNTRY``).
        intensity_providers: Live providers to ask (see :mod:`otel_joules.carbon.providers`),
            refreshed in the background every 900 s; added to those ``api_keys`` selects.
        tracer_provider: Where the spans go (default: the global SDK provider, else a
            private one).
        energy_meter: Use this meter (its domains filtered by ``components``); the tracker
            does not close it. Default: a meter of its own, closed when monitoring ends.
        sysfs_root: Where sysfs is mounted, for the tracker's own meter.
        gpus: GPUs to measure (NVML indices or UUIDs), for the tracker's own meter.
        stdin: Where ``stop_and_confirm`` reads the answer (default ``sys.stdin``).

    Raises:
        ConfigurationError: an argument is invalid (always raised, whatever ``ignore_errors``).
        CarbonTrackerError: nothing can be measured or the logs cannot be written, and
            ``ignore_errors`` is False.
    """

    def __init__(
        self,
        epochs: int,
        epochs_before_pred: int = 1,
        monitor_epochs: int = -1,
        update_interval: float = DEFAULT_UPDATE_INTERVAL_SECONDS,
        interpretable: bool = True,
        stop_and_confirm: bool = False,
        ignore_errors: bool = False,
        components: str = "all",
        devices_by_pid: bool = False,
        log_dir: str | Path | None = None,
        log_file_prefix: str = "",
        verbose: int = 1,
        decimal_precision: int = DEFAULT_DECIMAL_PRECISION,
        api_keys: Mapping[str, str] | None = None,
        sim_cpu: str | None = None,
        sim_cpu_tdp: float | None = None,
        sim_cpu_util: float | None = None,
        sim_gpu: str | None = None,
        sim_gpu_watts: float | None = None,
        sim_gpu_util: float | None = None,
        *,
        pue: float = CARBONTRACKER_PUE,
        intensity_gco2eq_per_kwh: float | None = None,
        country: str | None = None,
        intensity_providers: Sequence[LiveProvider] = (),
        tracer_provider: Any = None,
        energy_meter: EnergyMeter | None = None,
        sysfs_root: str | None = None,
        gpus: Sequence[int | str] | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        # -- arguments: programming errors, raised whatever ignore_errors says
        if not _is_int(epochs) or epochs < 0:
            raise ConfigurationError(
                f"epochs={epochs!r} must be an integer >= 0 (the total epochs of your training loop; 0 when a resumed "
                "training has none left)"
            )
        if not _is_int(epochs_before_pred) or epochs_before_pred < -1:
            raise ConfigurationError(
                f"epochs_before_pred={epochs_before_pred!r} must be an integer: epochs to measure before the "
                "prediction, -1 for all epochs, 0 for no prediction"
            )
        if not _is_int(monitor_epochs) or monitor_epochs < -1:
            raise ConfigurationError(
                f"monitor_epochs={monitor_epochs!r} must be an integer >= 1, or -1 to monitor all epochs"
            )
        if monitor_epochs == 0:
            raise ConfigurationError("monitor_epochs cannot be zero: pass -1 to monitor all epochs, or a number >= 1")
        pred_after = epochs if epochs_before_pred == -1 else int(epochs_before_pred)
        if epochs == 0:
            # Nothing is planned: no prediction (of zero epochs), and every epoch that runs
            # anyway is measured until stop() (carbontracker predicts "0 epoch(s)" and,
            # monitoring "all 0 epochs", never reports by itself either).
            pred_after = 0
        monitor = epochs if monitor_epochs == -1 else int(monitor_epochs)
        if monitor < pred_after:
            raise ConfigurationError(
                f"monitor_epochs={monitor_epochs!r} cannot be less than epochs_before_pred={epochs_before_pred!r} "
                f"(the prediction needs {pred_after} measured epochs); raise monitor_epochs or lower epochs_before_pred"
            )
        _positive_number("update_interval", update_interval)
        if not _is_int(verbose) or verbose < 0:
            raise ConfigurationError(f"verbose={verbose!r} must be an integer >= 0")
        if not _is_int(decimal_precision) or decimal_precision < 0:
            raise ConfigurationError(
                f"decimal_precision={decimal_precision!r} must be an integer >= 0 (carbontracker's default is "
                f"{DEFAULT_DECIMAL_PRECISION})"
            )
        if not isinstance(log_file_prefix, str) or "/" in log_file_prefix or "\\" in log_file_prefix:
            raise ConfigurationError(
                f"log_file_prefix={log_file_prefix!r} must be a plain name without a path separator; put directories into log_dir"
            )
        if log_dir is not None and not isinstance(log_dir, (str, Path)):
            raise ConfigurationError(f"log_dir={log_dir!r} must be a directory path or None")
        if api_keys is not None and not isinstance(api_keys, Mapping):
            raise ConfigurationError(f"api_keys={api_keys!r} must be a dict such as {{'electricitymaps': 'KEY'}}")
        _check_api_keys(api_keys)
        self._component_names = parse_components(components)
        self._all_requested = "all" in [part.strip().lower() for part in components.split(",")]
        self._sims = [
            sim
            for sim in (
                _simulated("gpu", sim_gpu, sim_gpu_watts, sim_gpu_util, "sim_gpu_watts"),
                _simulated("cpu", sim_cpu, sim_cpu_tdp, sim_cpu_util, "sim_cpu_tdp"),
            )
            if sim is not None and sim.component in self._component_names
        ]
        # What the meter adds to every measurement for them (fixed from here on).
        self._sim_watts = {sim.domain_id: sim.watts for sim in self._sims}
        simulated = {sim.component for sim in self._sims}
        self._measured_components = tuple(name for name in self._component_names if name not in simulated)
        self.pue = validate_pue(pue)
        providers = list(intensity_providers)
        for provider in providers:
            if not isinstance(provider, LiveProvider):
                raise ConfigurationError(f"intensity_providers holds {provider!r}, which is not a LiveProvider")
        self._extra_providers = tuple(providers)
        self._country = country
        providers = _providers_for_api_keys(api_keys, country, providers)
        # An invalid explicit value or country code is a configuration error: resolve once now.
        first_intensity = resolve_carbon_intensity(intensity_gco2eq_per_kwh, country, providers)

        self.epochs = int(epochs)
        self.epochs_before_pred = int(epochs_before_pred)
        self.monitor_epochs = monitor
        # epochs=0 with monitor_epochs=-1 ("all 0 epochs"): no limit, stop() ends monitoring.
        self._monitor_limit = sys.maxsize if epochs == 0 and monitor_epochs == -1 else monitor
        self.update_interval = update_interval
        self.interpretable = bool(interpretable)
        self.stop_and_confirm = bool(stop_and_confirm)
        self.ignore_errors = bool(ignore_errors)
        self.components = components
        self.devices_by_pid = bool(devices_by_pid)
        self.log_dir = log_dir
        self.log_file_prefix = log_file_prefix
        self.verbose = int(verbose)
        self.decimal_precision = int(decimal_precision)
        self.api_keys = api_keys
        self._pred_after = pred_after
        self._stdin = stdin
        self._ignored_sim = _ignored_sim_arguments(
            sim_cpu, sim_cpu_tdp, sim_cpu_util, sim_gpu, sim_gpu_watts, sim_gpu_util
        )

        self._lock = threading.RLock()
        # Held across counter reads and log writes (a training thread's epoch_end): renewed in
        # a forked child (a DataLoader worker) so its own calls and exit never wait on it.
        register_fork_hook(self, "_new_lock")
        self._state = "ready"  # ready -> running -> finished (or failed)
        self._epoch_counter = 0
        self._epoch_open = False
        self._epoch_span: Any = None
        self._epoch_start: EnergySnapshot | None = None
        self._epoch_token: object | None = None
        self._epoch_thread: int | None = None
        self._root_span: Any = None
        self._root_start: EnergySnapshot | None = None
        self._epoch_results: list[EpochResult] = []
        self._spans: list[Any] = []
        self._actual: Consumption | None = None
        self._predicted: Consumption | None = None
        self._early_stop = False
        self._trace_id: str | None = None
        self._error: str | None = None
        self._writer: CarbonTrackerLogWriter | None = None
        self._meter: EnergyMeter | None = None
        self._attributor: Attributor | None = None
        self._owns_meter = energy_meter is None
        self._domains: tuple[Domain, ...] = ()
        self._domain_ids: frozenset[str] = frozenset()
        # Component (gpu, cpu) of each chosen domain that adds to it, simulated ones included.
        self._component_by_domain_id: dict[str, str] = {}
        self._devices: dict[str, tuple[str, ...]] = {}
        self._intensity = _IntensitySource(first_intensity, intensity_gco2eq_per_kwh, country, providers)

        self._tracer_provider = tracer_provider if tracer_provider is not None else _sdk_provider_or_own()
        self._tracer = self._tracer_provider.get_tracer("otel_joules.carbontracker")

        try:
            if log_dir is not None:
                self._writer = CarbonTrackerLogWriter(log_dir, log_file_prefix)
            self._meter = energy_meter if energy_meter is not None else self._build_meter(sysfs_root, gpus)
            # Keeps the history the summary's share line needs (this process's part of the host's energy).
            self._attributor = attributor_for(self._meter)
            self._select_domains()
            self._write_header()
            self._intensity.start_refreshing()
        except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
            self._fail(exc, "starting the tracker")

    # -- setup --------------------------------------------------------------------------

    def _build_meter(self, sysfs_root: str | None, gpus: Sequence[int | str] | None) -> EnergyMeter:
        want_gpu = "gpu" in self._measured_components
        want_cpu = "cpu" in self._measured_components
        return EnergyMeter(
            sysfs_root=sysfs_root,
            gpus=gpus if want_gpu else [],
            devices_by_pid=self.devices_by_pid,
            host=want_cpu,
        )

    def _select_domains(self) -> None:
        assert self._meter is not None
        measured = self._measured_components
        selected: list[Domain] = []
        for domain in self._meter.domains:
            component = _component_of(domain)
            if component is not None and component in measured:
                selected.append(domain)
            elif component is None and domain.hw_type is not HardwareType.GPU and "cpu" in measured:
                # core/uncore (inside their package) stay on the spans as detail; they are not added.
                selected.append(domain)
        self._domains = tuple(selected)
        self._domain_ids = frozenset(d.id for d in selected)
        self._component_by_domain_id = {d.id: c for d in selected if (c := _component_of(d)) is not None}
        self._component_by_domain_id.update({sim.domain_id: sim.component for sim in self._sims})
        devices: dict[str, list[str]] = {}
        for name in self._component_names:
            names = [sim.name for sim in self._sims if sim.component == name]
            names += [_device_name(d) for d in selected if _component_of(d) == name]
            if names:
                devices[name] = names
        missing = [name for name in self._component_names if name not in devices]
        if not devices or (missing and not self._all_requested):
            reasons = "; ".join(f"{u.what}: {u.reason}" for u in self._meter.unavailable) or "no sensor found"
            raise NoComponentsError(
                f"cannot measure component(s) {', '.join(missing)} here ({reasons}). "
                "Run `otel-joules devices` to see what this machine exposes, or choose other components."
            )
        self._devices = {name: tuple(names) for name, names in devices.items()}

    def _estimated_domain_ids(self) -> list[str]:
        """The chosen domains that are estimates (no counter) or simulated: never to be called measured."""
        return [d.id for d in self._domains if d.method is Method.ESTIMATE] + [sim.domain_id for sim in self._sims]

    def _measured_domain_ids(self) -> list[str]:
        """Domains of this tracker read from hardware counters (or integrated from measured power)."""
        return [d.id for d in self._domains if d.method.is_measurement]

    def _write_header(self) -> None:
        components = {name: list(devs) for name, devs in self._devices.items()}
        line = format_components_line(components)
        pue_line = f"Only predicted and actual consumptions are multiplied by a PUE coefficient of {self.pue:g}"
        if self.pue == CARBONTRACKER_PUE:
            pue_line += f" ({CARBONTRACKER_PUE_SOURCE})"
        pue_line += "."
        if self._writer is not None:
            self._writer.write_header(
                components, pue=self.pue, pue_source=CARBONTRACKER_PUE_SOURCE if self.pue == CARBONTRACKER_PUE else None
            )
        self._console(MESSAGE_PREFIX + line)
        self._console(MESSAGE_PREFIX + pue_line)
        if self._ignored_sim:
            note = f"{self._ignored_sim} (as carbontracker ignores them): the real hardware is measured."
            self._info(note)
            self._console(MESSAGE_PREFIX + note)
        measured = self._measured_domain_ids()
        if measured:
            # Said as plainly as an estimate is: a reader of a measured run's log sees the word too.
            note = f"{MEASURED_LOG_PREFIX}{', '.join(measured)}."
            self._info(note)
            self._console(MESSAGE_PREFIX + note)
        estimated = self._estimated_domain_ids()
        if estimated:
            note = (
                f"{ESTIMATE_LOG_PREFIX}{', '.join(estimated)} "
                + (
                    "(no readable RAPL counter: CPU time x TDP and memory size x W/GB; run `otel-joules devices` for why)"
                    if any(d.method is Method.ESTIMATE for d in self._domains)
                    else "(simulated constant power)"
                )
                + "."
            )
            self._info(note)
            self._console(MESSAGE_PREFIX + note)
        intensity = self._intensity.current
        if self._writer is not None:
            self._writer.write_intensity_fetched(intensity.gco2eq_per_kwh, location=_location(intensity))

    # -- output ---------------------------------------------------------------------------

    def _console(self, text: str) -> None:
        if self.verbose > 0:
            print(text, file=sys.stdout, flush=True)

    def _info(self, message: str) -> None:
        if self._writer is not None:
            self._writer.write_info(message)

    def _output(self, message: str) -> None:
        text = self._writer.write_output(message) if self._writer is not None else MESSAGE_PREFIX + message
        self._console(text)

    def _report_error(self, message: str, *, level: str = "ERROR") -> None:
        # Errors reach the user whatever `verbose` says (carbontracker prints them too).
        print(f"{MESSAGE_PREFIX}{level} - {message}", file=sys.stderr, flush=True)
        if self._writer is not None:
            try:
                self._writer.write_error(message, level=level)
            except Exception:  # noqa: BLE001 - the log may be what failed
                pass

    # -- public API -------------------------------------------------------------------------

    def _new_lock(self) -> None:
        self._lock = threading.RLock()

    def epoch_start(self) -> None:
        """Start measuring an epoch. Call at the beginning of each epoch of the training loop."""
        with self._lock:
            if self._state not in ("ready", "running"):
                return
            try:
                self._epoch_start_locked()
            except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                self._fail(exc, "epoch_start()")

    def epoch_end(self) -> None:
        """Stop measuring the current epoch; prints the prediction or actual consumption when due.

        Raises:
            CarbonTrackerError: a failure, with ``ignore_errors=False``.
            TrainingCancelledError: the user answered ``n`` to ``stop_and_confirm``.
        """
        with self._lock:
            if self._state != "running":
                if self._state == "ready":
                    self._fail(
                        CarbonTrackerError("epoch_end() was called before any epoch_start(); call epoch_start() first"),
                        "epoch_end()",
                    )
                return
            try:
                self._epoch_end_locked()
            except TrainingCancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                self._fail(exc, "epoch_end()")

    def stop(self) -> TrackerResult:
        """End monitoring now (e.g. on early stopping) and report the actual consumption.

        An epoch still open is measured and counted (``interrupted=True``). After all
        ``monitor_epochs`` were measured this only returns the result. Idempotent.

        Returns:
            The :class:`TrackerResult` (also :attr:`result`).
        """
        with self._lock:
            if self._state in ("ready", "running"):
                try:
                    self._stop_locked()
                except Exception as exc:  # noqa: BLE001 - routed through ignore_errors
                    self._fail(exc, "stop()")
            return self.result

    def set_api_keys(self, api_keys: Mapping[str, str] | None) -> None:
        """Use these carbontracker API keys from now on, as carbontracker's ``set_api_keys``.

        ``{"electricitymaps": KEY}`` (zone from ``country``/``OTEL_JOULES_COUNTRY``),
        ``"carbonintensityGB"`` or ``"energidataservice"`` select live carbon-intensity
        services; they replace those the constructor's ``api_keys`` selected (providers
        given as ``intensity_providers`` stay). The intensity is fetched now, in the
        background, and every 900 s; epochs measured before keep the intensity they had.

        Raises:
            ConfigurationError: ``api_keys`` is not a dict or names an unknown service.
        """
        if api_keys is not None and not isinstance(api_keys, Mapping):
            raise ConfigurationError(f"api_keys={api_keys!r} must be a dict such as {{'electricitymaps': 'KEY'}}")
        _check_api_keys(api_keys)
        self.api_keys = api_keys
        self._intensity.set_providers(_providers_for_api_keys(api_keys, self._country, self._extra_providers))

    def __enter__(self) -> "CarbonTracker":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what the caller can read ---------------------------------------------------------

    @property
    def result(self) -> TrackerResult:
        """The results so far (``actual`` is set once monitoring has ended)."""
        writer = self._writer
        return TrackerResult(
            actual=self._actual,
            predicted=self._predicted,
            epochs=tuple(self._epoch_results),
            components=dict(self._devices),
            early_stop=self._early_stop,
            error=self._error,
            std_log=writer.std_log_path if writer is not None else None,
            output_log=writer.output_log_path if writer is not None else None,
            trace_id=self._trace_id,
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
        return tuple(self._epoch_results)

    @property
    def monitoring(self) -> bool:
        """True while epochs are (or can still be) measured."""
        return self._state in ("ready", "running")

    @property
    def intensity(self) -> CarbonIntensity:
        """The carbon intensity in use now, with its source."""
        return self._intensity.current

    @property
    def spans(self) -> tuple[Any, ...]:
        """The ended ``training`` and ``epoch`` spans (``ReadableSpan``), in the order they ended."""
        return tuple(self._spans)

    @property
    def tracer_provider(self) -> Any:
        """The tracer provider the spans went to."""
        return self._tracer_provider

    @property
    def energy_meter(self) -> EnergyMeter | None:
        """The meter behind the measurements (None if it could not be created)."""
        return self._meter

    # -- epochs -------------------------------------------------------------------------------

    def _snapshot(self) -> EnergySnapshot:
        assert self._meter is not None
        return self._meter.snapshot()

    def _epoch_start_locked(self) -> None:
        if self._epoch_open:
            raise CarbonTrackerError(
                f"epoch_start() was called while epoch {self._epoch_counter} is still running; call epoch_end() first"
            )
        snapshot = self._snapshot()
        if self._root_span is None:
            self._root_start = snapshot
            self._root_span = self._tracer.start_span(
                SPAN_TRAINING,
                # A training run is a trace of its own, whatever span is current.
                context=otel_context.Context(),
                attributes={ATTR_EPOCHS_PLANNED: self.epochs},
            )
            self._state = "running"
            self._trace_id = format(self._root_span.get_span_context().trace_id, "032x")
            # Names the trace in the log, so `otel-joules report` counts a run whose spans
            # and logs it is given only once. Both parsers ignore this line.
            self._info(f"{TRACE_ID_LOG_PREFIX}{self._trace_id}: the training and epoch spans of this run.")
        self._epoch_counter += 1
        self._epoch_span = self._tracer.start_span(
            SPAN_EPOCH,
            context=trace.set_span_in_context(self._root_span, otel_context.Context()),
            attributes={ATTR_EPOCH: self._epoch_counter},
        )
        # The user's own spans inside the epoch become its children.
        self._epoch_token = otel_context.attach(trace.set_span_in_context(self._epoch_span))
        self._epoch_thread = threading.get_ident()
        self._epoch_start = snapshot
        self._epoch_open = True

    def _close_epoch(self, *, interrupted: bool) -> tuple[EpochResult, EnergySnapshot]:
        """Measure and end the open epoch; returns its result and the closing snapshot."""
        assert self._epoch_start is not None
        end = self._snapshot()
        measurement = self._measure(self._epoch_start, end)
        intensity = self._intensity.current
        co2 = self._co2eq_grams(measurement.total_joules, intensity.gco2eq_per_kwh)
        power: dict[str, float | None] = {}
        for name in self._devices:
            joules = sum(
                value
                for domain_id, value in measurement.joules_by_domain.items()
                if self._component_by_domain_id.get(domain_id) == name
            )
            power[name] = joules / measurement.duration_s if measurement.duration_s > 0 else None
        result = EpochResult(
            epoch=self._epoch_counter,
            duration_s=measurement.duration_s,
            energy_joules=measurement.total_joules,
            joules_by_domain=dict(measurement.joules_by_domain),
            power_watts_by_component=power,
            co2eq_grams=co2,
            intensity_gco2eq_per_kwh=intensity.gco2eq_per_kwh,
            source=measurement.source,
            below_resolution=measurement.below_resolution,
            interrupted=interrupted,
        )
        self._epoch_results.append(result)
        span, self._epoch_span = self._epoch_span, None
        self._epoch_open = False
        self._detach_epoch_context()
        attributes = self._carbon_attributes(measurement, co2, intensity.gco2eq_per_kwh, intensity.source)
        attributes[ATTR_EPOCH] = result.epoch
        if interrupted:
            attributes[ATTR_EPOCH_INTERRUPTED] = True
        self._end_span(span, attributes)
        if self._writer is not None:
            self._writer.write_epoch(result.epoch, duration_seconds=result.duration_s, power_watts=power)
        if result.below_resolution:
            # The figure is quantised (a counter did not tick, or ticked once, inside the
            # epoch): say so where it is shown, and in the log for the report.
            note = (
                f"{BELOW_RESOLUTION_LOG_PREFIX}epoch {result.epoch} lasted {result.duration_s:.4f} s, shorter than a "
                "counter's update period: its energy and power are quantised, not exact."
            )
            self._info(note)
            self._console(MESSAGE_PREFIX + note)
        return result, end

    def _epoch_end_locked(self) -> None:
        if not self._epoch_open:
            raise CarbonTrackerError(
                f"epoch_end() was called twice for epoch {self._epoch_counter}; call epoch_start() at the start of each epoch"
            )
        _, end = self._close_epoch(interrupted=False)
        if self._epoch_counter == self._pred_after and self._pred_after > 0:
            self._output_prediction()
            if self.stop_and_confirm and not self._confirm():
                self._info("Session ended by user.")
                self._output("Quitting...")
                self._finish(end, early_stop=True)
                raise TrainingCancelledError(
                    f"training stopped at the user's request after {self._epoch_counter} epoch(s); the actual "
                    "consumption was reported and is in tracker.result"
                )
        if self._epoch_counter >= self._monitor_limit:
            self._finish(end, early_stop=False)

    def _stop_locked(self) -> None:
        if self._epoch_open:
            _, end = self._close_epoch(interrupted=True)
        else:
            end = self._snapshot() if self._meter is not None else None
        if self.epochs == 0 and self._monitor_limit == sys.maxsize:
            # Nothing was planned, so stop() is the normal end, not an interruption.
            self._finish(end, early_stop=False)
            return
        if self._writer is not None:
            self._writer.write_early_stop(self.monitor_epochs)
        self._finish(end, early_stop=True)

    # -- measurement helpers --------------------------------------------------------------

    def _measure(self, start: EnergySnapshot, end: EnergySnapshot) -> EnergyMeasurement:
        """The meter's measurement restricted to the chosen domains, plus simulated devices."""
        assert self._meter is not None
        return self._meter.measure(
            start,
            end,
            self._domain_ids,
            constant_watts=self._sim_watts,
        )

    def _co2eq_grams(self, joules: float, intensity_gco2eq_per_kwh: float) -> float:
        return max(joules, 0.0) / JOULES_PER_KWH * self.pue * intensity_gco2eq_per_kwh

    def _carbon_attributes(
        self, measurement: EnergyMeasurement, co2: float, intensity: float, source: str
    ) -> dict[str, Any]:
        attributes: dict[str, Any] = dict(measurement_attributes(measurement))
        attributes[ATTR_CO2EQ_GRAMS] = co2
        attributes[ATTR_INTENSITY] = intensity
        attributes[ATTR_INTENSITY_SOURCE] = source
        attributes[ATTR_PUE] = self.pue
        return attributes

    def _end_span(self, span: Any, attributes: Mapping[str, Any], *, error: str | None = None) -> None:
        if span is None:
            return
        span.set_attributes(dict(attributes))
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        # The class's end, not span.end: an EnergySpanProcessor from otel_joules.instrument()
        # on the same provider wraps the instance's end and would overwrite these
        # attributes with its own meter's values (all domains, not the chosen components).
        type(span).end(span)
        self._spans.append(span)

    def _detach_epoch_context(self) -> None:
        token, self._epoch_token = self._epoch_token, None
        # A context token can only be detached in the thread (context) that attached it.
        if token is not None and self._epoch_thread == threading.get_ident():
            try:
                otel_context.detach(token)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - a foreign context must not break training
                pass

    # -- consumption ----------------------------------------------------------------------

    def _consumption(
        self, kind: ConsumptionKind, epochs: int, duration_s: float, joules: float, co2: float, intensity: CarbonIntensity, value: float
    ) -> Consumption:
        return Consumption(
            kind=kind.value,
            epochs=epochs,
            duration_s=duration_s,
            energy_joules=joules,
            pue=self.pue,
            energy_kwh=max(joules, 0.0) * self.pue / JOULES_PER_KWH,
            co2eq_grams=co2,
            intensity_gco2eq_per_kwh=value,
            intensity_source=intensity.source,
            equivalents=equivalents(co2),
        )

    def _actual_consumption(self) -> Consumption:
        results = self._epoch_results
        joules = sum(r.energy_joules for r in results)
        co2 = sum(r.co2eq_grams for r in results)
        duration = sum(r.duration_s for r in results)
        intensity = self._intensity.current
        weight = sum(max(r.energy_joules, 0.0) for r in results)
        # The energy-weighted average: the intensity the epochs' grams add up to.
        average = (
            sum(max(r.energy_joules, 0.0) * r.intensity_gco2eq_per_kwh for r in results) / weight
            if weight > 0
            else intensity.gco2eq_per_kwh
        )
        return self._consumption(ConsumptionKind.ACTUAL, len(results), duration, joules, co2, intensity, average)

    def _output_block(self, consumption: Consumption, epochs: int | None) -> None:
        kind = ConsumptionKind(consumption.kind)
        # carbontracker prints only its one equivalent (km by car); the others stay in the result.
        shown = (
            {item.unit: item.amount for item in consumption.equivalents if item.key in PRINTED_EQUIVALENT_KEYS}
            if self.interpretable
            else None
        )
        # The writer's method formats exactly like format_consumption and also logs the block.
        write = self._writer.write_consumption if self._writer is not None else format_consumption
        text = write(
            kind,
            epochs=epochs,
            duration_seconds=consumption.duration_s,
            co2eq_grams=consumption.co2eq_grams,
            energy_kwh=consumption.energy_kwh,
            equivalents=shown,
            decimal_precision=self.decimal_precision,
        )
        self._console(text)

    def _console_share(self, host_joules: float) -> None:
        """Beside the host's consumption printed above, this process's share of it (console and output log).

        An extra line after carbontracker's block: its parsers ignore it, ``otel-joules report`` shows it.
        ``host_joules`` is the consumption printed above (IT energy): the share never exceeds it."""
        if self._attributor is None or self._root_start is None:
            return
        share = self._attributor.process_joules_since(self._root_start.monotonic_ns)
        if share is None:
            return
        # The history counts from the sampler period holding the start (up to 0.1 s early), so on a
        # short run the share could read more than the epochs' total: a share is never more than the host's.
        kwh = min(max(sum(share.values()), 0.0), max(host_joules, 0.0)) * self.pue / JOULES_PER_KWH
        self._output(
            f"{PROCESS_SHARE_LOG_PREFIX}{kwh:.{self.decimal_precision}f} kWh "
            "(its CPU time's part of the host's CPU and memory energy, its part of the GPUs; PUE applied). "
            "The consumption above is what the host's devices used, measured or estimated as said above."
        )

    def _output_prediction(self) -> None:
        results = self._epoch_results
        count = len(results)
        mean_joules = sum(r.energy_joules for r in results) / count
        mean_duration = sum(r.duration_s for r in results) / count
        joules = mean_joules * self.epochs
        duration = mean_duration * self.epochs
        intensity = self._intensity.current
        co2 = self._co2eq_grams(joules, intensity.gco2eq_per_kwh)
        predicted = self._consumption(
            ConsumptionKind.PREDICTED, self.epochs, duration, joules, co2, intensity, intensity.gco2eq_per_kwh
        )
        self._predicted = predicted
        if self._writer is not None:
            text = self._writer.write_predicted_intensity(
                intensity.gco2eq_per_kwh, duration_seconds=duration, location=_location(intensity), source=_say(intensity)
            )
            self._console(text)
        else:
            self._console(
                f"{MESSAGE_PREFIX}Carbon intensity for the prediction: {intensity.gco2eq_per_kwh:.2f} gCO2eq/kWh. "
                f"{_say(intensity)}"
            )
        self._output_block(predicted, self.epochs)
        if self._root_span is not None:
            self._root_span.add_event(
                EVENT_PREDICTION,
                attributes={
                    ATTR_EPOCHS: predicted.epochs,
                    ATTR_DURATION_S: predicted.duration_s,
                    ENERGY_JOULES: predicted.energy_joules,
                    ATTR_ENERGY_KWH: predicted.energy_kwh,
                    ATTR_CO2EQ_GRAMS: predicted.co2eq_grams,
                    ATTR_INTENSITY: predicted.intensity_gco2eq_per_kwh,
                    ATTR_INTENSITY_SOURCE: predicted.intensity_source,
                    ATTR_PUE: predicted.pue,
                },
            )

    def _confirm(self) -> bool:
        """Ask whether to continue; True to go on. Without a terminal, go on and say so."""
        stream = self._stdin if self._stdin is not None else sys.stdin
        try:
            interactive = stream is not None and bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            interactive = False
        if not interactive:
            message = (
                "stop_and_confirm=True, but standard input is not a terminal, so nobody can answer: "
                "continuing training without asking."
            )
            self._info(message)
            self._output(message)
            return True
        while True:
            self._output("Continue training (y/n)?")
            try:
                line = stream.readline()
            except (OSError, ValueError) as exc:
                self._output(f"Cannot read the answer ({exc}): continuing training.")
                return True
            if line == "":
                self._output("No answer (end of input): continuing training.")
                return True
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                self._output("Continuing...")
                return True
            if answer in ("n", "no"):
                return False
            self._output("Input not recognized. Try again (y/n):")

    # -- the end ----------------------------------------------------------------------------

    def _finish(self, end: EnergySnapshot | None, *, early_stop: bool) -> None:
        """Report the actual consumption, end the root span and release the meter."""
        self._early_stop = early_stop
        self._actual = self._actual_consumption()
        actual = self._actual
        intensity = self._intensity.current
        if self._writer is not None:
            text = self._writer.write_average_intensity(
                actual.intensity_gco2eq_per_kwh,
                intensities_g_per_kwh=self._intensity.values,
                update_interval_seconds=DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS,
                location=_location(intensity),
                source=_say(intensity),
            )
            self._console(text)
        else:
            self._console(
                f"{MESSAGE_PREFIX}Average carbon intensity during training was "
                f"{actual.intensity_gco2eq_per_kwh:.2f} gCO2eq/kWh. {_say(intensity)}"
            )
        self._output_block(actual, None if self.epochs_before_pred == 0 else actual.epochs)
        estimated = self._estimated_domain_ids()
        if estimated:
            # The block above is carbontracker's format and cannot carry a label: say it right after.
            self._output(f"{ESTIMATE_LOG_PREFIX}the consumption above includes estimates ({', '.join(estimated)}).")
        elif measured := self._measured_domain_ids():
            self._output(f"{MEASURED_LOG_PREFIX}the consumption above ({', '.join(measured)}).")
        self._console_share(actual.energy_joules)
        self._end_root(end, early_stop=early_stop)
        if self._writer is not None:
            text = self._writer.write_finished()
            self._console(text)
        else:
            self._console(f"{MESSAGE_PREFIX}Finished monitoring.")
        self._state = "finished"
        self._release()

    def _end_root(self, end: EnergySnapshot | None, *, early_stop: bool, error: str | None = None) -> None:
        span, self._root_span = self._root_span, None
        if span is None:
            return
        attributes: dict[str, Any] = {ATTR_EPOCHS: len(self._epoch_results), ATTR_EARLY_STOP: early_stop}
        if end is not None and self._root_start is not None:
            measurement = self._measure(self._root_start, end)
            kwh = max(measurement.total_joules, 0.0) * self.pue / JOULES_PER_KWH
            # Set by every caller that has measured epochs; computed here only for a run without any.
            actual = self._actual if self._actual is not None else self._actual_consumption()
            # The epochs' energy-weighted intensity also applies to the time between them.
            intensity = actual.intensity_gco2eq_per_kwh
            attributes.update(
                self._carbon_attributes(measurement, kwh * intensity, intensity, self._intensity.current.source)
            )
        self._end_span(span, attributes, error=error)

    def _release(self) -> None:
        self._intensity.stop()
        meter, self._meter = self._meter, None
        if meter is not None and self._owns_meter:
            meter.close()

    def _fail(self, exc: BaseException, where: str) -> None:
        """A failure: end what is open, keep what was measured, then raise or carry on."""
        message = f"{where} failed: {type(exc).__name__}: {exc}"
        self._error = message
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if self.ignore_errors:
            self._report_error(f"Ignored error: {details}Continued training without monitoring...")
        else:
            self._report_error(details, level="CRITICAL")
        try:
            end = self._snapshot() if self._meter is not None else None
        except Exception:  # noqa: BLE001 - the meter may be what failed
            end = None
        try:
            if self._epoch_open:
                span, self._epoch_span = self._epoch_span, None
                self._epoch_open = False
                self._detach_epoch_context()
                attributes: dict[str, Any] = {ATTR_EPOCH: self._epoch_counter, ATTR_EPOCH_INTERRUPTED: True}
                self._end_span(span, attributes, error=message)
            if self._epoch_results:
                self._actual = self._actual_consumption()
            self._end_root(end, early_stop=True, error=message)
        except Exception:  # noqa: BLE001 - cleaning up must not hide the original failure
            pass
        self._state = "failed"
        self._release()
        if not self.ignore_errors:
            error_type = type(exc) if isinstance(exc, CarbonTrackerError) else CarbonTrackerError
            raise error_type(
                f"energy monitoring {message}. Training was interrupted (ignore_errors=False); pass "
                "ignore_errors=True to keep training without monitoring when this happens. What was measured "
                "before is in tracker.result."
            ) from exc


# ------------------------------------------------------------------------------ helpers


def _sdk_provider_or_own() -> Any:
    """The global tracer provider if it is an SDK one (spans reach the user's exporters); else a private one."""
    provider = trace.get_tracer_provider()
    if hasattr(provider, "add_span_processor"):
        return provider
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


def _check_api_keys(api_keys: Mapping[str, str] | None) -> None:
    for name in api_keys or {}:
        if name not in KNOWN_API_KEYS:
            raise ConfigurationError(f"api_keys names unknown provider {name!r}; supported: {', '.join(KNOWN_API_KEYS)}")


def _providers_for_api_keys(
    api_keys: Mapping[str, str] | None, country: str | None, extra: Sequence[LiveProvider]
) -> list[LiveProvider]:
    """The live providers carbontracker's ``api_keys`` select (and the environment's), then ``extra``."""
    providers = list(providers_from_env(api_keys=dict(api_keys or {}), country=country)) + list(extra)
    if api_keys and "carbonintensityGB" in api_keys:
        providers.append(UKCarbonIntensityProvider())
    if api_keys and "energidataservice" in api_keys:
        providers.append(EnergiDataServiceProvider())
    return providers


def _ignored_sim_arguments(
    sim_cpu: object, sim_cpu_tdp: object, sim_cpu_util: object, sim_gpu: object, sim_gpu_watts: object, sim_gpu_util: object
) -> str:
    """A sentence naming the ``sim_*`` numbers given without their device name (carbontracker ignores them), or ''."""
    ignored = []
    if sim_cpu is None:
        ignored += [name for name, value in (("sim_cpu_tdp", sim_cpu_tdp), ("sim_cpu_util", sim_cpu_util)) if value is not None]
    if sim_gpu is None:
        ignored += [name for name, value in (("sim_gpu_watts", sim_gpu_watts), ("sim_gpu_util", sim_gpu_util)) if value is not None]
    if not ignored:
        return ""
    return f"Ignored {', '.join(ignored)}: simulation needs sim_cpu=/sim_gpu= (the simulated device's name)"


def _location(intensity: CarbonIntensity) -> str:
    return intensity.region or "Unknown"


def _say(intensity: CarbonIntensity) -> str:
    """Which intensity was used, in one line (the source names are otel_joules.carbon's)."""
    return f"Source: {intensity.source} - {intensity.detail.rstrip('.')}."


class _IntensitySource:
    """The carbon intensity in use, refreshed in the background when live providers exist.

    Provider requests are time-bounded and never raise; refreshing in a daemon thread
    keeps even their timeouts out of the training loop.
    """

    def __init__(
        self,
        first: CarbonIntensity,
        explicit: float | None,
        country: str | None,
        providers: Sequence[LiveProvider],
        refresh_s: float = float(DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS),
    ) -> None:
        self._lock = threading.Lock()
        register_fork_hook(self, "_new_lock")  # taken by the refresh thread
        self._current = first
        self._values = [first.gco2eq_per_kwh]
        self._explicit = explicit
        self._country = country
        self._providers = tuple(providers)
        self._refresh_s = refresh_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    @property
    def current(self) -> CarbonIntensity:
        with self._lock:
            return self._current

    @property
    def values(self) -> list[float]:
        with self._lock:
            return list(self._values)

    def set_providers(self, providers: Sequence[LiveProvider]) -> None:
        """Ask these providers from now on: once now (in the background) and every refresh period."""
        with self._lock:
            self._providers = tuple(providers)
            started = self._thread is not None
        if self._explicit is not None or not providers or self._stop.is_set():
            return
        if started:
            threading.Thread(target=self._refresh_once, name="otel-joules-intensity-now", daemon=True).start()
        else:
            self.start_refreshing(now=True)

    def _refresh_once(self) -> None:
        try:
            value = resolve_carbon_intensity(None, self._country, self._providers)
        except Exception:  # noqa: BLE001 - keep the last value
            return
        with self._lock:
            self._current = value
            self._values.append(value.gco2eq_per_kwh)

    def start_refreshing(self, *, now: bool = False) -> None:
        if self._explicit is not None or not self._providers or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, args=(now,), name="otel-joules-intensity", daemon=True)
        self._thread.start()

    def _run(self, now: bool = False) -> None:
        if now:
            self._refresh_once()
        while not self._stop.wait(self._refresh_s):
            self._refresh_once()

    def stop(self) -> None:
        self._stop.set()
