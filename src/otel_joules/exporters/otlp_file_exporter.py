"""OTLP/JSON file span exporter: files Jaeger, Tempo and the Collector read.

Format: one OTLP ``ExportTraceServiceRequest`` per line, encoded as OTLP/JSON (the
protobuf JSON mapping with the OTLP specification's exceptions: ``traceId``/``spanId``
as hex strings, enums as integers, 64-bit integers as strings), exactly as the
Collector's ``file`` exporter and the OpenTelemetry file exporter write it
(https://opentelemetry.io/docs/specs/otel/protocol/file-exporter/). Each ``export`` call
(one batch of a ``BatchSpanProcessor``, one span of a ``SimpleSpanProcessor``) is one
line; every span keeps all its attributes, its resource (``service.name``, ``host.name``,
...), scope, events, links and status, not only ``energy.*``.

Where it goes:

- Jaeger's UI: *Search* -> *Upload* (JSON file) accepts these files as they are;
- Tempo and any Collector: the Collector's ``otlpjsonfile`` receiver reads them and
  forwards them over OTLP;
- ``otel-joules report`` reads them (one aggregate over every file).

The encoding is the one of ``opentelemetry-exporter-otlp-json-common`` (the OpenTelemetry
project's own OTLP/JSON encoder): ``pip install 'otel-joules[otlp-file]'``. Writing
follows the model of the CSV and JSON-lines exporters (:mod:`otel_joules.exporters._files`):
the file is opened at construction (a path that cannot be written fails there with
:class:`~otel_joules.exporters.errors.ExporterPathError`), appended to with one
``write`` per line, never left ending in half a line, and a line that could not be
written is kept and written with the next batch.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from otel_joules.exporters._files import ExistingFile, FileSpanExporter
from otel_joules.exporters._retrying import DEFAULT_MAX_PENDING_SPANS
from otel_joules.exporters.records import utf8
from otel_joules.errors import MissingExtraError

#: What ``pip install`` needs for this exporter.
OTLP_FILE_EXTRA = "otel-joules[otlp-file]"


def _span_encoder() -> Callable[[Sequence[ReadableSpan]], Any]:
    try:
        from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    except ImportError:
        raise MissingExtraError(
            "the OTLP/JSON file exporter needs opentelemetry-exporter-otlp-json-common, which is not installed: "
            f"pip install '{OTLP_FILE_EXTRA}'"
        ) from None
    return encode_spans


def otlp_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One ``ExportTraceServiceRequest`` holding ``spans``, as one OTLP/JSON line ending in ``\\n``."""
    return _line(_span_encoder(), spans)


def _line(encode_spans: Callable[[Sequence[ReadableSpan]], Any], spans: Sequence[ReadableSpan]) -> str:
    return json.dumps(encode_spans(spans).to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n"


class OtlpFileSpanExporter(FileSpanExporter):
    """Append one OTLP/JSON ``ExportTraceServiceRequest`` per export to ``path`` (format: module docstring).

    ``OtlpFileSpanExporter(path, *, max_pending_spans=10_000)`` (``max_pending_spans``
    bounds the *lines* kept while the file cannot be written). Put it behind a
    ``BatchSpanProcessor``::

        provider.add_span_processor(BatchSpanProcessor(OtlpFileSpanExporter("traces.otlp.jsonl")))

    Raises :class:`~otel_joules.errors.MissingExtraError` when the encoder is
    not installed (``pip install 'otel-joules[otlp-file]'``) and
    :class:`~otel_joules.exporters.errors.ExporterPathError` when ``path`` cannot be written.
    """

    _ITEMS = "OTLP request line(s)"

    def __init__(self, path: str | os.PathLike[str], *, max_pending_spans: int = DEFAULT_MAX_PENDING_SPANS) -> None:
        # Before the file is created: a missing extra must not leave an empty file behind.
        self._encode_spans = _span_encoder()
        super().__init__(path, max_pending_spans=max_pending_spans)

    def _preamble(self, existing: ExistingFile) -> bytes:
        return b""

    def _encode_batch(self, spans: Sequence[ReadableSpan]) -> list[bytes]:
        if not spans:
            return []
        # A lone surrogate becomes U+FFFD: its JSON escape would make protobuf's parser reject the whole batch.
        return [utf8(_line(self._encode_spans, spans))]
