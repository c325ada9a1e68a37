"""OpenTelemetry span exporters that write energy records locally.

Each is a plain ``opentelemetry.sdk.trace.export.SpanExporter``: put it behind a
``BatchSpanProcessor`` (or ``SimpleSpanProcessor``) on any ``TracerProvider``. Each
writes, per span, its name, trace and span ids, parent span id, start, end, duration,
``service.name`` and every ``energy.*``, ``carbon.*`` and ``training.*`` attribute (the
prefixes in :data:`otel_joules.semconv.EXPORTED_ATTRIBUTE_PREFIXES`, re-exported here;
:mod:`.records` builds that record once for all of them):

- :class:`CsvSpanExporter` -- a CSV file (format: :mod:`.csv_exporter`);
- :class:`JsonLinesSpanExporter` -- a JSON-lines file (format: :mod:`.jsonl_exporter`);
- :class:`OtlpFileSpanExporter` -- OTLP/JSON, one ``ExportTraceServiceRequest`` per line,
  every attribute kept: files Jaeger's UI, Tempo (through the Collector) and
  ``otel-joules report`` read (``pip install 'otel-joules[otlp-file]'``; format:
  :mod:`.otlp_file_exporter`);
- :class:`ParquetSpanExporter` -- rotated Parquet files, each complete once it appears
  (``pip install 'otel-joules[parquet]'``; schema and files: :mod:`.parquet_exporter`);
- :class:`MongoSpanExporter` -- a MongoDB collection (``pip install 'otel-joules[mongo]'``;
  format: :mod:`.mongo_exporter`);
- :class:`DataFrameSpanExporter` -- in memory, returned by ``.dataframe()`` as a pandas
  DataFrame (``pip install 'otel-joules[pandas]'``; columns: :mod:`.dataframe_exporter`).

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from otel_joules.exporters import CsvSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(CsvSpanExporter("spans.csv")))
"""

from otel_joules.exporters.csv_exporter import DEFAULT_ENERGY_COLUMNS, CsvSpanExporter, csv_header
from otel_joules.exporters.dataframe_exporter import DataFrameSpanExporter
from otel_joules.errors import MissingExtraError
from otel_joules.exporters.errors import CsvHeaderMismatchError, ExporterPathError
from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter
from otel_joules.exporters.mongo_exporter import MongoSpanExporter
from otel_joules.exporters.otlp_file_exporter import OtlpFileSpanExporter
from otel_joules.exporters.parquet_exporter import ParquetSpanExporter
from otel_joules.exporters.records import CORE_FIELDS, SpanRecord, span_record
from otel_joules.semconv import EXPORTED_ATTRIBUTE_PREFIXES

__all__ = [
    "CORE_FIELDS",
    "DEFAULT_ENERGY_COLUMNS",
    "EXPORTED_ATTRIBUTE_PREFIXES",
    "CsvHeaderMismatchError",
    "CsvSpanExporter",
    "DataFrameSpanExporter",
    "ExporterPathError",
    "JsonLinesSpanExporter",
    "MissingExtraError",
    "MongoSpanExporter",
    "OtlpFileSpanExporter",
    "ParquetSpanExporter",
    "SpanRecord",
    "csv_header",
    "span_record",
]
