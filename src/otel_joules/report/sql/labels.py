"""Totals per group in DuckDB: ``otel-joules report --by`` (:mod:`otel_joules.report.groups`).

The spans are the store's (checked, one copy each); what --by reads beyond the kept attributes (host.name,
slurm.job.id, any other resource or span attribute) is read from the files again, for the keys asked only.
OTLP files hold every resource attribute: DuckDB's JSON functions hold every big OTLP line of a batch parsed
at once (a 15 MB file of 512-span lines ran out of a 350 MB limit), so their labels are read in Python, a line
at a time, and handed to DuckDB as JSON lines; a line that is not a request gives none. Our JSON-lines, CSV
and Parquet records keep the resource's identities in their ``resource`` field (exporters.records): read by
DuckDB in one query per file, or a line at a time in Python where DuckDB cannot read the file (the damaged
files the Python reader reads).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import shutil
import tempfile
from typing import Any, Iterable, Sequence

try:  # at import, as the store does
    import duckdb
except ImportError:  # the [report] extra is not installed; the store says what to install
    duckdb = None  # type: ignore[assignment]

from otel_joules.exporters.csv_exporter import RESOURCE_COLUMN, attributes_column_index
from otel_joules.report.filestream import FileLines, open_regular
from otel_joules.report.model import ReportError
from otel_joules.report.span_exports import csv_cells, csv_record_cells
from otel_joules.report.sql.checks import MAX_LINE_BYTES
from otel_joules.report.sql.dialect import attribute_number, json_path, literal
from otel_joules.report.sql.store import FORMAT_CSV, FORMAT_JSONL, FORMAT_OTLP, FORMAT_PARQUET, INSTALL_HINT, SpanStore
from otel_joules.semconv import ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_BELOW_RESOLUTION, ENERGY_SOURCE, SOURCE_MIXED, SOURCE_PARTIAL

_log = logging.getLogger(__name__)


#: The DuckDB types of the group table's columns after the keys (groups.TABLE_COLUMNS).
_GROUP_COLUMN_TYPES = ("DOUBLE", "DOUBLE", "VARCHAR", "BOOLEAN", "BIGINT", "BIGINT")
# How much of a file's start is looked at to tell an OTLP file (its first object names resourceSpans).
_OTLP_SNIFF_BYTES = 1 << 16
#: The first bytes of a Parquet file.
PARQUET_MAGIC = b"PAR1"
# The longest OTLP line read for labels: what one line may take in memory here.
_MAX_LABEL_LINE_BYTES = 64 << 20


def _span_file_kind(path: str) -> tuple[str, tuple[str, ...]]:
    """The format of a span file the store holds, from one read of its start: :data:`FORMAT_PARQUET` (its magic),
    :data:`FORMAT_OTLP` (its first object names resourceSpans), :data:`FORMAT_CSV` with its header (ours), else
    :data:`FORMAT_JSONL`.

    Raises:
        OSError: it cannot be opened, or is no longer a regular file.
    """
    handle, _ = open_regular(path)
    with handle:
        start = handle.read(_OTLP_SNIFF_BYTES)
    if start.startswith(PARQUET_MAGIC):
        return FORMAT_PARQUET, ()
    if b'"resourceSpans"' in start:
        return FORMAT_OTLP, ()
    header = tuple(csv_cells(start.split(b"\n", 1)[0].decode("utf-8", "replace")) or ())
    if attributes_column_index(header) is not None:
        return FORMAT_CSV, header
    return FORMAT_JSONL, ()


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _label_text(value: object) -> str | None:
    """An OTLP ``AnyValue`` as the text a key's value is (as ``json_extract_string`` gives it for the other formats)."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return "true" if value["boolValue"] is True else "false"
    for kind in ("intValue", "doubleValue"):
        if kind in value:
            return str(value[kind])
    return None


def _label_pairs(items: object, names: frozenset[str]) -> list[dict[str, str | None]]:
    return [
        {"k": item["key"], "v": _label_text(item.get("value"))}
        for item in _list(items)
        if isinstance(item, dict) and item.get("key") in names
    ]


