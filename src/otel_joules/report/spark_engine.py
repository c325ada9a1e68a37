"""``otel-joules report --engine spark``: the report's aggregation on a Spark session.

:class:`SparkSpanStore` is :class:`~otel_joules.report.sql.SpanStore` on Spark: the same
interface (``load_file``, ``add_spans``, ``traces``), so :func:`~otel_joules.report.readers.read_inputs`
and :mod:`otel_joules.report.trace_runs` run unchanged and the totals are the same floats. Each
span file is read by Spark's own readers (``text`` for JSON lines, ``csv``, ``parquet``) and
checked by the Spark SQL of :mod:`otel_joules.report.sql` (beside DuckDB's); a file with a record
failing a check, and an OTLP/JSON file, go to the Python line reader, whose records are handed
to Spark. Duplicates, nesting (recursive CTEs, Spark 4.1 or newer), roots and per-trace figures
are resolved in Spark SQL; only the spans a run is made of come back to the driver.

The session: the one ``spark-submit`` (or ``pyspark``) configured, else a local one,
``local[2]``. Paths are what Spark can read: local files and folders, or any Hadoop
file system URI (``hdfs://``, ``s3a://``, ...) whose connector is on Spark's class path. A
URI is listed through Hadoop's ``FileSystem`` (recursively; names starting with ``.`` or ``_``
skipped, as Spark does) and each file read by its name: ``*.parquet``, ``*.csv`` (our header),
anything else as JSON lines; records failing a check there are skipped and counted, as in a
Parquet file (there is no local line reader for them).

When to use it: DuckDB (the default) is faster on one machine for anything that fits its
disk; Spark when the exports already live in a cluster's storage or exceed one machine.
"""

from __future__ import annotations

import csv
import json
import uuid
from typing import Any, Iterator, Sequence

from otel_joules.report.model import ReportError, SpanRow
from otel_joules.report.record_checks import checked_attributes
from otel_joules.report.sql import (
    FORMAT_CSV,
    FORMAT_JSONL,
    FORMAT_OTLP,
    FORMAT_PARQUET,
    SPARK_AGGREGATE,
    SPARK_SPAN_COLUMNS,
    SPARK_TRACES,
    TraceSpans,
    _json_safe,
    spark_csv_select,
    spark_jsonl_select,
    spark_parquet_select,
)

#: What to install when pyspark is missing.
SPARK_INSTALL_HINT = "otel-joules report --engine spark needs pyspark (and Java 17+): pip install 'otel-joules[spark]'"
#: The master of the session made when none is configured.
DEFAULT_MASTER = "local[2]"
#: The engines ``otel-joules report --engine`` takes.
ENGINES = ("duckdb", "spark")

_SPAN_SCHEMA = (
    "file_idx INT, mid BIGINT, ok BOOLEAN, trace_id STRING, span_id STRING, parent_span_id STRING, name STRING, "
    "start_ns BIGINT, end_ns BIGINT, service_name STRING, attrs STRING, n_attrs INT"
)


