"""The record checks in SQL, written once for both engines, and each engine's readers of our span formats.

Every record is checked in SQL against the rules of :mod:`otel_joules.report.record_checks` (ids
of :data:`~otel_joules.report.record_checks.TRACE_ID_HEX_DIGITS` and
:data:`~otel_joules.report.record_checks.SPAN_ID_HEX_DIGITS` hex digits, 64-bit nanosecond times
that do not end before they start, every ``energy.*``/``carbon.*`` joules, grams, PUE and intensity
number finite, not negative and at most :data:`~otel_joules.report.record_checks.MAX_PLAUSIBLE_VALUE`),
conservatively: a record that passes would pass the Python checks too (tests/report/test_sql_dialect.py
feeds the same records, as JSON lines and as CSV, to both). The rules are the functions below, rendered for
DuckDB or Spark by a :class:`~otel_joules.report.sql.dialect.Dialect`; a JSON-lines field is read as text
by the dialect (``json_text``) and judged by the same text checks as a CSV cell. What is left per engine is
how its reader hands over a file's fields (DuckDB's ``read_ndjson_objects``/``read_csv``/``read_parquet``,
Spark's views).
"""

from __future__ import annotations

from typing import Sequence

from otel_joules.exporters.csv_exporter import attributes_column_index
from otel_joules.report.record_checks import (
    CHECKED_NUMBER_PREFIXES,
    CHECKED_NUMBER_SUFFIXES,
    REPORT_ATTRIBUTE_PREFIXES,
    SPAN_ID_HEX_DIGITS,
    TRACE_ID_HEX_DIGITS,
    hex_id_pattern,
)
from otel_joules.report.sql.dialect import DUCKDB, SPARK, Dialect, literal, text_time

#: The longest line DuckDB's readers take (``maximum_object_size``, ``max_line_size``): a file with a longer one is
#: read by the Python reader. DuckDB holds two buffers of this size per thread while it reads, and a bigger bound
#: made reading 510 MB of JSON lines four times slower (19 s against 4.7 s) under the memory limit.
MAX_LINE_BYTES = 16 << 20
#: The csv module's default field limit: a longer cell is left to the Python reader, which skips its row.
CSV_FIELD_LIMIT = 131072
#: Attribute keys read in SQL by a JSON path: a record with another kept key is left to the Python reader.
PLAIN_KEY = "[A-Za-z0-9_.\\-]+"
# The Python JSON parser gives up near 1,000 levels; a record with this many brackets may nest that deep and is
# left to the Python reader, which says so.
_DEEP_BRACKETS = 900


def _any(function: str, column: str, values: Sequence[str]) -> str:
    return "(" + " OR ".join(f"{function}({column}, {literal(v)})" for v in values) + ")"


def kept(d: Dialect, key: str) -> str:
    """SQL: the attribute named ``key`` is one a report keeps (record_checks.REPORT_ATTRIBUTE_PREFIXES)."""
    return _any(d.starts_with, key, REPORT_ATTRIBUTE_PREFIXES)


def checked(d: Dialect, key: str) -> str:
    """SQL: the attribute named ``key`` holds a number that enters a total (record_checks.CHECKED_NUMBER_*)."""
    return f"({_any(d.starts_with, key, CHECKED_NUMBER_PREFIXES)} AND {_any(d.ends_with, key, CHECKED_NUMBER_SUFFIXES)})"


def attributes_ok(d: Dialect, text: str, m: str) -> str:
    """SQL: the attributes ``text`` (``m``: read as a map) are one JSON object whose kept keys are plain and whose
    checked numbers may enter a total."""
    def entry_ok(key: str, value: str) -> str:
        return f"({d.full_match(key, PLAIN_KEY)} AND (NOT {checked(d, key)} OR {d.number_ok(text, key, value)}))"

    return f"({d.is_object(text, m)} AND {d.all_kept(m, lambda key: kept(d, key), entry_ok)})"


def kept_count(d: Dialect, m: str) -> str:
    """SQL: how many of the attributes ``m`` a report keeps (a duplicate's tie-break)."""
    return d.count_kept(m, lambda key: kept(d, key))


def hex_ok(d: Dialect, text: str, digits: int) -> str:
    """SQL: ``text`` is an id of ``digits`` hex digits."""
    return f"coalesce({d.full_match(text, hex_id_pattern(digits))}, false)"


