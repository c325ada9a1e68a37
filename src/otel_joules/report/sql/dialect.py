"""The one table of what differs between the report's two SQL engines, DuckDB and Spark.

The report's checks and per-span figures are written once (:mod:`otel_joules.report.sql.checks`)
against a :class:`Dialect`; :data:`DUCKDB` and :data:`SPARK` spell them for each engine: function
names (``starts_with``/``startswith``, ``arg_min``/``min_by``), regular expressions
(``regexp_full_match`` against an anchored ``RLIKE``), struct literals, lambdas, and how each engine
sees a JSON value. DuckDB reads JSON values with their types (``json_type``, ``MAP(VARCHAR, JSON)``);
Spark reads them as text (``get_json_object``, ``map<string,string>``), so its checks are stricter
where it cannot tell what ``json_type`` tells (an ``energy.*``/``carbon.*`` number must be an unquoted
JSON number): a file with a record failing them goes to the Python reader, for either engine, so the
same records are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from otel_joules.report.record_checks import MAX_PLAUSIBLE_VALUE, TIME_MAX_DIGITS


#: A time written as text: digits, at most as many as the 64-bit range has (one past it fails the cast to BIGINT).
TIME_PATTERN = f"[0-9]{{1,{TIME_MAX_DIGITS}}}"


def literal(text: str) -> str:
    """A SQL string literal (the same in both engines)."""
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Dialect:
    """How one engine spells what the report's SQL needs (module docstring). Every entry renders SQL text.

    Attributes:
        name: The engine (``duckdb``, ``spark``).
        starts_with: The name of the function ``f(text, prefix)``.
        ends_with: The name of the function ``f(text, suffix)``.
        min_by: The name of the aggregate ``f(value, key)``: the value at the smallest key.
        full_match: ``(text, pattern)``: the whole text matches the regular expression (NULL for NULL text).
        no_line_breaks: ``(text)``: a text cell without a line feed, carriage return or NUL.
        struct: ``([(name, value), ...])``: a struct value, ordered field by field.
        lambda_: ``(variable, body)``: an anonymous function for the list/array functions.
        count_kept: ``(map, kept)``: how many keys of ``map`` pass ``kept(key)``, as INTEGER.
        all_kept: ``(map, kept, condition)``: every entry of ``map`` whose key ``kept(key)`` holds passes
            ``condition(key, value)`` (true for a map with none).
        is_object: ``(text, map)``: the attributes (``text``, read as ``map``) are one JSON object.
        number_ok: ``(text, key, value)``: the attribute ``key`` (its ``value`` from the map of ``text``) may enter a
            total as the Python reader reads it: finite, not negative, at most the plausible bound.
        shallow: ``(text)``: a JSON text does not nest deeper than the Python reader reads (Spark: no such bound).
        csv_row_ok: Checks of a CSV row beyond its cells (Spark: the row parsed).
        json_record_ok: The checks of a JSON line as a whole (DuckDB: an object, not nested too deep; Spark: it
            parsed and starts with ``{``), over the select's columns.
        json_absent: ``(value)``: a JSON-lines field is absent or null.
        json_text: ``(value)``: a JSON-lines field as the text the checks read: a JSON string's text, else NULL
            (Spark: any value as text).
        json_time_text: ``(value)``: a JSON-lines time as text: a JSON string's or integer's, else NULL (Spark: any
            value as text).
        json_attributes_ok: ``(value)``: the JSON-lines attributes field is there to be read as a map.
        double: ``(number)``: a number literal as DOUBLE (a plain ``0.0`` is a DECIMAL in Spark).
        walk_number: ``(key)``: in the aggregation's first table, the span's attribute ``key`` as a finite DOUBLE
            (SpanRow.number), else NULL (DuckDB: from ``a``, the attributes parsed for the walks; Spark: from ``m``,
            the map of ``attrs``).
        walk_text: ``(key)``: there, the attribute ``key`` as text (NULL when absent or null).
        record_ok: ``(checks)``: a row's verdict from its checks (Spark's is never NULL: a filter reads it).
        table: ``(name, select)``: a table of the aggregation, made from ``select`` (DuckDB: a temp table, which
            spills to disk; Spark: a cached one).
        walk_bound: The columns a walk up a span's parents carries to end round a parent loop (DuckDB: its depth and
            the trace's size, so a walk's rows are numbers; Spark: the spans met, in an array).
        walk_start: ``(met)``: their values where a walk starts, having met the spans ``met`` (the walker first); the
            trace's size is ``t.n``.
        walk_step: Their values one step up, from the walk's row ``w`` to the parent ``p`` it reaches.
        walk_go_on: The walk's row ``w`` may step on to its next span ``w.cur``: not met before (DuckDB: the walk is
            no longer than the trace, which a parent loop makes it).
        spans_with_files: The span rows, ``s``, each with its file's index, ``file_idx`` (DuckDB: joined from
            ``files`` by path; Spark: a column of the row).
        sorted_set: ``(value)``: the aggregate of the distinct values, in ascending order, as a list/array.
        row_id: A span row's identity in ``spans s`` (DuckDB: its ``rowid``; Spark: its file and ``mid``).
        read_order: Where the row ``s`` was read, ordered as Python reads (files in index order, rows in file order).
        walk_attributes: ``(text, keys)``: the attributes parsed once, from the JSON text ``text``, for
            ``walk_number`` and ``walk_text`` (DuckDB: the JSON object ``keys`` names, as ``a``; Spark: the whole
            map, as ``m``).
        span_kept: What ``d`` keeps of a span's row for the trace query (DuckDB: ``rid``, its row in ``spans``;
            Spark: its ``attrs``).
        span_key: A span's key ``k`` in the walks (DuckDB: a row number; Spark: its ids, which need no single
            partition to number).
    """

    name: str
    starts_with: str
    ends_with: str
    min_by: str
    full_match: Callable[[str, str], str]
    no_line_breaks: Callable[[str], str]
    struct: Callable[[Sequence[tuple[str, str]]], str]
    lambda_: Callable[[str, str], str]
    count_kept: Callable[[str, Callable[[str], str]], str]
    all_kept: Callable[[str, Callable[[str], str], Callable[[str, str], str]], str]
    is_object: Callable[[str, str], str]
    number_ok: Callable[[str, str, str], str]
    shallow: Callable[[str], str]
    csv_row_ok: str
    json_record_ok: str
    json_absent: Callable[[str], str]
    json_text: Callable[[str], str]
    json_time_text: Callable[[str], str]
    json_attributes_ok: Callable[[str], str]
    double: Callable[[str], str]
    walk_number: Callable[[str], str]
    walk_text: Callable[[str], str]
    record_ok: Callable[[Iterable[str]], str]
    table: Callable[[str, str], str]
    walk_bound: str
    walk_start: Callable[[Sequence[str]], str]
    walk_step: str
    walk_go_on: str
    spans_with_files: str
    sorted_set: Callable[[str], str]
    row_id: str
    read_order: str
    walk_attributes: Callable[[str, str], str]
    span_kept: str
    span_key: str


def text_time(d: Dialect, text: str) -> str:
    """SQL: a time written as digits (at most :data:`~otel_joules.report.record_checks.TIME_MAX_DIGITS`) as BIGINT,
    else NULL (one past the 64-bit range too)."""
    return f"CASE WHEN {d.full_match(text, TIME_PATTERN)} THEN try_cast({text} AS BIGINT) END"


# -- DuckDB ------------------------------------------------------------------------------------------------------------

def _duckdb_full_match(text: str, pattern: str) -> str:
    return f"regexp_full_match({text}, {literal(pattern)})"


def _duckdb_number_ok(text: str, key: str, value: str) -> str:
    # A JSON number finite, >= 0 and plausible; a quoted "NaN"/"Infinity"/"-Infinity" is what the Python reader reads
    # as a float that is not finite; any other text is not a number it adds up.
    return (
        f"CASE WHEN json_type({value}) IN ('DOUBLE', 'BIGINT', 'UBIGINT') THEN "
        f"(isfinite(CAST({value} AS DOUBLE)) AND CAST({value} AS DOUBLE) >= 0 "
        f"AND CAST({value} AS DOUBLE) <= {MAX_PLAUSIBLE_VALUE!r}) "
        f"WHEN json_type({value}) = 'VARCHAR' THEN ({value}->>'$') NOT IN ('NaN', 'Infinity', '-Infinity') "
        "ELSE true END"
    )


def json_path(key: str) -> str:
    """DuckDB SQL: the JSON path of the attribute ``key`` (a literal)."""
    return literal(f'$."{key}"')


def attribute_number(key: str, attrs: str = "attrs") -> str:
    """DuckDB SQL: the JSON object ``attrs``' attribute ``key`` as a finite DOUBLE (SpanRow.number), else NULL."""
    return json_number(f"json_extract({attrs}, {json_path(key)})")


