"""One span, one record: the fields every local exporter writes.

:func:`span_record` turns an ended OpenTelemetry span into a :class:`SpanRecord`.
Every exporter in :mod:`otel_joules.exporters` (CSV, JSON lines, MongoDB, pandas)
builds its rows from this one function, so the formats cannot drift apart.

Fields (the same names in every format):

========================  =================================================================
``name``                  the span's name
``trace_id``              32 lowercase hex digits
``span_id``               16 lowercase hex digits
``parent_span_id``        16 lowercase hex digits, or absent (None) for a root span
``start_time``            ISO 8601 UTC with nanoseconds: ``2023-11-14T22:13:20.000000000Z``
``end_time``              the same, for the end
``start_time_unix_nano``  integer nanoseconds since the Unix epoch (what the SDK recorded;
                          the exact value, the ISO form is the same instant for humans)
``end_time_unix_nano``    the same, for the end
``duration_s``            the span's measured duration in seconds, a float, never negative:
                          ``(end_time_unix_nano - start_time_unix_nano) / 1e9``, less
                          ``energy.clock_step_s`` on a span the wall clock stepped during
                          (its times are then off by the step; the duration is not)
``service_name``          the ``service.name`` resource attribute, or absent (None)
``attributes``            every span attribute whose key starts with ``energy.``,
                          ``carbon.`` or ``training.``
                          (:data:`otel_joules.semconv.EXPORTED_ATTRIBUTE_PREFIXES`), keys
                          sorted; values as the SDK holds them (str, bool, int, float or a
                          tuple of one of those)
``resource``              the resource attributes that say who ran the span, where and as
                          which job (:data:`otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`:
                          ``host.name``, ``process.owner``, ``service.instance.id``, ...;
                          every ``slurm.*`` and ``torchrun.*`` one), keys sorted; empty
                          when the resource has none of them
========================  =================================================================

Only ``energy.*``, ``carbon.*`` and ``training.*`` attributes are kept: those are what
otel-joules puts on spans (``energy.joules``, ``energy.<domain>.joules``, ``energy.watts``,
``energy.source``, ``energy.co2eq.grams``, ...; where the intensity is known, as in
``otel-joules run`` and the CarbonTracker, ``carbon.intensity.gco2eq_per_kwh``,
``carbon.intensity.source`` and ``carbon.pue``, without which ``energy.co2eq.grams``
cannot be checked or recomputed; and a training run's ``training.epoch.number`` on each epoch
span, without which a report of an export cannot number the epochs). Of the resource, only
the identities that group energy by host, user and job are kept (``resource``). Other
attributes can be large or sensitive and already reach whatever OTLP backend the user has.

A span the SDK hands an exporter always has both times; should one be missing, the
time fields and ``duration_s`` are None (written as empty / null), never a made-up 0.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence, Union

from opentelemetry.sdk.trace import ReadableSpan

# Which attributes every format keeps is said once, in the vocabulary (``str.startswith``
# takes the tuple as it is).
from otel_joules.semconv import (
    ENERGY_CLOCK_STEP_S,
    EXPORTED_ATTRIBUTE_PREFIXES,
    EXPORTED_RESOURCE_ATTRIBUTES,
    EXPORTED_RESOURCE_PREFIXES,
    SERVICE_NAME,
)

#: The fixed fields of a record, in the order every format writes them (the
#: ``attributes`` field comes after these).
CORE_FIELDS: tuple[str, ...] = (
    "name",
    "trace_id",
    "span_id",
    "parent_span_id",
    "start_time",
    "end_time",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "duration_s",
    "service_name",
)

_Primitive = Union[str, bool, int, float]
#: A span attribute value as the OpenTelemetry SDK stores it.
AttributeValue = Union[_Primitive, Sequence[_Primitive]]
#: A value as it appears in JSON output (see :func:`json_value`).
JsonValue = Union[None, str, bool, int, float, list["JsonValue"]]

_NANOS_PER_SECOND = 1_000_000_000


#: A UTF-16 surrogate code point: in a Python str only from undecodable bytes (``surrogateescape``: a command-line
#: argument that is not UTF-8) or a bad escape; UTF-8 cannot hold one, and protobuf's JSON parser rejects its escape.
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the Unicode replacement character), as every
    exporter writes it: the output stays valid UTF-8 that any reader, protobuf's included, accepts."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def utf8(text: str) -> bytes:
    """``text`` as UTF-8 bytes, lone surrogates as U+FFFD (:func:`valid_text`)."""
    return valid_text(text).encode("utf-8")


def iso_utc_from_unix_nano(unix_nano: int) -> str:
    """Format nanoseconds since the epoch as ``YYYY-mm-ddTHH:MM:SS.nnnnnnnnnZ`` (UTC).

    Always nine fraction digits, so the string is exact and sorts like the number.
    (:mod:`datetime` keeps only microseconds, which would lose what the SDK recorded.)
    """
    seconds, nanos = divmod(unix_nano, _NANOS_PER_SECOND)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def json_value(value: AttributeValue) -> JsonValue:
    """An attribute value in the form the JSON formats write.

    Tuples become lists. Non-finite floats, which strict JSON cannot hold, become the
    strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (the protobuf JSON mapping's
    spelling, which OTLP/JSON uses too), so every line stays parseable by any reader.
    """
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, (str, bool, int, float)):
        return value
    return [json_value(item) for item in value]  # type: ignore[misc]


@dataclass(frozen=True)
class SpanRecord:
    """What the local exporters write about one span (see the module docstring)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_time_unix_nano: int | None
    end_time_unix_nano: int | None
    service_name: str | None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    resource: Mapping[str, AttributeValue] = field(default_factory=dict)

    @property
    def start_time(self) -> str | None:
        """Start as ISO 8601 UTC with nanoseconds, or None if the span had no start time."""
        return None if self.start_time_unix_nano is None else iso_utc_from_unix_nano(self.start_time_unix_nano)

    @property
    def end_time(self) -> str | None:
        """End as ISO 8601 UTC with nanoseconds, or None if the span had no end time."""
        return None if self.end_time_unix_nano is None else iso_utc_from_unix_nano(self.end_time_unix_nano)

    @property
    def duration_s(self) -> float | None:
        """The measured seconds from start to end (never negative), or None when either time is missing.

        The span's wall-clock times less ``energy.clock_step_s`` where the wall clock stepped
        during the span (:data:`otel_joules.semconv.ENERGY_CLOCK_STEP_S`).
        """
        if self.start_time_unix_nano is None or self.end_time_unix_nano is None:
            return None
        wall_s = (self.end_time_unix_nano - self.start_time_unix_nano) / _NANOS_PER_SECOND
        step_s = self.attributes.get(ENERGY_CLOCK_STEP_S)
        if isinstance(step_s, (int, float)) and not isinstance(step_s, bool) and math.isfinite(step_s):
            wall_s -= step_s
        return max(wall_s, 0.0)

    def core_fields(self) -> dict[str, str | int | float | None]:
        """The :data:`CORE_FIELDS` of this record, in that order, as plain values."""
        return {
            "name": self.name,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "start_time_unix_nano": self.start_time_unix_nano,
            "end_time_unix_nano": self.end_time_unix_nano,
            "duration_s": self.duration_s,
            "service_name": self.service_name,
        }

    def to_json_dict(self) -> dict[str, object]:
        """The record as the JSON-lines exporter writes it: core fields, then ``attributes``, then ``resource``."""
        result: dict[str, object] = dict(self.core_fields())
        result["attributes"] = {key: json_value(value) for key, value in self.attributes.items()}
        result["resource"] = {key: json_value(value) for key, value in self.resource.items()}
        return result