def _otlp_hex(value: object, size: int) -> str | None:
    """A hex id as the engine keeps it (lowercase; base64, the protobuf default, decoded), or None."""
    if not isinstance(value, str):
        return None
    text = value.lower()
    if len(text) == 2 * size and all(c in "0123456789abcdef" for c in text):
        return text
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == size else None


def _write_labels(path: str, names: frozenset[str], out: Any) -> int:
    """One JSON line per span of the OTLP file ``path``: its ids and labels (its own attributes in ``names``, then its
    resource's). Read a line at a time (each line is one request), so memory stays that of one line; a line that is
    not a request gives no labels. Returns how many spans were written."""
    written = 0
    with open(path, "rb") as handle:
        for raw in handle:
            if len(raw) > _MAX_LABEL_LINE_BYTES or b'"resourceSpans"' not in raw:
                continue
            try:
                request = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if not isinstance(request, dict):
                continue
            for resource_spans in _list(request.get("resourceSpans")):
                if not isinstance(resource_spans, dict):
                    continue
                resource = resource_spans.get("resource")
                shared = _label_pairs(resource.get("attributes") if isinstance(resource, dict) else None, names)
                scopes = _list(resource_spans.get("scopeSpans")) + _list(resource_spans.get("instrumentationLibrarySpans"))
                for scope in scopes:
                    for span in _list(scope.get("spans")) if isinstance(scope, dict) else ():
                        if not isinstance(span, dict):
                            continue
                        trace_id, span_id = _otlp_hex(span.get("traceId"), 16), _otlp_hex(span.get("spanId"), 8)
                        if trace_id is None or span_id is None:
                            continue
                        labels = _label_pairs(span.get("attributes"), names) + shared
                        out.write(json.dumps({"trace_id": trace_id, "span_id": span_id, "labels": labels}) + "\n")
                        written += 1
    return written


def _resource_labels(resource: str, names: Sequence[str]) -> str:
    """SQL: the labels (``STRUCT(k, v)[]``) of a record's ``resource`` JSON object among ``names``."""
    pairs = ", ".join(f"{{'k': {literal(n)}, 'v': json_extract_string({resource}, {json_path(n)})}}" for n in names)
    return f"list_filter([{pairs}], lambda l: l.v IS NOT NULL)"


def _record_labels_select(con: Any, path: str, kind: str, header: tuple[str, ...], names: Sequence[str]) -> str | None:
    """SQL: (trace_id, span_id, labels) of each record of our span file ``path`` (of ``kind``, a CSV one with
    ``header``: :func:`_span_file_kind`) from its ``resource`` field, or None for a file with no such field (a CSV or
    Parquet file from before it)."""
    if kind == FORMAT_PARQUET:
        schema = con.execute(f"SELECT name FROM parquet_schema({literal(path)})").fetchall()
        if (RESOURCE_COLUMN,) not in schema:
            return None
        resource = f"TRY_CAST(nullif({RESOURCE_COLUMN}, '') AS JSON)"
        return (f"SELECT lower(trace_id), lower(span_id), {_resource_labels(resource, names)} "
                f"FROM read_parquet({literal(path)})")
    if kind == FORMAT_CSV:
        if header[-1] != RESOURCE_COLUMN:
            return None
        columns = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(header))) + "}"
        resource = f"TRY_CAST(nullif(c{len(header) - 1}, '') AS JSON)"
        tid, sid = f"c{header.index('trace_id')}", f"c{header.index('span_id')}"
        return (f"SELECT lower({tid}), lower({sid}), {_resource_labels(resource, names)} "
                f"FROM read_csv({literal(path)}, header = true, auto_detect = false, columns = {columns}, delim = ',', "
                f"quote = '\"', escape = '\"', strict_mode = true, max_line_size = {MAX_LINE_BYTES})")
    labels = _resource_labels("json->'$.resource'", names)
    return (f"SELECT lower(json->>'$.trace_id'), lower(json->>'$.span_id'), {labels} "
            f"FROM read_ndjson_objects({literal(path)}, maximum_object_size = {MAX_LINE_BYTES})")


