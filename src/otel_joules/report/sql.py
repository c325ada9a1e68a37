"""All of the report's SQL: span files read by DuckDB's own readers, checked, deduplicated, nested and summed per trace.

The report's engine (``otel-joules report``; needs the ``[report]`` extra, ``duckdb``). Python
finds the files and tells their formats apart (:mod:`otel_joules.report.readers`, which holds
the filesystem checks: FIFOs, device links, link loops, unreadable folders); each span file is
handed here and read by DuckDB (``read_ndjson_objects`` for JSON lines, and for OTLP/JSON once
:func:`~otel_joules.report.otlp_files.flatten_otlp` has staged its spans as JSON lines, one request line at a
time; ``read_csv`` for our CSV, ``read_parquet`` for :mod:`otel_joules.exporters.parquet_exporter`'s
files) into one table of spans, which DuckDB keeps within :func:`otel_joules.config.report_memory_limit`
and spills to a private temporary folder (mode 0700, removed by :meth:`SpanStore.close`).

**Checks in SQL.** Every record is checked in SQL against the rules of
:mod:`otel_joules.report.record_checks` (ids of 32 and 16 hex digits, 64-bit nanosecond times
that do not end before they start, every ``energy.*``/``carbon.*`` joules, grams, PUE and
intensity number finite, not negative and at most
:data:`~otel_joules.report.record_checks.MAX_PLAUSIBLE_VALUE`), conservatively: a record that
passes would pass the Python checks too. A JSON-lines, CSV or OTLP file that DuckDB cannot read
(a half-written or foreign line, NUL bytes, text that is not UTF-8, a line over DuckDB's bound)
or that holds one record failing a check is not loaded: :meth:`SpanStore.load_file` says so and
the file is read by the line-by-line Python reader instead, which skips each bad record with its
own reason and line number and keeps the good ones (:meth:`SpanStore.add_spans` loads those).
So a damaged file costs its bad lines only, with the same messages as before, whatever DuckDB's
readers would do by default. A Parquet file has no line reader beside it: its records that fail
a check are skipped, counted in one message.

**Per trace in SQL.** A span exported twice counts once (the copy with the most kept attributes,
the first on a tie); the topmost spans carrying ``energy.attributed.joules`` (per
``training.rank``: nearest self-or-ancestor rank) and ``energy.joules`` are found by walking each
span's ancestors in a recursive query (a parent loop ends the walk, as in Python); first start,
last end, the root's name and service, clock steps and the longest measured span duration are
aggregated. :meth:`SpanStore.traces` yields one :class:`TraceSpans` per trace with only the spans
a run is made of (the counted ones and the epochs), in the order the spans were first read, so
:mod:`otel_joules.report.trace_runs` adds them up in the same order as before (the same floats).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

try:  # at import, as the other optional libraries are: a process may drop its privileges before reporting
    import duckdb
except ImportError:  # the [report] extra is not installed; SpanStore() says what to install
    duckdb = None  # type: ignore[assignment]

from otel_joules.carbon.units import JOULES_PER_KWH
from otel_joules.config import OTEL_JOULES_REPORT_MEMORY_LIMIT, report_memory_limit
from otel_joules.exporters.csv_exporter import RESOURCE_COLUMN, attributes_column_index
from otel_joules.report.filestream import FileLines, open_regular
from otel_joules.report.model import ReportError, SpanRow
from otel_joules.report.otlp_files import flatten_otlp
from otel_joules.report.record_checks import (
    CHECKED_NUMBER_PREFIXES,
    CHECKED_NUMBER_SUFFIXES,
    MAX_PLAUSIBLE_VALUE,
    REPORT_ATTRIBUTE_PREFIXES,
    checked_attributes,
)
from otel_joules.report.span_exports import csv_cells, csv_record_cells
from otel_joules.semconv import (
    CARBON_INTENSITY_GCO2EQ_PER_KWH,
    CARBON_PUE,
    ENERGY_ATTRIBUTED_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_JOULES,
    ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS,
    ENERGY_ATTRIBUTED_SELF_JOULES,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CLOCK_STEP_S,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    ENERGY_SOURCE,
    SOURCE_MIXED,
    SOURCE_PARTIAL,
    SPAN_EPOCH,
    TRAINING_RANK,
)

#: The span formats handed to :meth:`SpanStore.load_file`.
FORMAT_JSONL = "jsonl"
FORMAT_CSV = "csv"
FORMAT_OTLP = "otlp"
FORMAT_PARQUET = "parquet"
# OTLP files staged as JSON lines (SpanStore._load_otlp).
_FORMAT_STAGED_OTLP = "otlp-staged"
#: What to install when DuckDB is missing.
INSTALL_HINT = "otel-joules report needs DuckDB: pip install 'otel-joules[report]'"
#: The longest line DuckDB's readers take (``maximum_object_size``, ``max_line_size``): a file with a longer one is
#: read by the Python reader. DuckDB holds two buffers of this size per thread while it reads, and a bigger bound
#: made reading 510 MB of JSON lines four times slower (19 s against 4.7 s) under the memory limit.
MAX_LINE_BYTES = 16 << 20
#: The csv module's default field limit: a longer cell is left to the Python reader, which skips its row.
CSV_FIELD_LIMIT = 131072
# The Python JSON parser gives up near 1,000 levels; a record with this many brackets may nest that deep and is
# left to the Python reader, which says so.
_DEEP_BRACKETS = 900
# Attribute keys read in SQL by a JSON path: anything else is left to the Python reader.
_PLAIN_KEY = "[A-Za-z0-9_.\\-]+"
_INT64_MAX = 2**63 - 1
_log = logging.getLogger(__name__)


def _literal(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _any(function: str, column: str, values: Iterable[str]) -> str:
    return "(" + " OR ".join(f"{function}({column}, {_literal(v)})" for v in values) + ")"


def _kept(key: str) -> str:
    """SQL: the attribute named ``key`` is one a report keeps (record_checks.REPORT_ATTRIBUTE_PREFIXES)."""
    return _any("starts_with", key, REPORT_ATTRIBUTE_PREFIXES)


def _checked(key: str) -> str:
    """SQL: the attribute named ``key`` holds a number that enters a total (record_checks.CHECKED_NUMBER_*)."""
    return f"({_any('starts_with', key, CHECKED_NUMBER_PREFIXES)} AND {_any('ends_with', key, CHECKED_NUMBER_SUFFIXES)})"


def _path(key: str) -> str:
    return _literal(f'$."{key}"')


def _number_ok(value: str) -> str:
    """SQL: a JSON value that may enter a total as Python reads it (a number finite, >= 0, plausible)."""
    return (
        f"CASE WHEN json_type({value}) IN ('DOUBLE', 'BIGINT', 'UBIGINT') THEN "
        f"(isfinite(CAST({value} AS DOUBLE)) AND CAST({value} AS DOUBLE) >= 0 "
        f"AND CAST({value} AS DOUBLE) <= {MAX_PLAUSIBLE_VALUE!r}) "
        f"WHEN json_type({value}) = 'VARCHAR' THEN ({value}->>'$') NOT IN ('NaN', 'Infinity', '-Infinity') "
        "ELSE true END"
    )


def _attributes_ok(attrs: str) -> str:
    """SQL: attributes (a ``MAP(VARCHAR, JSON)``: NULL when not a JSON object or a key is there twice) whose kept
    keys are plain and whose checked numbers are fine."""
    entry_ok = f"regexp_full_match(e.key, '{_PLAIN_KEY}') AND (NOT {_checked('e.key')} OR {_number_ok('e.value')})"
    return (
        f"({attrs} IS NOT NULL "
        f"AND coalesce(list_bool_and([{entry_ok} for e in map_entries({attrs}) if {_kept('e.key')}]), true))"
    )


def _kept_count(attrs: str) -> str:
    return f"len([k for k in map_keys({attrs}) if {_kept('k')}])"


def _not_deep(text: str) -> str:
    return f"shallow({text})"


# A record shorter (in bytes, at least its characters) than twice the depth at which Python's parser gives up cannot
# nest that deep. A longer one is measured: strings dropped, brackets kept, then each round removes every innermost pair (one or two levels), so a
# record left with no bracket after the rounds nests at most twice that many levels deep. Deeper ones are left to
# the Python reader, which reads them exactly (and skips one nested too deeply with that reason).
_SHALLOW_ROUNDS = 24
_brackets = "regexp_replace(regexp_replace(t, '\"([^\"\\\\]|\\\\.)*\"', '', 'g'), '[^\\[\\]{}]', '', 'g')"
_peeled = _brackets
for _ in range(_SHALLOW_ROUNDS):
    _peeled = f"replace(replace({_peeled}, '[]', ''), '{{}}', '')"
_MACROS = (
    # Only a long record is measured, on its JSON structure (the types of its values, arrays merged: as deep as the
    # record, and short).
    f"CREATE MACRO peeled(t) AS {_peeled} = ''",
    f"CREATE MACRO shallow(t) AS CASE WHEN strlen(t) < {2 * _DEEP_BRACKETS} THEN true "
    "ELSE peeled(CAST(json_structure(t) AS VARCHAR)) END",
)


def _json_hex(value: str, digits: int) -> str:
    return f"(json_type({value}) = 'VARCHAR' AND regexp_full_match({value}->>'$', '[0-9a-fA-F]{{{digits}}}'))"


def _json_parent_ok(value: str) -> str:
    return (
        f"({value} IS NULL OR json_type({value}) = 'NULL' OR "
        f"(json_type({value}) = 'VARCHAR' AND (({value}->>'$') = '' OR regexp_full_match({value}->>'$', '[0-9a-fA-F]{{16}}'))))"
    )


def _json_text_ok(value: str) -> str:
    return f"({value} IS NULL OR json_type({value}) IN ('NULL', 'VARCHAR'))"


def _json_time(value: str) -> str:
    """SQL: a JSON time (an integer, or digits as text as OTLP writes them) as BIGINT; NULL if absent."""
    return (
        f"CASE WHEN json_type({value}) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST({value} AS BIGINT) "
        f"WHEN json_type({value}) = 'VARCHAR' AND regexp_full_match({value}->>'$', '[0-9]{{1,19}}') "
        f"THEN TRY_CAST({value}->>'$' AS BIGINT) END"
    )


def _json_time_ok(value: str) -> str:
    return (
        f"({value} IS NULL OR json_type({value}) = 'NULL' "
        f"OR (json_type({value}) = 'VARCHAR' AND ({value}->>'$') = '') "
        f"OR coalesce({_json_time(value)} >= 0, false))"
    )


def _text_time(cell: str) -> str:
    return f"CASE WHEN regexp_full_match({cell}, '[0-9]{{1,19}}') THEN TRY_CAST({cell} AS BIGINT) END"


def _text_time_ok(cell: str) -> str:
    return f"(coalesce({cell}, '') = '' OR {_text_time(cell)} IS NOT NULL)"


_COLUMNS = "path, ok, trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name, attrs, n_attrs"

_CREATE = """
CREATE TABLE spans (
    path VARCHAR,           -- the file it was read from (files.path)
    ok BOOLEAN,             -- passed every check (rows that did not are removed before aggregating)
    trace_id VARCHAR,       -- lowercase hex
    span_id VARCHAR,
    parent_span_id VARCHAR, -- NULL for none
    name VARCHAR,
    start_ns BIGINT,
    end_ns BIGINT,
    service_name VARCHAR,   -- NULL for none
    attrs JSON,             -- the span's attributes as one JSON object
    n_attrs INTEGER         -- how many of them a report keeps (a duplicate's tie-break)
);
CREATE TABLE files (
    path VARCHAR,           -- as given to the reader (DuckDB's filename column)
    file_idx INTEGER        -- its place in the order the files were found
)
"""


def _files(paths: Sequence[str]) -> str:
    """SQL: a list of file names for a reader."""
    return "[" + ", ".join(_literal(p) for p in paths) + "]"


_JSONL_FIELDS = (
    "trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano", "end_time_unix_nano", "service_name",
    "attributes",
)


def _jsonl_select(paths: Sequence[str]) -> str:
    ok = " AND ".join(
        (
            "json_type(j) = 'OBJECT'",
            _not_deep("CAST(j AS VARCHAR)"),
            _json_hex("tid", 32),
            _json_hex("sid", 16),
            _json_parent_ok("pid"),
            _json_text_ok("nm"),
            _json_text_ok("svc"),
            _json_time_ok("st"),
            _json_time_ok("et"),
            f"coalesce({_json_time('st')} <= {_json_time('et')}, true)",
            _attributes_ok("m"),
        )
    )
    fields = "{" + ", ".join(f'"{f}": "JSON"' for f in _JSONL_FIELDS) + "}"
    return f"""
SELECT filename, {ok}, lower(tid->>'$'), lower(sid->>'$'), nullif(lower(pid->>'$'), ''),
       coalesce(nm->>'$', ''), {_json_time('st')}, {_json_time('et')}, nullif(svc->>'$', ''), a, {_kept_count('m')}
FROM (
    SELECT *, TRY_CAST(a AS MAP(VARCHAR, JSON)) AS m
    FROM (
        SELECT filename, j, r.trace_id AS tid, r.span_id AS sid, r.parent_span_id AS pid, r.name AS nm,
               r.start_time_unix_nano AS st, r.end_time_unix_nano AS et, r.service_name AS svc, r.attributes AS a
        FROM (
            SELECT filename, json AS j, json_transform(json, '{fields}') AS r
            FROM read_ndjson_objects({_files(paths)}, filename = true, maximum_object_size = {MAX_LINE_BYTES})
        )
    )
)
"""


def _attributes_at(header: Sequence[str]) -> int:
    at = attributes_column_index(header)
    if at is None:
        raise ValueError(f"not an otel-joules CSV header: {','.join(header)[:200]!r}")
    return at


def _csv_select(paths: Sequence[str], header: Sequence[str], core: Sequence[str]) -> str:
    """Our CSV: ``header`` (the file's first line) starts with ``core`` (records.CORE_FIELDS) and ends in attributes
    (and resource)."""
    cells = [f"c{i}" for i in range(len(header))]
    position = {name: f"c{i}" for i, name in enumerate(header[: len(core)])}
    attrs_cell = cells[_attributes_at(header)]
    columns = "{" + ", ".join(f"{_literal(c)}: 'VARCHAR'" for c in cells) + "}"
    tid, sid, pid = position["trace_id"], position["span_id"], position["parent_span_id"]
    st, et = position["start_time_unix_nano"], position["end_time_unix_nano"]
    plain = " AND ".join(
        f"(coalesce(length({c}), 0) <= {CSV_FIELD_LIMIT} AND NOT regexp_matches(coalesce({c}, ''), '[\\n\\r\\x00]'))"
        for c in cells
    )
    ok = " AND ".join(
        (
            plain,
            f"regexp_full_match(coalesce({tid}, ''), '[0-9a-fA-F]{{32}}')",
            f"regexp_full_match(coalesce({sid}, ''), '[0-9a-fA-F]{{16}}')",
            f"(coalesce({pid}, '') = '' OR regexp_full_match({pid}, '[0-9a-fA-F]{{16}}'))",
            _text_time_ok(st),
            _text_time_ok(et),
            f"coalesce({_text_time(st)} <= {_text_time(et)}, true)",
            _not_deep(f"coalesce({attrs_cell}, '')"),
            _attributes_ok("m"),
        )
    )
    return f"""
SELECT filename, {ok}, lower({tid}), lower({sid}), nullif(lower({pid}), ''), coalesce({position['name']}, ''),
       {_text_time(st)}, {_text_time(et)}, nullif({position['service_name']}, ''), a, {_kept_count('m')}
FROM (SELECT *, TRY_CAST(a AS MAP(VARCHAR, JSON)) AS m FROM (
    SELECT *, TRY_CAST(coalesce(nullif({attrs_cell}, ''), '{{}}') AS JSON) AS a
    FROM read_csv({_files(paths)}, header = true, auto_detect = false, columns = {columns}, delim = ',',
                  quote = '"', escape = '"', strict_mode = true, max_line_size = {MAX_LINE_BYTES}, filename = true)
))
"""


def _parquet_select(paths: Sequence[str]) -> str:
    ok = " AND ".join(
        (
            "regexp_full_match(coalesce(trace_id, ''), '[0-9a-fA-F]{32}')",
            "regexp_full_match(coalesce(span_id, ''), '[0-9a-fA-F]{16}')",
            "(coalesce(parent_span_id, '') = '' OR regexp_full_match(parent_span_id, '[0-9a-fA-F]{16}'))",
            "coalesce(start_time_unix_nano >= 0, true)",
            "coalesce(end_time_unix_nano >= 0, true)",
            "coalesce(start_time_unix_nano <= end_time_unix_nano, true)",
            _not_deep("coalesce(attributes, '')"),
            _attributes_ok("m"),
        )
    )
    return f"""
SELECT filename, {ok}, lower(trace_id), lower(span_id), nullif(lower(parent_span_id), ''), coalesce(name, ''),
       start_time_unix_nano, end_time_unix_nano, nullif(service_name, ''), a, {_kept_count('m')}
FROM (SELECT *, TRY_CAST(a AS MAP(VARCHAR, JSON)) AS m FROM (
    SELECT filename, trace_id, span_id, parent_span_id, name, start_time_unix_nano, end_time_unix_nano, service_name,
           attributes, TRY_CAST(coalesce(nullif(attributes, ''), '{{}}') AS JSON) AS a
    FROM read_parquet({_files(paths)}, filename = true)
))
"""


@dataclass(frozen=True)
class TraceSpans:
    """One trace as the SQL aggregation hands it back: what a run is made of, in the order its spans were first read.

    Attributes:
        trace_id: 32 lowercase hex digits.
        sources: The files its spans came from, in the order first read.
        attributed: The topmost spans carrying ``energy.attributed.joules`` (per ``training.rank``).
        attributed_self: Every span carrying ``energy.attributed.self.joules``, in a trace without ``attributed``
            spans (only then are they summed).
        interval: The topmost spans carrying ``energy.joules``.
        epochs: The ``epoch`` spans carrying ``energy.joules``.
        root_name: The first root span's name (by start, then span id); None when no span is a root (a parent loop).
        service_name: The first root's ``service.name`` with one, else the first span's with one.
        start_unix_nano: The earliest start (None when no span has one).
        end_unix_nano: The latest end.
        stepped: How many spans carry ``energy.clock_step_s``.
        longest_duration_s: The longest measured span duration (end - start - clock step, never negative).
    """

    trace_id: str
    sources: tuple[str, ...]
    attributed: tuple[SpanRow, ...]
    attributed_self: tuple[SpanRow, ...]
    interval: tuple[SpanRow, ...]
    epochs: tuple[SpanRow, ...]
    root_name: str | None
    service_name: str | None
    start_unix_nano: int | None
    end_unix_nano: int | None
    stepped: int
    longest_duration_s: float | None


def _number(key: str, attrs: str = "attrs") -> str:
    """SQL: ``attrs``' attribute ``key`` as a finite DOUBLE (SpanRow.number), else NULL."""
    return _json_number(f"json_extract({attrs}, {_path(key)})")


def _json_number(value: str) -> str:
    """SQL: the JSON ``value`` as a finite DOUBLE (SpanRow.number), else NULL."""
    return (
        f"CASE WHEN json_type({value}) IN ('DOUBLE', 'BIGINT', 'UBIGINT') AND isfinite(CAST({value} AS DOUBLE)) "
        f"THEN CAST({value} AS DOUBLE) END"
    )


# What the walks read of each span's attributes, by json_transform's names.
_WALK_KEYS = json.dumps(dict.fromkeys(
    (ENERGY_JOULES, ENERGY_ATTRIBUTED_JOULES, ENERGY_ATTRIBUTED_SELF_JOULES, ENERGY_CLOCK_STEP_S, TRAINING_RANK), "JSON"
))
_AGGREGATE = [
    # The place of each span in the order Python would have read it (files in the order found, rows in file order), and
    # one copy of each span: the one with the most kept attributes, the first read on a tie; the span's place is where
    # it was first read. The copy is found by its row, so a span's attributes stay in ``spans`` alone (``rid``).
    f"""
CREATE TEMP TABLE d AS
SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name, file_idx, first_ord, rid,
       {_json_number(f'a."{ENERGY_JOULES}"')} AS ej, {_json_number(f'a."{ENERGY_ATTRIBUTED_JOULES}"')} AS eaj,
       {_json_number(f'a."{ENERGY_ATTRIBUTED_SELF_JOULES}"')} AS easj,
       {_json_number(f'a."{ENERGY_CLOCK_STEP_S}"')} AS clock_step,
       CASE WHEN json_type(a."{TRAINING_RANK}") NOT IN ('NULL') THEN CAST(a."{TRAINING_RANK}" AS VARCHAR) END AS own_rank,
       row_number() OVER () AS k
FROM (
    -- The attributes parsed once for the five a walk reads.
    SELECT s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.service_name, p.file_idx,
           p.first_ord, p.rid, json_transform(s.attrs, {_literal(_WALK_KEYS)}) AS a
    FROM (
        SELECT arg_min(rid, {{'n': -n_attrs, 'o': ord}}) AS rid, arg_min(file_idx, {{'n': -n_attrs, 'o': ord}}) AS file_idx,
               min(ord) AS first_ord
        FROM (SELECT s.trace_id, s.span_id, s.n_attrs, s.rowid AS rid, f.file_idx,
                     (CAST(f.file_idx AS BIGINT) << 40) + s.rowid AS ord
              FROM spans s JOIN files f USING (path))
        GROUP BY trace_id, span_id
    ) p JOIN spans s ON s.rowid = p.rid
)
""",
    # Each span's parent where it is among the spans (a root, or a span whose parent was not exported, has none), by
    # the spans' row numbers: the walks below step along these.
    """
CREATE TEMP TABLE link AS
SELECT c.k, p.k AS pk FROM d c JOIN d p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
""",
    # Traces with a training.rank, and their span counts: a walk up a trace's parents that is longer than its spans
    # has met a parent loop (each span it meets again says what it said the first time), so that ends the walk.
    """
CREATE TEMP TABLE trace_sizes AS
SELECT trace_id, count(*) AS n, bool_or(own_rank IS NOT NULL) AS ranked FROM d GROUP BY trace_id
""",
    # The training.rank of each span carrying a share, or of its nearest ancestor with one (none in a trace without
    # any rank: no walk there).
    """
CREATE TEMP TABLE ranks AS
WITH RECURSIVE walk(k, cur, rank, depth, n) AS (
    SELECT d.k, l.pk, d.own_rank, 0, t.n
    FROM d JOIN trace_sizes t ON t.trace_id = d.trace_id AND t.ranked LEFT JOIN link l ON l.k = d.k
    WHERE d.eaj IS NOT NULL AND d.own_rank IS NULL
    UNION ALL
    SELECT w.k, l.pk, p.own_rank, w.depth + 1, w.n
    FROM walk w JOIN d p ON p.k = w.cur LEFT JOIN link l ON l.k = p.k
    WHERE w.rank IS NULL AND w.depth < w.n
)
SELECT k, max(rank) AS rank FROM walk GROUP BY k
UNION ALL
SELECT k, own_rank FROM d WHERE eaj IS NOT NULL AND own_rank IS NOT NULL
""",
    # Spans with an ancestor (never the span itself, met again round a parent loop) carrying the same share (same
    # rank) or the same interval energy: nested, not counted. The parent decides most spans; only the others walk on.
    """
CREATE TEMP TABLE first_attributed AS
WITH shares AS (SELECT d.k, d.trace_id, r.rank FROM d LEFT JOIN ranks r ON r.k = d.k WHERE d.eaj IS NOT NULL)
SELECT s.k, l.pk, s.trace_id, s.rank, p.k IS NOT NULL AND l.pk <> s.k AS nested
FROM shares s JOIN link l ON l.k = s.k LEFT JOIN shares p ON p.k = l.pk AND p.rank IS NOT DISTINCT FROM s.rank
""",
    # (The parent's verdict is a table of its own: a recursive query's parts are held in memory, a table spills.)
    """
CREATE TEMP TABLE nested_attributed AS
WITH RECURSIVE walk(k, cur, rank, depth, n, nested) AS (
    SELECT f.k, l.pk, f.rank, 1, t.n, false
    FROM first_attributed f JOIN link l ON l.k = f.pk JOIN trace_sizes t ON t.trace_id = f.trace_id
    WHERE NOT f.nested
    UNION ALL
    SELECT w.k, l.pk, w.rank, w.depth + 1, w.n, p.k <> w.k AND p.eaj IS NOT NULL AND pr.rank IS NOT DISTINCT FROM w.rank
    FROM walk w JOIN d p ON p.k = w.cur LEFT JOIN ranks pr ON pr.k = p.k LEFT JOIN link l ON l.k = p.k
    WHERE NOT w.nested AND w.depth < w.n
)
SELECT k FROM first_attributed WHERE nested
UNION ALL
SELECT k FROM walk WHERE nested
""",
    """
CREATE TEMP TABLE first_interval AS
SELECT c.k, l.pk, c.trace_id, p.ej IS NOT NULL AND l.pk <> c.k AS nested
FROM d c JOIN link l ON l.k = c.k JOIN d p ON p.k = l.pk WHERE c.ej IS NOT NULL
""",
    """
CREATE TEMP TABLE nested_interval AS
WITH RECURSIVE walk(k, cur, depth, n, nested) AS (
    SELECT f.k, l.pk, 1, t.n, false
    FROM first_interval f JOIN link l ON l.k = f.pk JOIN trace_sizes t ON t.trace_id = f.trace_id
    WHERE NOT f.nested
    UNION ALL
    SELECT w.k, l.pk, w.depth + 1, w.n, p.k <> w.k AND p.ej IS NOT NULL
    FROM walk w JOIN d p ON p.k = w.cur LEFT JOIN link l ON l.k = p.k
    WHERE NOT w.nested AND w.depth < w.n
)
SELECT k FROM first_interval WHERE nested
UNION ALL
SELECT k FROM walk WHERE nested
""",
    """
CREATE TEMP TABLE sources AS
SELECT trace_id, list(file_idx ORDER BY first_read) AS sources
FROM (SELECT s.trace_id, f.file_idx, min((CAST(f.file_idx AS BIGINT) << 40) + s.rowid) AS first_read
      FROM spans s JOIN files f USING (path) GROUP BY s.trace_id, f.file_idx)
GROUP BY trace_id
""",
]

_FIGURES = [
    f"""
CREATE TEMP TABLE flagged AS
SELECT d.*,
       d.eaj IS NOT NULL AND na.k IS NULL AS top_attributed,
       d.easj IS NOT NULL AS has_self,
       d.ej IS NOT NULL AND ni.k IS NULL AS top_interval,
       d.name = {_literal(SPAN_EPOCH)} AND d.ej IS NOT NULL AS is_epoch,
       l.k IS NULL AS is_root
FROM d
LEFT JOIN nested_attributed na ON na.k = d.k
LEFT JOIN nested_interval ni ON ni.k = d.k
LEFT JOIN link l ON l.k = d.k
""",
    """
CREATE TEMP TABLE figures AS
SELECT trace_id,
       arg_min(name, {'s': coalesce(start_ns, 0), 'i': span_id}) FILTER (WHERE is_root) AS root_name,
       arg_min(service_name, {'s': coalesce(start_ns, 0), 'i': span_id}) FILTER (WHERE is_root AND service_name IS NOT NULL)
           AS root_service,
       arg_min(service_name, first_ord) FILTER (WHERE service_name IS NOT NULL) AS first_service,
       min(start_ns) AS first_start, max(end_ns) AS last_end, count(*) FILTER (WHERE clock_step IS NOT NULL) AS stepped,
       max(greatest(0.0, CAST(end_ns - start_ns AS DOUBLE) / 1e9 - coalesce(clock_step, 0.0)))
           FILTER (WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL) AS longest,
       bool_or(top_attributed) AS any_attributed,
       CASE WHEN bool_or(top_attributed) THEN 1 WHEN bool_or(has_self) THEN 2 WHEN bool_or(top_interval) THEN 3 END
           AS basis_kind
FROM flagged
GROUP BY trace_id
""",
]

#: :data:`_RUNS` ``basis_kind``: a trace's basis (trace_runs' ``_basis``): topmost inclusive shares, every span's
#: self share, topmost interval energy. NULL: none (a trace without energy).
BASIS_KIND_ATTRIBUTED, BASIS_KIND_SELF, BASIS_KIND_INTERVAL = 1, 2, 3


def _sequential_sum(values: str, order: str, condition: str) -> str:
    """SQL: ``values`` added one by one in ``order`` from 0.0, as Python's ``sum`` adds a list (the same float)."""
    return (
        f"list_reduce(coalesce(list({values} ORDER BY {order}) FILTER (WHERE {condition}), []), "
        "lambda a, b: a + b, CAST(0 AS DOUBLE))"
    )


def _source_text(attrs: str) -> str:
    """SQL: the span's ``energy.source`` if it is non-empty text (energy_parts.span_source), else NULL."""
    return (
        f"CASE WHEN json_type({attrs}, {_path(ENERGY_SOURCE)}) = 'VARCHAR' "
        f"THEN nullif(json_extract_string({attrs}, {_path(ENERGY_SOURCE)}), '') END"
    )


def _run_number(key: str) -> str:
    return _number(key, "sp.attrs")


# Per trace with energy, after a place in report order ($start, $trace) (start, then trace id): what trace_runs' ``_trace_run`` adds up,
# computed the same way (sums in read order from 0.0, the same products and quotient), for the runs a report does not
# list: its joules, the host's interval joules, the PUE it recorded (one value over its counted spans, else NULL), the
# intensity it recorded (the one value, else energy-weighted; NULL unless every counted span has one), the grams it recorded (NULL unless
# every counted span has them), its merged energy.source and whether a span was below resolution.
_TAIL_SPANS = f"""
CREATE OR REPLACE TEMP TABLE tail_spans AS
SELECT t.trace_id, t.basis_kind AS kind, coalesce(t.first_start, 0) AS start_key, f.first_ord,
       (t.basis_kind = 1 AND f.top_attributed) OR (t.basis_kind = 2 AND f.has_self)
           OR (t.basis_kind = 3 AND f.top_interval) AS counted,
       f.top_interval AS interval,
       coalesce(CASE t.basis_kind WHEN 1 THEN f.eaj WHEN 2 THEN f.easj ELSE f.ej END, 0.0) + 0.0 AS j,
       coalesce(f.ej, 0.0) + 0.0 AS ej,
       {_run_number(CARBON_PUE)} AS pue,
       {_run_number(CARBON_INTENSITY_GCO2EQ_PER_KWH)} AS intensity,
       CASE t.basis_kind WHEN 1 THEN {_run_number(ENERGY_ATTRIBUTED_CO2EQ_GRAMS)}
           WHEN 2 THEN {_run_number(ENERGY_ATTRIBUTED_SELF_CO2EQ_GRAMS)} ELSE {_run_number(ENERGY_CO2EQ_GRAMS)} END AS grams,
       {_source_text('sp.attrs')} AS source,
       coalesce(json_type(sp.attrs, {_path(ENERGY_BELOW_RESOLUTION)}) = 'BOOLEAN'
           AND json_extract_string(sp.attrs, {_path(ENERGY_BELOW_RESOLUTION)}) = 'true', false) AS below
FROM figures t JOIN flagged f ON f.trace_id = t.trace_id JOIN spans sp ON sp.rowid = f.rid
WHERE t.basis_kind IS NOT NULL AND (coalesce(t.first_start, 0) > $start OR (coalesce(t.first_start, 0) = $start AND t.trace_id > $trace))
  AND ((t.basis_kind = 1 AND f.top_attributed) OR (t.basis_kind = 2 AND f.has_self) OR f.top_interval)
"""
# Aggregates over every trace held their groups in memory (2 GB of input ran out of the limit), so a trace with one
# counted span and at most one interval span, the most, is a join of those two rows (joins spill): the same
# operations on one value (0.0 + x; one intensity is itself). Only the others are grouped, gathering values in read order.
_TAIL_SHAPES = """
CREATE OR REPLACE TEMP TABLE tail_shapes AS
SELECT trace_id, count(*) FILTER (WHERE counted) <= 1 AND count(*) FILTER (WHERE interval) <= 1 AS single
FROM tail_spans GROUP BY trace_id
"""
_ZERO = "CAST(0 AS DOUBLE)"
_TAIL_SINGLE = f"""
SELECT c.trace_id, c.kind, c.start_key, {_ZERO} + c.j AS joules,
       CASE WHEN c.kind <> 3 THEN {_ZERO} + coalesce(i.ej, {_ZERO}) END AS host,
       c.pue AS recorded_pue,
       c.intensity AS recorded_intensity,
       {_ZERO} + c.grams AS recorded_grams, c.source, c.below OR coalesce(i.below, false) AS below
FROM tail_spans c JOIN tail_shapes h ON h.trace_id = c.trace_id AND h.single
LEFT JOIN tail_spans i ON i.trace_id = c.trace_id AND i.interval
WHERE c.counted
"""
_TAIL_MANY = f"""
SELECT trace_id, first(kind) AS kind, first(start_key) AS start_key,
       {_sequential_sum('j', 'first_ord', 'counted')} AS joules,
       CASE WHEN first(kind) <> 3 THEN {_sequential_sum('ej', 'first_ord', 'interval')} END AS host,
       CASE WHEN count(*) FILTER (WHERE counted AND pue IS NOT NULL) = 0 THEN NULL
            WHEN count(*) FILTER (WHERE counted AND pue IS NULL) = 0 AND count(DISTINCT pue) FILTER (WHERE counted) = 1
            THEN min(pue) FILTER (WHERE counted) END AS recorded_pue,
       CASE WHEN count(*) FILTER (WHERE counted AND intensity IS NULL) = 0 THEN
            CASE WHEN count(DISTINCT intensity) FILTER (WHERE counted) = 1 THEN min(intensity) FILTER (WHERE counted)
                 WHEN {_sequential_sum('j', 'first_ord', 'counted')} > 0
                 THEN {_sequential_sum('j * intensity', 'first_ord', 'counted')} / {_sequential_sum('j', 'first_ord', 'counted')}
                 ELSE arg_min(intensity, first_ord) FILTER (WHERE counted) END END AS recorded_intensity,
       CASE WHEN count(*) FILTER (WHERE counted AND grams IS NULL) = 0 THEN {_sequential_sum('grams', 'first_ord', 'counted')} END
           AS recorded_grams,
       CASE WHEN count(source) FILTER (WHERE counted) = 0 THEN NULL
            WHEN bool_or(source = {_literal(SOURCE_PARTIAL)}) FILTER (WHERE counted) THEN {_literal(SOURCE_PARTIAL)}
            WHEN count(DISTINCT source) FILTER (WHERE counted) = 1 THEN min(source) FILTER (WHERE counted)
            ELSE {_literal(SOURCE_MIXED)} END AS source,
       bool_or(below) FILTER (WHERE counted OR interval) AS below
FROM tail_spans JOIN tail_shapes USING (trace_id) WHERE NOT single GROUP BY trace_id
"""
_TAIL_RUNS = f"CREATE OR REPLACE TEMP TABLE tail_runs AS {_TAIL_SINGLE} UNION ALL {_TAIL_MANY}"

# The tail's carbon figures as run_carbon computes them ($pue: --pue or NULL; $override: the intensity of --intensity or
# --country, or NULL; $fallback: the fallback intensity, NULL when no run needs it), numbered in report order.
_TAIL_CARBON = """
CREATE OR REPLACE TEMP TABLE tail_carbon AS
SELECT *, CASE WHEN $override IS NOT NULL THEN kwh * $override
               WHEN recorded_intensity IS NOT NULL THEN kwh * recorded_intensity
               WHEN recorded_grams IS NOT NULL AND $pue IS NULL THEN recorded_grams
               ELSE kwh * $fallback END AS grams
FROM (
    SELECT *, joules * pue_used / $joules_per_kwh AS kwh
    FROM (
        SELECT *, coalesce($pue, CASE WHEN isfinite(recorded_pue) AND recorded_pue >= 1.0 THEN recorded_pue END, 1.0)
                  AS pue_used,
               $pue IS NULL AND NOT coalesce(isfinite(recorded_pue) AND recorded_pue >= 1.0, false) AS pue_default,
               row_number() OVER (ORDER BY start_key, trace_id) AS pos
        FROM tail_runs
    )
)
"""
_TAIL_NEEDS_FALLBACK = """
SELECT count(*) FROM tail_runs
WHERE $override IS NULL AND recorded_intensity IS NULL AND (recorded_grams IS NULL OR $pue IS NOT NULL)
"""
#: The figures of a run that enter a total, as tail_carbon's columns (aggregate._TOTALLED's order).
TAIL_FIGURES = ("joules", "kwh", "grams", "host")
_TAIL_CHECK = (
    "SELECT count(*), "
    "count(*) FILTER (WHERE NOT (" + " AND ".join(f"coalesce(isfinite({c}) AND {c} >= 0, {'true' if c == 'host' else 'false'})" for c in TAIL_FIGURES) + ")), "
    + ", ".join(f"coalesce(max({c}), 0.0), count({c})" for c in TAIL_FIGURES) + " FROM tail_carbon"
)
# Each figure's exact sum: every value x > 0 is m * 2^e with whole m < 2^55 (e a little below x's exponent; scaled in
# two steps, each exact), the m of one e added as HUGEINT; Python adds the groups as fractions, exactly.
_EXACT_PARTS = """
SELECT e, sum(CAST(m AS HUGEINT)), count(*) FILTER (WHERE m <> floor(m))
FROM (
    SELECT e, (x * pow(2.0, CAST(least(-e, 600) AS DOUBLE))) * pow(2.0, CAST(-e - least(-e, 600) AS DOUBLE)) AS m
    FROM (SELECT x, greatest(CAST(floor(log2(x)) AS BIGINT) - 53, -1074) AS e FROM (SELECT {column} AS x FROM tail_carbon)
          WHERE x > 0)
)
GROUP BY e
"""
_TAIL_TALLY = """
SELECT kind, source, count(*), min(pos), count(*) FILTER (WHERE below), bool_or(pue_default), bool_or(host IS NOT NULL)
FROM tail_carbon GROUP BY kind, source
"""
_TAIL_ROWS = """
SELECT t.trace_id, s.sources[1], t.kind, t.source, coalesce(t.below, false), t.pue_default, t.joules, t.kwh, t.grams, t.host
FROM tail_carbon t JOIN sources s USING (trace_id) ORDER BY t.pos
"""


@dataclass
class TailTotals:
    """What the runs after the listed ones add up to (:meth:`SpanStore.tail`), when no figure of theirs needs a check
    run by run (none is infinite, negative or so large that a total could overflow).

    Attributes:
        runs: How many.
        exact: Per figure (:data:`TAIL_FIGURES`), ``(e, m)`` pairs: its exact sum is the sum of ``m * 2**e``.
        counts: Per figure, how many values it has (host: the attributed runs).
        tally: ``(basis kind, source, runs, first position, below resolution, default PUE, with host)`` groups.
        rows: Instead of the above, when a figure needs checking run by run: the runs in report order (trace id, its
            first file's number, basis kind, source, below resolution, default PUE, then :data:`TAIL_FIGURES`).
    """

    runs: int
    exact: dict[str, list[tuple[int, int]]]
    counts: dict[str, int]
    tally: list[tuple[Any, ...]]
    rows: Iterator[tuple[Any, ...]] | None = None


# One row per span a run is made of, of the first $limit traces with energy after ($start, $trace) in report order,
# each trace's rows together and in read order: streamed (an external sort where it must), never a trace's spans gathered in one value.
_TRACES = """
SELECT t.trace_id, s.sources, t.root_name, t.root_service, t.first_service, t.first_start, t.last_end, t.stepped,
       t.longest, f.span_id, f.parent_span_id, f.name, f.start_ns, f.end_ns, f.service_name, CAST(sp.attrs AS VARCHAR),
       f.file_idx, f.top_attributed, f.has_self, f.top_interval, f.is_epoch
FROM (
    SELECT * FROM figures
    WHERE basis_kind IS NOT NULL
      AND (coalesce(first_start, 0) > $start OR (coalesce(first_start, 0) = $start AND trace_id > $trace))
    ORDER BY coalesce(first_start, 0), trace_id LIMIT $limit
) t JOIN sources s USING (trace_id)
JOIN flagged f ON f.trace_id = t.trace_id
    -- Self shares are summed only in a trace without an inclusive share (trace_runs' basis).
    AND (f.top_attributed OR (f.has_self AND NOT t.any_attributed) OR f.top_interval OR f.is_epoch)
JOIN spans sp ON sp.rowid = f.rid
ORDER BY coalesce(t.first_start, 0), t.trace_id, f.first_ord
"""

# The traces (of those asked) a run is made of: with a span of a basis (trace_runs' basis is not None).
_WITH_ENERGY = """
SELECT DISTINCT trace_id FROM flagged
WHERE trace_id IN (SELECT unnest(?)) AND (top_attributed OR has_self OR top_interval)
"""


def _json_safe(value: object) -> object:
    """Non-finite floats as the strings our exports write for them (record_checks reads them back as floats)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


class SpanStore:
    """The spans of a report in DuckDB: loaded file by file, then aggregated per trace (module docstring).

    Raises:
        ReportError: DuckDB is not installed (:data:`INSTALL_HINT`).
    """

    def __init__(self) -> None:
        if duckdb is None:
            raise ReportError(INSTALL_HINT)
        # DuckDB's spill files go in a folder of our own (0700), never a fixed path, removed in close().
        self._spill = tempfile.mkdtemp(prefix="otel-joules-report-")
        self._files: list[str] = []
        self._bad: dict[int, int] = {}
        self._unreadable: dict[int, str] = {}
        self._last_error = ""
        self._aggregated = False
        self._batches = 0
        self._staged: dict[str, str] = {}
        self._memory_limit = report_memory_limit()
        try:
            self._con = duckdb.connect(
                ":memory:",
                config={
                    "memory_limit": self._memory_limit,
                    "threads": os.cpu_count() or 1,
                    "temp_directory": self._spill,
                    "preserve_insertion_order": True,
                    "enable_external_access": True,
                },
            )
            # stderr is the report's list of skipped inputs: no progress bar on it.
            self._con.execute("SET enable_progress_bar = false")
            self._con.execute(_CREATE)
            for macro in _MACROS:
                self._con.execute(macro)
        except BaseException:
            shutil.rmtree(self._spill, ignore_errors=True)
            raise

    def close(self) -> None:
        """Close DuckDB and remove its spill folder."""
        try:
            self._con.close()
        finally:
            shutil.rmtree(self._spill, ignore_errors=True)

    def __enter__(self) -> "SpanStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, path: str) -> int:
        """Number the span file ``path`` (in the order files are found: the order spans are taken in)."""
        index = len(self._files)
        self._files.append(path)
        self._con.execute("INSERT INTO files VALUES (?, ?)", [path, index])
        return index

    def load(
        self, fmt: str, files: Sequence[tuple[int, str]], header: Sequence[str] = (), core: Sequence[str] = ()
    ) -> dict[int, int | None]:
        """Load registered files of one format (CSV: of one ``header``, which starts with ``core``) in one query.

        Returns each file's number of spans, or None for a file not loaded: DuckDB could not read it or one of its
        records failed a check, so the Python reader reads it (and :meth:`add_spans` loads what it read). Parquet
        files are always taken: an unreadable one is said by :meth:`unreadable`, records failing a check are left
        out and counted by :meth:`bad_records`.
        """
        counts: dict[int, int | None] = {index: None for index, _ in files}
        if fmt == FORMAT_OTLP and files:
            return self._load_otlp(files, counts)
        if not files:
            return counts
        if not self._insert(fmt, [path for _, path in files], header, core):
            if len(files) == 1:
                if fmt == FORMAT_PARQUET:
                    self._unreadable[files[0][0]] = self._last_error
                    counts[files[0][0]] = 0
                return counts
            # One file DuckDB cannot read fails the whole query: halve until it is alone.
            half = len(files) // 2
            counts.update(self.load(fmt, files[:half], header, core))
            counts.update(self.load(fmt, files[half:], header, core))
            return counts
        paths = [path for _, path in files]
        rows = self._con.execute(
            "SELECT path, count(*), count(*) FILTER (WHERE NOT coalesce(ok, false)) FROM spans "
            "WHERE path IN (SELECT unnest(?)) GROUP BY path",
            [paths],
        ).fetchall()
        found = {path: (int(total), int(bad)) for path, total, bad in rows}
        rejected = [path for path, (_, bad) in found.items() if bad and fmt != FORMAT_PARQUET]
        if rejected:
            self._con.execute("DELETE FROM spans WHERE path IN (SELECT unnest(?))", [rejected])
        if fmt == FORMAT_PARQUET:
            self._con.execute("DELETE FROM spans WHERE path IN (SELECT unnest(?)) AND NOT coalesce(ok, false)", [paths])
        for index, path in files:
            total, bad = found.get(path, (0, 0))
            if fmt == FORMAT_PARQUET:
                self._bad[index] = bad
                counts[index] = total - bad
            elif not bad:
                counts[index] = total
        return counts

    def _load_otlp(self, files: Sequence[tuple[int, str]], counts: dict[int, int | None]) -> dict[int, int | None]:
        """OTLP files: each one's spans staged as our JSON lines (:func:`~otel_joules.report.otlp_files.flatten_otlp`)
        and loaded by the JSON-lines reader under the file's own path. DuckDB holds every line of a read batch at
        once, and a request line of 512 spans is 250 KB: the OTLP files themselves ran out of the memory limit."""
        staged: list[tuple[int, str]] = []
        try:
            for index, path in files:
                staging = os.path.join(self._spill, f"otlp-{index}.jsonl")
                fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    flat = flatten_otlp(path, out, MAX_LINE_BYTES)
                self._staged[path] = staging
                if flat:
                    staged.append((index, path))
                else:
                    _log.debug("%s is read by the Python reader: not a plain OTLP/JSON file", path)
            counts.update(self.load(_FORMAT_STAGED_OTLP, staged))
        except OSError as exc:
            _log.debug("OTLP files are read by the Python reader: %s", exc)
        finally:
            for index, path in files:
                staging = self._staged.pop(path, None)
                if staging is not None:
                    os.unlink(staging)
        return counts

    def _insert(self, fmt: str, paths: list[str], header: Sequence[str], core: Sequence[str]) -> bool:
        if fmt == FORMAT_JSONL:
            select = _jsonl_select(paths)
        elif fmt == _FORMAT_STAGED_OTLP:
            staging = {self._staged[path]: path for path in paths}
            renamed = " ".join(f"WHEN {_literal(s)} THEN {_literal(p)}" for s, p in staging.items())
            select = f"SELECT CASE filename {renamed} END, * EXCLUDE (filename) FROM ({_jsonl_select(list(staging))})"
        elif fmt == FORMAT_CSV:
            select = _csv_select(paths, header, core)
        elif fmt == FORMAT_PARQUET:
            select = _parquet_select(paths)
        else:
            raise ValueError(f"unknown span format {fmt!r}")
        try:
            self._con.execute(f"INSERT INTO spans ({_COLUMNS}) {select}")
        except duckdb.Error as exc:
            reason = str(exc).splitlines()[0]
            # Not an error of the report: the files go to the Python reader (or, alone and Parquet, are skipped).
            _log.debug("DuckDB could not read %d %s file(s) (%s): %s", len(paths), fmt, reason, ", ".join(paths[:3]))
            self._last_error = f"is not a readable Parquet span file: {reason}"
            return False
        return True

    def unreadable(self, index: int) -> str | None:
        """Why the registered Parquet file ``index`` could not be read; None if it was."""
        return self._unreadable.get(index)

    def bad_records(self, index: int) -> int:
        """How many records of the registered Parquet file ``index`` failed a check and were left out."""
        return self._bad.get(index, 0)

    def add_spans(self, index: int, spans: Sequence[SpanRow]) -> None:
        """Load spans the Python reader read from the registered file ``index`` (one DuckDB did not load)."""
        if not spans:
            return
        path = self._files[index]
        self._batches += 1
        staging = os.path.join(self._spill, f"python-{index}-{self._batches}.jsonl")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        longest = 0
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for span in spans:
                line = (
                    json.dumps(
                        {
                            "trace_id": span.trace_id,
                            "span_id": span.span_id,
                            "parent_span_id": span.parent_span_id,
                            "name": span.name,
                            "start_ns": span.start_unix_nano,
                            "end_ns": span.end_unix_nano,
                            "service_name": span.service_name,
                            "attrs": json.dumps(_json_safe(dict(span.attributes)), allow_nan=False),
                            "n_attrs": len(span.attributes),
                        },
                        allow_nan=False,
                    )
                    + "\n"
                )
                handle.write(line)
                longest = max(longest, len(line.encode("utf-8")))
        try:
            # DuckDB's read buffers are as big as the longest line allowed: no bigger than these lines need.
            self._run(
                f"""
INSERT INTO spans ({_COLUMNS})
SELECT {_literal(path)}, true, trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name,
       CAST(attrs AS JSON), n_attrs
FROM read_json({_literal(staging)}, format = 'newline_delimited', maximum_object_size = {max(longest + 1, 1 << 20)},
               columns = {{trace_id: 'VARCHAR', span_id: 'VARCHAR', parent_span_id: 'VARCHAR', name: 'VARCHAR',
                          start_ns: 'BIGINT', end_ns: 'BIGINT', service_name: 'VARCHAR', attrs: 'VARCHAR',
                          n_attrs: 'INTEGER'}})
"""
            )
        finally:
            os.unlink(staging)

    def _run(self, statement: str, parameters: Any = None) -> Any:
        """Execute ``statement``; running out of the memory limit is a :class:`ReportError` saying what to raise."""
        try:
            return self._con.execute(statement, parameters)
        except duckdb.OutOfMemoryException as exc:
            raise ReportError(
                f"the report's DuckDB engine ran out of its {self._memory_limit} memory limit "
                f"({str(exc).splitlines()[0]}): set {OTEL_JOULES_REPORT_MEMORY_LIMIT} higher, e.g. "
                f"{OTEL_JOULES_REPORT_MEMORY_LIMIT}=2GB"
            ) from None

    def _aggregate(self) -> None:
        """Resolve every trace in SQL, once, after the last file is loaded."""
        if self._aggregated:
            return
        # Rows are numbered now; the rest only reads, in any order (less memory than keeping the order).
        self._con.execute("SET preserve_insertion_order = false")
        for statement in (*_AGGREGATE, *_FIGURES):
            self._run(statement)
        # What the runs are made of is in flagged, figures and sources now: the walks' tables go.
        for table in ("d", "link", "trace_sizes", "ranks", "first_attributed", "nested_attributed", "first_interval",
                      "nested_interval"):
            self._con.execute(f"DROP TABLE {table}")
        self._aggregated = True

    def traces_with_energy(self, trace_ids: Iterable[str]) -> set[str]:
        """Which of ``trace_ids`` are traces a run is made of (with a span whose energy is summed)."""
        ids = sorted(set(trace_ids))
        if not ids:
            return set()
        self._aggregate()
        return {row[0] for row in self._con.execute(_WITH_ENERGY, [ids]).fetchall()}

    def traces(self, after: tuple[int, str] | None = None, limit: int | None = None) -> Iterator[TraceSpans]:
        """The traces with energy, aggregated in SQL (module docstring); in report order: by first start (unknown: 0),
        then trace id (:func:`otel_joules.report.trace_runs.run_order`), streamed; ``after``: only those after this
        place in that order; ``limit``: at most that many."""
        self._aggregate()
        start, trace = after if after is not None else (-1, "")
        result = self._run(_TRACES, {"start": start, "trace": trace, "limit": _INT64_MAX if limit is None else limit})
        figures: tuple[Any, ...] | None = None
        spans: list[tuple[Any, ...]] = []
        while True:
            rows = result.fetchmany(4096)
            for row in rows:
                if figures is not None and row[0] != figures[0]:
                    yield self._trace(figures, spans)
                    spans = []
                figures = row[:9]
                if row[9] is not None:
                    spans.append(row[9:])
            if not rows:
                break
        if figures is not None:
            yield self._trace(figures, spans)

    def traces_without_energy(self) -> int:
        """How many traces have no span whose energy a run would sum (:meth:`traces` leaves them out)."""
        self._aggregate()
        return int(self._con.execute("SELECT count(*) FROM figures WHERE basis_kind IS NULL").fetchone()[0])

    def tail(
        self, after: tuple[int, str] | None, pue: float | None, override: float | None, fallback: Callable[[], float]
    ) -> TailTotals:
        """What the traces with energy after ``after`` (in report order; None: all) add up to, in SQL (the ``_TAIL_*`` statements).

        ``pue``: ``--pue``; ``override``: the intensity of ``--intensity``/``--country``; ``fallback``: the fallback
        intensity, called only when a run needs it.
        """
        self._aggregate()
        start, trace = after if after is not None else (-1, "")
        con = self._con
        self._run(_TAIL_SPANS, {"start": start, "trace": trace})
        self._run(_TAIL_SHAPES)
        self._run(_TAIL_RUNS)
        carbon = {"pue": pue, "override": override}
        needs = con.execute(_TAIL_NEEDS_FALLBACK, carbon).fetchone()[0]
        self._run(_TAIL_CARBON, {**carbon, "fallback": fallback() if needs else None, "joules_per_kwh": JOULES_PER_KWH})
        runs, bad, *figures = con.execute(_TAIL_CHECK).fetchone()
        largest, counts = figures[0::2], dict(zip(TAIL_FIGURES, figures[1::2]))
        exact = {}
        for column in TAIL_FIGURES:
            parts = con.execute(_EXACT_PARTS.format(column=column)).fetchall()
            bad += sum(int(row[2]) for row in parts)
            exact[column] = [(int(e), int(m)) for e, m, _ in parts]
        # A total could overflow only past 1e300 (the values are not negative): below it, no run needs a check.
        if bad or runs * max(largest, default=0.0) >= 1e300:
            return TailTotals(runs, {}, counts, [], self._tail_rows())
        return TailTotals(runs, exact, counts, con.execute(_TAIL_TALLY).fetchall())

    def _tail_rows(self) -> Iterator[tuple[Any, ...]]:
        result = self._con.execute(_TAIL_ROWS)
        while rows := result.fetchmany(4096):
            for trace_id, file_idx, *rest in rows:
                yield (trace_id, self._files[file_idx], *rest)

    def _trace(self, figures: tuple[Any, ...], spans: list[tuple[Any, ...]]) -> TraceSpans:
        return trace_spans(self._files, figures, spans)


# -- Spark SQL: the same checks and aggregation in Spark's dialect ---------------------------------------------------
# ``otel-joules report --engine spark`` (:mod:`otel_joules.report.spark_engine`) runs these on a Spark session. The
# statements are the DuckDB ones above, spelled for Spark: ``map<string,string>`` from ``from_json`` stands for DuckDB's
# JSON type, ``array_append``/``array_contains`` for ``list_append``/``list_contains``, ``min_by`` for ``arg_min``, a
# (file, row) struct for ``rowid``, cached views for temp tables. Spark's checks are a subset, stricter where Spark
# cannot tell what DuckDB's ``json_type`` tells (an energy.*/carbon.* number must be an unquoted JSON number): a file
# with a record failing them is read by the Python reader instead, as with DuckDB, so the same records are counted.

#: The columns of Spark's ``spans`` view, in order (DuckDB's ``spans`` table, with ``mid``: the row's place in its file).
SPARK_SPAN_COLUMNS = (
    "file_idx", "mid", "ok", "trace_id", "span_id", "parent_span_id", "name", "start_ns", "end_ns", "service_name",
    "attrs", "n_attrs",
)
_SPARK_NUMBER = "'^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$'"


def _spark_any(function: str, column: str, values: Iterable[str]) -> str:
    return "(" + " OR ".join(f"{function}({column}, {_literal(v)})" for v in values) + ")"


def _spark_kept(key: str) -> str:
    return _spark_any("startswith", key, REPORT_ATTRIBUTE_PREFIXES)


def _spark_checked(key: str) -> str:
    return f"({_spark_any('startswith', key, CHECKED_NUMBER_PREFIXES)} AND {_spark_any('endswith', key, CHECKED_NUMBER_SUFFIXES)})"


def _spark_quoted(attrs: str, key: str) -> str:
    """Spark SQL: the attribute ``key`` (an expression) is a JSON string in the object text ``attrs``."""
    return f"({attrs} RLIKE concat('\"', regexp_replace({key}, '[.]', '[.]'), '\"[ ]*:[ ]*\"'))"


def _spark_attributes_ok(attrs: str, m: str) -> str:
    """Spark SQL: ``attrs`` is a JSON object (``m``: it as a map) whose kept keys are plain and checked numbers fine."""
    value = f"{m}[k]"
    number_ok = (
        f"({value} RLIKE {_SPARK_NUMBER} AND try_cast({value} AS DOUBLE) >= 0 "
        f"AND try_cast({value} AS DOUBLE) <= {MAX_PLAUSIBLE_VALUE!r} AND NOT {_spark_quoted(attrs, 'k')})"
    )
    key_ok = f"(k RLIKE '^{_PLAIN_KEY}$' AND (NOT {_spark_checked('k')} OR {number_ok}))"
    return (
        f"({attrs} RLIKE '^[ ]*[{{]' AND {m} IS NOT NULL "
        f"AND forall(map_keys({m}), k -> NOT {_spark_kept('k')} OR {key_ok}))"
    )


def _spark_hex(value: str, digits: int) -> str:
    return f"coalesce({value} RLIKE '^[0-9a-fA-F]{{{digits}}}$', false)"


def _spark_parent_ok(value: str) -> str:
    return f"(coalesce({value}, '') = '' OR {value} RLIKE '^[0-9a-fA-F]{{16}}$')"


def _spark_time(text: str) -> str:
    return f"CASE WHEN {text} RLIKE '^[0-9]{{1,19}}$' THEN try_cast({text} AS BIGINT) END"


def _spark_time_ok(text: str) -> str:
    return f"(coalesce({text}, '') = '' OR {_spark_time(text)} IS NOT NULL)"


def _spark_select(source: str, file_idx: int | str, ok: Sequence[str], tid: str, sid: str, pid: str, name: str, st: str,
                  et: str, svc: str) -> str:
    return f"""
SELECT {file_idx} AS file_idx, mid, coalesce({' AND '.join(ok)}, false) AS ok, lower({tid}) AS trace_id,
       lower({sid}) AS span_id, nullif(lower({pid}), '') AS parent_span_id, coalesce({name}, '') AS name,
       {st} AS start_ns, {et} AS end_ns, nullif({svc}, '') AS service_name, a AS attrs,
       CAST(size(filter(map_keys(m), k -> {_spark_kept('k')})) AS INT) AS n_attrs
FROM (SELECT *, from_json(a, 'map<string,string>') AS m FROM ({source}))
"""


def spark_jsonl_select(view: str, file_idx: int | str) -> str:
    """Spark SQL: our JSON lines from ``view`` (``spark.read.text``: one ``value`` per line) as ``spans`` rows.

    ``file_idx``: the file's number, or a column of ``view`` holding it (several files in one view).
    """
    source = f"""
SELECT *, get_json_object(value, '$.trace_id') AS tid, get_json_object(value, '$.span_id') AS sid,
       get_json_object(value, '$.parent_span_id') AS pid, get_json_object(value, '$.name') AS nm,
       get_json_object(value, '$.start_time_unix_nano') AS st, get_json_object(value, '$.end_time_unix_nano') AS et,
       get_json_object(value, '$.service_name') AS svc, get_json_object(value, '$.attributes') AS a,
       get_json_object(value, '$') IS NOT NULL AS parsed
FROM (SELECT *, monotonically_increasing_id() AS mid FROM {view}) WHERE trim(value) != ''
"""
    ok = (
        "parsed",
        "value RLIKE '^[ \t]*[{]'",
        _spark_hex("tid", 32),
        _spark_hex("sid", 16),
        _spark_parent_ok("pid"),
        _spark_time_ok("st"),
        _spark_time_ok("et"),
        f"coalesce({_spark_time('st')} <= {_spark_time('et')}, true)",
        "a IS NOT NULL",
        _spark_attributes_ok("a", "m"),
    )
    return _spark_select(source, file_idx, ok, "tid", "sid", "pid", "nm", _spark_time("st"), _spark_time("et"), "svc")


def spark_csv_select(view: str, file_idx: int | str, header: Sequence[str], core: Sequence[str]) -> str:
    """Spark SQL: our CSV from ``view`` (``spark.read.csv``, every column ``c0``... a string, ``_corrupt``) as ``spans`` rows."""
    cells = [f"c{i}" for i in range(len(header))]
    position = {name: f"c{i}" for i, name in enumerate(header[: len(core)])}
    plain = " AND ".join(
        f"(coalesce(length({c}), 0) <= {CSV_FIELD_LIMIT} AND instr(coalesce({c}, ''), char(10)) = 0 "
        f"AND instr(coalesce({c}, ''), char(13)) = 0 AND instr(coalesce({c}, ''), char(0)) = 0)"
        for c in cells
    )
    source = (
        f"SELECT *, coalesce(nullif({cells[_attributes_at(header)]}, ''), '{{}}') AS a FROM "
        f"(SELECT *, monotonically_increasing_id() AS mid FROM {view})"
    )
    st, et = position["start_time_unix_nano"], position["end_time_unix_nano"]
    ok = (
        "_corrupt IS NULL",
        plain,
        _spark_hex(position["trace_id"], 32),
        _spark_hex(position["span_id"], 16),
        _spark_parent_ok(position["parent_span_id"]),
        _spark_time_ok(st),
        _spark_time_ok(et),
        f"coalesce({_spark_time(st)} <= {_spark_time(et)}, true)",
        _spark_attributes_ok("a", "m"),
    )
    return _spark_select(
        source, file_idx, ok, position["trace_id"], position["span_id"], position["parent_span_id"], position["name"],
        _spark_time(st), _spark_time(et), position["service_name"],
    )


def spark_parquet_select(view: str, file_idx: int | str) -> str:
    """Spark SQL: a Parquet span file (:mod:`otel_joules.exporters.parquet_exporter`) from ``view`` as ``spans`` rows."""
    source = (
        "SELECT *, coalesce(nullif(attributes, ''), '{}') AS a FROM "
        f"(SELECT *, monotonically_increasing_id() AS mid FROM {view})"
    )
    ok = (
        _spark_hex("trace_id", 32),
        _spark_hex("span_id", 16),
        _spark_parent_ok("parent_span_id"),
        "coalesce(start_time_unix_nano >= 0, true)",
        "coalesce(end_time_unix_nano >= 0, true)",
        "coalesce(start_time_unix_nano <= end_time_unix_nano, true)",
        _spark_attributes_ok("a", "m"),
    )
    return _spark_select(
        source, file_idx, ok, "trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano",
        "end_time_unix_nano", "service_name",
    )


def _spark_number(key: str) -> str:
    """Spark SQL: the attribute ``key`` of ``m`` (``attrs`` as a map) as a finite DOUBLE, else NULL (as :func:`_number`)."""
    value = f"m[{_literal(key)}]"
    number = f"try_cast({value} AS DOUBLE)"
    quoted = _spark_quoted("attrs", _literal(key))
    return (
        f"CASE WHEN {value} RLIKE {_SPARK_NUMBER} AND NOT {quoted} AND NOT isnan({number}) "
        f"AND abs({number}) != double('Infinity') THEN {number} END"
    )


SPARK_AGGREGATE = [
    f"""
CACHE TABLE d AS
SELECT trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name, attrs, file_idx, first_ord,
       {_spark_number(ENERGY_JOULES)} AS ej, {_spark_number(ENERGY_ATTRIBUTED_JOULES)} AS eaj,
       {_spark_number(ENERGY_ATTRIBUTED_SELF_JOULES)} AS easj, {_spark_number(ENERGY_CLOCK_STEP_S)} AS clock_step,
       m[{_literal(TRAINING_RANK)}] AS own_rank
FROM (
    SELECT *, row_number() OVER (PARTITION BY trace_id, span_id ORDER BY n_attrs DESC, file_idx, mid) AS copy,
           min(named_struct('f', file_idx, 'm', mid)) OVER (PARTITION BY trace_id, span_id) AS first_ord,
           from_json(attrs, 'map<string,string>') AS m
    FROM spans
)
WHERE copy = 1
""",
    """
CACHE TABLE ranks AS
WITH RECURSIVE walk(trace_id, span_id, cur, visited, rank) AS (
    SELECT trace_id, span_id, parent_span_id, array(span_id), own_rank FROM d WHERE eaj IS NOT NULL
    UNION ALL
    SELECT w.trace_id, w.span_id, p.parent_span_id, array_append(w.visited, p.span_id), p.own_rank
    FROM walk w JOIN d p ON p.trace_id = w.trace_id AND p.span_id = w.cur
    WHERE w.rank IS NULL AND NOT array_contains(w.visited, w.cur)
)
SELECT trace_id, span_id, max(rank) AS rank FROM walk GROUP BY trace_id, span_id
""",
    """
CACHE TABLE nested_attributed AS
WITH RECURSIVE walk(trace_id, span_id, rank, cur, visited, nested) AS (
    SELECT r.trace_id, r.span_id, r.rank, d.parent_span_id, array(r.span_id), false
    FROM ranks r JOIN d ON d.trace_id = r.trace_id AND d.span_id = r.span_id
    UNION ALL
    SELECT w.trace_id, w.span_id, w.rank, p.parent_span_id, array_append(w.visited, p.span_id),
           p.eaj IS NOT NULL AND pr.rank <=> w.rank
    FROM walk w JOIN d p ON p.trace_id = w.trace_id AND p.span_id = w.cur
    LEFT JOIN ranks pr ON pr.trace_id = p.trace_id AND pr.span_id = p.span_id
    WHERE NOT w.nested AND NOT array_contains(w.visited, w.cur)
)
SELECT DISTINCT trace_id, span_id FROM walk WHERE nested
""",
    """
CACHE TABLE nested_interval AS
WITH RECURSIVE walk(trace_id, span_id, cur, visited, nested) AS (
    SELECT trace_id, span_id, parent_span_id, array(span_id), false FROM d WHERE ej IS NOT NULL
    UNION ALL
    SELECT w.trace_id, w.span_id, p.parent_span_id, array_append(w.visited, p.span_id), p.ej IS NOT NULL
    FROM walk w JOIN d p ON p.trace_id = w.trace_id AND p.span_id = w.cur
    WHERE NOT w.nested AND NOT array_contains(w.visited, w.cur)
)
SELECT DISTINCT trace_id, span_id FROM walk WHERE nested
""",
    """
CACHE TABLE sources AS
SELECT trace_id, array_sort(collect_set(file_idx)) AS sources FROM spans GROUP BY trace_id
""",
]

_SPARK_FIRST_ROOT = "named_struct('s', coalesce(f.start_ns, 0), 'i', f.span_id)"
SPARK_TRACES = f"""
WITH flagged AS (
    SELECT d.*,
           d.eaj IS NOT NULL AND na.span_id IS NULL AS top_attributed,
           d.easj IS NOT NULL AS has_self,
           d.ej IS NOT NULL AND ni.span_id IS NULL AS top_interval,
           d.name = {_literal(SPAN_EPOCH)} AND d.ej IS NOT NULL AS is_epoch,
           p.span_id IS NULL AS is_root
    FROM d
    LEFT JOIN nested_attributed na ON na.trace_id = d.trace_id AND na.span_id = d.span_id
    LEFT JOIN nested_interval ni ON ni.trace_id = d.trace_id AND ni.span_id = d.span_id
    LEFT JOIN d p ON p.trace_id = d.trace_id AND p.span_id = d.parent_span_id
)
SELECT f.trace_id, first(s.sources),
       min_by(f.name, {_SPARK_FIRST_ROOT}) FILTER (WHERE f.is_root),
       min_by(f.service_name, {_SPARK_FIRST_ROOT}) FILTER (WHERE f.is_root AND f.service_name IS NOT NULL),
       min_by(f.service_name, f.first_ord) FILTER (WHERE f.service_name IS NOT NULL),
       min(f.start_ns), max(f.end_ns), count(*) FILTER (WHERE f.clock_step IS NOT NULL),
       max(greatest(double(0), CAST(f.end_ns - f.start_ns AS DOUBLE) / double(1e9) - coalesce(f.clock_step, double(0))))
           FILTER (WHERE f.start_ns IS NOT NULL AND f.end_ns IS NOT NULL),
       transform(array_sort(collect_list(named_struct(
           'o', f.first_ord, 'span_id', f.span_id, 'parent', f.parent_span_id, 'name', f.name, 'start', f.start_ns,
           'end', f.end_ns, 'service', f.service_name, 'attrs', f.attrs, 'file', f.file_idx,
           'flags', array(f.top_attributed, f.has_self, f.top_interval, f.is_epoch)))
           FILTER (WHERE f.top_attributed OR f.has_self OR f.top_interval OR f.is_epoch)), x -> x)
FROM flagged f JOIN sources s ON s.trace_id = f.trace_id
GROUP BY f.trace_id
"""


# -- Totals per group: ``otel-joules report --by`` (:mod:`otel_joules.report.groups`) ---------------------------------
# The spans are the store's (checked, one copy each); what --by reads beyond the kept attributes (host.name,
# slurm.job.id, any other resource or span attribute) is read from the files again, for the keys asked only. OTLP
# files hold every resource attribute: DuckDB's JSON functions hold every big OTLP line of a batch parsed at once (a
# 15 MB file of 512-span lines ran out of a 350 MB limit), so their labels are read in Python, a line at a time, and
# handed to DuckDB as JSON lines; a line that is not a request gives none. Our JSON-lines, CSV and Parquet records
# keep the resource's identities in their ``resource`` field (exporters.records): read by DuckDB in one query per
# file, or a line at a time in Python where DuckDB cannot read the file (the damaged files the Python reader reads).

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
    import base64
    import binascii

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
    pairs = ", ".join(f"{{'k': {_literal(n)}, 'v': json_extract_string({resource}, {_path(n)})}}" for n in names)
    return f"list_filter([{pairs}], lambda l: l.v IS NOT NULL)"


def _record_labels_select(con: Any, path: str, kind: str, header: tuple[str, ...], names: Sequence[str]) -> str | None:
    """SQL: (trace_id, span_id, labels) of each record of our span file ``path`` (of ``kind``, a CSV one with
    ``header``: :func:`_span_file_kind`) from its ``resource`` field, or None for a file with no such field (a CSV or
    Parquet file from before it)."""
    if kind == FORMAT_PARQUET:
        schema = con.execute(f"SELECT name FROM parquet_schema({_literal(path)})").fetchall()
        if (RESOURCE_COLUMN,) not in schema:
            return None
        resource = f"TRY_CAST(nullif({RESOURCE_COLUMN}, '') AS JSON)"
        return (f"SELECT lower(trace_id), lower(span_id), {_resource_labels(resource, names)} "
                f"FROM read_parquet({_literal(path)})")
    if kind == FORMAT_CSV:
        if header[-1] != RESOURCE_COLUMN:
            return None
        columns = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(header))) + "}"
        resource = f"TRY_CAST(nullif(c{len(header) - 1}, '') AS JSON)"
        tid, sid = f"c{header.index('trace_id')}", f"c{header.index('span_id')}"
        return (f"SELECT lower({tid}), lower({sid}), {_resource_labels(resource, names)} "
                f"FROM read_csv({_literal(path)}, header = true, auto_detect = false, columns = {columns}, delim = ',', "
                f"quote = '\"', escape = '\"', strict_mode = true, max_line_size = {MAX_LINE_BYTES})")
    labels = _resource_labels("json->'$.resource'", names)
    return (f"SELECT lower(json->>'$.trace_id'), lower(json->>'$.span_id'), {labels} "
            f"FROM read_ndjson_objects({_literal(path)}, maximum_object_size = {MAX_LINE_BYTES})")


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
        found.append(f"json_extract_string(attrs, {_path(name)})")
        found.append(f"list_filter(coalesce(labels, []), lambda l: l.k = {_literal(name)})[1].v")
    return f"coalesce({', '.join(found)})"


def group_rows(
    store: SpanStore, keys: Sequence[str], attributes: Sequence[Sequence[str]]
) -> tuple[list[tuple[Any, ...]], int, list[tuple[str, str]]]:
    """The store's spans grouped by ``keys`` (``attributes[i]``: the names key ``i`` reads, none for service, span, day).

    Returns the rows (the key values, the sum of the spans' ``energy.attributed.self.joules``, their merged
    ``energy.source``, below resolution, spans and traces counted), how many spans have no self share (left out),
    and (path, reason) for each OTLP file whose labels could not be read. A span exported twice counts once.
    """
    con = store._con
    names = sorted({name for group in attributes for name in group})
    problems: list[tuple[str, str]] = []
    con.execute("CREATE OR REPLACE TEMP TABLE span_labels (trace_id VARCHAR, span_id VARCHAR, "
                "labels STRUCT(k VARCHAR, v VARCHAR)[])")
    if names:
        staging = os.path.join(store._spill, "labels.jsonl")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            written = 0
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                for path in dict.fromkeys(store._files):
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
FROM read_json({_literal(staging)}, format = 'newline_delimited', maximum_object_size = 67108864,
               columns = {{trace_id: 'VARCHAR', span_id: 'VARCHAR', labels: 'STRUCT(k VARCHAR, v VARCHAR)[]'}})
""")
        finally:
            os.unlink(staging)
    values = ", ".join(f"{_group_value(key, group)} AS k{i}" for i, (key, group) in enumerate(zip(keys, attributes)))
    columns = ", ".join(f"k{i}" for i in range(len(keys)))
    below = _path(ENERGY_BELOW_RESOLUTION)
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
    SELECT {values}, trace_id, {_number(ENERGY_ATTRIBUTED_SELF_JOULES)} AS self_joules,
           json_extract_string(attrs, {_path(ENERGY_SOURCE)}) AS source,
           coalesce(json_type(attrs, {below}) = 'BOOLEAN' AND CAST(json_extract(attrs, {below}) AS BOOLEAN), false) AS below
    FROM labelled
)
SELECT {columns}, fsum(self_joules),
       CASE WHEN bool_or(source = {_literal(SOURCE_PARTIAL)}) {counted} THEN {_literal(SOURCE_PARTIAL)}
            WHEN count(DISTINCT source) {counted} = 1 THEN min(source) {counted}
            WHEN count(DISTINCT source) {counted} > 1 THEN {_literal(SOURCE_MIXED)} END,
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
        con.execute(f"COPY g TO {_literal(path)} (FORMAT parquet)")
        with open(path, "rb") as handle:
            return handle.read()
    finally:
        con.close()
        shutil.rmtree(folder, ignore_errors=True)


def trace_spans(files: Sequence[str], figures: Sequence[Any], spans: Iterable[Sequence[Any]]) -> TraceSpans:
    """One trace's :class:`TraceSpans` from its figures (id, sources, root name and service, first service,
    start, end, clock steps, longest duration) and its counted spans (id, parent, name, start, end, service,
    attributes as JSON, file index, then a flag per group), as either engine's trace query returns them."""
    (trace_id, sources, root_name, root_service, first_service, start, end, stepped, longest) = figures
    groups: tuple[list[SpanRow], ...] = ([], [], [], [])
    for span_id, parent, name, span_start, span_end, service, attrs, file_idx, *flags in spans:
        span = SpanRow(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=name,
            start_unix_nano=span_start,
            end_unix_nano=span_end,
            service_name=service,
            attributes=checked_attributes(json.loads(attrs)),
            source=files[file_idx],
        )
        for group, flag in zip(groups, flags):
            if flag:
                group.append(span)
    return TraceSpans(
        trace_id=trace_id,
        sources=tuple(files[i] for i in sources),
        attributed=tuple(groups[0]),
        attributed_self=tuple(groups[1]),
        interval=tuple(groups[2]),
        epochs=tuple(groups[3]),
        root_name=root_name,
        service_name=root_service if root_service is not None else first_service,
        start_unix_nano=start,
        end_unix_nano=end,
        stepped=int(stepped),
        longest_duration_s=longest,
    )