def parent_ok(d: Dialect, text: str) -> str:
    """SQL: ``text`` is no parent (absent, empty) or a span id."""
    return f"(coalesce({text}, '') = '' OR {d.full_match(text, hex_id_pattern(SPAN_ID_HEX_DIGITS))})"


def time_ok(d: Dialect, text: str) -> str:
    """SQL: ``text`` is no time (absent, empty) or one (:func:`~otel_joules.report.sql.dialect.text_time`)."""
    return f"(coalesce({text}, '') = '' OR {text_time(d, text)} IS NOT NULL)"


def json_field_ok(d: Dialect, value: str, text: str, check: str) -> str:
    """SQL: the JSON-lines field ``value`` is absent or null, or read as ``text`` (a dialect's ``json_text`` or
    ``json_time_text``: NULL for a JSON value of another type, which fails) passes ``check``."""
    return f"({d.json_absent(value)} OR ({text} IS NOT NULL AND {check}))"


def json_time(d: Dialect, value: str) -> str:
    """SQL: the JSON-lines time ``value`` (an integer, or digits as text) as BIGINT; NULL if absent or not a time."""
    return text_time(d, d.json_time_text(value))


def in_order(start: str, end: str) -> str:
    """SQL: a span that does not end before it starts (either time unknown: in order)."""
    return f"coalesce({start} <= {end}, true)"


def jsonl_checks(d: Dialect) -> tuple[str, ...]:
    """The checks of a JSON-lines record, over the reader's columns ``tid sid pid nm svc st et`` (its fields) and ``a``
    (its attributes) read as the map ``m``."""
    text, time_text = d.json_text, d.json_time_text
    return (
        d.json_record_ok,
        hex_ok(d, text("tid"), TRACE_ID_HEX_DIGITS),
        hex_ok(d, text("sid"), SPAN_ID_HEX_DIGITS),
        json_field_ok(d, "pid", text("pid"), parent_ok(d, text("pid"))),
        json_field_ok(d, "nm", text("nm"), "true"),
        json_field_ok(d, "svc", text("svc"), "true"),
        json_field_ok(d, "st", time_text("st"), time_ok(d, time_text("st"))),
        json_field_ok(d, "et", time_text("et"), time_ok(d, time_text("et"))),
        in_order(json_time(d, "st"), json_time(d, "et")),
        d.json_attributes_ok("a"),
        attributes_ok(d, "a", "m"),
    )


def csv_checks(d: Dialect, header: Sequence[str], core: Sequence[str], attrs: str) -> tuple[str, ...]:
    """The checks of a row of our CSV (``header``, starting with ``core``: cells ``c0``...), its attributes cell read
    as the JSON ``attrs`` and the map ``m``."""
    cells = [f"c{i}" for i in range(len(header))]
    position = {name: f"c{i}" for i, name in enumerate(header[: len(core)])}
    st, et = position["start_time_unix_nano"], position["end_time_unix_nano"]
    plain = " AND ".join(f"(coalesce(length({c}), 0) <= {CSV_FIELD_LIMIT} AND {d.no_line_breaks(c)})" for c in cells)
    return (
        d.csv_row_ok,
        plain,
        hex_ok(d, position["trace_id"], TRACE_ID_HEX_DIGITS),
        hex_ok(d, position["span_id"], SPAN_ID_HEX_DIGITS),
        parent_ok(d, position["parent_span_id"]),
        time_ok(d, st),
        time_ok(d, et),
        in_order(text_time(d, st), text_time(d, et)),
        d.shallow(f"coalesce({cells[attributes_at(header)]}, '')"),
        attributes_ok(d, attrs, "m"),
    )


def parquet_checks(d: Dialect, attrs: str) -> tuple[str, ...]:
    """The checks of a Parquet record (:mod:`otel_joules.exporters.parquet_exporter`'s typed columns), its
    attributes read as the JSON ``attrs`` and the map ``m``."""
    return (
        hex_ok(d, "trace_id", TRACE_ID_HEX_DIGITS),
        hex_ok(d, "span_id", SPAN_ID_HEX_DIGITS),
        parent_ok(d, "parent_span_id"),
        "coalesce(start_time_unix_nano >= 0, true)",
        "coalesce(end_time_unix_nano >= 0, true)",
        in_order("start_time_unix_nano", "end_time_unix_nano"),
        d.shallow("coalesce(attributes, '')"),
        attributes_ok(d, attrs, "m"),
    )


