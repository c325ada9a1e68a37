"""The report's DuckDB store: span files read by DuckDB's own readers, checked, deduplicated, nested and summed per trace.

The report's engine (``otel-joules report``; needs the ``[report]`` extra, ``duckdb``). Python
finds the files and tells their formats apart (:mod:`otel_joules.report.readers`, which holds
the filesystem checks: FIFOs, device links, link loops, unreadable folders); each span file is
handed here and read by DuckDB (``read_ndjson_objects`` for JSON lines, and for OTLP/JSON once
:func:`~otel_joules.report.otlp_files.flatten_otlp` has staged its spans as JSON lines, one request line at a
time; ``read_csv`` for our CSV, ``read_parquet`` for :mod:`otel_joules.exporters.parquet_exporter`'s
files) into one table of spans, which DuckDB keeps within :func:`otel_joules.config.report_memory_limit`
and spills to a private temporary folder (mode 0700, removed by :meth:`SpanStore.close`).

**Checks in SQL** (:mod:`otel_joules.report.sql.checks`, the same rules for Spark). A JSON-lines, CSV or
OTLP file that DuckDB cannot read
(a half-written or foreign line, NUL bytes, text that is not UTF-8, a line over DuckDB's bound)
or that holds one record failing a check is not loaded: :meth:`SpanStore.load_file` says so and
the file is read by the line-by-line Python reader instead, which skips each bad record with its
own reason and line number and keeps the good ones (:meth:`SpanStore.add_spans` loads those).
So a damaged file costs its bad lines only, with the same messages as before, whatever DuckDB's
readers would do by default. A Parquet file has no line reader beside it: its records that fail
a check are skipped, counted in one message.

**Per trace in SQL** (:mod:`otel_joules.report.sql.traces`). :meth:`SpanStore.traces` yields one
:class:`~otel_joules.report.sql.traces.TraceSpans` per trace with only the spans a run is made of (the
counted ones and the epochs), in the order the spans were first read, so
:mod:`otel_joules.report.trace_runs` adds them up in the same order as before (the same floats); the
runs a report does not list are added up in SQL (:mod:`otel_joules.report.sql.tail`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from typing import Any, Callable, Iterable, Iterator, Sequence

try:  # at import, as the other optional libraries are: a process may drop its privileges before reporting
    import duckdb
except ImportError:  # the [report] extra is not installed; SpanStore() says what to install
    duckdb = None  # type: ignore[assignment]

from otel_joules.carbon.units import JOULES_PER_KWH
from otel_joules.config import OTEL_JOULES_REPORT_MEMORY_LIMIT, report_memory_limit
from otel_joules.report.model import ReportError, SpanRow
from otel_joules.report.otlp_files import flatten_otlp
from otel_joules.report.sql.checks import (
    DUCKDB_MACROS,
    MAX_LINE_BYTES,
    duckdb_csv_select,
    duckdb_jsonl_select,
    duckdb_parquet_select,
)
from otel_joules.report.sql.dialect import literal
from otel_joules.report.sql.tail import (
    EXACT_PARTS,
    TAIL_CARBON,
    TAIL_CHECK,
    TAIL_FIGURES,
    TAIL_NEEDS_FALLBACK,
    TAIL_ROWS,
    TAIL_RUNS,
    TAIL_SHAPES,
    TAIL_SPANS,
    TAIL_TALLY,
    TailTotals,
)
from otel_joules.report.sql.traces import AGGREGATE, FIGURES, TRACES, WITH_ENERGY, TraceSpans, trace_spans

#: The span formats handed to :meth:`SpanStore.load_file`.
FORMAT_JSONL = "jsonl"
FORMAT_CSV = "csv"
FORMAT_OTLP = "otlp"
FORMAT_PARQUET = "parquet"
# OTLP files staged as JSON lines (SpanStore._load_otlp).
_FORMAT_STAGED_OTLP = "otlp-staged"
#: What to install when DuckDB is missing.
INSTALL_HINT = "otel-joules report needs DuckDB: pip install 'otel-joules[report]'"
_INT64_MAX = 2**63 - 1
_log = logging.getLogger(__name__)


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


def json_safe(value: object) -> object:
    """Non-finite floats as the strings our exports write for them (record_checks reads them back as floats)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
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
            for macro in DUCKDB_MACROS:
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

    @property
    def connection(self) -> Any:
        """The DuckDB connection holding the ``spans`` table, for queries over the loaded spans."""
        return self._con

    @property
    def files(self) -> tuple[str, ...]:
        """The registered span files, in the order spans are taken in (a file registered twice is listed twice)."""
        return tuple(self._files)

    @property
    def spill_dir(self) -> str:
        """This store's private folder (0700, removed by :meth:`close`), for staging files next to DuckDB's spill."""
        return self._spill

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
            select = duckdb_jsonl_select(paths)
        elif fmt == _FORMAT_STAGED_OTLP:
            staging = {self._staged[path]: path for path in paths}
            renamed = " ".join(f"WHEN {literal(s)} THEN {literal(p)}" for s, p in staging.items())
            select = f"SELECT CASE filename {renamed} END, * EXCLUDE (filename) FROM ({duckdb_jsonl_select(list(staging))})"
        elif fmt == FORMAT_CSV:
            select = duckdb_csv_select(paths, header, core)
        elif fmt == FORMAT_PARQUET:
            select = duckdb_parquet_select(paths)
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
                            "attrs": json.dumps(json_safe(dict(span.attributes)), allow_nan=False),
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
SELECT {literal(path)}, true, trace_id, span_id, parent_span_id, name, start_ns, end_ns, service_name,
       CAST(attrs AS JSON), n_attrs
