"""Span records, good and bad, that the Python reader and each SQL engine must judge alike.

Each case is one JSON line. ``stricter`` names the engines whose SQL rejects a record the Python
reader takes: the SQL checks are conservative (a record they pass, Python passes too), and a file
with a record they reject is read by the Python reader instead, so the report is the same.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_joules.exporters.records import CORE_FIELDS

#: The header of our CSV span export (core fields, then the attributes and resource cells).
CSV_HEADER = (*CORE_FIELDS, "attributes", "resource")

GOOD: dict[str, Any] = {
    "trace_id": "a" * 32,
    "span_id": "b" * 16,
    "parent_span_id": None,
    "name": "train",
    "start_time_unix_nano": 1_000,
    "end_time_unix_nano": 2_000,
    "service_name": "svc",
    "attributes": {"energy.joules": 1.5, "carbon.pue": 1.58},
}


@dataclass(frozen=True)
class Case:
    """One record (a JSON line); ``stricter``: the engines whose SQL rejects it while Python takes it."""

    label: str
    line: str
    stricter: frozenset[str] = frozenset()


def _with(stricter: tuple[str, ...] = (), **changes: Any) -> str:
    record = dict(GOOD, span_id="c" * 16)
    record.update(changes)
    return json.dumps(record)


def _attrs(**attributes: Any) -> dict[str, Any]:
    return dict(GOOD["attributes"], **attributes)


BOTH = ("duckdb", "spark")
CASES = (
    Case("good", _with()),
    Case("upper-case ids", _with(trace_id="A" * 32, span_id="C" * 16, parent_span_id="D" * 16)),
    Case("trace id of 31 digits", _with(trace_id="a" * 31)),
    Case("trace id not hex", _with(trace_id="g" * 32)),
    Case("span id of 17 digits", _with(span_id="c" * 17)),
    Case("empty parent", _with(parent_span_id="")),
    Case("parent not hex", _with(parent_span_id="xyz")),
    Case("times as digits", _with(start_time_unix_nano="1000", end_time_unix_nano="2000")),
    Case("no times", _with(start_time_unix_nano=None, end_time_unix_nano=None)),
    Case("negative start", _with(start_time_unix_nano=-1)),
    Case("end before start", _with(start_time_unix_nano=5_000, end_time_unix_nano=2_000)),
    Case("end past the 64-bit range", _with(end_time_unix_nano=2**63)),
    Case(
        "end before start by a clock step",
        _with(start_time_unix_nano=3_000_000_000, end_time_unix_nano=1_000_000_000,
              attributes=_attrs(**{"energy.clock_step_s": -2.0})),
        frozenset(BOTH),
    ),
    Case("a time as a float", _with(end_time_unix_nano=2000.0), frozenset(BOTH)),
    Case("joules NaN", _with(attributes=_attrs(**{"energy.joules": "NaN"}))),
    Case("joules Infinity", _with(attributes=_attrs(**{"energy.attributed.joules": "Infinity"}))),
    Case("joules negative", _with(attributes=_attrs(**{"energy.joules": -1}))),
    Case("joules implausible", _with(attributes=_attrs(**{"energy.joules": 1e16}))),
    Case("grams negative", _with(attributes=_attrs(**{"energy.co2eq.grams": -0.5}))),
    Case("intensity negative", _with(attributes=_attrs(**{"carbon.intensity.gco2eq_per_kwh": -3}))),
    Case("joules as quoted digits", _with(attributes=_attrs(**{"energy.joules": "5"})), frozenset({"spark"})),
    Case("joules true", _with(attributes=_attrs(**{"energy.joules": True})), frozenset({"spark"})),
    Case("negative watts (never summed)", _with(attributes=_attrs(**{"energy.watts": -5}))),
    Case("a kept key that is not plain", _with(attributes=_attrs(**{"energy.a b": 1})), frozenset(BOTH)),
    Case("another key, not kept", _with(attributes=_attrs(**{"http.route name": "/x"}))),
    Case("attributes a list", _with(attributes=[1, 2])),
    Case("no attributes", _with(attributes=None)),
    Case("a number as name", _with(name=5), frozenset({"duckdb"})),
    Case(
        "a key twice",
        _with().replace('"energy.joules": 1.5', '"energy.joules": 1.5, "energy.joules": 2.5'),
        frozenset({"duckdb"}),
    ),
)


def write_case(folder: Path, case: Case) -> Path:
    """A JSON-lines file of a good record, then the case's: the Python reader judges the second line, SQL the file."""
    path = folder / (case.label.replace(" ", "-").replace("(", "").replace(")", "") + ".jsonl")
    path.write_text(json.dumps(GOOD) + "\n" + case.line + "\n", encoding="utf-8")
    return path


def _csv_row(record: dict[str, Any]) -> list[str]:
    """A record as a row of our CSV: each core field's text (absent: empty), the attributes as a JSON cell."""
    attributes = record.get("attributes")
    cells = ["" if record.get(field) is None else str(record[field]) for field in CORE_FIELDS]
    return [*cells, "" if attributes is None else json.dumps(attributes), "{}"]


def write_csv_case(folder: Path, case: Case) -> Path:
    """The case as our CSV (:data:`CSV_HEADER`): a good row, then the case's record (every cell text, so a JSON
    number and a JSON string read alike there)."""
    text = io.StringIO()
    writer = csv.writer(text)
    for row in (CSV_HEADER, _csv_row(GOOD), _csv_row(json.loads(case.line))):
        writer.writerow(row)
    path = folder / (case.label.replace(" ", "-").replace("(", "").replace(")", "") + ".csv")
    path.write_text(text.getvalue(), encoding="utf-8")
    return path