def attributes_at(header: Sequence[str]) -> int:
    """The place of the attributes cell in our CSV ``header``.

    Raises:
        ValueError: not a header of ours.
    """
    at = attributes_column_index(header)
    if at is None:
        raise ValueError(f"not an otel-joules CSV header: {','.join(header)[:200]!r}")
    return at


# -- DuckDB's readers --------------------------------------------------------------------------------------------------

# A record shorter (in bytes, at least its characters) than twice the depth at which Python's parser gives up cannot
# nest that deep. A longer one is measured: strings dropped, brackets kept, then each round removes every innermost
# pair (one or two levels), so a record left with no bracket after the rounds nests at most twice that many levels
# deep. Deeper ones are left to the Python reader, which reads them exactly (and skips one nested too deeply with that
# reason).
_SHALLOW_ROUNDS = 24
_brackets = "regexp_replace(regexp_replace(t, '\"([^\"\\\\]|\\\\.)*\"', '', 'g'), '[^\\[\\]{}]', '', 'g')"
_peeled = _brackets
for _ in range(_SHALLOW_ROUNDS):
    _peeled = f"replace(replace({_peeled}, '[]', ''), '{{}}', '')"
#: The macros DuckDB's checks call (``shallow``, DUCKDB.shallow), created on each connection.
DUCKDB_MACROS = (
    # Only a long record is measured, on its JSON structure (the types of its values, arrays merged: as deep as the
    # record, and short).
    f"CREATE MACRO peeled(t) AS {_peeled} = ''",
    f"CREATE MACRO shallow(t) AS CASE WHEN strlen(t) < {2 * _DEEP_BRACKETS} THEN true "
    "ELSE peeled(CAST(json_structure(t) AS VARCHAR)) END",
)


def _files(paths: Sequence[str]) -> str:
    """SQL: a list of file names for a reader."""
    return "[" + ", ".join(literal(p) for p in paths) + "]"


_JSONL_FIELDS = (
    "trace_id", "span_id", "parent_span_id", "name", "start_time_unix_nano", "end_time_unix_nano", "service_name",
    "attributes",
)


def duckdb_jsonl_select(paths: Sequence[str]) -> str:
    """DuckDB SQL: the records of our JSON-lines files ``paths`` as rows of ``spans`` (store.SPAN_COLUMNS)."""
    d = DUCKDB
    fields = "{" + ", ".join(f'"{f}": "JSON"' for f in _JSONL_FIELDS) + "}"
    return f"""
SELECT filename, {d.record_ok(jsonl_checks(d))}, lower(tid->>'$'), lower(sid->>'$'), nullif(lower(pid->>'$'), ''),
       coalesce(nm->>'$', ''), {json_time(d, 'st')}, {json_time(d, 'et')}, nullif(svc->>'$', ''), a, {kept_count(d, 'm')}
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


def duckdb_csv_select(paths: Sequence[str], header: Sequence[str], core: Sequence[str]) -> str:
    """DuckDB SQL: our CSV files ``paths`` of one ``header`` (starting with ``core``: records.CORE_FIELDS, ending in
    attributes and resource) as rows of ``spans``."""
    d = DUCKDB
    cells = [f"c{i}" for i in range(len(header))]
    position = {name: f"c{i}" for i, name in enumerate(header[: len(core)])}
    columns = "{" + ", ".join(f"{literal(c)}: 'VARCHAR'" for c in cells) + "}"
    tid, sid, pid = position["trace_id"], position["span_id"], position["parent_span_id"]
    st, et = position["start_time_unix_nano"], position["end_time_unix_nano"]
    return f"""
SELECT filename, {d.record_ok(csv_checks(d, header, core, 'a'))}, lower({tid}), lower({sid}), nullif(lower({pid}), ''),
       coalesce({position['name']}, ''), {text_time(d, st)}, {text_time(d, et)}, nullif({position['service_name']}, ''),
       a, {kept_count(d, 'm')}
FROM (SELECT *, TRY_CAST(a AS MAP(VARCHAR, JSON)) AS m FROM (
    SELECT *, TRY_CAST(coalesce(nullif({cells[attributes_at(header)]}, ''), '{{}}') AS JSON) AS a
    FROM read_csv({_files(paths)}, header = true, auto_detect = false, columns = {columns}, delim = ',',
                  quote = '"', escape = '"', strict_mode = true, max_line_size = {MAX_LINE_BYTES}, filename = true)
))
"""


def duckdb_parquet_select(paths: Sequence[str]) -> str:
    """DuckDB SQL: Parquet span files ``paths`` as rows of ``spans``."""
    d = DUCKDB
    return f"""
