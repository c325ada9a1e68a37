"""Read carbontracker-format logs: carbontracker's parser API, without its bugs.

Drop-in for ``carbontracker.parser`` (same function names, arguments and return shapes)
that reads logs written by carbontracker itself and by
:class:`otel_joules.carbontracker.logs.CarbonTrackerLogWriter`. Where carbontracker 2.4.7
reads its own logs wrongly, this module reads them right:

- ``Actual consumption for N epoch(s)`` gives N epochs, not 1 (so ``aggregate_consumption``
  uses the measured consumption of a finished run, not the prediction);
- device names keep their dots (``NVIDIA A100.1``) and lose the space after the comma;
- ``1.2e-05`` reads as 1.2e-05, not 1.2;
- a per-device power list (``[300.0 100.0]``, also wrapped over several lines the way numpy
  prints long arrays) gives one column per device, not only the first number;
- a power of ``None`` (nothing measured) is NaN, not 0 W;
- the standard and output logs of a run are paired by name, not by position in two sorted
  lists, and ``parse_logs(log_dir, std_log_file)`` reads that file.

Errors: a single file that cannot be read or is not a carbontracker log raises a
:class:`~otel_joules.carbontracker.logs.CarbonTrackerLogError` subclass saying which file
and line; the functions that walk a directory skip such runs with a
:class:`SkippedLogWarning` that says which file and why, and go on with the others.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from otel_joules.errors import MissingExtraError
from otel_joules.semconv import SOURCE_ESTIMATE, SOURCE_MIXED

from otel_joules.training.logformat import (
    OUTPUT_LOG_SUFFIX,
    STD_LOG_SUFFIX,
    CarbonTrackerLogError,
    LogFilesNotFoundError,
    LogFormatError,
    LogReadError,
)
from otel_joules.training.logfiles import (
    LogPair,
    SkippedLogWarning,
    check_log_dir,
    find_log_pairs,
    read_log_text,
    warn_skipped,
)
from otel_joules.training.logread import (
    EpochRecord,
    StandardLog,
    components_line_devices,
    consumption_blocks,
    get_consumption,
    get_early_stop,
    looks_like_standard_log,
    parse_duration,
    parse_standard_log,
)

#: carbontracker's dictionary of one consumption block (see :func:`get_consumption`).
Consumption = Dict[str, Any]


def _components(log: StandardLog, source: str) -> Dict[str, Dict[str, Any]]:
    """carbontracker's per-component dictionary (see :func:`parse_logs`)."""
    # Here rather than at the top: carbontracker's API hands back numpy arrays, but importing numpy
    # costs more than the whole rest of the parser, reading totals does not need it, and the base
    # install has no numpy (the pandas extra brings it).
    try:
        import numpy as np
    except ImportError:
        raise MissingExtraError(
            "carbontracker's parse_logs and parse_all_logs return numpy arrays, and numpy is not installed: "
            "pip install 'otel-joules[pandas]'"
        ) from None

    epochs = log.complete_epochs
    names = list(log.devices)
    for record in epochs:
        names.extend(name for name in record.power_watts if name not in names)
    result: Dict[str, Dict[str, Any]] = {}
    for name in names:
        durations = np.array([record.duration_seconds for record in epochs], dtype=float) if epochs else None
        rows = [record.power_watts.get(name) for record in epochs]
        measured = [row for row in rows if row is not None]
        has_lines = any(name in record.power_watts for record in epochs)
        if durations is None or not has_lines:
            power = None
            energy = None
        else:
            widths = {len(row) for row in measured} or {1}
            if len(widths) > 1:
                raise LogFormatError(
                    f"{source}: the power of {name!r} has {sorted(widths)} values in different epochs; "
                    "expected the same number of devices in every epoch"
                )
            width = widths.pop()
            # Not measured is unknown, not 0 W: NaN keeps the epoch out of sums that
            # skip NaN, instead of silently counting it as free.
            power = np.array([row if row is not None else (math.nan,) * width for row in rows], dtype=float)
            energy = power * durations[:, np.newaxis]
        result[name] = {
            "avg_power_usages (W)": power,
            "avg_energy_usages (J)": energy,
            "epoch_durations (s)": durations,
            "devices": list(log.devices.get(name, [])),
        }
    return result


