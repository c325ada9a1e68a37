"""Parquet span exporter: one row per span, in rotated files that are complete once they appear.

Schema (what :class:`ParquetSpanExporter` writes and what a reader may rely on; the same
fields as the CSV and JSON-lines exports, :mod:`otel_joules.exporters.records`):

=========================  ==========================  =================================================
column                     Parquet / Arrow type        value
=========================  ==========================  =================================================
``name``                   string, not null            the span's name
``trace_id``               string, not null            32 lowercase hex digits
``span_id``                string, not null            16 lowercase hex digits
``parent_span_id``         string                      16 hex digits; null for a root span
``start_time``             timestamp(us, UTC)          the start, to the microsecond (exact: below)
``end_time``               timestamp(us, UTC)          the end, to the microsecond
``start_time_unix_nano``   int64                       exact nanoseconds since the epoch
``end_time_unix_nano``     int64                       the same, for the end
``duration_s``             double                      the measured seconds (records.py)
``service_name``           string                      ``service.name``; null when absent
``energy.joules``          double                      the attribute (NaN, infinities as such); null where
                                                       absent or not a number
``energy.watts``           double                      the same
``energy.source``          string                      the same (null where absent)
``energy.co2eq.grams``     double                      the same
``attributes``             string, not null            every exported attribute as one JSON object,
                                                       exactly the CSV export's ``attributes`` cell
``resource``               string, not null            the exported resource attributes (host, user,
                                                       job) as one JSON object, exactly the CSV
                                                       export's ``resource`` cell
=========================  ==========================  =================================================

Why this layout: the four typed energy columns are the CSV export's default
``energy_columns`` (:data:`~otel_joules.exporters.csv_exporter.DEFAULT_ENERGY_COLUMNS`),
so ``SELECT sum("energy.joules")`` needs no JSON; every other attribute stays in the
``attributes`` JSON text (keys sorted, compact, non-finite numbers as ``"NaN"``,
``"Infinity"``, ``"-Infinity"``, text that is not valid Unicode (a lone surrogate) as
U+FFFD), which DuckDB (``json_extract``, ``->>``) and Spark (``get_json_object``,
``from_json``) read directly. Typed columns per attribute would give every file its own
schema (a span kind adds ``energy.nvidia_gpu_0.joules``), which Spark reads only with
``mergeSchema`` and DuckDB only with ``union_by_name``; one JSON column keeps every file's
schema identical. Times are microsecond timestamps because Spark cannot read Parquet's
nanosecond timestamps; the exact nanoseconds are the ``*_unix_nano`` columns.
Compression zstd; the file's key-value metadata has ``otel_joules.schema = span_records/2``.
Version 1 files have no ``resource`` column: readers take their resource as empty (no host,
user or job), and DuckDB reads both versions together with ``union_by_name``.

Files: ``ParquetSpanExporter("out/spans.parquet")`` writes ``out/spans-<UTC
start>-<pid>-<n>.parquet`` (``spans-20261203T182658123456Z-4242-1.parquet``: sorted by
the time it was opened); a folder as the path writes ``spans-...parquet`` inside it. The
folder must exist. A glob such as ``out/spans-*.parquet``, or the folder itself, reads them
all (``otel-joules report out/``, DuckDB ``read_parquet('out/*.parquet')``, Spark
``spark.read.parquet('out/')``).

A closed file is complete: the file being filled is not a Parquet file yet. Each
``export`` appends its records to the open file's journal, ``.<final name>.inprogress``
(JSON lines, the :mod:`~otel_joules.exporters.jsonl_exporter` format, written and
``fdatasync``\\ ed as the other file exporters write: :mod:`otel_joules.exporters._files`),
so an exported span survives a crash. When the file is closed, its journal is written as
Parquet to ``.<final name>.tmp``, ``fsync``\\ ed, renamed to the final name (the folder
``fsync``\\ ed too) and removed: a reader never sees a file without its footer, and files
starting with ``.`` are skipped by DuckDB's and Spark's globs and by Hadoop-style readers.

The open file is closed and the next one opened (rotation):

- when its journal reaches ``max_bytes`` (keyword, or ``OTEL_JOULES_PARQUET_MAX_BYTES``;
  default 64 MiB of JSON lines, typically a Parquet file 5-10x smaller; 0: no size bound);
- at the first export, ``force_flush()`` or ``rotate()`` at least ``max_age_s`` after it
  was opened (``OTEL_JOULES_PARQUET_MAX_AGE_S``; default 3600 s; 0: no time bound);
- by :meth:`ParquetSpanExporter.rotate` (closes the open file now) and ``shutdown()``.

A journal left by a process that ended without ``shutdown()`` (killed, power loss) is
written as its Parquet file by the next exporter given the same path (each journal is
held with ``flock`` while its exporter lives, so a live one's is never touched), with one
warning. If writing the Parquet file fails (disk full), the journal stays and keeps
being appended to, with one error; the next rotation tries again.

Needs pyarrow: ``pip install 'otel-joules[parquet]'``
(:class:`~otel_joules.errors.MissingExtraError` at construction otherwise).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

from otel_joules.config import Settings
from otel_joules.errors import ConfigurationError
from otel_joules.exporters._files import ExistingFile, FileSpanExporter
from otel_joules.exporters._retrying import DEFAULT_MAX_PENDING_SPANS
from otel_joules.exporters.csv_exporter import ATTRIBUTES_COLUMN, DEFAULT_ENERGY_COLUMNS, RESOURCE_COLUMN
from otel_joules.errors import import_extra
from otel_joules.exporters.errors import ExporterPathError
from otel_joules.exporters.jsonl_exporter import record_json_line
from otel_joules.exporters.records import CORE_FIELDS, SpanRecord, utf8, valid_text
from otel_joules.exporters.safe_open import create_new
from otel_joules.semconv import ENERGY_SOURCE

_LOGGER = logging.getLogger("otel_joules.exporters")

#: The files' ``otel_joules.schema`` metadata value: this module's schema, version 2 (version 1: no ``resource``).
SCHEMA_VERSION = "span_records/2"
#: Suffix of a file's journal while it is open (with a leading ``.`` on the name).
INPROGRESS_SUFFIX = ".inprogress"
#: Suffix of a Parquet file being written from its journal.
TMP_SUFFIX = ".tmp"
#: The stem used when the exporter's path is a folder.
DEFAULT_STEM = "spans"
_PARQUET = ".parquet"
#: Journal lines turned into one row group at a time: bounds the memory a rotation needs.
ROWS_PER_GROUP = 65_536


def _pyarrow() -> tuple[Any, Any]:
    feature = "the Parquet exporter"
    return import_extra("pyarrow", feature, "parquet"), import_extra("pyarrow.parquet", feature, "parquet")


def parquet_schema() -> Any:
    """The Arrow schema of every file (this module's docstring); needs pyarrow."""
    pa, _ = _pyarrow()
    text = pa.string()
    stamp = pa.timestamp("us", tz="UTC")
    fields = [
        pa.field("name", text, nullable=False),
        pa.field("trace_id", text, nullable=False),
        pa.field("span_id", text, nullable=False),
        pa.field("parent_span_id", text),
        pa.field("start_time", stamp),
        pa.field("end_time", stamp),
        pa.field("start_time_unix_nano", pa.int64()),
        pa.field("end_time_unix_nano", pa.int64()),
        pa.field("duration_s", pa.float64()),
        pa.field("service_name", text),
    ]
    for column in DEFAULT_ENERGY_COLUMNS:
        fields.append(pa.field(column, text if column == ENERGY_SOURCE else pa.float64()))
    fields.append(pa.field(ATTRIBUTES_COLUMN, text, nullable=False))
    fields.append(pa.field(RESOURCE_COLUMN, text, nullable=False))
    assert tuple(f.name for f in fields[: len(CORE_FIELDS)]) == CORE_FIELDS
    return pa.schema(fields, metadata={"otel_joules.schema": SCHEMA_VERSION})


def _valid_text(value: str | None) -> str | None:
    # A lone surrogate (possible in a Python str, not in UTF-8) becomes U+FFFD, as in every export.
    return None if value is None else valid_text(value)


#: How the JSON formats spell non-finite floats (records.json_value): NaN and infinities again in a double column.
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _number(value: object) -> float | None:
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _columns(lines: list[dict[str, Any]]) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {
        name: [] for name in (*CORE_FIELDS, *DEFAULT_ENERGY_COLUMNS, ATTRIBUTES_COLUMN, RESOURCE_COLUMN)
    }
    for line in lines:
        attributes = line.get("attributes") or {}
        for name in ("name", "trace_id", "span_id", "parent_span_id", "service_name"):
            columns[name].append(_valid_text(line.get(name)))
        for name in ("start_time_unix_nano", "end_time_unix_nano"):
            value = line.get(name)
            columns[name].append(value if isinstance(value, int) and not isinstance(value, bool) else None)
        columns["start_time"].append(None if columns["start_time_unix_nano"][-1] is None else columns["start_time_unix_nano"][-1] // 1000)
        columns["end_time"].append(None if columns["end_time_unix_nano"][-1] is None else columns["end_time_unix_nano"][-1] // 1000)
        columns["duration_s"].append(_number(line.get("duration_s")))
        for name in DEFAULT_ENERGY_COLUMNS:
            value = attributes.get(name)
            if name == ENERGY_SOURCE:
                columns[name].append(_valid_text(value) if isinstance(value, str) else None)
            else:
                columns[name].append(_number(value))
        for column, value in ((ATTRIBUTES_COLUMN, attributes), (RESOURCE_COLUMN, line.get("resource") or {})):
            columns[column].append(_valid_text(json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)))
    return columns


def _journal_lines(fd: int) -> Iterator[dict[str, Any]]:
    """The records of a journal, read through ``fd`` from its start; lines that do not parse are skipped."""
    skipped = 0
    with os.fdopen(os.dup(fd), "rb") as handle:
        handle.seek(0)
        for raw in handle:
            try:
                line = json.loads(raw.decode("utf-8", "surrogateescape"))
            except ValueError:
                skipped += 1
                continue
            if isinstance(line, dict) and isinstance(line.get("trace_id"), str):
                yield line
            elif raw.strip():
                skipped += 1
    if skipped:
        _LOGGER.warning("a Parquet exporter's journal held %d unreadable line(s) (a power loss?): skipped", skipped)


def _write_parquet(journal_fd: int, final: str) -> int:
    """Write the journal behind ``journal_fd`` as the Parquet file ``final`` (through its temp name): rows written."""
    pa, pq = _pyarrow()
    schema = parquet_schema()
    folder, name = os.path.split(final)
    tmp = os.path.join(folder, "." + name + TMP_SUFFIX)
    try:
        os.unlink(tmp)  # a crash's leftover: what it held is still in the journal
    except FileNotFoundError:
        pass
    fd = create_new(tmp)
    rows = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            writer = pq.ParquetWriter(handle, schema, compression="zstd")
            try:
                chunk: list[dict[str, Any]] = []
                for line in _journal_lines(journal_fd):
                    chunk.append(line)
                    if len(chunk) >= ROWS_PER_GROUP:
                        writer.write_table(pa.Table.from_pydict(_columns(chunk), schema=schema))
                        rows += len(chunk)
                        chunk = []
                if chunk or rows == 0:
                    writer.write_table(pa.Table.from_pydict(_columns(chunk), schema=schema))
                    rows += len(chunk)
            finally:
                writer.close()
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(folder)
    return rows


def _sync_folder(folder: str) -> None:
    # The rename must reach the disk too, or a power loss can bring back the journal alone.
    try:
        fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ParquetFileNaming:
    """Where the files of one exporter path go, and what they are called."""

    folder: str
    stem: str

    @classmethod
    def of(cls, path: str) -> "ParquetFileNaming":
        if os.path.isdir(path) or path.endswith(os.sep):
            return cls(path.rstrip(os.sep) or os.sep, DEFAULT_STEM)
        folder, name = os.path.split(path)
        stem = name[: -len(_PARQUET)] if name.endswith(_PARQUET) and len(name) > len(_PARQUET) else name
        return cls(folder or ".", stem)

    def final_name(self, opened_unix_s: float, sequence: int) -> str:
        seconds = int(opened_unix_s)
        micros = int((opened_unix_s - seconds) * 1_000_000)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{micros:06d}Z"
        return f"{self.stem}-{stamp}-{os.getpid()}-{sequence}{_PARQUET}"

    def journal_path(self, final_name: str) -> str:
        return os.path.join(self.folder, "." + final_name + INPROGRESS_SUFFIX)

    def journals(self) -> list[str]:
        """Journals of this path in the folder (any process's), oldest first."""
        pattern = re.compile(r"\." + re.escape(self.stem) + r"-\d{8}T\d{12}Z-\d+-\d+" + re.escape(_PARQUET + INPROGRESS_SUFFIX))
        try:
            names = os.listdir(self.folder)
        except OSError:
            return []
        return [os.path.join(self.folder, n) for n in sorted(names) if pattern.fullmatch(n)]


def _final_of(journal: str) -> str:
    folder, name = os.path.split(journal)
    return os.path.join(folder, name[1 : -len(INPROGRESS_SUFFIX)])


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _recover(naming: ParquetFileNaming) -> None:
    """Write the journals that no live exporter holds (their process ended without shutdown) as Parquet files."""
    for journal in naming.journals():
        try:
            fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not _lock(fd):
                continue  # a live exporter's open file
            final = _final_of(journal)
            if os.path.lexists(final):
                # Renamed before the process ended: the file is complete, the journal a leftover.
                os.unlink(journal)
                continue
            if os.fstat(fd).st_size == 0:
                os.unlink(journal)
                continue
            rows = _write_parquet(fd, final)
            os.unlink(journal)
            _LOGGER.warning(
                "%s was left open by a process that ended without shutdown(): wrote its %d span record(s) to %s",
                journal,
                rows,
                final,
            )
        except Exception as exc:  # noqa: BLE001 -- one bad leftover must not stop the exporter
            _LOGGER.error("cannot write the leftover journal %s as Parquet: %s; it is kept", journal, exc.strerror or exc)
        finally:
            os.close(fd)


def _check_bound(keyword: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise ConfigurationError(f"{keyword}={value!r} must be a number >= 0 (0: no bound)")
    return float(value)


class ParquetSpanExporter(FileSpanExporter):
    """Write one Parquet row per span to rotated files named after ``path`` (this module's docstring).

    ``ParquetSpanExporter(path, *, max_bytes=None, max_age_s=None, max_pending_spans=10_000)``;
    ``max_bytes`` and ``max_age_s`` default to ``OTEL_JOULES_PARQUET_MAX_BYTES`` and
    ``OTEL_JOULES_PARQUET_MAX_AGE_S`` (64 MiB, 3600 s). Put it behind a
    ``BatchSpanProcessor``::

        provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter("out/spans.parquet")))

    Raises :class:`~otel_joules.errors.MissingExtraError` without pyarrow
    (``pip install 'otel-joules[parquet]'``) and
    :class:`~otel_joules.exporters.errors.ExporterPathError` when the folder cannot be written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = None,
        max_age_s: float | None = None,
        max_pending_spans: int = DEFAULT_MAX_PENDING_SPANS,
    ) -> None:
        _pyarrow()
        try:
            base = os.fspath(path)
        except TypeError:
            raise ConfigurationError(f"path={path!r} must be a file or folder path (str or os.PathLike)") from None
        settings = Settings.from_env()
        self._max_bytes = int(_check_bound("max_bytes", max_bytes, settings.parquet_max_bytes))
        self._max_age_s = _check_bound("max_age_s", max_age_s, settings.parquet_max_age_s)
        self._base = base
        self._naming = ParquetFileNaming.of(base)
        if not os.path.isdir(self._naming.folder):
            raise ExporterPathError(
                f"cannot write Parquet files for {base!r}: the folder {self._naming.folder!r} does not exist; create it first"
            )
        _recover(self._naming)
        self._sequence = 0
        self._closed_files: list[str] = []
        self._retry_rotation_at = 0.0
        self._opened_at = time.monotonic()
        super().__init__(self._next_journal(), max_pending_spans=max_pending_spans)

    @property
    def path(self) -> str:
        """The path this exporter was given (its files are named after it)."""
        return self._base

    @property
    def journal_path(self) -> str:
        """The open file's journal (``.<final name>.inprogress``)."""
        return self._path

    @property
    def closed_files(self) -> list[str]:
        """The complete Parquet files this exporter has written, oldest first."""
        with self._lock:
            return list(self._closed_files)

    def rotate(self) -> str | None:
        """Close the open file now (it becomes a complete Parquet file) and open the next: the file's path, or None if empty."""
        with self._lock:
            if self._shutdown:
                return None
            self._send_pending()
            return self._rotate(reopen=True)

    # FileSpanExporter hooks ----------------------------------------------------------------

    _READ_BACK = True

    def _preamble(self, existing: ExistingFile) -> bytes:
        return b""

    def _encode(self, record: SpanRecord) -> bytes:
        return utf8(record_json_line(record))

    def _open(self) -> None:
        super()._open()
        # Held while this exporter lives, so that another exporter's recovery never takes it.
        _lock(self._fd)

    def _send_pending(self) -> bool:
        if self._fd < 0 and self._pending:
            try:
                self._open()  # the next journal could not be opened at the last rotation
            except ConfigurationError:
                pass
        self._rotate_if_due()
        sent = super()._send_pending()
        self._rotate_if_due()
        return sent

    def _close(self) -> None:
        self._rotate(reopen=False)
        super()._close()

    # Rotation ------------------------------------------------------------------------------

    def _next_journal(self) -> str:
        self._sequence += 1
        self._opened_at = time.monotonic()
        return self._naming.journal_path(self._naming.final_name(time.time(), self._sequence))

    def _journal_bytes(self) -> int:
        try:
            return os.fstat(self._fd).st_size
        except OSError:
            return 0

    def _rotate_if_due(self) -> None:
        now = time.monotonic()
        if now < self._retry_rotation_at:
            return
        too_big = self._max_bytes > 0 and self._journal_bytes() >= self._max_bytes
        too_old = self._max_age_s > 0 and now - self._opened_at >= self._max_age_s
        if too_big or too_old:
            self._rotate(reopen=True)

    def _rotate(self, *, reopen: bool) -> str | None:
        """Write the open journal as its Parquet file and remove it; open the next one if ``reopen``."""
        if self._fd < 0 or self._close_fd is None or not self._close_fd.alive:
            return None
        journal = self._path
        if self._journal_bytes() == 0:
            if not reopen:
                self._unlink_journal(journal)
            else:
                self._opened_at = time.monotonic()
            return None
        final = _final_of(journal)
        try:
            rows = _write_parquet(self._fd, final)
        except Exception as exc:  # an OSError (disk full) or pyarrow's: export must never raise
            # The journal keeps every record; appending goes on and the next rotation retries.
            self._retry_rotation_at = time.monotonic() + 60.0
            _LOGGER.error(
                "cannot write %s as Parquet (%s): its records stay in %s, which is still appended to; "
                "writing it is tried again at the next rotation",
                final,
                exc.strerror or exc,
                journal,
            )
            return None
        self._closed_files.append(final)
        _LOGGER.debug("wrote %d span record(s) to %s", rows, final)
        super()._close()
        self._unlink_journal(journal)
        if reopen:
            self._path = self._next_journal()
            try:
                self._open()
            except ConfigurationError as exc:
                _LOGGER.error("cannot open the next Parquet journal %s: %s", self._path, exc)
                self._fd = -1
        return final

    @staticmethod
    def _unlink_journal(journal: str) -> None:
        try:
            os.unlink(journal)
        except OSError:
            pass
