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
from otel_joules.report import filestream
from otel_joules.report.inputs import Inputs, LineErrors
from otel_joules.report.model import SpanRow
from otel_joules.report.record_checks import (
    SPAN_ID_HEX_DIGITS,
    TRACE_ID_HEX_DIGITS,
    checked_attributes,
    checked_times,
    clock_step_number,
    hex_id_pattern,
    loads_json,
)

# Matched against lowercased ids; the SQL checks render the same patterns (report.sql.checks).
_HEX_TRACE = re.compile(f"^{hex_id_pattern(TRACE_ID_HEX_DIGITS)}$")
_HEX_SPAN = re.compile(f"^{hex_id_pattern(SPAN_ID_HEX_DIGITS)}$")


def csv_cells(text: str) -> list[str] | None:
    """The cells of one CSV line (a possible header), or None if it is not CSV."""
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return None


def read_jsonl_line(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: LineErrors) -> None:
    """The span of one JSON-lines record (line ``number``), or its line skipped with the reason."""
    try:
        inputs.add_span(_span_from_record(item, item.get("attributes"), path))
    except (ValueError, RecursionError) as exc:
        errors.add(number, str(exc) if isinstance(exc, ValueError) else "nested too deeply to read")


def read_csv(
    path: str, header: list[str], stream: Iterator[tuple[int, str]], inputs: Inputs, errors: LineErrors
) -> None:
    """The spans of a CSV export's rows after its ``header``; a bad row is skipped with its reason.

    Rows are framed here, not by the csv module: a row is its physical lines up to the one
    that ends outside a quoted cell, and each row is parsed on its own, so whatever is wrong
    with one row (a cell over the csv module's field limit, a torn quote) costs that row
    alone, with one message at its first line.
    """
    for number, row_lines, problem in _csv_rows(header, stream):
        if problem is not None:
            errors.add(number, problem)
            continue
        try:
            parsed = list(csv.reader(row_lines))
        except csv.Error as exc:
            errors.add(number, f"CSV error: {exc}; row skipped")
            continue
        for cells in parsed:
            if not cells:
                continue
            if len(cells) != len(header):
                errors.add(number, "has a different number of cells than the header")
                continue
            row = dict(zip(header, cells))
            attributes, problem = loads_json(row[ATTRIBUTES_COLUMN] or "{}")
            if problem is not None:
                errors.add(number, "its attributes cell is not JSON" + ("" if "valid" in problem else f" ({problem})"))
                continue
            try:
                inputs.add_span(_span_from_record(row, attributes, path))
            except (ValueError, RecursionError) as exc:
                errors.add(number, str(exc) if isinstance(exc, ValueError) else "nested too deeply to read")


def csv_record_cells(header: list[str], stream: Iterator[tuple[int, str]]) -> Iterator[dict[str, str]]:
    """The rows of our CSV after its header that read, as ``{column: cell}``: a torn, damaged or miscounted row is
    left out, as :func:`read_csv` skips it (for what a second pass reads of a file, e.g. ``--by``'s resource)."""
    for _, row_lines, problem in _csv_rows(header, stream):
        if problem is not None:
            continue
        try:
            parsed = list(csv.reader(row_lines))
        except csv.Error:
            continue
        for cells in parsed:
            if cells and len(cells) == len(header):
                yield dict(zip(header, cells))


def _csv_rows(header: list[str], stream: Iterator[tuple[int, str]]) -> Iterator[tuple[int, list[str], str | None]]:
    """``(first line number, the row's lines, None)`` per row, or ``(number, [], reason)`` for a row that is skipped.

    A row goes on while a quoted cell is open (a span name with a line break). It was torn
    (a writer stopped mid-row) when a line comes that does not complete it into a row of
    this file but is a whole row by itself (cell count, trace and span id): the torn row is
    skipped and that line starts the next one, so a torn row costs only itself. A row over
    :data:`~otel_joules.report.filestream.MAX_LINE_BYTES` is skipped unread.
    """
    pending: list[str] = []
    start = size = 0
    for number, text in stream:
        if pending:
            size += len(text)
            if size <= filestream.MAX_LINE_BYTES:
                pending.append(text)
            if not _ends_in_quotes(text, in_quotes=True):
                if size > filestream.MAX_LINE_BYTES:
                    yield start, [], f"a row of {size} characters, over the {filestream.MAX_LINE_BYTES}-byte limit of a line, skipped"
                    pending = []
                    continue
                if _row_of(pending, header) or not _whole_row_alone(text, header):
                    yield start, pending, None
                    pending = []
                    continue
            elif not _whole_row_alone(text, header):
                continue
            yield start, [], _TORN_ROW
            pending = []
        if _ends_in_quotes(text, in_quotes=False):
            start, pending, size = number, [text], len(text)
        else:
            yield number, [text], None
    if pending:
        yield start, [], _TORN_ROW


