"""Find and read the inputs of a report: carbontracker logs, CSV, JSON lines and OTLP JSON files.

A file's format is recognised by its content, not its extension:

- ``*_carbontracker.log`` / ``*_carbontracker_output.log``: a carbontracker-format run
  (both files needed; ``*_carbontracker_err.log`` is ignored);
- a first line that is this project's CSV header (``name,trace_id,...,attributes``, see
  :mod:`otel_joules.exporters.csv_exporter`): CSV span export; a span's attributes are
  its ``attributes`` JSON cell (every ``energy.*``, ``carbon.*`` and ``training.*``
  attribute, typed),
  whatever ``energy_columns`` the file was written with;
- a first line that is a JSON object with ``trace_id`` and ``span_id``: JSON-lines span
  export (:mod:`otel_joules.exporters.jsonl_exporter`), attributes from its
  ``attributes`` object;
- a JSON object with ``resourceSpans`` per line (what the Collector's ``file`` exporter and
  ``opentelemetry-exporter-otlp-json-file`` write), or one such document over several lines:
  OTLP/JSON (camelCase keys, hex ids, 64-bit integers as strings).

Anything else is skipped with a reason; so are lines that cannot be read (at most
:data:`MAX_LINE_MESSAGES` messages per file, then a count), which does not stop the rest of
the file from being read.

Hostile and damaged inputs (each skipped with a reason, never a hang, a traceback or a
whole report lost):

- Only regular files are read (a FIFO, a socket or a device, also behind a link named
  ``*.jsonl``, is skipped unopened or opened non-blocking and left); symbolic links to
  files are followed, links inside folders to folders are not (no loops), and a link loop
  is reported as such.
- Files are streamed line by line: memory does not grow with a file's size. A file is
  read up to the size it had when opened (one that grows meanwhile ends there), a line
  longer than :data:`MAX_LINE_BYTES` is skipped, and so is a file larger than
  :data:`MAX_FILE_BYTES`.
- NUL bytes (a region a power loss left while a writer appended) are a damaged region:
  the partial line before them is skipped, the line after them is read, and so is the
  rest of the file.
- A CSV row with a cell over the csv module's field limit (128 KiB) is skipped, not the
  rest of the file.
- A record is skipped with its reason when JSON nests too deeply, a time is outside the
  64-bit nanosecond range or ends before it starts, or an ``energy.*``/``carbon.*``
  number is not finite, negative or beyond :data:`MAX_PLAUSIBLE_VALUE`: such values
  never enter a total. So is a carbontracker epoch with such a power or duration.
"""

from __future__ import annotations

import base64
import binascii
import csv
import errno
import io
import json
import math
import os
import re
import stat
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from otel_joules.training.logformat import (
    ERR_LOG_SUFFIX,
    OUTPUT_LOG_SUFFIX,
    PROCESS_SHARE_LOG_PREFIX,
    STD_LOG_SUFFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogError,
)
from otel_joules.training.logfiles import SkippedLogWarning, find_log_pairs
from otel_joules.training.logread import get_consumption, parse_standard_log
from otel_joules.exporters.csv_exporter import ATTRIBUTES_COLUMN
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report.model import CarbonTrackerRun, Skipped, SpanRow
from otel_joules.semconv import CARBON_NAMESPACE, ENERGY_NAMESPACE, SERVICE_NAME, TRAINING_NAMESPACE

