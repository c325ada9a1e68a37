"""CSV span exporter: one row per span, with a header that never changes for a file.

Format (what :class:`CsvSpanExporter` writes and what a reader may rely on):

- UTF-8, no byte-order mark (text that is not valid Unicode, i.e. a lone surrogate,
  is written as U+FFFD), ``,`` separator, rows end in ``\\n`` (not ``\\r\\n``),
  RFC 4180 quoting: a cell containing ``,``, ``"`` or a line break is enclosed in ``"``
  with inner ``"`` doubled; other cells are bare.
- First line: the header. With the default ``energy_columns`` it is exactly::

    name,trace_id,span_id,parent_span_id,start_time,end_time,start_time_unix_nano,end_time_unix_nano,duration_s,service_name,energy.joules,energy.watts,energy.source,energy.co2eq.grams,energy.below_resolution,attributes,resource

  that is the core fields of :mod:`otel_joules.exporters.records` in their order, then
  one column per entry of ``energy_columns``, then ``energy.below_resolution`` (unless
  ``energy_columns`` names it), then ``attributes``, then ``resource``. ``energy_columns`` may
  name any ``energy.*``, ``carbon.*`` or ``training.*`` attribute (e.g. ``carbon.pue``).
- One row per span, in the order the spans were exported. Cells:

  ======================================  ============================================
  ``name``, ``service_name``              the text as is
  ``trace_id``, ``span_id``               32 / 16 lowercase hex digits
  ``parent_span_id``                      16 lowercase hex digits; empty for a root span
  ``start_time``, ``end_time``            ISO 8601 UTC, nanoseconds:
                                          ``2023-11-14T22:13:20.000000000Z``
  ``start_time_unix_nano``, ``end_...``   decimal integer nanoseconds since the epoch
                                          (exact; the ISO cells are the same instants)
  ``duration_s``                          float, Python ``repr`` (shortest text that
                                          reads back to the same double: ``1.5``,
                                          ``0.25``, ``1e-05``)
  ``energy_columns`` columns              the attribute's value: text as is, integers in
                                          decimal, floats as ``duration_s`` (``NaN``,
                                          ``Infinity``, ``-Infinity`` if not finite),
                                          booleans ``true``/``false``, tuples as a JSON
                                          array; empty when the span lacks the attribute
  ``energy.below_resolution``             ``true`` where the span was shorter than a
                                          counter's update period (its figures are
                                          quantised, often ``0.0``), ``false`` for
                                          another span with energy, empty for a span
                                          without ``energy.joules``
  ``attributes``                          a JSON object of **every** ``energy.*``,
                                          ``carbon.*`` and ``training.*`` attribute of
                                          the span, keys sorted (so ``carbon.*`` come
                                          first), compact
                                          (``{"carbon.pue":1.2,"energy.joules":1.5}``),
                                          floats always with a ``.`` or exponent,
                                          non-finite floats as the strings ``"NaN"``,
                                          ``"Infinity"``, ``"-Infinity"``
  ``resource``                            a JSON object, written as ``attributes``, of
                                          the resource attributes that say who ran the
                                          span, where and as which job
                                          (:data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`);
                                          ``{}`` when the resource has none
  ======================================  ============================================

- Empty cell: the value is absent (a root span's parent, a missing attribute).

Domain policy: spans and runs measure different domains (``energy.package_1.joules``
exists on a two-socket host only, GPUs come and go), so the header cannot list them
all. The ``attributes`` JSON column holds every ``energy.*``, ``carbon.*`` and
``training.*`` attribute with its type and is the authoritative record (``otel-joules report`` reads it, not the
other columns); ``energy_columns`` only repeats chosen attributes as their own columns
so a spreadsheet shows them directly (the default names no ``carbon.*`` attribute: pass
e.g. ``(*DEFAULT_ENERGY_COLUMNS, "carbon.pue")`` to see the PUE in its own column). The
header depends on nothing but ``energy_columns``, so every row of a file has the same
layout.

Appending: when the file exists and is not empty, its first line must be the header
this exporter would write; otherwise :class:`CsvHeaderMismatchError` is raised at
construction and the file is left untouched (the message names the
``energy_columns`` that would match). A missing or empty file gets the header at
construction. Exceptions: a file whose header is this one without the last column,
``resource`` (written by an otel-joules from before that column), is appended to in its own
layout, with one warning that its rows cannot say their host, user or job; so is a file without
the ``energy.below_resolution`` column (with one warning that its rows do not flag it there; the
``attributes`` JSON still does). Write failures,
retries and exit behaviour: :mod:`otel_joules.exporters._files`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from typing import Iterable, Sequence

from otel_joules.errors import ConfigurationError
from otel_joules.exporters._files import ExistingFile, FileSpanExporter
from otel_joules.exporters._retrying import DEFAULT_MAX_PENDING_SPANS
from otel_joules.exporters.errors import CsvHeaderMismatchError
from otel_joules.exporters.records import CORE_FIELDS, AttributeValue, SpanRecord, json_value, utf8
from otel_joules.semconv import (
    CARBON_PUE,
    ENERGY_BELOW_RESOLUTION,
    ENERGY_CO2EQ_GRAMS,
    ENERGY_JOULES,
    ENERGY_SOURCE,
    ENERGY_WATTS,
    EXPORTED_ATTRIBUTE_PREFIXES,
)

_log = logging.getLogger("otel_joules")

#: Attributes repeated as their own columns unless ``energy_columns`` says otherwise.
DEFAULT_ENERGY_COLUMNS: tuple[str, ...] = (ENERGY_JOULES, ENERGY_WATTS, ENERGY_SOURCE, ENERGY_CO2EQ_GRAMS)

#: Name of the column with the JSON object of every exported (``energy.*``, ``carbon.*``,
#: ``training.*``) attribute.
ATTRIBUTES_COLUMN = "attributes"
#: Name of the last column, the JSON object of the exported resource attributes (host, user, job).
RESOURCE_COLUMN = "resource"


def csv_header(energy_columns: Sequence[str] = DEFAULT_ENERGY_COLUMNS) -> tuple[str, ...]:
    """The header :class:`CsvSpanExporter` writes for these ``energy_columns``."""
    return (*CORE_FIELDS, *_with_flag(tuple(energy_columns)), ATTRIBUTES_COLUMN, RESOURCE_COLUMN)


def _with_flag(energy_columns: tuple[str, ...]) -> tuple[str, ...]:
    """``energy_columns`` and the below-resolution flag: a 0.0 shown in a row says whether it is a measured zero."""
    return energy_columns if ENERGY_BELOW_RESOLUTION in energy_columns else (*energy_columns, ENERGY_BELOW_RESOLUTION)


def attributes_column_index(header: Sequence[str]) -> int | None:
    """Where the ``attributes`` cell is in ``header`` if this exporter writes it (any ``energy_columns``, with the
    ``resource`` column or from a file before it), else None: how a reader tells our CSV and finds its cells."""
    header = tuple(header)
    if header[: len(CORE_FIELDS)] != CORE_FIELDS:
        return None
    if header[-1:] == (ATTRIBUTES_COLUMN,):
        return len(header) - 1
    if header[-2:] == (ATTRIBUTES_COLUMN, RESOURCE_COLUMN):
        return len(header) - 2
    return None


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _cell(value: AttributeValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        converted = json_value(value)
        return converted if isinstance(converted, str) else repr(converted)
    return _json_text(json_value(value))


def _column_cell(record: SpanRecord, column: str) -> str:
    """One energy column's cell: the flag is ``false``, not empty, on a span with energy that is not below resolution."""
    value = record.attributes.get(column)
    if column == ENERGY_BELOW_RESOLUTION and value is None and ENERGY_JOULES in record.attributes:
        value = False
    return _cell(value)