def json_number(value: str) -> str:
    """DuckDB SQL: the JSON ``value`` as a finite DOUBLE (SpanRow.number), else NULL."""
    return (
        f"CASE WHEN json_type({value}) IN ('DOUBLE', 'BIGINT', 'UBIGINT') AND isfinite(CAST({value} AS DOUBLE)) "
        f"THEN CAST({value} AS DOUBLE) END"
    )


DUCKDB = Dialect(
    name="duckdb",
    starts_with="starts_with",
    ends_with="ends_with",
    min_by="arg_min",
    full_match=_duckdb_full_match,
    no_line_breaks=lambda text: f"NOT regexp_matches(coalesce({text}, ''), '[\\n\\r\\x00]')",
    struct=lambda fields: "{" + ", ".join(f"{literal(name)}: {value}" for name, value in fields) + "}",
    lambda_=lambda variable, body: f"lambda {variable}: {body}",
    count_kept=lambda m, kept: f"len([k for k in map_keys({m}) if {kept('k')}])",
    all_kept=lambda m, kept, condition: (
        f"coalesce(list_bool_and([{condition('e.key', 'e.value')} for e in map_entries({m}) if {kept('e.key')}]), true)"
    ),
    # A MAP(VARCHAR, JSON) cast is NULL when the text is not a JSON object or holds a key twice.
    is_object=lambda text, m: f"{m} IS NOT NULL",
    number_ok=_duckdb_number_ok,
    shallow=lambda text: f"shallow({text})",  # the macro of report.sql.checks.DUCKDB_MACROS
    csv_row_ok="true",  # strict_mode: a row DuckDB cannot parse fails the whole query
    json_record_ok="json_type(j) = 'OBJECT' AND shallow(CAST(j AS VARCHAR))",
    json_absent=lambda value: f"({value} IS NULL OR json_type({value}) = 'NULL')",
    json_text=lambda value: f"CASE WHEN json_type({value}) = 'VARCHAR' THEN {value}->>'$' END",
    json_time_text=lambda value: f"CASE WHEN json_type({value}) IN ('VARCHAR', 'BIGINT', 'UBIGINT') THEN {value}->>'$' END",
    json_attributes_ok=lambda value: "true",
    double=lambda number: f"CAST({number} AS DOUBLE)",
    walk_number=lambda key: json_number(f'a."{key}"'),
    walk_text=lambda key: f"CASE WHEN json_type(a.\"{key}\") NOT IN ('NULL') THEN CAST(a.\"{key}\" AS VARCHAR) END",
    record_ok=lambda checks: " AND ".join(checks),
    table=lambda name, select: f"CREATE TEMP TABLE {name} AS\n{select}",
    walk_bound="depth, n",
    walk_start=lambda met: f"{len(met) - 1}, t.n",
    walk_step="w.depth + 1, w.n",
    walk_go_on="w.depth < w.n",
    spans_with_files="spans s JOIN files f USING (path)",
    sorted_set=lambda value: f"list(DISTINCT {value} ORDER BY {value})",
    row_id="s.rowid",
    read_order="(CAST(file_idx AS BIGINT) << 40) + s.rowid",
    # json_transform parses only what the walks read; a span's attributes stay in ``spans`` alone.
    walk_attributes=lambda text, keys: f"json_transform({text}, {literal(keys)}) AS a",
    span_kept="rid",
    span_key="row_number() OVER ()",
)


