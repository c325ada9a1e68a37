"""Spans of OTLP/JSON trace files.

What the Collector's ``file`` exporter and ``opentelemetry-exporter-otlp-json-file`` write:
a JSON object with ``resourceSpans`` per line, or one such document over several lines
(camelCase keys, hex ids, or base64 ones as the protobuf default writes them, 64-bit
integers as strings). Only the attributes a report uses are kept
(:func:`otel_joules.report.record_checks.checked_attributes`); a bad span is skipped with
its reason, the request's other spans are kept.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from typing import IO, Any, Iterator

from otel_joules.report.inputs import Inputs, LineErrors
from otel_joules.report.model import SpanRow
from otel_joules.report.record_checks import (
    REPORT_ATTRIBUTE_PREFIXES,
    checked_attributes,
    checked_times,
    clock_step_number,
)
from otel_joules.semconv import SERVICE_NAME

_HEX = re.compile("[0-9a-f]*")


def read_otlp_request(item: dict[str, Any], path: str, number: int, inputs: Inputs, errors: LineErrors) -> None:
    """The spans of one OTLP request: a bad span is skipped with its reason, the others kept."""
    try:
        for span in _otlp_span_objects(item):
            try:
                inputs.add_span(_otlp_span(span, path))
            except ValueError as exc:
                errors.add(number, f"a span skipped: {exc}")
            except RecursionError:
                errors.add(number, "a span skipped: its attributes nest too deeply to read")
    except ValueError as exc:
        errors.add(number, f"not an OTLP trace request: {exc}")


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return value


def _otlp_span_objects(request: dict[str, Any]) -> Iterator[tuple[object, str | None]]:
    for resource_spans in _list(request.get("resourceSpans"), "resourceSpans"):
        if not isinstance(resource_spans, dict):
            raise ValueError("a resourceSpans entry is not an object")
        resource = resource_spans.get("resource") or {}
        resource_attributes = _otlp_attributes(resource.get("attributes") if isinstance(resource, dict) else None)
        service = resource_attributes.get(SERVICE_NAME)
        service_name = sys.intern(str(service)) if service not in (None, "") else None
        scopes = _list(resource_spans.get("scopeSpans"), "scopeSpans") + _list(
            resource_spans.get("instrumentationLibrarySpans"), "instrumentationLibrarySpans"
        )
        for scope in scopes:
            if not isinstance(scope, dict):
                raise ValueError("a scopeSpans entry is not an object")
            for span in _list(scope.get("spans"), "spans"):
                yield span, service_name


def _otlp_span(entry: tuple[object, str | None], path: str) -> SpanRow:
    span, service_name = entry
    if not isinstance(span, dict):
        raise ValueError("a span is not an object")
    attributes = checked_attributes(_otlp_attributes(span.get("attributes")))
    start_ns, end_ns = checked_times(
        span.get("startTimeUnixNano"),
        span.get("endTimeUnixNano"),
        "startTimeUnixNano",
        "endTimeUnixNano",
        clock_step_number(attributes),
    )
    return SpanRow(
        trace_id=sys.intern(_otlp_id(span.get("traceId"), 16, "traceId")),
        span_id=_otlp_id(span.get("spanId"), 8, "spanId"),
        parent_span_id=_otlp_id(span.get("parentSpanId"), 8, "parentSpanId") if span.get("parentSpanId") else None,
        name=sys.intern(str(span.get("name") or "")),
        start_unix_nano=start_ns,
        end_unix_nano=end_ns,
        service_name=service_name,
        attributes=attributes,
        source=sys.intern(path),
    )


def _otlp_id(value: object, size: int, what: str) -> str:
    """OTLP/JSON ids are hex; some writers use the protobuf default, base64: accept both."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is missing")
    value = value[:64]  # an id is 16 or 24 characters; a longer one is only echoed in the error
    text = value.lower()
    if len(text) == 2 * size and _HEX.fullmatch(text):
        return text
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise ValueError(f"{what} {value!r} is neither {2 * size} hex digits nor base64 of {size} bytes")


def _otlp_attributes(items: object) -> dict[str, object]:
    attributes: dict[str, object] = {}
    if not isinstance(items, list):
        return attributes
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attributes[item["key"]] = _any_value(item.get("value"))
    return attributes