def _insert_record_labels(con: Any, path: str, kind: str, header: tuple[str, ...], names: Sequence[str]) -> bool:
    """Our span file's labels into ``span_labels`` by DuckDB; False where DuckDB cannot read the file (the Python
    reader's turn). A file with no ``resource`` field gives none."""
    try:
        select = _record_labels_select(con, path, kind, header, names)
        if select is None:
            return True
        con.execute(f"INSERT INTO span_labels {select}")
    except duckdb.Error as exc:
        _log.debug("otel-joules report: DuckDB cannot read the resource of %s (%s): read line by line", path, exc)
        return False
    return True


def _label_of(value: object) -> str | None:
    """A JSON value as the text ``json_extract_string`` gives of it (None for null)."""
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _write_record_labels(path: str, kind: str, header: tuple[str, ...], names: frozenset[str], out: Any) -> int:
    """As :func:`_write_labels`, for our JSON-lines or CSV span file ``path`` (of ``kind``, a CSV one with ``header``)
    that DuckDB cannot read: its records' ``resource`` field, read a line at a time as the Python reader reads the
    spans (a line or row it skips gives no labels)."""
    if kind == FORMAT_PARQUET or (kind == FORMAT_CSV and header[-1] != RESOURCE_COLUMN):
        return 0  # a Parquet file DuckDB cannot read, a CSV file without the column: nothing to read
    written = 0
    handle, size = open_regular(path)
    with handle:
        stream = iter(FileLines(handle, size))
        rows: Iterable[Any]
        if kind == FORMAT_CSV:
            next(stream, None)  # the header
            rows = (
                {"trace_id": r["trace_id"], "span_id": r["span_id"], "resource": _json_or_none(r[RESOURCE_COLUMN])}
                for r in csv_record_cells(list(header), stream)
            )
        else:
            rows = map(_json_or_none, (text for _, text in stream))
        for row in rows:
            if not isinstance(row, dict):
                continue
            resource, trace_id, span_id = row.get("resource"), row.get("trace_id"), row.get("span_id")
            if not (isinstance(resource, dict) and isinstance(trace_id, str) and isinstance(span_id, str)):
                continue
            labels = [{"k": k, "v": _label_of(resource[k])} for k in sorted(names) if k in resource]
            out.write(json.dumps({"trace_id": trace_id.lower(), "span_id": span_id.lower(), "labels": labels}) + "\n")
            written += 1
    return written


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _group_value(key: str, names: Sequence[str]) -> str:
    """SQL: one ``--by`` key's value for a span (text; NULL: none); ``names``: the attributes it reads, in order."""
    if key == "service":
        return "service_name"
    if key == "span":
        return "name"
    if key == "day":
        return "strftime(make_timestamp(start_ns // 1000), '%Y-%m-%d')"
    found = []
    for name in names:
        found.append(f"json_extract_string(attrs, {json_path(name)})")
        found.append(f"list_filter(coalesce(labels, []), lambda l: l.k = {literal(name)})[1].v")
    return f"coalesce({', '.join(found)})"


