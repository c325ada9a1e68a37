"""The report's SQL comes from one set of definitions, and its record checks agree with the Python reader's.

- The checks and per-trace figures are rendered for DuckDB and Spark from the same functions: with every entry of
  the dialect table marked, the two engines' SQL is the same text once each marked entry is replaced by its name.
- Every entry renders for both engines, and DuckDB runs what it renders.
- The same records, good and bad, get the same verdict from the Python reader and from DuckDB's SQL (Spark's: in
  test_spark.py), except where the SQL is knowingly stricter (the file then goes to the Python reader).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import pytest

from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report.readers import read_inputs
from otel_joules.report.sql import FORMAT_CSV, checks, traces
from otel_joules.report.sql.dialect import DIALECTS, DUCKDB, SPARK, Dialect

from tests.report.record_cases import CASES, CSV_HEADER, Case, write_case, write_csv_case

_OPEN, _NAME_END, _CLOSE = "\x01", "\x02", "\x03"


def _marked(d: Dialect) -> Dialect:
    """``d`` with each entry's output wrapped in markers that name the entry."""
    def mark(name: str, value: Any) -> Any:
        if isinstance(value, str):
            return f"{_OPEN}{name}{_NAME_END}{value}{_CLOSE}"
        return lambda *args: mark(name, value(*args))

    return dataclasses.replace(
        d, **{f.name: mark(f.name, getattr(d, f.name)) for f in dataclasses.fields(d) if f.name != "name"}
    )