FROM read_json({literal(staging)}, format = 'newline_delimited', maximum_object_size = {max(longest + 1, 1 << 20)},
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
        for statement in (*AGGREGATE, *FIGURES):
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
        return {row[0] for row in self._con.execute(WITH_ENERGY, [ids]).fetchall()}

    def traces(self, after: tuple[int, str] | None = None, limit: int | None = None) -> Iterator[TraceSpans]:
        """The traces with energy, aggregated in SQL (module docstring); in report order: by first start (unknown: 0),
        then trace id (:func:`otel_joules.report.trace_runs.run_order`), streamed; ``after``: only those after this
        place in that order; ``limit``: at most that many."""
        self._aggregate()
        start, trace = after if after is not None else (-1, "")
        result = self._run(TRACES, {"start": start, "trace": trace, "limit": _INT64_MAX if limit is None else limit})
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
        """What the traces with energy after ``after`` (in report order; None: all) add up to, in SQL (the statements of :mod:`otel_joules.report.sql.tail`).

        ``pue``: ``--pue``; ``override``: the intensity of ``--intensity``/``--country``; ``fallback``: the fallback
        intensity, called only when a run needs it.
        """
        self._aggregate()
        start, trace = after if after is not None else (-1, "")
        con = self._con
        self._run(TAIL_SPANS, {"start": start, "trace": trace})
        self._run(TAIL_SHAPES)
        self._run(TAIL_RUNS)
        carbon = {"pue": pue, "override": override}
        needs = con.execute(TAIL_NEEDS_FALLBACK, carbon).fetchone()[0]
        self._run(TAIL_CARBON, {**carbon, "fallback": fallback() if needs else None, "joules_per_kwh": JOULES_PER_KWH})
        runs, bad, *figures = con.execute(TAIL_CHECK).fetchone()
        largest, counts = figures[0::2], dict(zip(TAIL_FIGURES, figures[1::2]))
        exact = {}
        for column in TAIL_FIGURES:
            parts = con.execute(EXACT_PARTS.format(column=column)).fetchall()
            bad += sum(int(row[2]) for row in parts)
            exact[column] = [(int(e), int(m)) for e, m, _ in parts]
        # A total could overflow only past 1e300 (the values are not negative): below it, no run needs a check.
        if bad or runs * max(largest, default=0.0) >= 1e300:
            return TailTotals(runs, {}, counts, [], self._tail_rows())
        return TailTotals(runs, exact, counts, con.execute(TAIL_TALLY).fetchall())

    def _tail_rows(self) -> Iterator[tuple[Any, ...]]:
        result = self._con.execute(TAIL_ROWS)
        while rows := result.fetchmany(4096):
            for trace_id, file_idx, *rest in rows:
                yield (trace_id, self._files[file_idx], *rest)

    def _trace(self, figures: tuple[Any, ...], spans: list[tuple[Any, ...]]) -> TraceSpans:
        return trace_spans(self._files, figures, spans)
