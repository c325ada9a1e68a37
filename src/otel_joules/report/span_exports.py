"""Spans of this project's own exports: JSON lines and CSV.

- JSON lines (:mod:`otel_joules.exporters.jsonl_exporter`): one JSON object per line with
  ``trace_id`` and ``span_id``, attributes from its ``attributes`` object;
- CSV (:mod:`otel_joules.exporters.csv_exporter`): a header starting with the core fields
  of :mod:`otel_joules.exporters.records` and ending in ``attributes``; a span's attributes
  are that JSON cell (every ``energy.*``, ``carbon.*`` and ``training.*`` attribute, typed),
  whatever ``energy_columns`` the file was written with.

A record that fails a check (:mod:`otel_joules.report.record_checks`) is skipped with its
reason; the rest of the file is read.
"""

from __future__ import annotations

import csv
import re
import sys
from typing import Any, Iterator

from otel_joules.exporters.csv_exporter import ATTRIBUTES_COLUMN
from otel_joules.report.filestream import FileLines
from otel_joules.report.inputs import Inputs, LineErrors
from otel_joules.report.model import SpanRow
from otel_joules.report.record_checks import checked_attributes, checked_times, loads_json

_HEX_TRACE = re.compile(r"^[0-9a-f]{32}$")
_HEX_SPAN = re.compile(r"^[0-9a-f]{16}$")


def csv_cells(text: str) -> list[str] | None:
    """The cells of one CSV line (a possible header), or None if it is not CSV."""
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return None


def read_jsonl_line(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: LineErrors) -> None:
    """The span of one JSON-lines record (line ``number``), or its line skipped with the reason."""
    try:
        inputs.spans.append(_span_from_record(item, item.get("attributes"), path))
    except (ValueError, RecursionError) as exc:
        errors.add(number, str(exc) if isinstance(exc, ValueError) else "nested too deeply to read")


def read_csv(
    path: str, header: list[str], stream: Iterator[tuple[int, str]], lines: FileLines, inputs: Inputs, errors: LineErrors
) -> None:
    """The spans of a CSV export's rows after its ``header``; a bad row is skipped with its reason."""
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
                attributes, problem = loads_json(row[ATTRIBUTES_COLUMN] or "{}")
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
    start_ns, end_ns = checked_times(
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