# -- Spark -------------------------------------------------------------------------------------------------------------

#: An unquoted JSON number as Spark's ``map<string,string>`` gives it back.
SPARK_NUMBER = "'^-?[0-9]+([.][0-9]+)?([eE][-+]?[0-9]+)?$'"


def _spark_full_match(text: str, pattern: str) -> str:
    return f"({text} RLIKE {literal('^' + pattern + '$')})"


def spark_quoted(text: str, key: str) -> str:
    """Spark SQL: the attribute ``key`` (an expression) is a JSON string in the object text ``text``."""
    return f"({text} RLIKE concat('\"', regexp_replace({key}, '[.]', '[.]'), '\"[ ]*:[ ]*\"'))"


def _spark_number_ok(text: str, key: str, value: str) -> str:
    return (
        f"({value} RLIKE {SPARK_NUMBER} AND try_cast({value} AS DOUBLE) >= 0 "
        f"AND try_cast({value} AS DOUBLE) <= {MAX_PLAUSIBLE_VALUE!r} AND NOT {spark_quoted(text, key)})"
    )


def _spark_walk_number(key: str) -> str:
    value = f"m[{literal(key)}]"
    number = f"try_cast({value} AS DOUBLE)"
    return (
        f"CASE WHEN {value} RLIKE {SPARK_NUMBER} AND NOT {spark_quoted('attrs', literal(key))} AND NOT isnan({number}) "
        f"AND abs({number}) != double('Infinity') THEN {number} END"
    )