def _any_value(value: object) -> object:
    """Decode an OTLP/JSON ``AnyValue`` (int64 as strings, doubles possibly "NaN")."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, str):
            try:
                return float(raw)  # "NaN", "Infinity", "-Infinity", or a number as text
            except ValueError:
                return None
        return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
    if "arrayValue" in value:
        inner = value["arrayValue"] or {}
        return [_any_value(v) for v in (inner.get("values") or [])] if isinstance(inner, dict) else None
    if "kvlistValue" in value:
        inner = value["kvlistValue"] or {}
        return _otlp_attributes(inner.get("values")) if isinstance(inner, dict) else None
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def flatten_otlp(path: str, out: IO[str], max_line_bytes: int) -> bool:
    """Write the spans of the OTLP/JSON file ``path`` to ``out`` as our JSON lines (one span a line), for the SQL
    engine's JSON-lines reader, which then checks every record as it checks our exports.

    Ids, names and times are copied as the request has them and attributes decoded as :func:`read_otlp_request`
    decodes them (the kept ones only), one request line in memory at a time. Anything the Python reader would
    skip or report (a line that is not a JSON object, not UTF-8, over ``max_line_bytes``, nested too deeply, a
    request whose structure is not OTLP's, a ``service.name`` that is not one text) returns False: then the file
    is the Python reader's, which says why line by line.
    """
    with open(path, "rb") as handle:
        while raw := handle.readline(max_line_bytes + 1):
            if len(raw) > max_line_bytes or not raw.strip():
                return False
            try:
                request = json.loads(raw)
            except (ValueError, RecursionError):
                return False
            if not isinstance(request, dict) or not _write_request(request, out):
                return False
    return True


def _write_request(request: dict[str, Any], out: IO[str]) -> bool:
    """The spans of one request as JSON lines; False where its structure is not OTLP's (see :func:`flatten_otlp`)."""
    resources = request.get("resourceSpans")
    if resources is None:
        return True
    if not isinstance(resources, list):
        return False
    for resource_spans in resources:
        if not isinstance(resource_spans, dict):
            return False
        service = _one_service_name(resource_spans.get("resource"))
        if service is False:
            return False
        for key in ("scopeSpans", "instrumentationLibrarySpans"):
            scopes = resource_spans.get(key)
            if scopes is not None and not _write_scopes(scopes, service, out):
                return False
    return True


def _one_service_name(resource: object) -> str | None | bool:
    """The resource's ``service.name`` (None: none or empty); False unless it is one text in one attribute."""
    if resource is None:
        return None
    if not isinstance(resource, dict):
        return False
    items = resource.get("attributes")
    if items is None:
        return None
    if not isinstance(items, list):
        return False
    named = [item for item in items if isinstance(item, dict) and item.get("key") == SERVICE_NAME]
    if not named:
        return None
    value = named[0].get("value")
    if len(named) > 1 or not isinstance(value, dict) or not isinstance(value.get("stringValue"), str):
        return False
    return value["stringValue"] or None


def _write_scopes(scopes: object, service: str | None, out: IO[str]) -> bool:
    if not isinstance(scopes, list):
        return False
    for scope in scopes:
        if not isinstance(scope, dict):
            return False
        spans = scope.get("spans")
        if spans is None:
            continue
        if not isinstance(spans, list):
            return False
        for span in spans:
            if not isinstance(span, dict):
                return False
            attributes = {
                key: value for key, value in _otlp_attributes(span.get("attributes")).items()
                if key.startswith(REPORT_ATTRIBUTE_PREFIXES)
            }
            if not all(_plain(value) for value in attributes.values()):
                return False
            record = {
                "trace_id": span.get("traceId"), "span_id": span.get("spanId"),
                "parent_span_id": span.get("parentSpanId"), "name": span.get("name"),
                "start_time_unix_nano": span.get("startTimeUnixNano"), "end_time_unix_nano": span.get("endTimeUnixNano"),
                "service_name": service, "attributes": attributes,
            }
            try:
                out.write(json.dumps(record, allow_nan=False) + "\n")
            except (ValueError, RecursionError):
                return False
    return True


def _plain(value: object) -> bool:
    """A value DuckDB's JSON keeps as Python reads it back: 64-bit integers, finite floats, texts, lists of them."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_plain(item) for item in value.values())
    return False
