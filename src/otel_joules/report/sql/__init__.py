"""All of the report's SQL, by job, for DuckDB (the default engine) and Spark (``--engine spark``).

- :mod:`~otel_joules.report.sql.dialect`: the one table of what differs between the engines.
- :mod:`~otel_joules.report.sql.checks`: the record checks, written once, and each engine's readers.
- :mod:`~otel_joules.report.sql.traces`: duplicates, nesting, roots and figures per trace.
- :mod:`~otel_joules.report.sql.tail`: the runs a report does not list, added up in SQL.
- :mod:`~otel_joules.report.sql.store`: :class:`SpanStore`, the spans of a report in DuckDB.
- :mod:`~otel_joules.report.sql.labels`: totals per group (``--by``).
"""

from otel_joules.report.sql.checks import (
    CSV_FIELD_LIMIT,
    MAX_LINE_BYTES,
    SPARK_SPAN_COLUMNS,
    SPARK_SPAN_SCHEMA,
    spark_csv_select,
    spark_jsonl_select,
    spark_parquet_select,
)
from otel_joules.report.sql.dialect import DIALECTS, DUCKDB, SPARK, Dialect
from otel_joules.report.sql.labels import PARQUET_MAGIC, group_rows, groups_parquet_bytes
from otel_joules.report.sql.store import (
    FORMAT_CSV,
    FORMAT_JSONL,
    FORMAT_OTLP,
    FORMAT_PARQUET,
    INSTALL_HINT,
    SpanStore,
    json_safe,
)
from otel_joules.report.sql.tail import TAIL_FIGURES, TailTotals
from otel_joules.report.sql.traces import (
    BASIS_KIND_ATTRIBUTED,
    BASIS_KIND_INTERVAL,
    BASIS_KIND_SELF,
    SPARK_AGGREGATE,
    SPARK_TRACES,
    TraceSpans,
    trace_spans,
)

__all__ = [
    "BASIS_KIND_ATTRIBUTED",
    "BASIS_KIND_INTERVAL",
    "BASIS_KIND_SELF",
    "CSV_FIELD_LIMIT",
    "DIALECTS",
    "DUCKDB",
    "Dialect",
    "FORMAT_CSV",
    "FORMAT_JSONL",
    "FORMAT_OTLP",
    "FORMAT_PARQUET",
    "INSTALL_HINT",
    "MAX_LINE_BYTES",
    "PARQUET_MAGIC",
    "SPARK",
    "SPARK_AGGREGATE",
    "SPARK_SPAN_COLUMNS",
    "SPARK_SPAN_SCHEMA",
    "SPARK_TRACES",
    "SpanStore",
    "TAIL_FIGURES",
    "TailTotals",
    "TraceSpans",
    "group_rows",
    "groups_parquet_bytes",
    "json_safe",
    "spark_csv_select",
    "spark_jsonl_select",
    "spark_parquet_select",
    "trace_spans",
]
