"""Drive carbontracker 2.4.7's own logging code, the oracle for the log format, offline.

carbontracker's writers are methods of its tracker classes; they only read a few
attributes of ``self`` (the logger, the components, the epoch times, the precision), so
the tests call them on a namespace holding those, with carbontracker's real ``Logger``
writing real files. Nothing here measures hardware or touches the network.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from carbontracker import loggerutil
from carbontracker.tracker import CarbonTracker, CarbonTrackerThread


@contextlib.contextmanager
def carbontracker_logger(log_dir: Path | None, *, prefix: str = "", logger_id: str = "1", verbose: int = 0) -> Iterator[loggerutil.Logger]:
    """carbontracker's ``Logger`` (writes its three files into ``log_dir``); its handlers are closed on exit."""
    logger = loggerutil.Logger(
        log_dir=None if log_dir is None else str(log_dir), verbose=verbose, log_prefix=prefix, logger_id=logger_id
    )
    try:
        yield logger
    finally:
        # Its loggers live in the logging module's registry: detach and close the
        # handlers so files are closed and later tests don't write into them.
        for each in (logger.logger, logger.logger_output, logger.logger_err):
            for handler in list(each.handlers):
                each.removeHandler(handler)
                handler.close()


def _component(name: str, devices: Sequence[str], power_usages: list) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, devices=lambda: list(devices), power_usages=power_usages)


def log_components(logger: loggerutil.Logger, components: Mapping[str, Sequence[str]]) -> None:
    """carbontracker's ``The following components were found: ...`` line."""
    this = types.SimpleNamespace(
        logger=logger, components=[_component(name, devices, []) for name, devices in components.items()]
    )
    CarbonTrackerThread._log_components_info(this)


def log_epoch(logger: loggerutil.Logger, epoch: int, duration_seconds: float, power_usages: Mapping[str, list]) -> None:
    """carbontracker's epoch block; ``power_usages[component]`` is its list of this epoch's samples.

    A flat list of numbers gives one average (carbontracker 2.x); a list of per-device
    lists gives a numpy array of per-device averages (what older versions logged); an
    empty list gives ``None`` (nothing measured).
    """
    this = types.SimpleNamespace(
        logger=logger,
        epoch_counter=epoch,
        epoch_times=[duration_seconds],
        components=[_component(name, [], [samples]) for name, samples in power_usages.items()],
    )
    CarbonTrackerThread._log_epoch_measurements(this)


def output_energy(
    logger: loggerutil.Logger,
    description: str,
    *,
    time_seconds: float,
    energy_kwh: float,
    co2eq_grams: float,
    conversions: list | None,
    decimal_precision: int,
) -> None:
    """carbontracker's consumption block (console and output log)."""
    this = types.SimpleNamespace(logger=logger, decimal_precision=decimal_precision)
    CarbonTracker._output_energy(this, description, time_seconds, energy_kwh, co2eq_grams, conversions)
