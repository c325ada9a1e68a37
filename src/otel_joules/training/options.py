"""The training tracker's arguments (carbontracker's constructor arguments): checked, with carbontracker's defaults and messages.

Programming errors in the arguments raise :class:`~otel_joules.errors.ConfigurationError`
whatever ``ignore_errors`` says. :func:`check_epochs` turns ``epochs``,
``epochs_before_pred`` and ``monitor_epochs`` into an :class:`EpochPlan`; the ``sim_*``
keywords become :class:`~otel_joules.training.devices.SimulatedDevice` (carbontracker
ignores the numbers without their device name; so do we, and say so); ``api_keys`` select
live carbon-intensity providers.
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from otel_joules.carbon.providers import (
    EnergiDataServiceProvider,
    LiveProvider,
    UKCarbonIntensityProvider,
    providers_from_env,
)
from otel_joules.carbon.refresh import RefreshingIntensity
from otel_joules.training.logwrite import DEFAULT_DECIMAL_PRECISION, DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS
from otel_joules.errors import ConfigurationError
from otel_joules.training.devices import COMPONENT_NAMES, SimulatedDevice

#: carbontracker 2.4.7's default ``update_interval`` (seconds).
DEFAULT_UPDATE_INTERVAL_SECONDS = 1
#: carbontracker's default utilisation of a simulated CPU or GPU.
DEFAULT_SIM_UTILISATION = 0.5
#: carbontracker's API key names, each selecting a live carbon-intensity service.
KNOWN_API_KEYS = ("electricitymaps", "carbonintensityGB", "energidataservice")


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_number(name: str, value: object, *, upper: float | None = None) -> float:
    """``value`` as a float, or ConfigurationError unless finite, > 0 (and <= ``upper``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ConfigurationError(f"{name}={value!r} must be a finite number")
    number = float(value)
    if number <= 0 or (upper is not None and number > upper):
        bound = f" and at most {upper:g}" if upper is not None else ""
        raise ConfigurationError(f"{name}={value!r} must be greater than 0{bound}")
    return number


@dataclass(frozen=True)
class EpochPlan:
    """When the tracker predicts and reports.

    Attributes:
        pred_after: Epochs measured before the prediction (0: none).
        monitor: Epochs measured (``monitor_epochs`` with -1 resolved).
        monitor_limit: The epoch at which the actual consumption is reported by itself
            (``sys.maxsize``: never, :meth:`stop` ends it).
    """

    pred_after: int
    monitor: int
    monitor_limit: int


def check_epochs(epochs: object, epochs_before_pred: object, monitor_epochs: object) -> EpochPlan:
    """Check carbontracker's epoch arguments and say when to predict and report."""
    if not _is_int(epochs) or epochs < 0:  # type: ignore[operator]
        raise ConfigurationError(
            f"epochs={epochs!r} must be an integer >= 0 (the total epochs of your training loop; 0 when a resumed "
            "training has none left)"
        )
    if not _is_int(epochs_before_pred) or epochs_before_pred < -1:  # type: ignore[operator]
        raise ConfigurationError(
            f"epochs_before_pred={epochs_before_pred!r} must be an integer: epochs to measure before the "
            "prediction, -1 for all epochs, 0 for no prediction"
        )
    if not _is_int(monitor_epochs) or monitor_epochs < -1:  # type: ignore[operator]
        raise ConfigurationError(f"monitor_epochs={monitor_epochs!r} must be an integer >= 1, or -1 to monitor all epochs")
    if monitor_epochs == 0:
        raise ConfigurationError("monitor_epochs cannot be zero: pass -1 to monitor all epochs, or a number >= 1")
    total = int(epochs)  # type: ignore[call-overload]
    pred_after = total if epochs_before_pred == -1 else int(epochs_before_pred)  # type: ignore[call-overload]
    if total == 0:
        # Nothing is planned: no prediction (of zero epochs), and every epoch that runs
        # anyway is measured until stop() (carbontracker predicts "0 epoch(s)" and,
        # monitoring "all 0 epochs", never reports by itself either).
        pred_after = 0
    monitor = total if monitor_epochs == -1 else int(monitor_epochs)  # type: ignore[call-overload]
    if monitor < pred_after:
        raise ConfigurationError(
            f"monitor_epochs={monitor_epochs!r} cannot be less than epochs_before_pred={epochs_before_pred!r} "
            f"(the prediction needs {pred_after} measured epochs); raise monitor_epochs or lower epochs_before_pred"
        )
    # epochs=0 with monitor_epochs=-1 ("all 0 epochs"): no limit, stop() ends monitoring.
    limit = sys.maxsize if total == 0 and monitor_epochs == -1 else monitor
    return EpochPlan(pred_after, monitor, limit)


def check_output_arguments(
    update_interval: object, verbose: object, decimal_precision: object, log_file_prefix: object, log_dir: object
) -> None:
    """Check the polling, console and log arguments."""
    positive_number("update_interval", update_interval)
    if not _is_int(verbose) or verbose < 0:  # type: ignore[operator]
        raise ConfigurationError(f"verbose={verbose!r} must be an integer >= 0")
    if not _is_int(decimal_precision) or decimal_precision < 0:  # type: ignore[operator]
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


def _simulated(kind: str, name: object, watts: object, util: object, watts_keyword: str) -> SimulatedDevice | None:
    if name is None:
        # carbontracker simulates only when the name is given and ignores the numbers
        # otherwise; so do we (the tracker says so once, see ignored_sim_arguments).
        return None
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"sim_{kind}={name!r} must be the simulated {kind.upper()}'s name, e.g. 'Xeon 8380'")
    if watts is None:
        # carbontracker's own message.
        raise ConfigurationError(
            f"When using simulated {kind.upper()} (sim_{kind}), you must also specify the {kind.upper()} "
            f"{'TDP' if kind == 'cpu' else 'power consumption'} ({watts_keyword})"
        )
    power = positive_number(watts_keyword, watts)
    utilisation = DEFAULT_SIM_UTILISATION if util is None else positive_number(f"sim_{kind}_util", util, upper=1.0)
    return SimulatedDevice(f"sim_{kind}", kind, f"{name.strip()} (simulated)", power * utilisation)