#: Unreadable lines reported one by one per file; the rest are counted.
MAX_LINE_MESSAGES = 3
#: Longest line read (bytes). OTLP files hold a whole export batch per line, which can
#: reach megabytes; a longer line is skipped.
MAX_LINE_BYTES = 64 << 20
#: Largest file read; larger ones are skipped (a sparse or runaway file, not an export).
MAX_FILE_BYTES = 256 << 30
#: Largest pretty-printed OTLP document (one JSON value over many lines) read whole.
MAX_DOCUMENT_BYTES = 64 << 20
#: Largest carbontracker log read.
MAX_LOG_BYTES = 64 << 20
#: An ``energy.*`` or ``carbon.*`` number beyond this (1e15 J is about 280 GWh) is not a
#: measurement; its record is skipped, so such a value never enters a total.
MAX_PLAUSIBLE_VALUE = 1e15
#: Span times are int64 nanoseconds (OTLP's fixed64, our exporters' integers).
MAX_UNIX_NANO = 2**63 - 1
#: Attributes kept per span: what a report uses. Others (an OTLP file's http.*, ...) are
#: dropped at read time, so memory per span stays small however many a file holds.
REPORT_ATTRIBUTE_PREFIXES = (
    ENERGY_NAMESPACE,
    CARBON_NAMESPACE,
    TRAINING_NAMESPACE,
    "process.",
    "service.",
    "otel_joules.",
)
#: Prefixes and suffixes of the attributes whose numbers enter totals (joules, grams, and
#: the PUE and intensity that turn them into kWh and CO2eq): a record with such a number
#: not finite, negative or implausible is skipped. Others (``energy.watts``) are kept as
#: they are; the report never adds them up.
CHECKED_NUMBER_PREFIXES = (ENERGY_NAMESPACE, CARBON_NAMESPACE)
CHECKED_NUMBER_SUFFIXES = (".joules", ".grams", ".gco2eq_per_kwh", ".pue")

_HEX_TRACE = re.compile(r"^[0-9a-f]{32}$")
_HEX_SPAN = re.compile(r"^[0-9a-f]{16}$")
_CARBONTRACKER_SUFFIXES = (OUTPUT_LOG_SUFFIX, STD_LOG_SUFFIX, ERR_LOG_SUFFIX)
# What otel_joules.carbontracker.tracker writes when the run starts.
_SHARE_RE = re.compile(rf"CarbonTracker: {re.escape(PROCESS_SHARE_LOG_PREFIX)}([0-9.eE+-]+) kWh")
_TRACE_ID_RE = re.compile(rf" - {re.escape(TRACE_ID_LOG_PREFIX)}([0-9a-f]{{32}})\b")
_UNKNOWN_FORMAT = (
    "unknown format: not a carbontracker log, an otel-joules CSV or JSON-lines span export, or an OTLP JSON trace file"
)
_BINARY = "is a binary file (or damaged from its start), not a span export or carbontracker log"
# How many non-empty lines may precede the first JSON line of a JSON file (damage at its start).
_FORMAT_LOOKAHEAD_LINES = 16
# Read in pieces of this size when skipping the rest of an overlong line.
_SKIP_CHUNK = 1 << 20


@dataclass
class Inputs:
    """Everything read from the paths given."""

    spans: list[SpanRow] = field(default_factory=list)
    carbontracker_runs: list[CarbonTrackerRun] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)


class _LineErrors:
    """Collects unreadable lines of one file, reporting the first few and counting the rest."""

    def __init__(self, path: str, skipped: list[Skipped]) -> None:
        self.path = path
        self.skipped = skipped
        self.count = 0

    def add(self, line_number: int, reason: str) -> None:
        self.count += 1
        if self.count <= MAX_LINE_MESSAGES:
            self.skipped.append(Skipped(f"{self.path}:{line_number}", reason))

    def close(self) -> None:
        if self.count > MAX_LINE_MESSAGES:
            self.skipped.append(Skipped(self.path, f"{self.count - MAX_LINE_MESSAGES} more unreadable lines skipped"))


# ------------------------------------------------------------------------------ walking


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat_reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop"
    if isinstance(exc, FileNotFoundError):
        return "does not exist (or is a dangling link)"
    return f"cannot be read: {exc.strerror or exc}"