@dataclass(frozen=True)
class ParsedRun:
    """One run read from its log pair: the standard log, its actual and predicted consumption, its components."""

    pair: LogPair
    std: StandardLog
    actual: Optional[Consumption]
    pred: Optional[Consumption]
    components: Dict[str, Dict[str, Any]]


def _runs(log_dir: str | os.PathLike[str]) -> List[ParsedRun]:
    runs: List[ParsedRun] = []
    for pair in find_log_pairs(log_dir):
        try:
            std_text = read_log_text(pair.std_log)
            output_text = read_log_text(pair.output_log)
            std = parse_standard_log(std_text, source=pair.std_log)
            if not looks_like_standard_log(std):
                raise LogFormatError(f"{pair.std_log!r} has no carbontracker line (version, PUE, components or epochs)")
            components = _components(std, pair.std_log)
            try:
                actual, pred = consumption_blocks(output_text, len(std.complete_epochs))
            except LogFormatError as exc:
                raise LogFormatError(f"{pair.output_log!r}: {exc}") from None
        except CarbonTrackerLogError as exc:
            warn_skipped(f"skipped the run {pair.stem!r}: {exc}")
            continue
        runs.append(ParsedRun(pair=pair, std=std, actual=actual, pred=pred, components=components))
    return runs


def parse_all_logs(log_dir: str | os.PathLike[str]) -> List[Dict[str, Any]]:
    """Parse every run in ``log_dir``.

    Returns:
        One dictionary per run, sorted by file name::

            {
                "output_filename": str,
                "standard_filename": str,
                "components": dict,       # see parse_logs
                "early_stop": bool,
                "actual": dict | None,    # see get_consumption
                "pred": dict | None,      # see get_consumption
            }

        Runs whose files are unpaired, empty or corrupt are left out, each with a
        :class:`SkippedLogWarning` saying why.

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory.
    """
    return [
        {
            "output_filename": run.pair.output_log,
            "standard_filename": run.pair.std_log,
            "components": run.components,
            "early_stop": run.std.early_stop,
            "actual": run.actual,
            "pred": run.pred,
        }
        for run in _runs(log_dir)
    ]


def _most_recent_std_log(directory: str) -> str:
    candidates = [
        os.path.join(directory, name)
        for name in os.listdir(directory)
        if name.endswith(STD_LOG_SUFFIX) and os.path.isfile(os.path.join(directory, name))
    ]
    candidates = [path for path in candidates if os.path.getsize(path) > 0]
    if not candidates:
        raise LogFilesNotFoundError(
            f"no non-empty *{STD_LOG_SUFFIX} file in {directory!r}; pass the log_dir the tracker wrote to"
        )
    return max(candidates, key=lambda path: (os.path.getmtime(path), path))


