"""carbontracker-format runs: a standard and an output log with the same name stem.

``*_carbontracker.log`` and ``*_carbontracker_output.log`` make one run (both are needed;
``*_carbontracker_err.log`` holds no consumption and is ignored). The format itself (file
names, line prefixes) is :mod:`otel_joules.training.logformat`; the logs are parsed by
:mod:`otel_joules.training.logread` and paired by :mod:`otel_joules.training.logfiles`.
This module turns each pair into a :class:`~otel_joules.report.model.CarbonTrackerRun`,
skipping, each with its reason, a run that cannot be read, an epoch a half-written log cut
off, an epoch whose power or duration must not enter a total, and a logged total (kWh or
CO2eq) that must not.
"""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

from otel_joules.report.filestream import open_regular
from otel_joules.report.inputs import Inputs
from otel_joules.report.model import CarbonTrackerRun, Skipped
from otel_joules.report.record_checks import number_problem
from otel_joules.training.logfiles import SkippedLogWarning, find_log_pairs
from otel_joules.training.logread import get_consumption, parse_standard_log
from otel_joules.training.logformat import (
    ERR_LOG_SUFFIX,
    OUTPUT_LOG_SUFFIX,
    PROCESS_SHARE_LOG_PREFIX,
    STD_LOG_SUFFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogError,
)

#: Largest carbontracker log read.
MAX_LOG_BYTES = 64 << 20

_CARBONTRACKER_SUFFIXES = (OUTPUT_LOG_SUFFIX, STD_LOG_SUFFIX, ERR_LOG_SUFFIX)
# Lines only the carbontracker-compatible tracker writes (their prefixes are
# otel_joules.training.logformat's): the process share and the run's trace id.
_SHARE_RE = re.compile(rf"CarbonTracker: {re.escape(PROCESS_SHARE_LOG_PREFIX)}([0-9.eE+-]+) kWh")
_TRACE_ID_RE = re.compile(rf" - {re.escape(TRACE_ID_LOG_PREFIX)}([0-9a-f]{{32}})\b")


def carbontracker_stem(name: str) -> str | None:
    """The run a carbontracker log file belongs to (its name before the suffix), or None."""
    for suffix in _CARBONTRACKER_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def _logged_share_kwh(output_text: str) -> float | None:
    """The tracking process's share of the actual consumption, as an otel-joules tracker logged it."""
    match = _SHARE_RE.search(output_text)
    if match is None:
        return None
    try:
        kwh = float(match.group(1))
    except ValueError:
        return None
    return kwh if number_problem(kwh) is None else None