def simulated_devices(
    sim_cpu: object, sim_cpu_tdp: object, sim_cpu_util: object, sim_gpu: object, sim_gpu_watts: object, sim_gpu_util: object
) -> tuple[SimulatedDevice, ...]:
    """The simulated devices the ``sim_*`` keywords ask for (GPU first, as carbontracker lists them)."""
    sims = (
        _simulated("gpu", sim_gpu, sim_gpu_watts, sim_gpu_util, "sim_gpu_watts"),
        _simulated("cpu", sim_cpu, sim_cpu_tdp, sim_cpu_util, "sim_cpu_tdp"),
    )
    return tuple(sim for sim in sims if sim is not None)


def ignored_sim_arguments(
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


def check_api_keys(api_keys: object) -> None:
    """ConfigurationError unless ``api_keys`` is None or a dict of known service names."""
    if api_keys is not None and not isinstance(api_keys, Mapping):
        raise ConfigurationError(f"api_keys={api_keys!r} must be a dict such as {{'electricitymaps': 'KEY'}}")
    for name in api_keys or {}:
        if name not in KNOWN_API_KEYS:
            raise ConfigurationError(f"api_keys names unknown provider {name!r}; supported: {', '.join(KNOWN_API_KEYS)}")


def check_providers(providers: Sequence[object]) -> tuple[LiveProvider, ...]:
    """``intensity_providers`` as a tuple, or ConfigurationError for an item that is not a LiveProvider."""
    for provider in providers:
        if not isinstance(provider, LiveProvider):
            raise ConfigurationError(f"intensity_providers holds {provider!r}, which is not a LiveProvider")
    return tuple(providers)  # type: ignore[arg-type]


def providers_for_api_keys(
    api_keys: Mapping[str, str] | None, country: str | None, extra: Sequence[LiveProvider]
) -> list[LiveProvider]:
    """The live providers carbontracker's ``api_keys`` select (and the environment's), then ``extra``."""
    providers = list(providers_from_env(api_keys=dict(api_keys or {}), country=country)) + list(extra)
    if api_keys and "carbonintensityGB" in api_keys:
        providers.append(UKCarbonIntensityProvider())
    if api_keys and "energidataservice" in api_keys:
        providers.append(EnergiDataServiceProvider())
    return providers


def resolve_intensity(
    intensity_gco2eq_per_kwh: float | None,
    country: str | None,
    api_keys: Mapping[str, str] | None,
    extra: Sequence[LiveProvider],
) -> RefreshingIntensity:
    """The tracker's carbon intensity: the explicit value, else the providers ``api_keys`` select and ``extra``.

    Refreshed in the background every :data:`DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS` once started.

    Raises:
        ConfigurationError: an invalid explicit value or country code.
    """
    # An invalid explicit value or country code is a configuration error: resolve once now.
    return RefreshingIntensity.resolve(
        intensity_gco2eq_per_kwh,
        country,
        providers_for_api_keys(api_keys, country, extra),
        refresh_s=float(DEFAULT_INTENSITY_UPDATE_INTERVAL_SECONDS),
    )
