"""Find and read the inputs of a report: carbontracker logs, CSV, JSON lines and OTLP JSON files.

A file's format is recognised by its content, not its extension:

- ``*_carbontracker.log`` / ``*_carbontracker_output.log``: a carbontracker-format run
  (both files needed; ``*_carbontracker_err.log`` is ignored);
- a first line that is this project's CSV header (``name,trace_id,...,attributes``, see
  :mod:`otel_joules.exporters.csv_exporter`): CSV span export; a span's attributes are
  its ``attributes`` JSON cell (every ``energy.*`` and ``carbon.*`` attribute, typed),
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
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from otel_joules.carbontracker.logs import (
    ERR_LOG_SUFFIX,
    OUTPUT_LOG_SUFFIX,
    STD_LOG_SUFFIX,
    TRACE_ID_LOG_PREFIX,
    CarbonTrackerLogError,
)
from otel_joules.carbontracker.parser import (
    SkippedLogWarning,
    find_log_pairs,
    get_consumption,
    parse_standard_log,
)
from otel_joules.exporters.csv_exporter import ATTRIBUTES_COLUMN
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report.model import CarbonTrackerRun, Skipped, SpanRow

#: Unreadable lines reported one by one per file; the rest are counted.
MAX_LINE_MESSAGES = 3

_HEX_TRACE = re.compile(r"^[0-9a-f]{32}$")
_HEX_SPAN = re.compile(r"^[0-9a-f]{16}$")
_CARBONTRACKER_SUFFIXES = (OUTPUT_LOG_SUFFIX, STD_LOG_SUFFIX, ERR_LOG_SUFFIX)
# What otel_joules.carbontracker.tracker writes when the run starts.
_TRACE_ID_RE = re.compile(rf" - {re.escape(TRACE_ID_LOG_PREFIX)}([0-9a-f]{{32}})\b")


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


def read_inputs(paths: Iterable[str | os.PathLike[str]]) -> Inputs:
    """Read every path (files and directories, recursively) into spans and carbontracker runs."""
    inputs = Inputs()
    files: list[Path] = []
    log_stems: dict[Path, set[str] | None] = {}  # directory -> stems asked for (None: all)
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for directory, subdirs, names in os.walk(path):
                subdirs.sort()
                for name in sorted(names):
                    files.append(Path(directory) / name)
        elif path.is_file():
            files.append(path)
        elif path.exists():
            inputs.skipped.append(Skipped(str(path), "not a regular file or directory"))
        else:
            inputs.skipped.append(Skipped(str(path), "does not exist"))
    seen: set[Path] = set()
    for file in files:
        resolved = file.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
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


# ------------------------------------------------------------------------ carbontracker


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
            std_text = _read_log(pair.std_log)
            output_text = _read_log(pair.output_log)
            std = parse_standard_log(std_text, source=pair.std_log)
            if not (std.software or std.pue is not None or std.devices or std.epochs):
                raise CarbonTrackerLogError("no carbontracker line (version, PUE, components or epochs)")
            actual, _ = get_consumption(output_text, std_text)
        except (CarbonTrackerLogError, OSError, ValueError) as exc:
            inputs.skipped.append(Skipped(pair.std_log, f"carbontracker run {pair.stem!r} cannot be read: {exc}"))
            continue
        epochs = tuple(
            (record.epoch, float(record.duration_seconds), dict(record.power_watts))
            for record in std.complete_epochs
        )
        inputs.carbontracker_runs.append(
            CarbonTrackerRun(
                stem=pair.stem,
                std_log=pair.std_log,
                output_log=pair.output_log,
                software=std.software,
                pue=std.pue,
                average_intensity_g_per_kwh=std.average_intensity_g_per_kwh,
                devices={name: tuple(devices) for name, devices in std.devices.items()},
                epochs=epochs,  # type: ignore[arg-type]
                logged_actual_kwh=actual["energy (kWh)"] if actual else None,
                logged_actual_co2eq_grams=actual["co2eq (g)"] if actual else None,
                early_stop=std.early_stop,
                logged_actual_epochs=actual["epochs"] if actual else None,
                energy_source=std.energy_source,
                below_resolution=std.below_resolution,
                trace_id=match.group(1) if (match := _TRACE_ID_RE.search(std_text)) else None,
            )
        )
        inputs.files_read.extend([pair.std_log, pair.output_log])


def _read_log(path: str) -> str:
    data = Path(path).read_bytes()
    if b"\x00" in data:
        raise CarbonTrackerLogError(f"{path!r} holds binary data")
    return data.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------- span files


def _read_file(file: Path, inputs: Inputs) -> None:
    path = str(file)
    try:
        data = file.read_bytes()
    except OSError as exc:
        inputs.skipped.append(Skipped(path, f"cannot be read: {exc.strerror or exc}"))
        return
    if not data.strip():
        inputs.skipped.append(Skipped(path, "is empty"))
        return
    if b"\x00" in data[:65536]:
        inputs.skipped.append(Skipped(path, "is a binary file, not a span export or carbontracker log"))
        return
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        inputs.skipped.append(Skipped(path, f"is not UTF-8 text (byte {exc.start}): not a span export"))
        return
    first = next((line for line in text.splitlines() if line.strip()), "")
    before = len(inputs.spans)
    if first.lstrip().startswith("{"):
        _read_json(path, text, first, inputs)
    else:
        header = next(csv.reader([first]), [])
        if tuple(header[: len(CORE_FIELDS)]) == CORE_FIELDS and header and header[-1] == ATTRIBUTES_COLUMN:
            _read_csv(path, text, inputs)
        else:
            inputs.skipped.append(
                Skipped(
                    path,
                    "unknown format: not a carbontracker log, an otel-joules CSV or JSON-lines span export, "
                    "or an OTLP JSON trace file",
                )
            )
            return
    if len(inputs.spans) > before:
        inputs.files_read.append(path)
    elif not any(s.path == path or s.path.startswith(f"{path}:") for s in inputs.skipped):
        inputs.skipped.append(Skipped(path, "holds no span"))


def _read_json(path: str, text: str, first: str, inputs: Inputs) -> None:
    try:
        head = json.loads(first)
    except ValueError:
        # One OTLP document pretty-printed over several lines?
        try:
            document = json.loads(text)
        except ValueError as exc:
            inputs.skipped.append(Skipped(path, f"is not valid JSON ({exc.msg} at line {exc.lineno})"))
            return
        if isinstance(document, dict) and "resourceSpans" in document:
            errors = _LineErrors(path, inputs.skipped)
            _otlp_request(document, path, 1, inputs, errors)
            errors.close()
        else:
            inputs.skipped.append(Skipped(path, "JSON, but not an OTLP trace request (no resourceSpans)"))
        return
    if not isinstance(head, dict):
        inputs.skipped.append(Skipped(path, "JSON, but not an object per line"))
        return
    if "resourceSpans" in head:
        reader = _otlp_line
    elif "trace_id" in head and "span_id" in head:
        reader = _jsonl_line
    elif "resourceMetrics" in head or "resourceLogs" in head:
        inputs.skipped.append(Skipped(path, "OTLP metrics or logs, not traces: nothing to sum"))
        return
    else:
        inputs.skipped.append(
            Skipped(path, "JSON, but neither OTLP traces (resourceSpans) nor otel-joules JSON lines (trace_id, span_id)")
        )
        return
    errors = _LineErrors(path, inputs.skipped)
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            errors.add(number, f"not valid JSON ({exc.msg}); a truncated or corrupt line")
            continue
        if not isinstance(item, dict):
            errors.add(number, "not a JSON object")
            continue
        reader(item, path, number, inputs, errors)
    errors.close()


def _jsonl_line(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: _LineErrors) -> None:
    try:
        inputs.spans.append(_span_from_record(item, item.get("attributes"), path))
    except ValueError as exc:
        errors.add(number, str(exc))


def _read_csv(path: str, text: str, inputs: Inputs) -> None:
    errors = _LineErrors(path, inputs.skipped)
    reader = csv.DictReader(io.StringIO(text))
    try:
        for row in reader:
            number = reader.line_num
            if None in row or any(value is None for value in row.values()):
                errors.add(number, "has a different number of cells than the header")
                continue
            try:
                attributes = json.loads(row[ATTRIBUTES_COLUMN] or "{}")
            except ValueError:
                errors.add(number, "its attributes cell is not JSON")
                continue
            try:
                inputs.spans.append(_span_from_record(row, attributes, path))
            except ValueError as exc:
                errors.add(number, str(exc))
    except csv.Error as exc:
        errors.add(reader.line_num, f"CSV error: {exc}")
    errors.close()


def _optional_int(value: object, what: str) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not an integer")
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ValueError(f"{what} is {value!r}, not an integer") from None


def _span_from_record(record: dict[str, Any], attributes: object, path: str) -> SpanRow:
    """A span of our CSV or JSON-lines format (core fields of otel_joules.exporters.records)."""
    trace_id = str(record.get("trace_id") or "").lower()
    span_id = str(record.get("span_id") or "").lower()
    if not _HEX_TRACE.match(trace_id):
        raise ValueError(f"trace_id {record.get('trace_id')!r} is not 32 hex digits")
    if not _HEX_SPAN.match(span_id):
        raise ValueError(f"span_id {record.get('span_id')!r} is not 16 hex digits")
    parent = str(record.get("parent_span_id") or "").lower() or None
    if parent is not None and not _HEX_SPAN.match(parent):
        raise ValueError(f"parent_span_id {record.get('parent_span_id')!r} is not 16 hex digits")
    if not isinstance(attributes, dict):
        raise ValueError("attributes is not a JSON object")
    service = record.get("service_name")
    return SpanRow(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=str(record.get("name") or ""),
        start_unix_nano=_optional_int(record.get("start_time_unix_nano"), "start_time_unix_nano"),
        end_unix_nano=_optional_int(record.get("end_time_unix_nano"), "end_time_unix_nano"),
        service_name=str(service) if service not in (None, "") else None,
        attributes={key: _json_number(value) for key, value in attributes.items()},
        source=path,
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


def _otlp_line(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: _LineErrors) -> None:
    _otlp_request(item, path, number, inputs, errors)


def _otlp_request(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: _LineErrors) -> None:
    try:
        spans = list(_otlp_spans(item, path))
    except ValueError as exc:
        errors.add(number, f"not an OTLP trace request: {exc}")
        return
    inputs.spans.extend(spans)


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def _otlp_spans(request: dict[str, Any], path: str) -> Iterator[SpanRow]:
    for resource_spans in _list(request.get("resourceSpans"), "resourceSpans"):
        if not isinstance(resource_spans, dict):
            raise ValueError("a resourceSpans entry is not an object")
        resource = resource_spans.get("resource") or {}
        resource_attributes = _otlp_attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        service = resource_attributes.get("service.name")
        scopes = _list(resource_spans.get("scopeSpans"), "scopeSpans") + _list(
            resource_spans.get("instrumentationLibrarySpans"), "instrumentationLibrarySpans"
        )
        for scope in scopes:
            if not isinstance(scope, dict):
                raise ValueError("a scopeSpans entry is not an object")
            for span in _list(scope.get("spans"), "spans"):
                if not isinstance(span, dict):
                    raise ValueError("a span is not an object")
                yield SpanRow(
                    trace_id=_otlp_id(span.get("traceId"), 16, "traceId"),
                    span_id=_otlp_id(span.get("spanId"), 8, "spanId"),
                    parent_span_id=_otlp_id(span.get("parentSpanId"), 8, "parentSpanId") if span.get("parentSpanId") else None,
                    name=str(span.get("name") or ""),
                    start_unix_nano=_optional_int(span.get("startTimeUnixNano"), "startTimeUnixNano"),
                    end_unix_nano=_optional_int(span.get("endTimeUnixNano"), "endTimeUnixNano"),
                    service_name=str(service) if service not in (None, "") else None,
                    attributes=_otlp_attributes(span.get("attributes")),
                    source=path,
                )


def _otlp_id(value: object, size: int, what: str) -> str:
    """OTLP/JSON ids are hex; some writers use the protobuf default, base64: accept both."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is missing")
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