def spark_session() -> Any:
    """The configured Spark session, else a local ``local[2]`` one; :class:`ReportError` without pyspark or Java."""
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError:
        raise ReportError(SPARK_INSTALL_HINT) from None
    builder = SparkSession.builder.appName("otel-joules report")
    try:
        if not SparkConf().contains("spark.master"):
            builder = builder.master(DEFAULT_MASTER)
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "8")
        )
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a JVM that cannot start, a bad master: Py4J's or Spark's error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"cannot start Spark ({first}); --engine spark needs Java 17 or newer on PATH or JAVA_HOME") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def is_uri(path: str) -> bool:
    """Whether ``path`` is a Hadoop file system URI (``hdfs://...``) rather than a local path."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isalnum()


class SparkSpanStore:
    """The spans of a report in Spark (module docstring); the interface of :class:`~otel_joules.report.sql.SpanStore`.

    ``session``: a Spark session to use (and leave running); by default :func:`spark_session`'s,
    stopped by :meth:`close` when this store started it.
    """

    def __init__(self, session: Any = None) -> None:
        self._owns = session is None
        base = spark_session() if session is None else session
        # Its own temp views and SQL settings, on the same Spark context.
        self._spark = base.newSession()
        for key, value in (
            ("spark.sql.mapKeyDedupPolicy", "LAST_WIN"),  # a key twice in attributes: the last, as json.loads
            ("spark.sql.cteRecursionLevelLimit", "10000"),
            ("spark.sql.cteRecursionRowLimit", "-1"),
        ):
            try:
                self._spark.conf.set(key, value)
            except Exception:  # noqa: BLE001 -- a Spark without the setting has no such limit
                pass
        self._base = base
        self._prefix = "oj_" + uuid.uuid4().hex[:8]
        self._files: list[str] = []
        self._frames: list[Any] = []
        self._parquet_bad: dict[str, int] = {}

    def close(self) -> None:
        """Drop the cached views; stop the session if this store started it."""
        try:
            self._spark.catalog.clearCache()
        finally:
            if self._owns:
                self._base.stop()

    def __enter__(self) -> "SparkSpanStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _file_index(self, path: str) -> int:
        self._files.append(path)
        return len(self._files) - 1

    def _read(self, path: str, fmt: str, columns: int = 0) -> Any:
        reader = self._spark.read
        if fmt == FORMAT_PARQUET:
            return reader.parquet(path)
        if fmt == FORMAT_CSV:
            schema = ", ".join(f"c{i} STRING" for i in range(columns)) + ", _corrupt STRING"
            return (
                reader.schema(schema)
                .option("header", "true")
                .option("multiLine", "true")
                .option("quote", '"')
                .option("escape", '"')
                .option("mode", "PERMISSIVE")
                .option("columnNameOfCorruptRecord", "_corrupt")
                .option("maxCharsPerColumn", "-1")
                .csv(path)
            )
        return reader.option("wholetext", "false").text(path)

    def load_file(self, path: str, fmt: str, header: Sequence[str] = (), core: Sequence[str] = ()) -> int | None:
        """Load one file's spans through Spark's readers; how many, or None: read it with the Python reader.

        OTLP/JSON is always left to the Python reader. A Parquet file (or a file at a URI) is always
        loaded; its records failing a check are left out, counted by :meth:`bad_parquet_records`.
        """
        if fmt == FORMAT_OTLP:
            return None
        index = self._file_index(path)
        view = f"{self._prefix}_f{index}"
        try:
            self._read(path, fmt, len(header)).createOrReplaceTempView(view)
            if fmt == FORMAT_JSONL:
                select = spark_jsonl_select(view, index)
            elif fmt == FORMAT_CSV:
                select = spark_csv_select(view, index, header, core)
            elif fmt == FORMAT_PARQUET:
                select = spark_parquet_select(view, index)
            else:
                raise ValueError(f"unknown span format {fmt!r}")
            # Read and checked once: the aggregation scans the checkpoint, not the file again.
            frame = self._spark.sql(select).localCheckpoint()
            total, bad = frame.selectExpr("count(*)", "count_if(NOT ok)").first()
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 -- Spark's AnalysisException, a Py4J error: this file only
            if fmt == FORMAT_PARQUET or is_uri(path):
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ReportError(f"is not a readable {fmt} span file for Spark: {first[:300]}") from None
            return None
        if bad and fmt != FORMAT_PARQUET and not is_uri(path):
            return None
        if bad:
            self._parquet_bad[path] = int(bad)
        self._frames.append(frame.where("ok"))
        return int(total - bad)

    def bad_parquet_records(self, path: str) -> int:
        """How many records of the Parquet file (or file at a URI) ``path`` failed a check and were left out."""
        return self._parquet_bad.get(path, 0)

    def add_spans(self, path: str, spans: Sequence[SpanRow]) -> None:
        """Load spans the Python reader read from ``path`` (a file Spark did not load)."""
        index = self._file_index(path)
        if not spans:
            return
        rows = [
            (
                index, position, True, span.trace_id, span.span_id, span.parent_span_id, span.name,
                span.start_unix_nano, span.end_unix_nano, span.service_name,
                json.dumps(_json_safe(dict(span.attributes)), allow_nan=False), len(span.attributes),
            )
            for position, span in enumerate(spans)
        ]
        self._frames.append(self._spark.createDataFrame(rows, schema=_SPAN_SCHEMA))

    def load_uri(self, uri: str) -> tuple[list[str], list[tuple[str, str]]]:
        """Load every span file under a Hadoop URI: (files read, [(path, why skipped)])."""
        read: list[str] = []
        skipped: list[tuple[str, str]] = []
        try:
            files = self._list(uri)
        except Exception as exc:  # noqa: BLE001 -- Hadoop's FileNotFoundException, an unknown scheme
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return read, [(uri, f"cannot be listed by Spark: {first[:300]}")]
        for path in files:
            name = path.rsplit("/", 1)[-1]
            if name.endswith(".parquet"):
                fmt, header = FORMAT_PARQUET, ()
            elif name.endswith(".csv"):
                fmt = FORMAT_CSV
                first_line = self._spark.read.text(path).first()
                header = tuple(next(csv.reader([first_line[0]]), ())) if first_line else ()
            else:
                fmt, header = FORMAT_JSONL, ()
            try:
                loaded = self.load_file(path, fmt, header, header[:10])
            except ReportError as exc:
                skipped.append((path, str(exc)))
                continue
            if loaded:
                read.append(path)
            bad = self.bad_parquet_records(path)
            if bad:
                skipped.append((path, f"{bad} span record(s) skipped: they fail the report's checks"))
            elif not loaded:
                skipped.append((path, "holds no span"))
        return read, skipped

    def _list(self, uri: str) -> list[str]:
        jvm = self._spark.sparkContext._jvm
        hadoop_path = jvm.org.apache.hadoop.fs.Path(uri)
        fs = hadoop_path.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration())
        root = fs.makeQualified(hadoop_path).toString().rstrip("/")
        found = fs.listFiles(hadoop_path, True)
        paths: list[str] = []
        while found.hasNext():
            path = found.next().getPath().toString()
            below = path[len(root):] if path.startswith(root) else path.rsplit("/", 1)[-1]
            if not any(part.startswith((".", "_")) for part in below.split("/") if part):
                paths.append(path)
        return sorted(paths)

    def traces(self) -> Iterator[TraceSpans]:
        """Every trace, aggregated in Spark SQL (the statements of :mod:`otel_joules.report.sql`)."""
        if not self._frames:
            return
        spans = self._frames[0]
        for frame in self._frames[1:]:
            spans = spans.unionByName(frame)
        spans.select(*SPARK_SPAN_COLUMNS).createOrReplaceTempView("spans")
        for statement in SPARK_AGGREGATE:
            self._spark.sql(statement)
        for row in self._spark.sql(SPARK_TRACES).toLocalIterator():
            yield self._trace(tuple(row))

    def _trace(self, row: tuple[Any, ...]) -> TraceSpans:
        (trace_id, sources, root_name, root_service, first_service, start, end, stepped, longest, spans) = row
        groups: tuple[list[SpanRow], ...] = ([], [], [], [])
        for item in spans or ():
            span = SpanRow(
                trace_id=trace_id,
                span_id=item["span_id"],
                parent_span_id=item["parent"],
                name=item["name"],
                start_unix_nano=item["start"],
                end_unix_nano=item["end"],
                service_name=item["service"],
                attributes=checked_attributes(json.loads(item["attrs"])),
                source=self._files[item["file"]],
            )
            for group, flag in zip(groups, item["flags"]):
                if flag:
                    group.append(span)
        return TraceSpans(
            trace_id=trace_id,
            sources=tuple(self._files[i] for i in sources),
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