def parse_logs(
    log_dir: str | os.PathLike[str],
    std_log_file: Optional[str] = None,
    output_log_file: Optional[str] = None,
) -> Dict[str, Dict[str, Any]]:
    """Per-component measurements of one standard log.

    Args:
        log_dir: Directory of logs.
        std_log_file: The standard log to read: a path, or a file name inside
            ``log_dir``. Default: the most recently modified non-empty one in ``log_dir``.
        output_log_file: Not used (deprecated in carbontracker too); accepted for compatibility.

    Returns:
        ``{component: {...}}`` with ``component`` ``"gpu"``/``"cpu"`` in the order of the
        components line::

            {
                "avg_power_usages (W)": ndarray (epochs x values) | None,
                "avg_energy_usages (J)": ndarray (epochs x values) | None,
                "epoch_durations (s)": ndarray (epochs,) | None,
                "devices": list[str],
            }

        A row holds one value (our logs: the component's total power) or one per device
        (per-device lists); ``None`` in the log gives NaN. Arrays are None when the log
        has no complete epoch or no power line for that component. Energy is power times
        the epoch's duration (W x s = J).

    Raises:
        LogFilesNotFoundError: no such directory or file, or no standard log in ``log_dir``.
        LogFormatError: the file is not a carbontracker standard log, or a value in it
            cannot be read (the message names the line).
        LogReadError: the file cannot be read.

    A run that has written nothing yet (empty standard logs only, or an empty
    ``std_log_file``) gives ``{}``, as in carbontracker.
    """
    del output_log_file  # carbontracker ignores it as well; the standard log has everything.
    if std_log_file is None:
        directory = check_log_dir(log_dir)
        if _only_empty_std_logs(directory):
            return {}
        path = _most_recent_std_log(directory)
    else:
        path = os.fspath(std_log_file)
        if not os.path.exists(path):
            inside = os.path.join(os.fspath(log_dir), path)
            if os.path.exists(inside):
                path = inside
    text = read_log_text(path)
    if not text.strip():
        return {}
    log = parse_standard_log(text, source=path)
    if not looks_like_standard_log(log):
        raise LogFormatError(
            f"{path!r} is not a carbontracker standard log: it has no version, PUE, components or epoch line"
        )
    return _components(log, path)


# -------------------------------------------------------------------------- aggregate


def _choose(run: ParsedRun) -> Optional[Consumption]:
    actual, pred = run.actual, run.pred
    if actual is None or pred is None:
        return actual if actual is not None else pred
    # The prediction covers the whole training; the actual block covers it too when all
    # epochs were monitored, and is the only truth after an early stop.
    if run.std.early_stop or actual["epochs"] == pred["epochs"]:
        return actual
    return pred


@dataclass
class RunTotals:
    """The runs of an aggregate added up: energy, CO2eq, equivalents, and what their writers say the figures are."""

    energy_kwh: float = 0.0
    co2eq_grams: float = 0.0
    equivalents: Dict[str, float] = field(default_factory=dict)
    #: Who wrote the runs -> what their logs say the figures are (None: not said).
    writers: Dict[str, List[Optional[str]]] = field(default_factory=dict)
    #: Runs whose logs say an epoch was below a counter's resolution.
    below_resolution_runs: int = 0
    #: Runs whose consumption is in the sums.
    runs: int = 0


def _aggregate(log_dir: str | os.PathLike[str]) -> RunTotals:
    totals = RunTotals()
    for run in _runs(log_dir):
        chosen = _choose(run)
        if chosen is None:
            warn_skipped(f"skipped the run {run.pair.stem!r}: {run.pair.output_log!r} has no consumption block yet")
            continue
        energy, co2eq = chosen["energy (kWh)"], chosen["co2eq (g)"]
        if not math.isfinite(energy):
            warn_skipped(f"skipped the run {run.pair.stem!r}: its energy is {energy!r} kWh")
            continue
        totals.energy_kwh += energy
        if math.isfinite(co2eq):
            totals.co2eq_grams += co2eq
        for unit, amount in (chosen["equivalents"] or {}).items():
            totals.equivalents[unit] = totals.equivalents.get(unit, 0.0) + amount
        if run.std.software:
            totals.writers.setdefault(run.std.software, []).append(run.std.energy_source)
        if run.std.below_resolution:
            totals.below_resolution_runs += 1
        totals.runs += 1
    if not totals.runs:
        raise _nothing_found(log_dir)
    return totals


def _nothing_found(log_dir: str | os.PathLike[str]) -> LogFilesNotFoundError:
    """The error of an aggregate over no run: a sum over nothing is not a result of 0 kWh."""
    directory = os.fspath(log_dir)
    logs = [name for name in os.listdir(directory) if name.endswith((STD_LOG_SUFFIX, OUTPUT_LOG_SUFFIX))]
    if not logs:
        found = "it holds no carbontracker log (*" + STD_LOG_SUFFIX + " and *" + OUTPUT_LOG_SUFFIX + " pairs)"
    else:
        found = (
            f"none of its {len(logs)} log file(s) is a finished run with a consumption block "
            "(the SkippedLogWarning for each says why)"
        )
    return LogFilesNotFoundError(
        f"no carbontracker logs found in {directory!r}: {found}; pass the log_dir the tracker wrote to"
    )