def read_inputs(paths: Iterable[str | os.PathLike[str]]) -> Inputs:
    """Read every path (files and directories, recursively) into spans and carbontracker runs."""
    inputs = Inputs()
    files: list[Path] = []
    log_stems: dict[Path, set[str] | None] = {}  # directory -> stems asked for (None: all)
    for raw in paths:
        path = Path(raw)
        try:
            info = os.stat(path)
        except OSError as exc:
            inputs.skipped.append(Skipped(str(path), _stat_reason(exc)))
            continue
        if stat.S_ISDIR(info.st_mode):
            # Links to folders are not followed (os.walk's default): no loops, no escapes.
            def unreadable(exc: OSError) -> None:
                inputs.skipped.append(Skipped(str(exc.filename), f"folder {_stat_reason(exc)}"))

            for directory, subdirs, names in os.walk(path, onerror=unreadable):
                subdirs.sort()
                for name in sorted(names):
                    files.append(Path(directory) / name)
        else:
            files.append(path)
    seen: set[tuple[int, int]] = set()
    for file in files:
        try:
            info = os.stat(file)
        except OSError as exc:
            inputs.skipped.append(Skipped(str(file), _stat_reason(exc)))
            continue
        if not stat.S_ISREG(info.st_mode):
            inputs.skipped.append(Skipped(str(file), f"is {_file_kind(info.st_mode)}: only regular files are read"))
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            continue
        seen.add(identity)
        stem = _carbontracker_stem(file.name)
        if stem is not None:
            if file.name.endswith(ERR_LOG_SUFFIX):
                continue  # error logs hold no consumption
            wanted = log_stems.setdefault(file.parent, set())
            if wanted is not None:
                wanted.add(stem)
            continue
        _read_file(file, inputs)
    for directory, stems in log_stems.items():
        _read_carbontracker_dir(directory, stems, inputs)
    return inputs


def _carbontracker_stem(name: str) -> str | None:
    for suffix in _CARBONTRACKER_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def _open_regular(path: str) -> tuple[IO[bytes], int]:
    """Open ``path`` for reading if it is a regular file; its size when opened.

    Non-blocking, so that a FIFO swapped in after the check cannot block the open.

    Raises:
        OSError: it cannot be opened, or is not a regular file (``strerror`` says which).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, f"is {_file_kind(info.st_mode)}: only regular files are read")
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


# ------------------------------------------------------------------------ carbontracker


def _logged_share_kwh(output_text: str) -> float | None:
    """The tracking process's share of the actual consumption, as an otel-joules tracker logged it."""
    match = _SHARE_RE.search(output_text)
    if match is None:
        return None
    try:
        kwh = float(match.group(1))
    except ValueError:
        return None
    return kwh if _number_problem(kwh) is None else None


def _read_carbontracker_dir(directory: Path, stems: set[str] | None, inputs: Inputs) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedLogWarning)
        pairs = find_log_pairs(directory)
    for warning in caught:
        if issubclass(warning.category, SkippedLogWarning):
            message = str(warning.message)
            if stems is None or any(stem in message for stem in stems):
                inputs.skipped.append(Skipped(str(directory), message))
    for pair in pairs:
        if stems is not None and pair.stem not in stems:
            continue
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
            continue
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
        logged_kwh = actual["energy (kWh)"] if actual else None
        logged_grams = actual["co2eq (g)"] if actual else None
        if logged_kwh is not None and _number_problem(logged_kwh) is not None:
            inputs.skipped.append(
                Skipped(pair.output_log, f"logged actual consumption {logged_kwh!r} kWh ignored: {_number_problem(logged_kwh)}")
            )
            logged_kwh = logged_grams = None
        pue = std.pue if std.pue is not None and _number_problem(std.pue) is None else None
        intensity = std.average_intensity_g_per_kwh
        if intensity is not None and _number_problem(intensity) is not None:
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
                epochs=tuple(epochs),  # type: ignore[arg-type]
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


def _number_problem(value: float) -> str | None:
    """Why ``value`` cannot enter a total (not finite, negative, implausibly large), or None."""
    if not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if value < 0:
        return f"{value!r} is negative"
    if value > MAX_PLAUSIBLE_VALUE:
        return f"{value!r} is beyond any plausible measurement (> {MAX_PLAUSIBLE_VALUE:g})"
    return None


def _epoch_problem(duration_s: float, power: Any) -> str | None:
    problem = _number_problem(duration_s)
    if problem is not None:
        return f"duration {problem}"
    for component, values in (power or {}).items():
        for value in values or ():
            # NaN is carbontracker's "no reading": the report counts it as 0 W and says so.
            if isinstance(value, float) and math.isnan(value):
                continue
            problem = _number_problem(float(value))
            if problem is not None:
                return f"{component} power {problem}"
    return None


def _whole_lines(text: str) -> tuple[str, bool]:
    """``text`` without a last line cut off mid-write, and whether there was one."""
    if not text or text.endswith("\n"):
        return text, False
    return text[: text.rfind("\n") + 1], True