def exported_resource(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """The resource attributes the file exporters keep (:data:`~otel_joules.semconv.EXPORTED_RESOURCE_ATTRIBUTES`), keys sorted."""
    return {
        key: attributes[key]
        for key in sorted(attributes)
        if key in EXPORTED_RESOURCE_ATTRIBUTES or key.startswith(EXPORTED_RESOURCE_PREFIXES)
    }


#: (the resource last seen, what the exporters keep of it): a provider's spans share one resource, so its kept part
#: is worked out once per resource rather than per exported span. Replaced whole, by one assignment, so exporter
#: threads may share it; read-only, as every record of that resource holds it.
_last_resource: tuple[object, Mapping[str, AttributeValue]] = (None, MappingProxyType({}))


def _kept_resource(resource: object) -> Mapping[str, AttributeValue]:
    global _last_resource
    seen, kept = _last_resource
    if resource is not seen:
        kept = MappingProxyType(exported_resource(getattr(resource, "attributes", None) or {}))
        _last_resource = (resource, kept)
    return kept


def span_record(span: ReadableSpan) -> SpanRecord:
    """Build the :class:`SpanRecord` of one ended span."""
    context = span.context
    parent = span.parent
    attributes = span.attributes or {}
    exported = {
        key: attributes[key] for key in sorted(attributes) if key.startswith(EXPORTED_ATTRIBUTE_PREFIXES)
    }
    service_name = span.resource.attributes.get(SERVICE_NAME) if span.resource is not None else None
    return SpanRecord(
        name=span.name,
        trace_id=format(context.trace_id, "032x") if context is not None else "0" * 32,
        span_id=format(context.span_id, "016x") if context is not None else "0" * 16,
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        start_time_unix_nano=span.start_time,
        end_time_unix_nano=span.end_time,
        service_name=None if service_name is None else str(service_name),
        attributes=exported,
        resource=_kept_resource(span.resource),
    )