SPARK = Dialect(
    name="spark",
    starts_with="startswith",
    ends_with="endswith",
    min_by="min_by",
    full_match=_spark_full_match,
    no_line_breaks=lambda text: (
        f"instr(coalesce({text}, ''), char(10)) = 0 AND instr(coalesce({text}, ''), char(13)) = 0 "
        f"AND instr(coalesce({text}, ''), char(0)) = 0"
    ),
    struct=lambda fields: "named_struct(" + ", ".join(f"{literal(name)}, {value}" for name, value in fields) + ")",
    lambda_=lambda variable, body: f"{variable} -> {body}",
    count_kept=lambda m, kept: f"CAST(size(filter(map_keys({m}), k -> {kept('k')})) AS INT)",
    all_kept=lambda m, kept, condition: f"forall(map_keys({m}), k -> NOT {kept('k')} OR {condition('k', f'{m}[k]')})",
    is_object=lambda text, m: f"{text} RLIKE '^[ ]*[{{]' AND {m} IS NOT NULL",
    number_ok=_spark_number_ok,
    shallow=lambda text: "true",
    csv_row_ok="_corrupt IS NULL",
    json_record_ok="parsed AND value RLIKE '^[ \t]*[{]'",
    # get_json_object gives any value (a string unquoted) as text, NULL where absent or null.
    json_absent=lambda value: f"{value} IS NULL",
    json_text=lambda value: value,
    json_time_text=lambda value: value,
    json_attributes_ok=lambda value: f"{value} IS NOT NULL",
    double=lambda number: f"double({number})",
    walk_number=_spark_walk_number,
    walk_text=lambda key: f"m[{literal(key)}]",
    record_ok=lambda checks: f"coalesce({' AND '.join(checks)}, false)",
    table=lambda name, select: f"CACHE TABLE {name} AS\n{select}",
    walk_bound="visited",
    walk_start=lambda met: f"array({', '.join(met)})",
    walk_step="array_append(w.visited, p.k)",
    walk_go_on="NOT array_contains(w.visited, w.cur)",
    spans_with_files="spans s",
    sorted_set=lambda value: f"array_sort(collect_set({value}))",
    row_id="named_struct('f', s.file_idx, 'm', s.mid)",
    read_order="named_struct('f', s.file_idx, 'm', s.mid)",
    walk_attributes=lambda text, keys: f"from_json({text}, 'map<string,string>') AS m",
    span_kept="attrs",
    span_key="named_struct('t', trace_id, 's', span_id)",
)

#: Both engines, for what is rendered for each.
DIALECTS = (DUCKDB, SPARK)