def _read_log(path: str) -> str:
    handle, size = _open_regular(path)
    with handle:
        if size > MAX_LOG_BYTES:
            raise CarbonTrackerLogError(f"{path!r} is {size} bytes, more than a carbontracker log ({MAX_LOG_BYTES})")
        data = handle.read(size)
    if b"\x00" in data:
        raise CarbonTrackerLogError(f"{path!r} holds binary data")
    return data.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------- span files


class _Lines:
    """The lines of an open file as text, streamed, with damaged ones reported and left out.

    Yields ``(line number, text with its line ending)``. Reads at most ``size`` bytes
    (the size when opened). A line over :data:`MAX_LINE_BYTES`, one that is not UTF-8,
    and a region of NUL bytes (with the partial line before it) are reported through
    ``report`` (set once the format is known; until then they are held) and skipped.
    """

    def __init__(self, handle: IO[bytes], size: int) -> None:
        self._handle = handle
        self._remaining = size
        self.number = 0
        self.held: list[tuple[int, str]] = []
        self.report: Callable[[int, str], None] = lambda number, reason: self.held.append((number, reason))

    def release_held(self, report: Callable[[int, str], None]) -> None:
        """Report what was held back while the format was unknown, and from now on directly."""
        for number, reason in self.held:
            report(number, reason)
        self.held.clear()
        self.report = report

    def _next_raw(self) -> bytes | None:
        while self._remaining > 0:
            raw = self._handle.readline(min(MAX_LINE_BYTES + 1, self._remaining))
            if not raw:
                return None
            self._remaining -= len(raw)
            self.number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                skipped = len(raw) + self._skip_to_line_end()
                self.report(self.number, f"a line of {skipped} bytes or more, over the {MAX_LINE_BYTES}-byte limit, skipped")
                continue
            return raw
        return None

    def _skip_to_line_end(self) -> int:
        skipped = 0
        while self._remaining > 0:
            more = self._handle.readline(min(_SKIP_CHUNK, self._remaining))
            if not more:
                break
            self._remaining -= len(more)
            skipped += len(more)
            if more.endswith(b"\n"):
                break
        return skipped

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while True:
            raw = self._next_raw()
            if raw is None:
                return
            if b"\x00" in raw:
                before, _, after = raw.rpartition(b"\x00")
                nul_bytes = before.count(b"\x00") + 1
                self.report(
                    self.number,
                    f"{nul_bytes} NUL bytes (a damaged region, e.g. power lost while a writer "
                    f"appended) and the partial line before them skipped; reading on after them",
                )
                raw = after
            if self.number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.report(self.number, f"not UTF-8 text (byte {exc.start}); binary or corrupt data skipped")
                continue
            if text.strip():
                yield self.number, text


def _read_file(file: Path, inputs: Inputs) -> None:
    path = str(file)
    try:
        handle, size = _open_regular(path)
    except OSError as exc:
        inputs.skipped.append(Skipped(path, exc.strerror if exc.errno == 0 and exc.strerror else _stat_reason(exc)))
        return
    with handle:
        if size > MAX_FILE_BYTES:
            inputs.skipped.append(Skipped(path, f"is {size} bytes, over the {MAX_FILE_BYTES}-byte limit of a span export"))
            return
        before = len(inputs.spans)
        errors = _LineErrors(path, inputs.skipped)
        lines = _Lines(handle, size)
        stream = iter(lines)
        first = next(stream, None)
        if first is None:
            if lines.number and lines.held:
                inputs.skipped.append(Skipped(path, "holds no readable line: " + lines.held[0][1]))
            else:
                inputs.skipped.append(Skipped(path, "is empty"))
            return
        number, text = first
        header = _csv_cells(text)
        if header and tuple(header[: len(CORE_FIELDS)]) == CORE_FIELDS and header[-1] == ATTRIBUTES_COLUMN:
            lines.release_held(errors.add)
            _read_csv(path, header, stream, lines, inputs, errors)
        else:
            # JSON lines or OTLP: the first line that looks like JSON tells. Lines before it
            # (a damaged start) are reported once the format is known.
            start: tuple[int, str] | None = first
            looked = 1
            while start is not None and not start[1].lstrip().startswith(("{", "[")):
                if looked >= _FORMAT_LOOKAHEAD_LINES:
                    start = None
                    break
                lines.report(start[0], "not JSON (a damaged or foreign line) skipped")
                start = next(stream, None)
                looked += 1
            if start is None:
                binary = bool(lines.held) and any("NUL" in r or "UTF-8" in r for _, r in lines.held)
                binary = binary or any(ord(c) < 32 and c not in "\t\r\n" for c in text[:4096])
                inputs.skipped.append(Skipped(path, _BINARY if binary else _UNKNOWN_FORMAT))
                return
            _read_json(path, start, stream, lines, handle, size, inputs, errors)
        errors.close()
    if len(inputs.spans) > before:
        inputs.files_read.append(path)
    elif not any(s.path == path or s.path.startswith(f"{path}:") for s in inputs.skipped):
        inputs.skipped.append(Skipped(path, "holds no span"))