def group_rows(
    store: SpanStore, keys: Sequence[str], attributes: Sequence[Sequence[str]]
) -> tuple[list[tuple[Any, ...]], int, list[tuple[str, str]]]:
    """The store's spans grouped by ``keys`` (``attributes[i]``: the names key ``i`` reads, none for service, span, day).

    Returns the rows (the key values, the sum of the spans' ``energy.attributed.self.joules``, their merged
    ``energy.source``, below resolution, spans and traces counted), how many spans have no self share (left out),
    and (path, reason) for each OTLP file whose labels could not be read. A span exported twice counts once.
    """
    con = store.connection
    names = sorted({name for group in attributes for name in group})
    problems: list[tuple[str, str]] = []
    con.execute("CREATE OR REPLACE TEMP TABLE span_labels (trace_id VARCHAR, span_id VARCHAR, "
                "labels STRUCT(k VARCHAR, v VARCHAR)[])")
    if names:
        staging = os.path.join(store.spill_dir, "labels.jsonl")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            written = 0
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for path in dict.fromkeys(store.files):
                    try:
                        kind, header = _span_file_kind(path)
                        if kind == FORMAT_OTLP:
                            written += _write_labels(path, frozenset(names), out)
                        elif not _insert_record_labels(con, path, kind, header, names):
                            written += _write_record_labels(path, kind, header, frozenset(names), out)
                    except OSError as exc:
                        problems.append((path, f"its resource attributes could not be read for --by: {exc.strerror or exc}"))
            if written:
                con.execute(f"""
INSERT INTO span_labels
SELECT trace_id, span_id, labels
FROM read_json({literal(staging)}, format = 'newline_delimited', maximum_object_size = 67108864,
               columns = {{trace_id: 'VARCHAR', span_id: 'VARCHAR', labels: 'STRUCT(k VARCHAR, v VARCHAR)[]'}})
""")
        finally:
            os.unlink(staging)
    values = ", ".join(f"{_group_value(key, group)} AS k{i}" for i, (key, group) in enumerate(zip(keys, attributes)))
    columns = ", ".join(f"k{i}" for i in range(len(keys)))
    below = json_path(ENERGY_BELOW_RESOLUTION)
    counted = "FILTER (WHERE self_joules IS NOT NULL)"
    rows = con.execute(f"""
WITH one AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (PARTITION BY trace_id, span_id ORDER BY n_attrs DESC, ord) AS copy
        FROM (SELECT *, rowid AS ord FROM spans)
    ) WHERE copy = 1
), labelled AS (
    SELECT one.*, l.labels
    FROM one LEFT JOIN (SELECT trace_id, span_id, first(labels) AS labels FROM span_labels GROUP BY ALL) l
    USING (trace_id, span_id)
), keyed AS (
    SELECT {values}, trace_id, {attribute_number(ENERGY_ATTRIBUTED_SELF_JOULES)} AS self_joules,
           json_extract_string(attrs, {json_path(ENERGY_SOURCE)}) AS source,
           coalesce(json_type(attrs, {below}) = 'BOOLEAN' AND CAST(json_extract(attrs, {below}) AS BOOLEAN), false) AS below
    FROM labelled
)
SELECT {columns}, fsum(self_joules),
       CASE WHEN bool_or(source = {literal(SOURCE_PARTIAL)}) {counted} THEN {literal(SOURCE_PARTIAL)}
            WHEN count(DISTINCT source) {counted} = 1 THEN min(source) {counted}
            WHEN count(DISTINCT source) {counted} > 1 THEN {literal(SOURCE_MIXED)} END,
       coalesce(bool_or(below) {counted}, false), count(self_joules), count(DISTINCT trace_id) {counted},
       count(*) - count(self_joules)
FROM keyed GROUP BY {columns}
""").fetchall()
    missing = sum(int(row[-1]) for row in rows)
    return [row[:-1] for row in rows if row[-3] > 0], missing, problems


def groups_parquet_bytes(by: Sequence[str], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> bytes:
    """The groups as a Parquet file's bytes: the keys as text, then ``columns`` (the caller writes the file).

    Raises:
        ReportError: DuckDB is not installed (:data:`INSTALL_HINT`).
    """
    try:
        import duckdb
    except ImportError:
        raise ReportError(INSTALL_HINT) from None
    folder = tempfile.mkdtemp(prefix="otel-joules-report-")
    con = duckdb.connect(":memory:")
    try:
        names = [*by, *columns]
        types = ["VARCHAR"] * len(by) + list(_GROUP_COLUMN_TYPES)
        con.execute("CREATE TABLE g (" + ", ".join(f'"{n}" {t}' for n, t in zip(names, types)) + ")")
        if rows:
            con.executemany("INSERT INTO g VALUES (" + ", ".join("?" for _ in names) + ")", [list(r) for r in rows])
        path = os.path.join(folder, "groups.parquet")
        con.execute(f"COPY g TO {literal(path)} (FORMAT parquet)")
        with open(path, "rb") as handle:
            return handle.read()
    finally:
        con.close()
        shutil.rmtree(folder, ignore_errors=True)