def aggregate_consumption(log_dir: str | os.PathLike[str]) -> Tuple[float, float, Dict[str, float]]:
    """Total consumption of every run in ``log_dir``.

    Per run, the actual consumption when all epochs were monitored or training stopped
    early, else the prediction for the whole training (carbontracker's rule, applied to
    the right epoch counts).

    Returns:
        ``(energy_kwh, co2eq_grams, equivalents)`` with ``equivalents`` mapping a unit to
        its summed amount. Runs without a consumption block, or with an unreadable one,
        are left out with a :class:`SkippedLogWarning`.

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory, or no run in it has a readable
            consumption (an aggregate over nothing is not 0 kWh; carbontracker returns zeros).
    """
    totals = _aggregate(log_dir)
    return totals.energy_kwh, totals.co2eq_grams, totals.equivalents


_ATTRIBUTION = {"carbontracker": "carbontracker (https://github.com/lfwa/carbontracker)"}


def _provenance(sources: List[Optional[str]]) -> str:
    """``Measured``, ``Estimated`` or ``Partly estimated`` for one writer's runs: never an estimate called measured."""
    estimated = sum(1 for source in sources if source in (SOURCE_ESTIMATE, SOURCE_MIXED))
    if not estimated:
        return "Measured"
    if all(source == SOURCE_ESTIMATE for source in sources):
        return "Estimated (not measured: no readable energy counter)"
    return f"Partly estimated ({estimated} of {len(sources)} run(s) include estimates)"


def print_aggregate(log_dir: str | os.PathLike[str]) -> str:
    """Print the aggregate consumption of ``log_dir`` as carbontracker's sentence; returns it too.

    ``The training of models in this work is estimated to use X kWh of electricity
    contributing to Y kg of CO2eq. This is equivalent to Z km travelled by car. Measured
    by ...`` -- naming whoever wrote the logs (carbontracker, otel-joules), and saying
    ``Estimated by`` / ``Partly estimated by`` where their logs say the figures are estimates,
    and ``BELOW RESOLUTION: ...`` where they say an epoch was too short to measure exactly.

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory, or no run in it has a readable
            consumption ("no carbontracker logs found", where carbontracker prints 0 kWh).
    """
    totals = _aggregate(log_dir)
    text = (
        f"The training of models in this work is estimated to use {totals.energy_kwh:.16f} kWh of electricity "
        f"contributing to {totals.co2eq_grams / 1000:.16f} kg of CO2eq. "
    )
    if totals.equivalents:
        text += "This is equivalent to " + " or ".join(f"{v:.16f} {k}" for k, v in totals.equivalents.items()) + ". "
    if totals.writers:
        text += " ".join(
            f"{_provenance(sources)} by {_ATTRIBUTION.get(name, name)}." for name, sources in totals.writers.items()
        )
    if totals.below_resolution_runs:
        # The sentence's figures include epochs too short to measure exactly: say so where they are shown.
        text += (
            f" BELOW RESOLUTION: {totals.below_resolution_runs} run(s) had an epoch shorter than a counter's"
            " resolution, so their figures are quantised, not exact."
        )
    text = text.rstrip()
    print(text)
    return text


# ------------------------------------------------------ carbontracker's helper functions


def _only_empty_std_logs(directory: str) -> bool:
    """True when ``directory`` has standard logs and every one is empty (runs that wrote nothing yet)."""
    sizes = [
        os.path.getsize(os.path.join(directory, name))
        for name in os.listdir(directory)
        if name.endswith(STD_LOG_SUFFIX) and os.path.isfile(os.path.join(directory, name))
    ]
    return bool(sizes) and not any(sizes)


