"""An in-memory span exporter that hands its spans back as a pandas DataFrame.

:meth:`DataFrameSpanExporter.dataframe` returns one row per exported span, in export
order, with these columns:

- the core fields of :mod:`otel_joules.exporters.records`, in their order:
  ``name``, ``trace_id``, ``span_id``, ``parent_span_id`` (None for a root span),
  ``start_time`` and ``end_time`` (``datetime64[ns, UTC]``, exact to the nanosecond),
  ``start_time_unix_nano`` and ``end_time_unix_nano`` (integers), ``duration_s``
  (float seconds, measured: see :mod:`otel_joules.exporters.records`), ``service_name``;
- then one column per ``energy.*``, ``carbon.*`` or ``training.*`` attribute seen on any
  collected span, named by the attribute (``carbon.pue``, ``energy.joules``,
  ``energy.package_0.joules``, ...), sorted by name (so ``carbon.*`` columns come first); a span without that
  attribute has NaN/None there. ``energy.below_resolution`` is there whenever a span has ``energy.joules``:
  True where the span was shorter than a counter's update period (its figures are quantised, often 0.0),
  False for another span with energy, None for a span without energy;
- then one column per exported resource attribute seen on any collected span (who ran it, where,
  as which job: ``host.name``, ``service.instance.id``, ``slurm.job.id``, ...;
  :data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`), sorted, None where absent.

Unlike the file formats there is no JSON column: a DataFrame's columns can differ from
one call to the next, so every attribute gets its own column.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_joules._fork import register_fork_hook
from otel_joules.errors import import_extra
from otel_joules.exporters.records import AttributeValue, SpanRecord, span_record
from otel_joules.semconv import ENERGY_BELOW_RESOLUTION, ENERGY_JOULES

if TYPE_CHECKING:
    import pandas as pd


def _value(record: SpanRecord, name: str) -> AttributeValue | None:
    """A span's value in column ``name``: the flag is False, not None, on a span with energy not below resolution."""
    value = record.attributes.get(name)
    if value is None and name == ENERGY_BELOW_RESOLUTION and ENERGY_JOULES in record.attributes:
        return False
    return value


def _pandas() -> Any:
    # Imported when first needed: pandas is an extra (the base install has none), and it takes a
    # noticeable time to import, which a process that only writes CSV should not pay.
    return import_extra("pandas", "DataFrameSpanExporter", "pandas")


class DataFrameSpanExporter(SpanExporter):
    """Collect exported spans in memory; :meth:`dataframe` returns them as a DataFrame.

    Memory grows with every span until :meth:`clear`; meant for notebooks, tests and
    short jobs. After :meth:`shutdown`, new spans are refused (FAILURE) but the
    collected ones stay readable.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Another thread may hold the lock at a fork; the child's copy would stay locked.
        register_fork_hook(self, "_new_lock")
        self._records: list[SpanRecord] = []
        self._shutdown = False

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Keep a record of each span."""
        records = [span_record(span) for span in spans]
        with self._lock:
            if self._shutdown:
                return SpanExportResult.FAILURE
            self._records.extend(records)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing is ever pending: spans are collected when exported."""
        return True

    def shutdown(self) -> None:
        """Refuse further spans; what was collected stays available."""
        with self._lock:
            self._shutdown = True

    @property
    def records(self) -> list[SpanRecord]:
        """A copy of the collected records, in export order."""
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        """Forget every collected span (e.g. after saving a DataFrame)."""
        with self._lock:
            self._records.clear()

    def dataframe(self) -> "pd.DataFrame":
        """One row per collected span (columns: this module's docstring)."""
        pd = _pandas()

        records = self.records
        names = {key for record in records for key in record.attributes}
        if ENERGY_JOULES in names:
            names.add(ENERGY_BELOW_RESOLUTION)  # a 0.0 in a row says whether it is a measured zero
        attribute_names = sorted(names)
        columns: dict[str, object] = {
            "name": [r.name for r in records],
            "trace_id": [r.trace_id for r in records],
            "span_id": [r.span_id for r in records],
            "parent_span_id": pd.Series([r.parent_span_id for r in records], dtype=object),
            "start_time": pd.to_datetime(
                pd.Series([r.start_time_unix_nano for r in records], dtype="Int64"), unit="ns", utc=True
            ),
            "end_time": pd.to_datetime(
                pd.Series([r.end_time_unix_nano for r in records], dtype="Int64"), unit="ns", utc=True
            ),
            "start_time_unix_nano": pd.Series([r.start_time_unix_nano for r in records], dtype="Int64"),
            "end_time_unix_nano": pd.Series([r.end_time_unix_nano for r in records], dtype="Int64"),
            "duration_s": pd.Series([r.duration_s for r in records], dtype="float64"),
            "service_name": pd.Series([r.service_name for r in records], dtype=object),
        }
        for name in attribute_names:
            columns[name] = [_value(record, name) for record in records]
        # Resource keys (host.name, slurm.job.id, ...) never start like a span attribute's (energy., ...).
        for name in sorted({key for record in records for key in record.resource}):
            columns[name] = pd.Series([record.resource.get(name) for record in records], dtype=object)
        frame = pd.DataFrame(columns)
        for name in attribute_names:
            # All-numeric columns as float64 (NaN where absent) so they sum and plot;
            # text or mixed columns stay as objects, None where absent.
            values = [record.attributes.get(name) for record in records]
            present = [v for v in values if v is not None]
            if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
                frame[name] = pd.Series([float("nan") if v is None else float(v) for v in values], dtype="float64")
        return frame
