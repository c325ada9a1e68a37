"""``otel-joules report --engine spark``: the report's aggregation on a Spark session.

:class:`SparkSpanStore` is :class:`~otel_joules.report.sql.SpanStore` on Spark: the same
interface (``register``, ``load`` of a batch of files of one format, ``add_spans``, ``traces``;
and ``load_file`` for one file), so :func:`~otel_joules.report.readers.read_inputs` and
:mod:`otel_joules.report.trace_runs` run unchanged and the totals are the same floats. Each
batch of span files is read by Spark's own readers (``text`` for JSON lines, ``csv``,
``parquet``) in one query, checked by the record checks of :mod:`otel_joules.report.sql.checks`
rendered for Spark (the same definitions DuckDB's are rendered from); a file with a record failing a check, and an OTLP/JSON file, go to the Python line
reader, whose records are handed to Spark. Duplicates, nesting (recursive CTEs, Spark 4.1 or newer), roots and per-trace figures
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

from otel_joules.exporters.csv_exporter import attributes_column_index
from otel_joules.exporters.records import CORE_FIELDS
from otel_joules.report.model import ReportError, SpanRow
from otel_joules.report.sql import (
    FORMAT_CSV,
    FORMAT_JSONL,
    FORMAT_OTLP,
    FORMAT_PARQUET,
    SPARK_AGGREGATE,
    SPARK_SPAN_COLUMNS,
    SPARK_SPAN_SCHEMA,
    SPARK_TRACES,
    TraceSpans,
    json_safe,
    spark_csv_select,
    spark_jsonl_select,
    spark_parquet_select,
    trace_spans,
)

#: What to install when pyspark is missing.
SPARK_INSTALL_HINT = "otel-joules report --engine spark needs pyspark (and Java 17+): pip install 'otel-joules[spark]'"
#: The master of the session made when none is configured.
DEFAULT_MASTER = "local[2]"
#: The driver's heap in local mode (Spark's own default, 1g, is the whole of a local session: planning the report's
#: statements and their cached tables came within reach of it on a 2-core box).
DEFAULT_DRIVER_MEMORY = "2g"
#: The engines ``otel-joules report --engine`` takes.
ENGINES = ("duckdb", "spark")

_SPAN_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in SPARK_SPAN_SCHEMA)


def spark_session() -> Any:
    """The configured Spark session, else a local ``local[2]`` one; :class:`ReportError` without pyspark or Java."""
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError:
        raise ReportError(SPARK_INSTALL_HINT) from None
    builder = SparkSession.builder.appName("otel-joules report")
    try:
        conf = SparkConf()
        if not conf.contains("spark.master"):
            # Local mode: as many shuffle partitions as threads (Spark's 200 would be 200 tasks per join).
            builder = builder.master(DEFAULT_MASTER).config("spark.sql.shuffle.partitions", "2")
            builder = builder.config("spark.ui.enabled", "false")
            if not conf.contains("spark.driver.memory"):
                builder = builder.config("spark.driver.memory", DEFAULT_DRIVER_MEMORY)
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a JVM that cannot start, a bad master: Py4J's or Spark's error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReportError(f"cannot start Spark ({first}); --engine spark needs Java 17 or newer on PATH or JAVA_HOME") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def is_uri(path: str) -> bool:
    """Whether ``path`` is a Hadoop file system URI (``hdfs://...``, ``file://...``) rather than a local path."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isalnum()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


class SparkSpanStore:
    """The spans of a report in Spark (module docstring); the interface of :class:`~otel_joules.report.sql.SpanStore`.

    ``session``: a Spark session to use (and leave running); by default :func:`spark_session`'s,
    stopped by :meth:`close`.
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
        # What the aggregation reads: each load's kept rows, each Python-read file's spans.
        self._frames: list[Any] = []
        # Spans the Python reader handed over per file so far (their places in the file).
        self._taken: dict[int, int] = {}
        self._loads = 0
        self._bad: dict[int, int] = {}
        self._unreadable: dict[int, str] = {}

    def close(self) -> None:
        """Drop the cached data; stop the session if this store started it."""
        try:
            self._spark.catalog.clearCache()
        finally:
            if self._owns:
                self._base.stop()

    def __enter__(self) -> "SparkSpanStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, path: str) -> int:
        """Number the span file ``path`` (in the order files are found: the order spans are taken in)."""
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
        return reader.text(path)

    def load(
        self, fmt: str, files: Sequence[tuple[int, str]], header: Sequence[str] = (), core: Sequence[str] = ()
    ) -> dict[int, int | None]:
        """Load registered files of one format in one Spark query (as :meth:`~otel_joules.report.sql.SpanStore.load`).

        Each file's number of spans, or None: the Python reader reads it (OTLP/JSON always; a file with a
        record failing a check). Parquet files (and files at a URI) are always taken: an unreadable one is said
        by :meth:`unreadable`, records failing a check are left out and counted by :meth:`bad_records`.
        """
        counts: dict[int, int | None] = {index: None for index, _ in files}
        if not files or fmt == FORMAT_OTLP:
            return counts
        from pyspark.sql.functions import col, count as count_, lit, sum as sum_, when

        try:
            raw = None
            for index, path in files:
                one = self._read(path, fmt, len(header)).withColumn("oj_file", lit(index))
                raw = one if raw is None else raw.unionByName(one)
            view = f"{self._prefix}_g{self._loads}"
            self._loads += 1
            raw.createOrReplaceTempView(view)  # type: ignore[union-attr]
            if fmt == FORMAT_JSONL:
                select = spark_jsonl_select(view, "oj_file")
            elif fmt == FORMAT_CSV:
                select = spark_csv_select(view, "oj_file", header, core)
            elif fmt == FORMAT_PARQUET:
                select = spark_parquet_select(view, "oj_file")
            else:
                raise ValueError(f"unknown span format {fmt!r}")
            # Read and checked once, in the job that counts: the aggregation scans the cache, not the files again.
            frame = self._spark.sql(select).cache()
            rows = frame.groupBy("file_idx").agg(
                count_("*").alias("total"), sum_(when(~col("ok"), 1).otherwise(0)).alias("bad")
            ).select("file_idx", "total", "bad").collect()
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 -- Spark's AnalysisException or a Py4J error
            if len(files) > 1:
                # One file Spark cannot read fails the whole query: halve until it is alone.
                half = len(files) // 2
                counts.update(self.load(fmt, files[:half], header, core))
                counts.update(self.load(fmt, files[half:], header, core))
                return counts
            index, path = files[0]
            if fmt == FORMAT_PARQUET or is_uri(path):
                self._unreadable[index] = f"is not a readable {fmt} span file for Spark: {_first_line(exc)}"
                counts[index] = 0
            return counts
        found = {int(row[0]): (int(row[1]), int(row[2] or 0)) for row in rows}
        taken = []
        for index, path in files:
            total, bad = found.get(index, (0, 0))
            if fmt == FORMAT_PARQUET or is_uri(path):
                self._bad[index] = bad
                counts[index] = total - bad
                taken.append(index)
            elif not bad:
                counts[index] = total
                taken.append(index)
        if taken:
            self._frames.append(frame.where(f"ok AND file_idx IN ({', '.join(map(str, taken))})"))
        return counts

    def unreadable(self, index: int) -> str | None:
        """Why the registered Parquet file (or file at a URI) ``index`` could not be read; None if it was."""
        return self._unreadable.get(index)

    def bad_records(self, index: int) -> int:
        """How many records of the registered Parquet file (or file at a URI) ``index`` failed a check."""
        return self._bad.get(index, 0)

    def load_file(self, path: str, fmt: str, header: Sequence[str] = (), core: Sequence[str] = ()) -> int | None:
        """One file: :meth:`register` then :meth:`load`; :class:`ReportError` for an unreadable Parquet file."""
        index = self.register(path)
        loaded = self.load(fmt, [(index, path)], header, core)[index]
        problem = self.unreadable(index)
        if problem is not None:
            raise ReportError(problem)
        return loaded

    def bad_parquet_records(self, path: str) -> int:
        """:meth:`bad_records` of the file last registered as ``path``."""
        indices = [i for i, p in enumerate(self._files) if p == path]
        return self.bad_records(indices[-1]) if indices else 0

    def add_spans(self, file: int | str, spans: Sequence[SpanRow]) -> None:
        """Load spans the Python reader read from the registered file ``file`` (its number; a path registers it)."""
        index = self.register(file) if isinstance(file, str) else file
        if not spans:
            return
        # A file's spans may come in several batches: their places in the file follow on.
        first = self._taken.get(index, 0)
        self._taken[index] = first + len(spans)
        rows = [
            (
                index, first + position, True, span.trace_id, span.span_id, span.parent_span_id, span.name,
                span.start_unix_nano, span.end_unix_nano, span.service_name,
                json.dumps(json_safe(dict(span.attributes)), allow_nan=False), len(span.attributes),
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
            return read, [(uri, f"cannot be listed by Spark: {_first_line(exc)}")]
        groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, str]]] = {}
        for path in files:
            name = path.rsplit("/", 1)[-1]
            header: tuple[str, ...] = ()
            if name.endswith(".parquet"):
                fmt = FORMAT_PARQUET
            elif name.endswith(".csv"):
                fmt = FORMAT_CSV
                first = self._spark.read.text(path).first()
                header = tuple(next(csv.reader([first[0]]), ())) if first else ()
                if attributes_column_index(header) is None:
                    skipped.append((path, "is not an otel-joules CSV span export (another header)"))
                    continue
            else:
                fmt = FORMAT_JSONL
            groups.setdefault((fmt, header), []).append((self.register(path), path))
        for (fmt, header), items in groups.items():
            counts = self.load(fmt, items, header, CORE_FIELDS if header else ())
            for index, path in items:
                problem = self.unreadable(index)
                if problem is not None:
                    skipped.append((path, problem))
                    continue
                loaded, bad = counts.get(index), self.bad_records(index)
                if loaded:
                    read.append(path)
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
        spans = self._frames[0].select(*SPARK_SPAN_COLUMNS)
        for frame in self._frames[1:]:
            spans = spans.unionByName(frame.select(*SPARK_SPAN_COLUMNS))
        spans.createOrReplaceTempView("spans")
        for statement in SPARK_AGGREGATE:
            self._spark.sql(statement)
        for row in self._spark.sql(SPARK_TRACES).toLocalIterator():
            yield self._trace(tuple(row))

    def _trace(self, row: tuple[Any, ...]) -> TraceSpans:
        spans = (
            (item["span_id"], item["parent"], item["name"], item["start"], item["end"], item["service"], item["attrs"],
             item["file"], *item["flags"])
            for item in row[9] or ()
        )
        return trace_spans(self._files, row[:9], spans)
