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
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from otel_joules.carbontracker.logs import (
    BELOW_RESOLUTION_LOG_PREFIX,
    ESTIMATE_DEVICE_MARKS,
    ESTIMATE_LOG_PREFIX,
    SOFTWARE_NAME,
    OUTPUT_LOG_SUFFIX,
    STD_LOG_SUFFIX,
    CarbonTrackerLogError,
    LogFilesNotFoundError,
    LogFormatError,
)

__all__ = [
    "EpochRecord",
    "LogPair",
    "LogReadError",
    "SkippedLogWarning",
    "StandardLog",
    "aggregate_consumption",
    "find_log_pairs",
    "get_all_logs",
    "get_avg_power_usages",
    "get_consumption",
    "get_devices",
    "get_early_stop",
    "get_epoch_durations",
    "get_most_recent_logs",
    "parse_all_logs",
    "parse_duration",
    "parse_logs",
    "parse_standard_log",
    "print_aggregate",
]

#: carbontracker's dictionary of one consumption block (see :func:`get_consumption`).
Consumption = Dict[str, Any]


class LogReadError(CarbonTrackerLogError, OSError):
    """A log file exists but cannot be read (permissions, I/O error)."""


class SkippedLogWarning(UserWarning):
    """A log file or run was left out of a directory-wide result; the message says which and why."""


def _skip(message: str) -> None:
    """Warn that a run was left out, pointing the warning at the caller's code, not at ours."""
    frame = sys._getframe(0)
    level = 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
        level += 1
    warnings.warn(SkippedLogWarning(message), stacklevel=level)


# ----------------------------------------------------------------------------- values

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
_NUMBER_RE = re.compile(rf"^(?:{_NUMBER})$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^(-?)(\d+):(\d{2}):(\d{2}(?:\.\d+)?)$")
_NUMPY_SCALAR_RE = re.compile(r"^np\.float\d*\((.*)\)$")


def _number(text: str) -> float:
    if not _NUMBER_RE.match(text):
        raise ValueError(f"{text!r} is not a number")
    return float(text)


def parse_duration(text: str) -> float:
    """Seconds of carbontracker's ``h:mm:ss`` or ``h:mm:ss.ff`` (``-`` allowed in front).

    Raises:
        LogFormatError: ``text`` is not such a duration.
    """
    match = _DURATION_RE.match(text.strip())
    if not match:
        raise LogFormatError(f"{text!r} is not a duration in carbontracker's h:mm:ss[.ff] format")
    sign, hours, minutes, seconds = match.groups()
    value = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return -value if sign else value


def _parse_power(text: str) -> Optional[Tuple[float, ...]]:
    """``None``/``nan`` -> None (not measured); ``400.0`` -> (400.0,); ``[300. 100.]`` -> (300.0, 100.0)."""
    text = " ".join(text.split())
    numpy_scalar = _NUMPY_SCALAR_RE.match(text)
    if numpy_scalar:
        text = numpy_scalar.group(1).strip()
    if text == "None":
        return None
    if text.startswith("["):
        if not text.endswith("]"):
            raise ValueError(f"the list {text!r} is not closed with ']'")
        items = [item for item in re.split(r"[\s,]+", text[1:-1]) if item]
        if not items:
            raise ValueError("the list of powers is empty")
        return tuple(_number(item) for item in items)
    value = _number(text)
    if math.isnan(value):
        return None
    return (value,)


# --------------------------------------------------------------------- standard log


