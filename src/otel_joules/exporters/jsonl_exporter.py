"""JSON-lines span exporter: one JSON object per span, one span per line.

Format (what :class:`JsonLinesSpanExporter` writes and what a reader may rely on):

- UTF-8 (non-ASCII text written as is, not ``\\u`` escaped; a lone surrogate, as from a
  command-line argument that is not UTF-8, is written as U+FFFD), one object per line, each
  line ending in ``\\n``, no header, no blank lines; the file is valid JSON Lines
  (https://jsonlines.org) and every line is strict JSON (no ``NaN`` tokens).
- Compact (``,`` and ``:`` without spaces), keys in this order::

    {"name":"train","trace_id":"<32 hex>","span_id":"<16 hex>","parent_span_id":null,
     "start_time":"2023-11-14T22:13:20.000000000Z","end_time":"2023-11-14T22:13:21.500000000Z",
     "start_time_unix_nano":1700000000000000000,"end_time_unix_nano":1700000001500000000,
     "duration_s":1.5,"service_name":"svc",
     "attributes":{"energy.joules":12.5,"energy.package_0.joules":10.0,"energy.source":"measured"},
     "resource":{"host.name":"node-7","service.instance.id":"<uuid>","slurm.job.id":"4242"}}

  (shown wrapped here; each record is one line in the file). A span that also carries
  carbon attributes (``otel-joules run``, the CarbonTracker) has them in the same
  object, sorted before the ``energy.*`` keys::

    "attributes":{"carbon.intensity.gco2eq_per_kwh":300.0,"carbon.intensity.source":"explicit",
                  "carbon.pue":1.2,"energy.co2eq.grams":0.00075,"energy.joules":7.5,...}
- ``parent_span_id``: 16 hex digits, or ``null`` for a root span. ``service_name``:
  the ``service.name`` resource attribute or ``null``. Times: ISO 8601 UTC with nine
  fraction digits, and the exact integer nanoseconds since the epoch (JSON integers;
  they exceed 2**53, so a JavaScript reader must parse them as big integers).
  ``duration_s``: the measured seconds, ``(end - start) / 1e9`` less any ``energy.clock_step_s``
  (see :mod:`otel_joules.exporters.records`), as a JSON number.
- ``attributes``: every ``energy.*``, ``carbon.*`` and ``training.*`` attribute of the
  span (:data:`~otel_joules.semconv.EXPORTED_ATTRIBUTE_PREFIXES`), keys sorted.
  Numbers as JSON numbers (floats always with a ``.`` or exponent, so ``10.0`` stays a float), booleans
  and strings as such, tuples as arrays; non-finite floats as the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``.
- ``resource``: the resource attributes that say who ran the span, where and as which job
  (:data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`), keys sorted, values as in
  ``attributes``; ``{}`` when the resource has none. ``otel-joules report --by host,user,job``
  groups by them.

Any existing file is appended to (the format has no header to disagree with). Write
failures, retries and exit behaviour: :mod:`otel_joules.exporters._files`.
"""

from __future__ import annotations

import json

from otel_joules.exporters._files import ExistingFile, FileSpanExporter
from otel_joules.exporters.records import SpanRecord, utf8


def record_json_line(record: SpanRecord) -> str:
    """The line (with its ``\\n``) :class:`JsonLinesSpanExporter` writes for ``record``."""
    return json.dumps(record.to_json_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


class JsonLinesSpanExporter(FileSpanExporter):
    """Append one JSON object per span to ``path`` (format: this module's docstring).

    ``JsonLinesSpanExporter(path, *, max_pending_spans=10_000)``. Raises
    :class:`~otel_joules.exporters.errors.ExporterPathError` at construction when
    ``path`` cannot be written.
    """

    def _preamble(self, existing: ExistingFile) -> bytes:
        return b""

    def _encode(self, record: SpanRecord) -> bytes:
        # A lone surrogate becomes U+FFFD: its \udXXX escape is not valid Unicode, and strict readers reject it.
        return utf8(record_json_line(record))
