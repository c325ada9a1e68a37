"""Find the inputs of a report and tell their formats apart: carbontracker logs, CSV, JSON lines, OTLP JSON.

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

- a file starting with ``PAR1``: Parquet (:mod:`otel_joules.exporters.parquet_exporter`'s
  schema), read by the DuckDB engine only.

This module walks the paths and recognises each file's format. With the report's engine
(:class:`otel_joules.report.sql.SpanStore`), span files whose start is undamaged are loaded
by DuckDB's own readers, all files of a format in one query; a file DuckDB cannot read, or
with a record failing a check, is read here line by line instead, by the reader of its
format: :mod:`otel_joules.report.span_exports` (CSV, JSON lines),
:mod:`otel_joules.report.otlp_files` (OTLP/JSON); carbontracker logs always are
(:mod:`otel_joules.report.carbontracker_logs`). Files are opened and streamed by
:mod:`otel_joules.report.filestream`; every record passes
:mod:`otel_joules.report.record_checks`; all of it is collected in one
:class:`~otel_joules.report.inputs.Inputs`.

Anything else is skipped with a reason; so are lines that cannot be read (at most
:data:`~otel_joules.report.inputs.MAX_LINE_MESSAGES` messages per file, then a count), which does not stop the rest of
the file from being read.

Hostile and damaged inputs (each skipped with a reason, never a hang, a traceback or a
whole report lost):

- Only regular files are read (a FIFO, a socket or a device, also behind a link named
  ``*.jsonl``, is skipped unopened or opened non-blocking and left); symbolic links to
  files are followed, links inside folders to folders are not (no loops), and a link loop
  is reported as such.
- Files are streamed line by line: memory does not grow with a file's size. A file is
  read up to the size it had when opened (one that grows meanwhile ends there), a line
  longer than :data:`~otel_joules.report.filestream.MAX_LINE_BYTES` is skipped, and so is a file larger than
  :data:`MAX_FILE_BYTES`.
- NUL bytes (a region a power loss left while a writer appended) are a damaged region:
  the partial line before them is skipped, the line after them is read, and so is the
  rest of the file.
- A CSV row with a cell over the csv module's field limit (128 KiB), and a torn row (a
  quoted cell that never closes), is skipped alone: rows are framed before the csv module
  parses each one, so a bad row never swallows the next.
- A record is skipped with its reason when JSON nests too deeply, a time is outside the
  64-bit nanosecond range or ends before it starts, or an ``energy.*``/``carbon.*``
  number is not finite, negative or beyond
  :data:`~otel_joules.report.record_checks.MAX_PLAUSIBLE_VALUE`: such values
  never enter a total. So is a carbontracker epoch with such a power or duration.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from otel_joules.exporters.csv_exporter import attributes_column_index
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report.carbontracker_logs import carbontracker_stem, read_carbontracker_dir
from otel_joules.report.filestream import FileLines, file_kind, open_regular, stat_reason
from otel_joules.report.inputs import Inputs, LineErrors
from otel_joules.report.model import Skipped
from otel_joules.report.otlp_files import read_otlp_request
from otel_joules.report.record_checks import loads_json
from otel_joules.report.span_exports import csv_cells, read_csv, read_jsonl_line
from otel_joules.report.sql import FORMAT_CSV, FORMAT_JSONL, FORMAT_OTLP, FORMAT_PARQUET, PARQUET_MAGIC, SpanStore
from otel_joules.training.logformat import ERR_LOG_SUFFIX

#: Largest file read; larger ones are skipped (a sparse or runaway file, not an export).
MAX_FILE_BYTES = 256 << 30
#: How the hidden name of a file an exporter is still writing ends (the Parquet exporter's journal, a temp name
#: before the rename): such a file is skipped, its spans are read once the file is closed under its own name.
IN_PROGRESS_SUFFIXES = (".inprogress", ".tmp")
_IN_PROGRESS = "is a file an exporter is still writing (a hidden .inprogress/.tmp name): read once it is closed"
#: Largest pretty-printed OTLP document (one JSON value over many lines) read whole.
MAX_DOCUMENT_BYTES = 64 << 20
_UNKNOWN_FORMAT = (
    "unknown format: not a carbontracker log, an otel-joules CSV or JSON-lines span export, or an OTLP JSON trace file"
)
_BINARY = "is a binary file (or damaged from its start), not a span export or carbontracker log"
# How many non-empty lines may precede the first JSON line of a JSON file (damage at its start).
_FORMAT_LOOKAHEAD_LINES = 16


def read_inputs(paths: Iterable[str | os.PathLike[str]], store: SpanStore | None = None) -> Inputs:
    """Read every path (files and directories, recursively) into spans and carbontracker runs.

    With a ``store`` (the report's engine), span files are loaded into it, read by DuckDB where
    :meth:`~otel_joules.report.sql.SpanStore.load_file` takes them and by the Python reader
    otherwise, and ``spans`` stays empty; without one, every span is read in Python into ``spans``
    (Parquet files are then skipped: only DuckDB reads them).
    """
    inputs = Inputs()
    files: list[Path] = []
    log_stems: dict[Path, set[str] | None] = {}  # directory -> stems asked for (None: all)
    for raw in paths:
        path = Path(raw)
        try:
            info = os.stat(path)
        except OSError as exc:
            inputs.skipped.append(Skipped(str(path), stat_reason(exc)))
            continue
        if stat.S_ISDIR(info.st_mode):
            # Links to folders are not followed (os.walk's default): no loops, no escapes.
            def unreadable(exc: OSError) -> None:
                inputs.skipped.append(Skipped(str(exc.filename), f"folder {stat_reason(exc)}"))

            for directory, subdirs, names in os.walk(path, onerror=unreadable):
                subdirs.sort()
                for name in sorted(names):
                    files.append(Path(directory) / name)
        else:
            files.append(path)
    seen: set[tuple[int, int]] = set()
    # Files are looked at in order; what each yields (skip reasons, spans) is taken in the same order once DuckDB
    # has loaded the files it takes, all of a format in one query.
    plan: list[Skipped | SpanFile] = []
    for file in files:
        try:
            info = os.stat(file)
        except OSError as exc:
            plan.append(Skipped(str(file), stat_reason(exc)))
            continue
        if not stat.S_ISREG(info.st_mode):
            plan.append(Skipped(str(file), f"is {file_kind(info.st_mode)}: only regular files are read"))
            continue
        if _in_progress(file.name):
            plan.append(Skipped(str(file), _IN_PROGRESS))
            continue
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            continue
        seen.add(identity)
        stem = carbontracker_stem(file.name)
        if stem is not None:
            if file.name.endswith(ERR_LOG_SUFFIX):
                continue  # error logs hold no consumption
            wanted = log_stems.setdefault(file.parent, set())
            if wanted is not None:
                wanted.add(stem)
            continue
        plan.append(_plan_file(file, store))
    if store is not None:
        _load_planned(store, [item for item in plan if isinstance(item, SpanFile)])
    for item in plan:
        if isinstance(item, Skipped):
            inputs.skipped.append(item)
        else:
            _take(item, inputs, store)
    for directory, stems in log_stems.items():
        read_carbontracker_dir(directory, stems, inputs)
    return inputs


@dataclass
class SpanFile:
    """A file to read spans from: its format if DuckDB may read it, and what loading it gave."""

    path: str
    index: int = -1
    format: str | None = None
    header: tuple[str, ...] = ()
    loaded: int | None = None


def _in_progress(name: str) -> bool:
    """A hidden file an exporter is still writing (ParquetSpanExporter's journal, a temp name before a rename)."""
    return name.startswith(".") and name.endswith(IN_PROGRESS_SUFFIXES)


def _plan_file(file: Path, store: SpanStore | None) -> Skipped | SpanFile:
    """How ``file`` will be read: a reason to skip it, or a span file (with a format DuckDB may read it as)."""
    path = str(file)
    try:
        handle, size = open_regular(path)
    except OSError as exc:
        return Skipped(path, exc.strerror if exc.errno == 0 and exc.strerror else stat_reason(exc))
    with handle:
        if size > MAX_FILE_BYTES:
            return Skipped(path, f"is {size} bytes, over the {MAX_FILE_BYTES}-byte limit of a span export")
        planned = SpanFile(path, store.register(path) if store is not None else -1)
        if handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
            planned.format = FORMAT_PARQUET
        elif store is not None:
            handle.seek(0)
            planned.format, planned.header = _format_for_duckdb(handle, size)
        return planned


def _load_planned(store: SpanStore, planned: list[SpanFile]) -> None:
    """Load every file DuckDB may read, one query per format (and CSV header)."""
    groups: dict[tuple[str, tuple[str, ...]], list[SpanFile]] = {}
    for item in planned:
        if item.format is not None:
            groups.setdefault((item.format, item.header), []).append(item)
    for (fmt, header), items in groups.items():
        counts = store.load(fmt, [(item.index, item.path) for item in items], header, CORE_FIELDS)
        for item in items:
            item.loaded = counts.get(item.index)


def _take(item: SpanFile, inputs: Inputs, store: SpanStore | None) -> None:
    """What a span file gave: its spans counted (loaded by DuckDB), or read now by the Python reader."""
    if item.format == FORMAT_PARQUET:
        _take_parquet(item, inputs, store)
        return
    if item.loaded is not None:
        if item.loaded:
            inputs.files_read.append(item.path)
        else:
            inputs.skipped.append(Skipped(item.path, "holds no span"))
        return
    try:
        handle, size = open_regular(item.path)
    except OSError as exc:
        inputs.skipped.append(Skipped(item.path, exc.strerror if exc.errno == 0 and exc.strerror else stat_reason(exc)))
        return
    if store is not None:
        # The Python reader hands its spans to DuckDB in batches, so a big damaged file is never held whole.
        inputs.flush = lambda spans: store.add_spans(item.index, spans)
    try:
        with handle:
            _read_lines(item.path, handle, size, inputs)
        inputs.flush_spans()
    finally:
        inputs.flush = None


def _take_parquet(item: SpanFile, inputs: Inputs, store: SpanStore | None) -> None:
    path = item.path
    if store is None:
        inputs.skipped.append(Skipped(path, "is a Parquet file: read by the DuckDB engine only"))
        return
    problem = store.unreadable(item.index)
    if problem is not None:
        inputs.skipped.append(Skipped(path, problem))
        return
    bad = store.bad_records(item.index)
    if bad:
        inputs.skipped.append(
            Skipped(path, f"{bad} span record(s) skipped: a bad id or time, or an energy.*/carbon.* number not finite, "
                          "negative or implausible")
        )
    if item.loaded:
        inputs.files_read.append(path)
    elif not bad:
        inputs.skipped.append(Skipped(path, "holds no span"))


def _format_for_duckdb(handle: IO[bytes], size: int) -> tuple[str | None, tuple[str, ...]]:
    """The format of a file whose start is undamaged (CSV with its header, JSON lines, OTLP), or None."""
    lines = FileLines(handle, size)
    first = next(iter(lines), None)
    if first is None or lines.held:
        return None, ()
    text = first[1]
    header = csv_cells(text)
    if header and attributes_column_index(header) is not None:
        return FORMAT_CSV, tuple(header)
    if not text.lstrip().startswith("{"):
        return None, ()
    item, problem = loads_json(text)
    if problem is not None or not isinstance(item, dict):
        return None, ()
    if "resourceSpans" in item:
        return FORMAT_OTLP, ()
    if "trace_id" in item and "span_id" in item:
        return FORMAT_JSONL, ()
    return None, ()


def _read_lines(path: str, handle: IO[bytes], size: int, inputs: Inputs) -> None:
    """The Python reader: a file line by line, each bad line skipped with its reason."""
    before = inputs.spans_read
    errors = LineErrors(path, inputs.skipped)
    lines = FileLines(handle, size)
    stream = iter(lines)
    first = next(stream, None)
    if first is None:
        if lines.number and lines.held:
            inputs.skipped.append(Skipped(path, "holds no readable line: " + lines.held[0][1]))
        else:
            inputs.skipped.append(Skipped(path, "is empty"))
        return
    number, text = first
    header = csv_cells(text)
    if header and attributes_column_index(header) is not None:
        lines.release_held(errors.add)
        read_csv(path, header, stream, inputs, errors)
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
    if inputs.spans_read > before:
        inputs.files_read.append(path)
    elif not any(s.path == path or s.path.startswith(f"{path}:") for s in inputs.skipped):
        inputs.skipped.append(Skipped(path, "holds no span"))


def _read_json(
    path: str,
    first: tuple[int, str],
    stream: Iterator[tuple[int, str]],
    lines: FileLines,
    handle: IO[bytes],
    size: int,
    inputs: Inputs,
    errors: LineErrors,
) -> None:
    """JSON lines (ours or OTLP), the kind told by the first line that is a JSON object."""
    reader: Callable[[dict[str, Any], str, int, Inputs, LineErrors], None] | None = None
    for number, text in _chain(first, stream):
        item, problem = loads_json(text)
        if problem is None and not isinstance(item, dict):
            problem = "not a JSON object"
        if problem is not None:
            lines.report(number, problem)
            continue
        if reader is None:
            if "resourceSpans" in item:
                reader = read_otlp_request
            elif "trace_id" in item and "span_id" in item:
                reader = read_jsonl_line
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


def _read_json_document(path: str, handle: IO[bytes], size: int, lines: FileLines, inputs: Inputs, errors: LineErrors) -> None:
    """No line is a JSON object: perhaps one OTLP document pretty-printed over several lines."""
    first_problem = lines.held[0][1] if lines.held else "no JSON object"
    if size > MAX_DOCUMENT_BYTES:
        inputs.skipped.append(Skipped(path, f"no line is a JSON object ({first_problem})"))
        return
    handle.seek(0)
    data = handle.read(size)
    document, problem = loads_json(data.decode("utf-8-sig", errors="replace"))
    if problem is not None:
        inputs.skipped.append(Skipped(path, f"is not valid JSON: {problem.split(';')[0]}"))
        return
    if isinstance(document, dict) and "resourceSpans" in document:
        read_otlp_request(document, path, 1, inputs, errors)
    else:
        inputs.skipped.append(Skipped(path, "JSON, but not an OTLP trace request (no resourceSpans)"))