def _csv_cells(text: str) -> list[str] | None:
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return None


def _loads(text: str | bytes) -> tuple[Any, str | None]:
    """``json.loads``, or the reason it failed (RecursionError included: 100,000-deep nesting)."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "JSON nested too deeply to read"
    except ValueError as exc:
        message = getattr(exc, "msg", str(exc))
        return None, f"not valid JSON ({message}); a truncated or corrupt line"


def _read_json(
    path: str,
    first: tuple[int, str],
    stream: Iterator[tuple[int, str]],
    lines: _Lines,
    handle: IO[bytes],
    size: int,
    inputs: Inputs,
    errors: _LineErrors,
) -> None:
    """JSON lines (ours or OTLP), the kind told by the first line that is a JSON object."""
    reader: Callable[[dict[str, Any], str, int, Inputs, _LineErrors], None] | None = None
    for number, text in _chain(first, stream):
        item, problem = _loads(text)
        if problem is None and not isinstance(item, dict):
            problem = "not a JSON object"
        if problem is not None:
            lines.report(number, problem)
            continue
        if reader is None:
            if "resourceSpans" in item:
                reader = _otlp_request
            elif "trace_id" in item and "span_id" in item:
                reader = _jsonl_line
            elif "resourceMetrics" in item or "resourceLogs" in item:
                inputs.skipped.append(Skipped(path, "OTLP metrics or logs, not traces: nothing to sum"))
                return
            else:
                inputs.skipped.append(
                    Skipped(path, "JSON, but neither OTLP traces (resourceSpans) nor otel-joules JSON lines (trace_id, span_id)")
                )
                return
            lines.release_held(errors.add)
        reader(item, path, number, inputs, errors)
    if reader is None:
        _read_json_document(path, handle, size, lines, inputs, errors)


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


def _read_json_document(path: str, handle: IO[bytes], size: int, lines: _Lines, inputs: Inputs, errors: _LineErrors) -> None:
    """No line is a JSON object: perhaps one OTLP document pretty-printed over several lines."""
    first_problem = lines.held[0][1] if lines.held else "no JSON object"
    if size > MAX_DOCUMENT_BYTES:
        inputs.skipped.append(Skipped(path, f"no line is a JSON object ({first_problem})"))
        return
    handle.seek(0)
    data = handle.read(size)
    document, problem = _loads(data.decode("utf-8-sig", errors="replace"))
    if problem is not None:
        inputs.skipped.append(Skipped(path, f"is not valid JSON: {problem.split(';')[0]}"))
        return
    if isinstance(document, dict) and "resourceSpans" in document:
        _otlp_request(document, path, 1, inputs, errors)
    else:
        inputs.skipped.append(Skipped(path, "JSON, but not an OTLP trace request (no resourceSpans)"))


def _jsonl_line(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: _LineErrors) -> None:
    try:
        inputs.spans.append(_span_from_record(item, item.get("attributes"), path))
    except (ValueError, RecursionError) as exc:
        errors.add(number, str(exc) if isinstance(exc, ValueError) else "nested too deeply to read")


def _read_csv(
    path: str, header: list[str], stream: Iterator[tuple[int, str]], lines: _Lines, inputs: Inputs, errors: _LineErrors
) -> None:
    texts = (text for _, text in stream)
    while True:
        # A csv.Error (a cell over the field limit, ...) ends a reader; a new one goes on
        # with the next line, so one bad row does not lose the rest of the file.
        reader = csv.reader(texts)
        try:
            for cells in reader:
                if not cells:
                    continue
                if len(cells) != len(header):
                    errors.add(lines.number, "has a different number of cells than the header")
                    continue
                row = dict(zip(header, cells))
                attributes, problem = _loads(row[ATTRIBUTES_COLUMN] or "{}")
                if problem is not None:
                    errors.add(lines.number, "its attributes cell is not JSON" + ("" if "valid" in problem else f" ({problem})"))
                    continue
                try:
                    inputs.spans.append(_span_from_record(row, attributes, path))
                except (ValueError, RecursionError) as exc:
                    errors.add(lines.number, str(exc) if isinstance(exc, ValueError) else "nested too deeply to read")
        except csv.Error as exc:
            errors.add(lines.number, f"CSV error: {exc}; row skipped")
            continue
        return


def _optional_int(value: object, what: str) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not an integer")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} is {value!r}, not an integer") from None
    if not 0 <= number <= MAX_UNIX_NANO:
        raise ValueError(f"{what} is {value!r}, outside the 64-bit nanosecond range of a time")
    return number


def _times(start: object, end: object, start_what: str, end_what: str) -> tuple[int | None, int | None]:
    start_ns = _optional_int(start, start_what)
    end_ns = _optional_int(end, end_what)
    if start_ns is not None and end_ns is not None and end_ns < start_ns:
        raise ValueError(f"{end_what} {end_ns} is before {start_what} {start_ns}")
    return start_ns, end_ns


def checked_attributes(attributes: dict[str, object]) -> dict[str, object]:
    """The attributes a report keeps, with every number that enters a total checked.

    Raises:
        ValueError: a number that must not enter a total (not finite, negative, implausible);
            the message names the attribute.
    """
    kept: dict[str, object] = {}
    for key, raw in attributes.items():
        if not isinstance(key, str) or not key.startswith(REPORT_ATTRIBUTE_PREFIXES):
            continue
        value = _json_number(raw)
        if (
            key.startswith(CHECKED_NUMBER_PREFIXES)
            and key.endswith(CHECKED_NUMBER_SUFFIXES)
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            try:
                problem = _number_problem(float(value))
            except OverflowError:
                problem = f"{value!r} is beyond any plausible measurement"
            if problem is not None:
                raise ValueError(f"{key} = {problem}; record skipped so it enters no total")
        # Short texts (energy.source, carbon.intensity.source) repeat on every span: share them.
        kept[sys.intern(key)] = sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value
    return kept


def _span_from_record(record: dict[str, Any], attributes: object, path: str) -> SpanRow:
    """A span of our CSV or JSON-lines format (core fields of otel_joules.exporters.records)."""
    trace_id = str(record.get("trace_id") or "").lower()
    span_id = str(record.get("span_id") or "").lower()
    if not _HEX_TRACE.match(trace_id):
        raise ValueError(f"trace_id {str(record.get('trace_id'))[:80]!r} is not 32 hex digits")
    if not _HEX_SPAN.match(span_id):
        raise ValueError(f"span_id {str(record.get('span_id'))[:80]!r} is not 16 hex digits")
    parent = sys.intern(str(record.get("parent_span_id") or "").lower()) or None
    if parent is not None and not _HEX_SPAN.match(parent):
        raise ValueError(f"parent_span_id {str(record.get('parent_span_id'))[:80]!r} is not 16 hex digits")
    if not isinstance(attributes, dict):
        raise ValueError("attributes is not a JSON object")
    start_ns, end_ns = _times(
        record.get("start_time_unix_nano"), record.get("end_time_unix_nano"), "start_time_unix_nano", "end_time_unix_nano"
    )
    service = record.get("service_name")
    return SpanRow(
        trace_id=sys.intern(trace_id),
        span_id=span_id,
        parent_span_id=parent,
        name=sys.intern(str(record.get("name") or "")),
        start_unix_nano=start_ns,
        end_unix_nano=end_ns,
        service_name=sys.intern(str(service)) if service not in (None, "") else None,
        attributes=checked_attributes(attributes),
        source=sys.intern(path),
    )


def _json_number(value: object) -> object:
    # Our exporters write non-finite floats as these strings (the protobuf JSON spelling).
    if value == "NaN":
        return float("nan")
    if value == "Infinity":
        return float("inf")
    if value == "-Infinity":
        return float("-inf")
    return value


# --------------------------------------------------------------------------------- OTLP


def _otlp_request(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: _LineErrors) -> None:
    """The spans of one OTLP request: a bad span is skipped with its reason, the others kept."""
    try:
        for span in _otlp_span_objects(item):
            try:
                inputs.spans.append(_otlp_span(span, path))
            except ValueError as exc:
                errors.add(number, f"a span skipped: {exc}")
            except RecursionError:
                errors.add(number, "a span skipped: its attributes nest too deeply to read")
    except ValueError as exc:
        errors.add(number, f"not an OTLP trace request: {exc}")


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def _otlp_span_objects(request: dict[str, Any]) -> Iterator[tuple[object, str | None]]:
    for resource_spans in _list(request.get("resourceSpans"), "resourceSpans"):
        if not isinstance(resource_spans, dict):
            raise ValueError("a resourceSpans entry is not an object")
        resource = resource_spans.get("resource") or {}
        resource_attributes = _otlp_attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        service = resource_attributes.get(SERVICE_NAME)
        service_name = sys.intern(str(service)) if service not in (None, "") else None
        scopes = _list(resource_spans.get("scopeSpans"), "scopeSpans") + _list(
            resource_spans.get("instrumentationLibrarySpans"), "instrumentationLibrarySpans"
        )
        for scope in scopes:
            if not isinstance(scope, dict):
                raise ValueError("a scopeSpans entry is not an object")
            for span in _list(scope.get("spans"), "spans"):
                yield span, service_name


def _otlp_span(entry: tuple[object, str | None], path: str) -> SpanRow:
    span, service_name = entry
    if not isinstance(span, dict):
        raise ValueError("a span is not an object")
    start_ns, end_ns = _times(span.get("startTimeUnixNano"), span.get("endTimeUnixNano"), "startTimeUnixNano", "endTimeUnixNano")
    return SpanRow(
        trace_id=sys.intern(_otlp_id(span.get("traceId"), 16, "traceId")),
        span_id=_otlp_id(span.get("spanId"), 8, "spanId"),
        parent_span_id=_otlp_id(span.get("parentSpanId"), 8, "parentSpanId") if span.get("parentSpanId") else None,
        name=sys.intern(str(span.get("name") or "")),
        start_unix_nano=start_ns,
        end_unix_nano=end_ns,
        service_name=service_name,
        attributes=checked_attributes(_otlp_attributes(span.get("attributes"))),
        source=sys.intern(path),
    )


def _otlp_id(value: object, size: int, what: str) -> str:
    """OTLP/JSON ids are hex; some writers use the protobuf default, base64: accept both."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is missing")
    value = value[:64]  # an id is 16 or 24 characters; a longer one is only echoed in the error
    text = value.lower()
    if len(text) == 2 * size and all(c in "0123456789abcdef" for c in text):
        return text
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise ValueError(f"{what} {value!r} is neither {2 * size} hex digits nor base64 of {size} bytes")


def _otlp_attributes(items: object) -> dict[str, object]:
    attributes: dict[str, object] = {}
    if not isinstance(items, list):
        return attributes
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attributes[item["key"]] = _any_value(item.get("value"))
    return attributes


def _any_value(value: object) -> object:
    """Decode an OTLP/JSON ``AnyValue`` (int64 as strings, doubles possibly "NaN")."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, str):
            try:
                return float(raw)  # "NaN", "Infinity", "-Infinity", or a number as text
            except ValueError:
                return None
        return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    if "arrayValue" in value:
        inner = value["arrayValue"] or {}
        return [_any_value(v) for v in (inner.get("values") or [])] if isinstance(inner, dict) else None
    if "kvlistValue" in value:
        inner = value["kvlistValue"] or {}
        return _otlp_attributes(inner.get("values")) if isinstance(inner, dict) else None
    if "bytesValue" in value:
        return value["bytesValue"]
    return None