def read_carbontracker_dir(directory: Path, stems: set[str] | None, inputs: Inputs) -> None:
    """Read the log pairs of ``directory`` (those named in ``stems``; None: all) into ``inputs``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedLogWarning)
        pairs = find_log_pairs(directory)
    for warning in caught:
        if issubclass(warning.category, SkippedLogWarning):
            message = str(warning.message)
            if stems is None or any(stem in message for stem in stems):
                inputs.skipped.append(Skipped(str(directory), message))
    for pair in pairs:
        if stems is None or pair.stem in stems:
            _read_pair(pair, inputs)


def _read_pair(pair: Any, inputs: Inputs) -> None:
    """One log pair into ``inputs``: a run, or a skipped entry saying why not; bad epochs and figures skipped apart."""
    try:
        std_text, std_cut = _whole_lines(_read_log(pair.std_log))
        output_text, _ = _whole_lines(_read_log(pair.output_log))
        std = parse_standard_log(std_text, source=pair.std_log)
        if not (std.software or std.pue is not None or std.devices or std.epochs):
            raise CarbonTrackerLogError("no carbontracker line (version, PUE, components or epochs)")
        actual, _ = get_consumption(output_text, std_text)
    except (CarbonTrackerLogError, OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        inputs.skipped.append(Skipped(pair.std_log, f"carbontracker run {pair.stem!r} cannot be read: {reason}"))
        return
    epochs = _epochs(pair, std, std_cut, inputs)
    logged_kwh, logged_grams = _logged_actual(pair, actual, inputs)
    pue = std.pue if std.pue is not None and number_problem(std.pue) is None else None
    intensity = std.average_intensity_g_per_kwh
    if intensity is not None and number_problem(intensity) is not None:
        intensity = None
    inputs.carbontracker_runs.append(
        CarbonTrackerRun(
            stem=pair.stem,
            std_log=pair.std_log,
            output_log=pair.output_log,
            software=std.software,
            pue=pue,
            average_intensity_g_per_kwh=intensity,
            devices={name: tuple(devices) for name, devices in std.devices.items()},
            epochs=epochs,  # type: ignore[arg-type]
            logged_actual_kwh=logged_kwh,
            logged_actual_co2eq_grams=logged_grams,
            early_stop=std.early_stop,
            logged_actual_epochs=actual["epochs"] if actual else None,
            energy_source=std.energy_source,
            below_resolution=std.below_resolution,
            trace_id=match.group(1) if (match := _TRACE_ID_RE.search(std_text)) else None,
            logged_share_kwh=_logged_share_kwh(output_text),
        )
    )
    inputs.files_read.extend([pair.std_log, pair.output_log])


def _epochs(pair: Any, std: Any, std_cut: bool, inputs: Inputs) -> tuple[tuple[int, float, dict], ...]:
    """The standard log's complete epochs as (epoch, seconds, power by component); a half-written last one and
    epochs with impossible figures are skipped, each with its reason."""
    epochs = []
    complete = std.complete_epochs
    for position, record in enumerate(complete):
        missing = sorted(set(std.devices) - set(record.power_watts))
        if std_cut and position == len(complete) - 1 and missing:
            inputs.skipped.append(
                Skipped(
                    pair.std_log,
                    f"carbontracker run {pair.stem!r}, epoch {record.epoch} skipped: the log ends before its "
                    f"power for {', '.join(missing)} (a half-written log)",
                )
            )
            continue
        problem = _epoch_problem(float(record.duration_seconds), record.power_watts)
        if problem is not None:
            inputs.skipped.append(
                Skipped(pair.std_log, f"carbontracker run {pair.stem!r}, epoch {record.epoch} skipped: {problem}")
            )
            continue
        epochs.append((record.epoch, float(record.duration_seconds), dict(record.power_watts)))
    return tuple(epochs)


def _logged_actual(pair: Any, actual: Any, inputs: Inputs) -> tuple[float | None, float | None]:
    """The output log's actual kWh and grams, each None (and said) where it is not a usable number."""
    logged_kwh = actual["energy (kWh)"] if actual else None
    logged_grams = actual["co2eq (g)"] if actual else None
    if logged_kwh is not None and number_problem(logged_kwh) is not None:
        inputs.skipped.append(
            Skipped(pair.output_log, f"logged actual consumption {logged_kwh!r} kWh ignored: {number_problem(logged_kwh)}")
        )
        logged_kwh = logged_grams = None
    if logged_grams is not None and number_problem(logged_grams) is not None:
        inputs.skipped.append(
            Skipped(
                pair.output_log,
                f"logged actual CO2eq {logged_grams!r} g ignored: {number_problem(logged_grams)}; "
                "the run's CO2eq is computed from its energy instead",
            )
        )
        logged_grams = None
    return logged_kwh, logged_grams


def _epoch_problem(duration_s: float, power: Any) -> str | None:
    problem = number_problem(duration_s)
    if problem is not None:
        return f"duration {problem}"
    for component, values in (power or {}).items():
        for value in values or ():
            # NaN is carbontracker's "no reading": the report counts it as 0 W and says so.
            if isinstance(value, float) and math.isnan(value):
                continue
            problem = number_problem(float(value))
            if problem is not None:
                return f"{component} power {problem}"
    return None


def _whole_lines(text: str) -> tuple[str, bool]:
    """``text`` without a last line cut off mid-write, and whether there was one."""
    if not text or text.endswith("\n"):
        return text, False
    return text[: text.rfind("\n") + 1], True


def _read_log(path: str) -> str:
    handle, size = open_regular(path)
    with handle:
        if size > MAX_LOG_BYTES:
            raise CarbonTrackerLogError(f"{path!r} is {size} bytes, more than a carbontracker log ({MAX_LOG_BYTES})")
        data = handle.read(size)
    if b"\x00" in data:
        raise CarbonTrackerLogError(f"{path!r} holds binary data")
    return data.decode("utf-8", errors="replace")