def _row_of(row_lines: list[str], header: list[str]) -> bool:
    """Whether ``row_lines`` make one record of this file (cells, ids, a JSON attributes cell), or one the csv
    module refuses for its size (a bad cell)."""
    try:
        rows = [cells for cells in csv.reader(row_lines) if cells]
    except csv.Error as exc:
        return "field larger than field limit" in str(exc)
    if len(rows) != 1 or len(rows[0]) != len(header):
        return False
    row = dict(zip(header, rows[0]))
    if not (_HEX_TRACE.match(row.get("trace_id", "").lower()) and _HEX_SPAN.match(row.get("span_id", "").lower())):
        return False
    # The attributes cell is JSON, which holds no raw line break: a torn row joined with the
    # next one has one there.
    attributes, problem = loads_json(row.get(ATTRIBUTES_COLUMN) or "{}")
    return problem is None and isinstance(attributes, dict)


_TORN_ROW = "a row whose quoted cell never closes (a torn or damaged row) skipped"


def _ends_in_quotes(text: str, *, in_quotes: bool) -> bool:
    """Whether a CSV line ends inside a quoted cell (its row goes on on the next line).

    As the csv module reads: a quote opens a quoted cell only at a cell's start, ``""``
    inside one is a quote, and a quote elsewhere is an ordinary character.
    """
    position, at_cell_start = 0, True
    while True:
        if in_quotes:
            close = text.find('"', position)
            if close < 0:
                return True
            if text.startswith('"', close + 1):
                position = close + 2
                continue
            in_quotes, position, at_cell_start = False, close + 1, False
            continue
        quote = text.find('"', position)
        if quote < 0:
            return False
        opens = text[quote - 1] == "," if quote > position else at_cell_start
        in_quotes, position, at_cell_start = opens, quote + 1, False


def _whole_row_alone(text: str, header: list[str]) -> bool:
    """Whether ``text`` is by itself a complete row of this file (cell count, ids): the start of a new row."""
    if _ends_in_quotes(text, in_quotes=False):
        return False
    try:
        cells = next(csv.reader([text]), [])
    except csv.Error:
        return False
    if len(cells) != len(header):
        return False
    row = dict(zip(header, cells))
    return bool(_HEX_TRACE.match(row.get("trace_id", "").lower()) and _HEX_SPAN.match(row.get("span_id", "").lower()))


def _span_from_record(record: dict[str, Any], attributes: object, path: str) -> SpanRow:
    """A span of our CSV or JSON-lines format (core fields of otel_joules.exporters.records)."""
    trace_id = str(record.get("trace_id") or "").lower()
    span_id = str(record.get("span_id") or "").lower()
    if not _HEX_TRACE.match(trace_id):
        raise ValueError(f"trace_id {str(record.get('trace_id'))[:80]!r} is not {TRACE_ID_HEX_DIGITS} hex digits")
    if not _HEX_SPAN.match(span_id):
        raise ValueError(f"span_id {str(record.get('span_id'))[:80]!r} is not {SPAN_ID_HEX_DIGITS} hex digits")
    parent = sys.intern(str(record.get("parent_span_id") or "").lower()) or None
    if parent is not None and not _HEX_SPAN.match(parent):
        raise ValueError(f"parent_span_id {str(record.get('parent_span_id'))[:80]!r} is not {SPAN_ID_HEX_DIGITS} hex digits")
    if not isinstance(attributes, dict):
        raise ValueError("attributes is not a JSON object")
    kept = checked_attributes(attributes)
    start_ns, end_ns = checked_times(
        record.get("start_time_unix_nano"),
        record.get("end_time_unix_nano"),
        "start_time_unix_nano",
        "end_time_unix_nano",
        clock_step_number(kept),
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
        attributes=kept,
        source=sys.intern(path),
    )