SELECT filename, {d.record_ok(parquet_checks(d, 'a'))}, lower(trace_id), lower(span_id),
       nullif(lower(parent_span_id), ''), coalesce(name, ''), start_time_unix_nano, end_time_unix_nano,
       nullif(service_name, ''), a, {kept_count(d, 'm')}
FROM (SELECT *, TRY_CAST(a AS MAP(VARCHAR, JSON)) AS m FROM (
    SELECT filename, trace_id, span_id, parent_span_id, name, start_time_unix_nano, end_time_unix_nano, service_name,
           attributes, TRY_CAST(coalesce(nullif(attributes, ''), '{{}}') AS JSON) AS a
    FROM read_parquet({_files(paths)}, filename = true)
))
"""


# -- Spark's readers ---------------------------------------------------------------------------------------------------
# ``otel-joules report --engine spark`` (:mod:`otel_joules.report.spark_engine`) reads a batch of files into one view
# and selects from it; ``mid`` numbers the rows (a row's place in its file, as DuckDB's ``rowid``).

#: The columns of Spark's ``spans`` view and their types, in order (DuckDB's ``spans`` table, with ``mid``: the row's
#: place in its file).
SPARK_SPAN_SCHEMA = (
    ("file_idx", "INT"), ("mid", "BIGINT"), ("ok", "BOOLEAN"), ("trace_id", "STRING"), ("span_id", "STRING"),
    ("parent_span_id", "STRING"), ("name", "STRING"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
    ("service_name", "STRING"), ("attrs", "STRING"), ("n_attrs", "INT"),
)
#: Their names.
SPARK_SPAN_COLUMNS = tuple(name for name, _ in SPARK_SPAN_SCHEMA)


def _spark_select(source: str, file_idx: int | str, ok: Sequence[str], tid: str, sid: str, pid: str, name: str,
                  st: str, et: str, svc: str) -> str:
    d = SPARK
    return f"""
SELECT {file_idx} AS file_idx, mid, {d.record_ok(ok)} AS ok, lower({tid}) AS trace_id,
       lower({sid}) AS span_id, nullif(lower({pid}), '') AS parent_span_id, coalesce({name}, '') AS name,
       {st} AS start_ns, {et} AS end_ns, nullif({svc}, '') AS service_name, a AS attrs,
       {kept_count(d, 'm')} AS n_attrs
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
    st, et = json_time(SPARK, "st"), json_time(SPARK, "et")
    return _spark_select(source, file_idx, jsonl_checks(SPARK), "tid", "sid", "pid", "nm", st, et, "svc")


def spark_csv_select(view: str, file_idx: int | str, header: Sequence[str], core: Sequence[str]) -> str:
    """Spark SQL: our CSV from ``view`` (``spark.read.csv``, every column ``c0``... a string, ``_corrupt``) as ``spans`` rows."""
    position = {name: f"c{i}" for i, name in enumerate(header[: len(core)])}
    source = (
        f"SELECT *, coalesce(nullif(c{attributes_at(header)}, ''), '{{}}') AS a FROM "
        f"(SELECT *, monotonically_increasing_id() AS mid FROM {view})"
    )
    st, et = position["start_time_unix_nano"], position["end_time_unix_nano"]
    return _spark_select(
        source, file_idx, csv_checks(SPARK, header, core, "a"), position["trace_id"], position["span_id"],
        position["parent_span_id"], position["name"], text_time(SPARK, st), text_time(SPARK, et),
        position["service_name"],
    )


def spark_parquet_select(view: str, file_idx: int | str) -> str:
    """Spark SQL: a Parquet span file (:mod:`otel_joules.exporters.parquet_exporter`) from ``view`` as ``spans`` rows."""
    source = (
        "SELECT *, coalesce(nullif(attributes, ''), '{}') AS a FROM "
        f"(SELECT *, monotonically_increasing_id() AS mid FROM {view})"
    )
    return _spark_select(
        source, file_idx, parquet_checks(SPARK, "a"), "trace_id", "span_id", "parent_span_id", "name",
        "start_time_unix_nano", "end_time_unix_nano", "service_name",
    )