def get_all_logs(log_dir: str | os.PathLike[str]) -> Tuple[List[str], List[str]]:
    """All runs' output and standard logs in ``log_dir``, as carbontracker's ``get_all_logs``.

    Returns:
        ``(output_logs, std_logs)``: two lists of paths (``log_dir`` joined with the file
        name), sorted by name, where ``output_logs[i]`` and ``std_logs[i]`` are the same
        run. Empty logs and logs without their counterpart are left out with a
        :class:`SkippedLogWarning` (carbontracker drops them silently, pairs the rest by
        position -- which mixes runs up when one run lacks its standard log and another its
        output log -- and raises ``MismatchedLogFilesError`` where it cannot).

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory.
    """
    pairs = find_log_pairs(log_dir)
    return [pair.output_log for pair in pairs], [pair.std_log for pair in pairs]


def get_devices(std_log_data: str) -> Dict[str, List[str]]:
    """Component -> device names of a standard or output log's text, as carbontracker's ``get_devices``.

    Returns:
        ``{"gpu": ["NVIDIA A100.1", "T4"], "cpu": ["cpu:0", "dram:0"]}`` from the first
        components line (the output log's, after its ``CarbonTracker: `` prefix, too);
        ``{}`` when the text has none. Unlike carbontracker, a dot inside a device name
        does not end the list and names carry no leading space.
    """
    return components_line_devices(std_log_data)


def get_epoch_durations(std_log_data: str) -> List[float]:
    """Seconds of every epoch with a ``Duration:`` line, in log order, as carbontracker's ``get_epoch_durations``.

    Durations keep all their decimals (carbontracker's pattern keeps at most two).
    """
    return [record.duration_seconds for record in parse_standard_log(std_log_data).complete_epochs]  # type: ignore[misc]


def get_avg_power_usages(std_log_data: str) -> Dict[str, List[List[float]]]:
    """Average power per epoch and component, as carbontracker's ``get_avg_power_usages``.

    Returns:
        ``{component: [[W, ...] per epoch]}`` in the order components first appear: one
        value per row where the log has one, one per device where it has a list. Unlike
        carbontracker 2.4.7: ``None`` (nothing measured) is ``[nan]``, not ``[0.0]``;
        ``1.2e-05`` is 1.2e-05, not 1.2; a list wrapped over several lines is read whole;
        the dict's order is the log's (carbontracker's comes from a set).
    """
    result: Dict[str, List[List[float]]] = {}
    for record in parse_standard_log(std_log_data).epochs:
        for component, power in record.power_watts.items():
            result.setdefault(component, []).append([math.nan] if power is None else list(power))
    return result


def get_most_recent_logs(log_dir: str | os.PathLike[str]) -> Tuple[str, str]:
    """The standard and output log of the most recently modified run, as carbontracker's ``get_most_recent_logs``.

    Returns:
        ``(std_log, output_log)``: paths of one run (carbontracker sorts the two kinds
        separately by modification time, so it can return two different runs' files).
        A run that has written nothing yet counts, as in carbontracker.

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory, has no standard log, or the
            most recent one has no output log (carbontracker raises ``IndexError``).
    """
    directory = check_log_dir(log_dir)
    std_logs = [
        os.path.join(directory, name)
        for name in os.listdir(directory)
        if name.endswith(STD_LOG_SUFFIX) and os.path.isfile(os.path.join(directory, name))
    ]
    if not std_logs:
        raise LogFilesNotFoundError(f"no *{STD_LOG_SUFFIX} file in {directory!r}; pass the log_dir the tracker wrote to")
    std_log = max(std_logs, key=lambda path: (os.path.getmtime(path), path))
    output_log = std_log[: -len(STD_LOG_SUFFIX)] + OUTPUT_LOG_SUFFIX
    if not os.path.isfile(output_log):
        raise LogFilesNotFoundError(f"the most recent standard log {std_log!r} has no output log {output_log!r}")
    return std_log, output_log