@dataclass(frozen=True)
class EpochRecord:
    """One ``Epoch N:`` block of a standard log.

    Attributes:
        epoch: The number after ``Epoch``.
        duration_seconds: From the ``Duration:`` line; None when the block has none
            (a run killed while writing it).
        power_watts: Component -> average power in W: one value (the component's total
            as we write it, or carbontracker's average over its devices), one value per
            device, or None when the log says ``None`` (nothing measured).
    """

    epoch: int
    duration_seconds: Optional[float] = None
    power_watts: Dict[str, Optional[Tuple[float, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class StandardLog:
    """What a standard log (``..._carbontracker.log``) says.

    Attributes:
        software: Who wrote it, from the version line (``carbontracker``, ``otel-joules``).
        version: That writer's version.
        pue: The PUE coefficient of the PUE line.
        devices: Component (``gpu``, ``cpu``) -> device names, from the components line.
        epochs: The epoch blocks, in log order.
        average_intensity_g_per_kwh: From ``Average carbon intensity during training was ...``.
        early_stop: Whether it says ``Training was interrupted``.
        energy_source: ``measured``, ``estimate`` (every device estimated or simulated) or
            ``mixed``, from the ``ESTIMATE, not a measurement`` line and the device names;
            None when the log does not say (carbontracker's own logs).
        below_resolution: An epoch was shorter than a counter's update period (a
            ``BELOW RESOLUTION`` line): its energy is quantised.
    """

    software: Optional[str] = None
    version: Optional[str] = None
    pue: Optional[float] = None
    devices: Dict[str, List[str]] = field(default_factory=dict)
    epochs: List[EpochRecord] = field(default_factory=list)
    average_intensity_g_per_kwh: Optional[float] = None
    early_stop: bool = False
    energy_source: Optional[str] = None
    below_resolution: bool = False

    @property
    def complete_epochs(self) -> List[EpochRecord]:
        """The epochs that have a duration (those energy can be computed for)."""
        return [epoch for epoch in self.epochs if epoch.duration_seconds is not None]


_LINE_PREFIX_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:,\d+)? - ")
_VERSION_RE = re.compile(r"^(\S+) version (\S+)\s*$")
_PUE_RE = re.compile(rf"PUE coefficient of ({_NUMBER})", re.IGNORECASE)
_COMPONENTS_RE = re.compile(r"^The following components were found:(.*)$", re.DOTALL)
_COMPONENT_START_RE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*) with device\(s\) ")
_EPOCH_RE = re.compile(r"^Epoch (\d+):\s*$")
_DURATION_LINE_RE = re.compile(r"^Duration:\s*(.*?)\s*$")
_POWER_RE = re.compile(r"^Average power usage \(W\) for (.+?): (.*)$", re.DOTALL)
_AVERAGE_INTENSITY_RE = re.compile(rf"Average carbon intensity during training was ({_NUMBER}) gCO2", re.IGNORECASE)
_EARLY_STOP_RE = re.compile(r"Training was interrupted", re.IGNORECASE)


def _messages(text: str) -> List[Tuple[int, str]]:
    """(line number, message) pairs: the timestamp prefix removed, wrapped power lists joined."""
    messages: List[Tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        prefix = _LINE_PREFIX_RE.match(line)
        body = line[prefix.end():] if prefix else line
        if not prefix and messages:
            previous_number, previous = messages[-1]
            # numpy wraps long arrays over several lines; only the first carries the prefix.
            if previous.startswith("Average power usage") and previous.count("[") > previous.count("]"):
                messages[-1] = (previous_number, f"{previous} {body.strip()}")
                continue
        messages.append((number, body))
    return messages


def _parse_devices(text: str) -> Dict[str, List[str]]:
    """``GPU with device(s) A100.1, T4. CPU with device(s) cpu:0.`` -> {"gpu": ["A100.1", "T4"], "cpu": ["cpu:0"]}."""
    text = text.strip()
    # A component starts the text or follows the ". " that ends the previous one, so a
    # dot inside a device name ("A100.1", "8.x") does not end the list.
    starts = [m for m in _COMPONENT_START_RE.finditer(text) if m.start() == 0 or text[: m.start()].endswith(". ")]
    devices: Dict[str, List[str]] = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        segment = text[match.end():end].rstrip()
        if segment.endswith("."):
            segment = segment[:-1]
        devices[match.group(1).lower()] = [name.strip() for name in segment.split(",") if name.strip()]
    return devices


def parse_standard_log(text: str, *, source: str = "<text>") -> StandardLog:
    """Parse the text of a standard log (``..._carbontracker.log``).

    Lines the format does not define (``Monitoring thread started.``, intensity fetches)
    are ignored. ``source`` names the file in error messages.

    Raises:
        LogFormatError: a line the format defines holds a value that cannot be read
            (says which line), the same component appears twice in one epoch, or an epoch
            other than the last has no duration.
    """
    software: Optional[str] = None
    version: Optional[str] = None
    pue: Optional[float] = None
    devices: Optional[Dict[str, List[str]]] = None
    epochs: List[EpochRecord] = []
    durations: List[Optional[float]] = []
    intensity: Optional[float] = None
    early_stop = False
    estimate_line = below_resolution = False

    def current_epoch() -> int:
        # A Duration or power line before any "Epoch N:" starts an epoch of its own:
        # carbontracker's parser does not need the Epoch lines either.
        if not epochs:
            epochs.append(EpochRecord(epoch=1))
            durations.append(None)
        return len(epochs) - 1

    for line_number, message in _messages(text):
        where = f"{source}, line {line_number}"
        if software is None and (match := _VERSION_RE.match(message)):
            software, version = match.group(1), match.group(2)
        elif match := _COMPONENTS_RE.match(message):
            if devices is None:
                devices = _parse_devices(match.group(1))
        elif match := _EPOCH_RE.match(message):
            epochs.append(EpochRecord(epoch=int(match.group(1))))
            durations.append(None)
        elif match := _DURATION_LINE_RE.match(message):
            index = current_epoch()
            if durations[index] is not None:
                # Two durations in one block: the second belongs to an epoch whose
                # "Epoch N:" line is missing.
                epochs.append(EpochRecord(epoch=epochs[index].epoch + 1))
                durations.append(None)
                index += 1
            try:
                durations[index] = parse_duration(match.group(1))
            except LogFormatError as exc:
                raise LogFormatError(f"{where}: {exc}") from None
        elif match := _POWER_RE.match(message):
            component = match.group(1).strip().lower()
            try:
                power = _parse_power(match.group(2))
            except ValueError as exc:
                raise LogFormatError(f"{where}: cannot read the power of {component!r}: {exc}") from None
            index = current_epoch()
            if component in epochs[index].power_watts:
                raise LogFormatError(
                    f"{where}: a second power line for {component!r} in epoch {epochs[index].epoch}; "
                    "the log is corrupt (two runs written into one file?)"
                )
            epochs[index].power_watts[component] = power
        else:
            if pue is None and (match := _PUE_RE.search(message)):
                pue = float(match.group(1))
            if match := _AVERAGE_INTENSITY_RE.search(message):
                intensity = float(match.group(1))
            if _EARLY_STOP_RE.search(message):
                early_stop = True
            estimate_line = estimate_line or message.startswith(ESTIMATE_LOG_PREFIX)
            below_resolution = below_resolution or message.startswith(BELOW_RESOLUTION_LOG_PREFIX)

    records = [
        EpochRecord(epoch=record.epoch, duration_seconds=duration, power_watts=record.power_watts)
        for record, duration in zip(epochs, durations)
    ]
    for record in records[:-1]:
        if record.duration_seconds is None:
            raise LogFormatError(
                f"{source}: epoch {record.epoch} has no 'Duration:' line but later epochs do; the log is corrupt"
            )
    return StandardLog(
        software=software,
        version=version,
        pue=pue,
        devices=devices or {},
        epochs=records,
        average_intensity_g_per_kwh=intensity,
        early_stop=early_stop,
        energy_source=_energy_source(software, devices or {}, estimate_line),
        below_resolution=below_resolution,
    )


def _energy_source(software: Optional[str], devices: Dict[str, List[str]], estimate_line: bool) -> Optional[str]:
    """What the log says its figures are: measured, estimate or mixed (None: it does not say)."""
    names = [name for group in devices.values() for name in group]
    estimated = [name for name in names if name.endswith(ESTIMATE_DEVICE_MARKS)]
    if estimate_line or estimated:
        return "mixed" if len(estimated) < len(names) else "estimate"
    # Our writer always writes the ESTIMATE line when there is one; carbontracker never does.
    return "measured" if software == SOFTWARE_NAME else None


def _looks_like_standard_log(log: StandardLog) -> bool:
    return bool(log.software or log.pue is not None or log.devices or log.epochs)


def _components(log: StandardLog, source: str) -> Dict[str, Dict[str, Any]]:
    """carbontracker's per-component dictionary (see :func:`parse_logs`)."""
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


# ----------------------------------------------------------------------- output log

_HEADING_RE = re.compile(
    r"(Actual|Predicted) consumption(?: for (-?\d+) epochs?(?:\(s\))?)?:[ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_TIME_RE = re.compile(r"^\s*Time:\s*(.*?)\s*$")
_ENERGY_RE = re.compile(rf"^\s*Energy:\s*({_NUMBER})\s*kWh\s*$", re.IGNORECASE)
_CO2EQ_RE = re.compile(rf"^\s*CO2eq:\s*({_NUMBER})\s*g\s*$", re.IGNORECASE)
_EQUIVALENT_HEAD_RE = re.compile(r"^\s*This is equivalent to:\s*$", re.IGNORECASE)
_EQUIVALENT_RE = re.compile(rf"^\s*({_NUMBER})\s+(\S.*?)\s*$", re.IGNORECASE)


def _block(text: str, heading: "re.Match[str]", epochs_in_std_log: Optional[int]) -> Consumption:
    kind = heading.group(1).capitalize()
    line_number = text.count("\n", 0, heading.start()) + 1
    where = f"the '{heading.group(0).strip()}' block (line {line_number})"
    lines = [line for line in text[heading.end():].split("\n")[1:]]
    position = 0

    def expect(pattern: "re.Pattern[str]", what: str) -> "re.Match[str]":
        nonlocal position
        while position < len(lines) and not lines[position].strip():
            position += 1
        line = lines[position] if position < len(lines) else ""
        match = pattern.match(line)
        if not match:
            raise LogFormatError(f"{where} has no readable {what} line (found {line.strip()!r})")
        position += 1
        return match

    duration = parse_duration(expect(_TIME_RE, "'Time:'").group(1))
    energy = float(expect(_ENERGY_RE, "'Energy: ... kWh'").group(1))
    co2eq = float(expect(_CO2EQ_RE, "'CO2eq: ... g'").group(1))
    equivalents: Optional[Dict[str, float]] = None
    if position < len(lines) and _EQUIVALENT_HEAD_RE.match(lines[position]):
        equivalents = {}
        for line in lines[position + 1:]:
            # The block ends at the first line that is not "<amount> <unit>": the next
            # timestamped message, or the console's next "CarbonTracker:" line.
            if _LINE_PREFIX_RE.match(line):
                break
            match = _EQUIVALENT_RE.match(line)
            if not match:
                break
            equivalents[match.group(2)] = float(match.group(1))
    if heading.group(2) is not None:
        epochs: Optional[int] = int(heading.group(2))
    elif kind == "Actual":
        epochs = epochs_in_std_log
    else:
        epochs = None
    return {
        "epochs": epochs,
        "duration (s)": duration,
        "energy (kWh)": energy,
        "co2eq (g)": co2eq,
        "equivalents": equivalents,
    }


def get_consumption(
    output_log_data: str, std_log_data: Optional[str] = None
) -> Tuple[Optional[Consumption], Optional[Consumption]]:
    """Actual and predicted consumption from the text of an output log.

    Returns:
        ``(actual, pred)``, each None when the log has no such block, else::

            {
                "epochs": int | None,   # N of "... for N epoch(s):"
                "duration (s)": float,
                "energy (kWh)": float,
                "co2eq (g)": float,
                "equivalents": {unit: amount} | None,  # None without "This is equivalent to:"
            }

        When a log has several blocks of a kind, the last one counts. carbontracker
        writes a bare ``Actual consumption:`` when it makes no prediction; its
        ``"epochs"`` is then the number of complete epochs in ``std_log_data`` (the
        standard log's text) if given, else None (carbontracker says 1).

        ``"epochs"`` is the number the block states. carbontracker's ``stop()`` states one
        epoch fewer than ran when the last epoch had ended (its energy covers them all);
        the standard log's epoch blocks (:func:`parse_logs`) show how many ran.

    Raises:
        LogFormatError: a block's Time, Energy or CO2eq line is missing or unreadable.
    """
    epochs_in_std_log = None
    if std_log_data is not None:
        epochs_in_std_log = len(parse_standard_log(std_log_data).complete_epochs)
    return _consumption(output_log_data, epochs_in_std_log)


def _consumption(
    output_log_data: str, epochs_in_std_log: Optional[int]
) -> Tuple[Optional[Consumption], Optional[Consumption]]:
    text = output_log_data.replace("\r\n", "\n")
    actual: Optional[Consumption] = None
    pred: Optional[Consumption] = None
    for heading in _HEADING_RE.finditer(text):
        block = _block(text, heading, epochs_in_std_log)
        if heading.group(1).lower() == "actual":
            actual = block
        else:
            pred = block
    return actual, pred


def get_early_stop(std_log_data: str) -> bool:
    """Whether a standard log's text says training was interrupted (carbontracker's ``stop()``)."""
    return bool(_EARLY_STOP_RE.search(std_log_data))


# ------------------------------------------------------------------------------ files


@dataclass(frozen=True)
class LogPair:
    """The standard and output log of one run, paired by their common name stem."""

    stem: str
    std_log: str
    output_log: str


def _read_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise LogFilesNotFoundError(f"log file {path!r} does not exist") from None
    except IsADirectoryError:
        raise LogFilesNotFoundError(f"{path!r} is a directory, not a log file") from None
    except OSError as exc:
        raise LogReadError(f"cannot read log file {path!r}: {exc}") from exc
    if b"\x00" in data:
        raise LogFormatError(f"{path!r} holds binary data, not a carbontracker log")
    # carbontracker writes with the platform's default encoding; a stray non-UTF-8 byte
    # in a device name must not make the numbers unreadable.
    return data.decode("utf-8", errors="replace")


def _check_dir(log_dir: str | os.PathLike[str]) -> str:
    path = os.fspath(log_dir)
    if not os.path.isdir(path):
        raise LogFilesNotFoundError(
            f"log directory {path!r} does not exist or is not a directory; pass the log_dir the tracker wrote to"
        )
    return path


def find_log_pairs(log_dir: str | os.PathLike[str]) -> List[LogPair]:
    """The runs in ``log_dir``: standard and output logs with the same stem, sorted by name.

    A log without its counterpart, or an empty one, is left out with a
    :class:`SkippedLogWarning` (carbontracker leaves them out silently, and pairs the
    rest by position, which mixes runs up when one file is missing).

    Raises:
        LogFilesNotFoundError: ``log_dir`` is not a directory.
    """
    directory = _check_dir(log_dir)
    std_logs: Dict[str, str] = {}
    output_logs: Dict[str, str] = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(OUTPUT_LOG_SUFFIX):
            output_logs[name[: -len(OUTPUT_LOG_SUFFIX)]] = path
        elif name.endswith(STD_LOG_SUFFIX):
            std_logs[name[: -len(STD_LOG_SUFFIX)]] = path
    pairs: List[LogPair] = []
    for stem in sorted(set(std_logs) | set(output_logs)):
        std, output = std_logs.get(stem), output_logs.get(stem)
        if std is None or output is None:
            present = std or output
            missing = f"{stem}{OUTPUT_LOG_SUFFIX}" if output is None else f"{stem}{STD_LOG_SUFFIX}"
            _skip(f"skipped {present!r}: its counterpart {missing!r} is missing")
            continue
        empty = [path for path in (std, output) if os.path.getsize(path) == 0]
        if empty:
            _skip(f"skipped the run {stem!r}: {empty[0]!r} is empty (the run wrote nothing yet)")
            continue
        pairs.append(LogPair(stem=stem, std_log=std, output_log=output))
    return pairs


@dataclass(frozen=True)
class _Run:
    pair: LogPair
    std: StandardLog
    actual: Optional[Consumption]
    pred: Optional[Consumption]
    components: Dict[str, Dict[str, Any]]


def _runs(log_dir: str | os.PathLike[str]) -> List[_Run]:
    runs: List[_Run] = []
    for pair in find_log_pairs(log_dir):
        try:
            std_text = _read_text(pair.std_log)
            output_text = _read_text(pair.output_log)
            std = parse_standard_log(std_text, source=pair.std_log)
            if not _looks_like_standard_log(std):
                raise LogFormatError(f"{pair.std_log!r} has no carbontracker line (version, PUE, components or epochs)")
            components = _components(std, pair.std_log)
            try:
                actual, pred = _consumption(output_text, len(std.complete_epochs))
            except LogFormatError as exc:
                raise LogFormatError(f"{pair.output_log!r}: {exc}") from None
        except CarbonTrackerLogError as exc:
            _skip(f"skipped the run {pair.stem!r}: {exc}")
            continue
        runs.append(_Run(pair=pair, std=std, actual=actual, pred=pred, components=components))
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
        directory = _check_dir(log_dir)
        if _only_empty_std_logs(directory):
            return {}
        path = _most_recent_std_log(directory)
    else:
        path = os.fspath(std_log_file)
        if not os.path.exists(path):
            inside = os.path.join(os.fspath(log_dir), path)
            if os.path.exists(inside):
                path = inside
    text = _read_text(path)
    if not text.strip():
        return {}
    log = parse_standard_log(text, source=path)
    if not _looks_like_standard_log(log):
        raise LogFormatError(
            f"{path!r} is not a carbontracker standard log: it has no version, PUE, components or epoch line"
        )
    return _components(log, path)


# -------------------------------------------------------------------------- aggregate


def _choose(run: _Run) -> Optional[Consumption]:
    actual, pred = run.actual, run.pred
    if actual is None or pred is None:
        return actual if actual is not None else pred
    # The prediction covers the whole training; the actual block covers it too when all
    # epochs were monitored, and is the only truth after an early stop.
    if run.std.early_stop or actual["epochs"] == pred["epochs"]:
        return actual
    return pred


@dataclass
class _Totals:
    energy_kwh: float = 0.0
    co2eq_grams: float = 0.0
    equivalents: Dict[str, float] = field(default_factory=dict)
    #: Who wrote the runs -> what their logs say the figures are (None: not said).
    writers: Dict[str, List[Optional[str]]] = field(default_factory=dict)
    #: Runs whose logs say an epoch was below a counter's resolution.
    below_resolution_runs: int = 0


def _aggregate(log_dir: str | os.PathLike[str]) -> _Totals:
    totals = _Totals()
    for run in _runs(log_dir):
        chosen = _choose(run)
        if chosen is None:
            _skip(f"skipped the run {run.pair.stem!r}: {run.pair.output_log!r} has no consumption block yet")
            continue
        energy, co2eq = chosen["energy (kWh)"], chosen["co2eq (g)"]
        if not math.isfinite(energy):
            _skip(f"skipped the run {run.pair.stem!r}: its energy is {energy!r} kWh")
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
    return totals


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
        LogFilesNotFoundError: ``log_dir`` is not a directory.
    """
    totals = _aggregate(log_dir)
    return totals.energy_kwh, totals.co2eq_grams, totals.equivalents


_ATTRIBUTION = {"carbontracker": "carbontracker (https://github.com/lfwa/carbontracker)"}


def _provenance(sources: List[Optional[str]]) -> str:
    """``Measured``, ``Estimated`` or ``Partly estimated`` for one writer's runs: never an estimate called measured."""
    estimated = sum(1 for source in sources if source in ("estimate", "mixed"))
    if not estimated:
        return "Measured"
    if all(source == "estimate" for source in sources):
        return "Estimated (not measured: no readable energy counter)"
    return f"Partly estimated ({estimated} of {len(sources)} run(s) include estimates)"


def print_aggregate(log_dir: str | os.PathLike[str]) -> str:
    """Print the aggregate consumption of ``log_dir`` as carbontracker's sentence; returns it too.

    ``The training of models in this work is estimated to use X kWh of electricity
    contributing to Y kg of CO2eq. This is equivalent to Z km travelled by car. Measured
    by ...`` -- naming whoever wrote the logs (carbontracker, otel-joules), and saying
    ``Estimated by`` / ``Partly estimated by`` where their logs say the figures are estimates,
    and ``BELOW RESOLUTION: ...`` where they say an epoch was too short to measure exactly.
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
    """Component -> device names of a standard log's text, as carbontracker's ``get_devices``.

    Returns:
        ``{"gpu": ["NVIDIA A100.1", "T4"], "cpu": ["cpu:0", "dram:0"]}``; ``{}`` when the
        text has no components line. Unlike carbontracker, a dot inside a device name does
        not end the list and names carry no leading space.
    """
    return dict(parse_standard_log(std_log_data).devices)


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
    directory = _check_dir(log_dir)
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