def _check_energy_columns(energy_columns: Iterable[str]) -> tuple[str, ...]:
    if isinstance(energy_columns, str):
        raise ConfigurationError(f"energy_columns={energy_columns!r} must be a sequence of attribute names, not one string")
    columns = tuple(energy_columns)
    for column in columns:
        if not isinstance(column, str) or not column.startswith(EXPORTED_ATTRIBUTE_PREFIXES):
            names = " or ".join(f"{prefix}*" for prefix in EXPORTED_ATTRIBUTE_PREFIXES)
            raise ConfigurationError(
                f"energy_columns entry {column!r} is not an exported attribute name ({names}) "
                f"such as {ENERGY_JOULES!r} or {CARBON_PUE!r}"
            )
    if len(set(columns)) != len(columns):
        raise ConfigurationError(f"energy_columns={columns!r} names a column twice")
    return columns


class CsvSpanExporter(FileSpanExporter):
    """Append one CSV row per span to ``path`` (format: this module's docstring).

    Put it behind a ``BatchSpanProcessor`` (or ``SimpleSpanProcessor``)::

        provider.add_span_processor(BatchSpanProcessor(CsvSpanExporter("spans.csv")))

    Raises :class:`~otel_joules.exporters.errors.ExporterPathError` when ``path``
    cannot be written and :class:`CsvHeaderMismatchError` when it holds another
    header, both at construction.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        energy_columns: Sequence[str] = DEFAULT_ENERGY_COLUMNS,
        max_pending_spans: int = DEFAULT_MAX_PENDING_SPANS,
    ) -> None:
        self._energy_columns = _with_flag(_check_energy_columns(energy_columns))
        self._header = csv_header(self._energy_columns)
        #: False for a file whose header has no ``resource`` column: its rows are written without one.
        self._with_resource = True
        super().__init__(path, max_pending_spans=max_pending_spans)

    @property
    def header(self) -> tuple[str, ...]:
        """The column names, in file order."""
        return self._header

    def _row_bytes(self, row: Sequence[str]) -> bytes:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(row)
        # A lone surrogate (possible in a Python str, not in UTF-8) becomes U+FFFD instead of failing the batch.
        return utf8(buffer.getvalue())

    def _preamble(self, existing: ExistingFile) -> bytes:
        if existing.size == 0:
            return self._row_bytes(self._header)
        try:
            text = existing.first_line.decode("utf-8-sig")
            found = tuple(next(csv.reader([text]), []))
        except (UnicodeDecodeError, csv.Error):
            found = ()
        if found == self._header:
            return b""
        unflagged = tuple(name for name in self._header if name != ENERGY_BELOW_RESOLUTION)
        if found in (unflagged, unflagged[:-1]):
            self._energy_columns = tuple(c for c in self._energy_columns if c != ENERGY_BELOW_RESOLUTION)
            self._header = unflagged
            _log.warning(
                "otel-joules: %s has no %r column (an older otel-joules wrote it): its new rows are written in its "
                "layout and flag spans below the counters' resolution only in their %r JSON",
                self.path,
                ENERGY_BELOW_RESOLUTION,
                ATTRIBUTES_COLUMN,
            )
            if found == unflagged:
                return b""
        if found == self._header[:-1]:
            self._with_resource = False
            self._header = found
            _log.warning(
                "otel-joules: %s has no %r column (an older otel-joules wrote it): its new rows are written in its "
                "layout and do not say their host, user or job; write to a new file to record them",
                self.path,
                RESOURCE_COLUMN,
            )
            return b""
        hint = "write to a new file"
        attributes_at = attributes_column_index(found)
        if attributes_at is not None and attributes_at > len(CORE_FIELDS):
            columns = tuple(c for c in found[len(CORE_FIELDS):attributes_at] if c != ENERGY_BELOW_RESOLUTION)
            hint += f", or pass energy_columns={columns!r} to append in that file's layout"
        shown = existing.first_line[:300].decode("utf-8", errors="replace")
        raise CsvHeaderMismatchError(
            f"{self.path!r} already starts with the header {shown!r}, not the one this exporter writes "
            f"({','.join(self._header)!r}); appending would mix two layouts in one file, so nothing was "
            f"written: {hint}"
        )

    def _encode(self, record: SpanRecord) -> bytes:
        core = record.core_fields()
        row = [_cell(core[name]) for name in CORE_FIELDS]  # type: ignore[arg-type]
        row.extend(_column_cell(record, column) for column in self._energy_columns)
        row.append(_json_text({key: json_value(value) for key, value in record.attributes.items()}))
        if self._with_resource:
            row.append(_json_text({key: json_value(value) for key, value in record.resource.items()}))
        return self._row_bytes(row)
