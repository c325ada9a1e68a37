"""Checks a record passes before its numbers can enter a total, and JSON read with a reason.

Shared by the span formats (:mod:`otel_joules.report.span_exports`,
:mod:`otel_joules.report.otlp_files`) and the carbontracker logs
(:mod:`otel_joules.report.carbontracker_logs`): JSON that nests too deeply, a time outside
the 64-bit nanosecond range or ending before it starts, and an ``energy.*``/``carbon.*``
number that is not finite, negative or beyond :data:`MAX_PLAUSIBLE_VALUE` each make a
record skipped with its reason, so such values never enter a total.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from otel_joules.semconv import (
    CARBON_NAMESPACE,
    ENERGY_CLOCK_STEP_S,
    ENERGY_NAMESPACE,
    FORMER_ATTRIBUTE_NAMES,
    TRAINING_NAMESPACE,
)

#: An ``energy.*`` or ``carbon.*`` number beyond this (1e15 J is about 280 GWh) is not a
#: measurement; its record is skipped, so such a value never enters a total.
MAX_PLAUSIBLE_VALUE = 1e15
#: Span times are int64 nanoseconds (OTLP's fixed64, our exporters' integers).
MAX_UNIX_NANO = 2**63 - 1
#: How far a span's measured duration (``end - start - energy.clock_step_s``) may come out below 0 s: the step
#: is read to microseconds.
CLOCK_STEP_SLACK_S = 0.001
#: Attributes kept per span: what a report uses. Others (an OTLP file's http.*, ...) are
#: dropped at read time, so memory per span stays small however many a file holds.
REPORT_ATTRIBUTE_PREFIXES = (
    ENERGY_NAMESPACE,
    CARBON_NAMESPACE,
    TRAINING_NAMESPACE,
    "process.",
    "service.",
    "otel_joules.",
)
#: Prefixes and suffixes of the attributes whose numbers enter totals (joules, grams, and
#: the PUE and intensity that turn them into kWh and CO2eq): a record with such a number
#: not finite, negative or implausible is skipped. Others (``energy.watts``) are kept as
#: they are; the report never adds them up.
CHECKED_NUMBER_PREFIXES = (ENERGY_NAMESPACE, CARBON_NAMESPACE)
CHECKED_NUMBER_SUFFIXES = (".joules", ".grams", ".gco2eq_per_kwh", ".pue")
#: Hex digits of a trace id and of a span id (OTLP's 16 and 8 bytes), either case.
TRACE_ID_HEX_DIGITS = 32
SPAN_ID_HEX_DIGITS = 16
#: The most digits a time written as text has (:data:`MAX_UNIX_NANO` has 19).
TIME_MAX_DIGITS = len(str(MAX_UNIX_NANO))


def hex_id_pattern(digits: int) -> str:
    """The regular expression an id of ``digits`` hex digits matches in full (the Python reader's and the SQL's)."""
    return f"[0-9a-fA-F]{{{digits}}}"


def number_problem(value: float) -> str | None:
    """Why ``value`` cannot enter a total (not finite, negative, implausibly large), or None."""
    if not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if value < 0:
        return f"{value!r} is negative"
    if value > MAX_PLAUSIBLE_VALUE:
        return f"{value!r} is beyond any plausible measurement (> {MAX_PLAUSIBLE_VALUE:g})"
    return None


def loads_json(text: str | bytes) -> tuple[Any, str | None]:
    """``json.loads``, or the reason it failed (RecursionError included: 100,000-deep nesting)."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "JSON nested too deeply to read"
    except ValueError as exc:
        message = getattr(exc, "msg", str(exc))
        return None, f"not valid JSON ({message}); a truncated or corrupt line"


def _optional_int(value: object, what: str) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what} is {value!r}, not an integer")
    try:
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what} is {value!r}, not an integer") from None
    if not 0 <= number <= MAX_UNIX_NANO:
        raise ValueError(f"{what} is {value!r}, outside the 64-bit nanosecond range of a time")
    return number


def checked_times(
    start: object, end: object, start_what: str, end_what: str, clock_step_s: float | None = None
) -> tuple[int | None, int | None]:
    """A span's start and end in nanoseconds (None where absent).

    ``clock_step_s``: the span's ``energy.clock_step_s``. A wall-clock step back during a span
    puts its end before its start; its measured duration, ``end - start - clock_step_s``, is
    what must not be negative then.

    Raises:
        ValueError: not an integer, outside the 64-bit range, or an end before the start that no
            clock step explains.
    """
    start_ns = _optional_int(start, start_what)
    end_ns = _optional_int(end, end_what)
    if start_ns is not None and end_ns is not None and end_ns < start_ns:
        if clock_step_s is None or (end_ns - start_ns) / 1e9 - clock_step_s < -CLOCK_STEP_SLACK_S:
            raise ValueError(
                f"{end_what} {end_ns} is before {start_what} {start_ns}"
                + ("" if clock_step_s is None else f", by more than its {ENERGY_CLOCK_STEP_S} {clock_step_s!r}")
            )
    return start_ns, end_ns


def checked_attributes(attributes: dict[str, object]) -> dict[str, object]:
    """The attributes a report keeps, with every number that enters a total checked, under today's names
    (an archive written with a former name, :data:`~otel_joules.semconv.FORMER_ATTRIBUTE_NAMES`, reads as a new one).

    Raises:
        ValueError: a number that must not enter a total (not finite, negative, implausible);
            the message names the attribute.
    """
    kept: dict[str, object] = {}
    for key, raw in attributes.items():
        if not isinstance(key, str) or not key.startswith(REPORT_ATTRIBUTE_PREFIXES):
            continue
        value = _json_number(raw)
        if (
            key.startswith(CHECKED_NUMBER_PREFIXES)
            and key.endswith(CHECKED_NUMBER_SUFFIXES)
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            try:
                problem = number_problem(float(value))
            except OverflowError:
                problem = f"{value!r} is beyond any plausible measurement"
            if problem is not None:
                raise ValueError(f"{key} = {problem}; record skipped so it enters no total")
        # Short texts (energy.source, carbon.intensity.source) repeat on every span: share them.
        kept[sys.intern(key)] = sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value
    for former, current in FORMER_ATTRIBUTE_NAMES.items():
        if former in kept:
            value = kept.pop(former)
            kept.setdefault(current, value)
    return kept


def clock_step_number(attributes: dict[str, object]) -> float | None:
    """A span's ``energy.clock_step_s`` as a finite float; None when absent or not a finite number."""
    value = attributes.get(ENERGY_CLOCK_STEP_S)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _json_number(value: object) -> object:
    # Our exporters write non-finite floats as these strings (the protobuf JSON spelling).
    if value == "NaN":
        return float("nan")
    if value == "Infinity":
        return float("inf")
    if value == "-Infinity":
        return float("-inf")
    return value
