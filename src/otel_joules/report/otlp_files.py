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
import re
import sys
from typing import Any, Iterator

from otel_joules.report.inputs import Inputs, LineErrors
from otel_joules.report.model import SpanRow
from otel_joules.report.record_checks import checked_attributes, checked_times, clock_step_number
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