def _entries_named(text: str) -> str:
    """``text`` with every outermost marked entry replaced by ``<its name>``."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char == _OPEN:
            if depth == 0:
                end = text.index(_NAME_END, i)
                out.append(f"<{text[i + 1:end]}>")
            depth += 1
        elif char == _CLOSE:
            depth -= 1
        elif depth == 0:
            out.append(char)
        i += 1
    assert depth == 0
    return "".join(out)


def _strip(text: str) -> str:
    """``text`` without the markers: what the engine gets."""
    out, skipping = [], False
    for char in text:
        if char == _OPEN:
            skipping = True
        elif char == _NAME_END:
            skipping = False
        elif char != _CLOSE and not skipping:
            out.append(char)
    return "".join(out)


# Everything written once for both engines, as a function of the dialect.
SHARED: dict[str, Callable[[Dialect], Any]] = {
    "jsonl checks": checks.jsonl_checks,
    "csv checks": lambda d: checks.csv_checks(d, CSV_HEADER, CORE_FIELDS, "a"),
    "parquet checks": lambda d: checks.parquet_checks(d, "a"),
    "attributes": lambda d: checks.attributes_ok(d, "a", "m"),
    "kept count": lambda d: checks.kept_count(d, "m"),
    "span figures": traces.span_figures,
    "trace figures": lambda d: traces.trace_figures(d, "f."),
    "walks": lambda d: "".join(traces.walks(d)),
    "one copy of each span": traces.spans_once,
    "each trace's files": traces.sources,
}


@pytest.mark.parametrize("what", sorted(SHARED))
def test_both_engines_sql_differs_only_in_the_dialect_entries(what: str) -> None:
    def render(d: Dialect) -> str:
        sql = SHARED[what](d)
        return sql if isinstance(sql, str) else " AND ".join(sql)

    duckdb_marked, spark_marked = (render(_marked(d)) for d in DIALECTS)
    # The markers change nothing the engine gets...
    assert _strip(duckdb_marked) == render(DUCKDB)
    assert _strip(spark_marked) == render(SPARK)
    # ...and outside the dialect's entries the two engines' SQL is the same text.
    assert _entries_named(duckdb_marked) == _entries_named(spark_marked)
    # The engines do differ there (else the entries would be needless).
    assert render(DUCKDB) != render(SPARK)


def _render_entry(d: Dialect, name: str) -> list[str]:
    """Every SQL text entry ``name`` of ``d`` renders, with arguments of the right kinds."""
    value = getattr(d, name)
    if isinstance(value, str):
        return [value]
    args: dict[str, tuple[Any, ...]] = {
        "full_match": ("x", "[0-9]+"),
        "struct": ([("a", "1"), ("b", "'x'")],),
        "lambda_": ("x", "x + 1"),
        "count_kept": ("m", lambda key: f"{d.starts_with}({key}, 'energy.')"),
        "all_kept": ("m", lambda key: f"{d.starts_with}({key}, 'energy.')", lambda key, value: f"{value} IS NOT NULL"),
        "is_object": ("a", "m"),
        "number_ok": ("a", "k", "v"),
        "record_ok": (["true", "x = '12'"],),
        "table": ("t", "SELECT 1"),
        "walk_start": (["f.k", "f.pk"],),
        "walk_attributes": ("attrs", '{"energy.joules": "JSON"}'),
    }
    return [value(*args.get(name, ("x",)))]


@pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.name)
def test_every_dialect_entry_renders(d: Dialect) -> None:
    for field in dataclasses.fields(Dialect):
        if field.name == "name":
            continue
        rendered = _render_entry(d, field.name)
        assert all(isinstance(text, str) and text.strip() for text in rendered), field.name


def test_duckdb_runs_every_entry_it_renders() -> None:
    duckdb = pytest.importorskip("duckdb")
    from otel_joules.report.sql.checks import DUCKDB_MACROS

    con = duckdb.connect(":memory:")
    for macro in DUCKDB_MACROS:
        con.execute(macro)
    scalar = "SELECT {} FROM (SELECT '12' AS x, '12' AS k, json('5') AS v, '{{\"energy.a\": 1}}' AS a, " \
             "CAST(json('{{\"energy.a\": 1}}') AS MAP(VARCHAR, JSON)) AS m, json('{{}}') AS j, 0 AS start_ns, " \
             "'s' AS span_id, {} AS attrs_parsed)"
    for field in dataclasses.fields(Dialect):
        if field.name in (
            "name", "starts_with", "ends_with", "min_by", "walk_number", "walk_text", "lambda_", "spans_with_files",
            "sorted_set", "row_id", "read_order", "span_kept",
        ) or (field.name == "table" or field.name.startswith("walk_")):
            continue
        for text in _render_entry(DUCKDB, field.name):
            if text:
                con.execute(scalar.format(text, "NULL")).fetchall()
    # The aggregate and the FROM clause, in place: a trace's files, once each, in index order.
    con.execute("CREATE TABLE files AS SELECT * FROM (VALUES ('p', 2), ('q', 0)) v(path, file_idx)")
    con.execute("CREATE TABLE spans AS SELECT * FROM (VALUES ('t', 'p'), ('t', 'q'), ('t', 'p'), ('u', 'p')) v(trace_id, path)")
    assert con.execute(f"SELECT s.trace_id, {DUCKDB.sorted_set('file_idx')} FROM {DUCKDB.spans_with_files} "
                       "GROUP BY s.trace_id ORDER BY 1").fetchall() == [("t", [0, 2]), ("u", [2])]
    # The names and the walks' reads, in place.
    con.execute("SELECT starts_with('ab', 'a'), ends_with('ab', 'b'), arg_min(1, 2), list_transform([1], lambda x: x + 1)")
    walk = "SELECT {} FROM (SELECT json_transform('{{\"energy.joules\": 2}}', '{{\"energy.joules\": \"JSON\", \"training.rank\": \"JSON\"}}') AS a)"
    assert con.execute(walk.format(DUCKDB.walk_number("energy.joules"))).fetchone() == (2.0,)
    assert con.execute(walk.format(DUCKDB.walk_text("training.rank"))).fetchone() == (None,)
    # The walks' entries, in the walks over a trace of a span nested under its parent's share and a parent loop.
    con.execute("CREATE TABLE d AS SELECT * FROM (VALUES (1, 't', 'a', NULL, 1.0, NULL, NULL), "
                "(2, 't', 'b', 'a', 1.0, NULL, NULL), (3, 't', 'c', 'd', 1.0, NULL, NULL), "
                "(4, 't', 'd', 'c', 1.0, NULL, NULL)) v(k, trace_id, span_id, parent_span_id, eaj, ej, own_rank)")
    for statement in traces.walks(DUCKDB):
        con.execute(statement)
    assert sorted(con.execute("SELECT k FROM nested_attributed").fetchall()) == [(2,), (3,), (4,)]


def _python_takes(path: Path) -> bool:
    inputs = read_inputs([path])
    assert inputs.spans and inputs.spans[0].span_id == "b" * 16, "the good first record is read"
    return len(inputs.spans) == 2


def verdicts(store: Any, folder: Path, fmt: str, engine: str) -> list[tuple[str, bool, bool]]:
    """(case, Python takes it, the engine's SQL takes it) for every case, wherever the two differ beyond the case's
    known strictness; [] when they all agree."""
    wrong = []
    for case in CASES:
        path = write_case(folder, case)
        index = store.register(str(path))
        sql = store.load(fmt, [(index, str(path))])[index] is not None
        python = _python_takes(path)
        expected_sql = python and engine not in case.stricter
        if sql != expected_sql or (engine in case.stricter and not python):
            wrong.append((case.label, python, sql))
    return wrong


def csv_verdicts(store: Any, folder: Path, engine: str) -> list[tuple[str, bool, bool]]:
    """(case, Python takes it, the engine's SQL takes it) for every case written as our CSV where the SQL takes a
    record Python rejects, or the two differ in a case not known to be stricter in SQL; [] when none."""
    wrong = []
    for case in CASES:
        path = write_csv_case(folder, case)
        index = store.register(str(path))
        sql = store.load(FORMAT_CSV, [(index, str(path))], CSV_HEADER, CORE_FIELDS)[index] is not None
        python = _python_takes(path)
        if (sql and not python) or (sql != python and engine not in case.stricter):
            wrong.append((case.label, python, sql))
    return wrong


def test_duckdb_sql_judges_csv_records_as_the_python_reader(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    from otel_joules.report.sql import SpanStore

    with SpanStore() as store:
        assert csv_verdicts(store, tmp_path, "duckdb") == []


def test_duckdb_sql_judges_records_as_the_python_reader(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    from otel_joules.report.sql import FORMAT_JSONL, SpanStore

    with SpanStore() as store:
        assert verdicts(store, tmp_path, FORMAT_JSONL, "duckdb") == []


def test_the_cases_hold_good_and_bad_records() -> None:
    # Both kinds, or agreement would prove nothing.
    labels = {case.label for case in CASES}
    assert {"good", "trace id not hex", "joules NaN"} <= labels
    assert any(not case.stricter for case in CASES if "not" in case.label)


def test_a_case_is_one_record(tmp_path: Path) -> None:
    for case in CASES:
        assert case.line.count("\n") == 0
        assert isinstance(case, Case)
