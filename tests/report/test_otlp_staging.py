"""OTLP/JSON files reach DuckDB as JSON lines staged one request line at a time, or go to the Python reader whole.

A plain file (hex ids, one request a line) is staged: DuckDB loads it and the report reads the same attributes as
the Python reader (``intValue`` text as an integer, an ``arrayValue`` as a list, attributes a report does not keep
dropped). A file the Python reader would treat differently (base64 ids, a line that is not JSON) is not staged: the
Python reader reads it, so its messages and its spans are what they always were.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from otel_joules.report import build_report
from otel_joules.report.readers import read_inputs
from otel_joules.report.sql import FORMAT_OTLP, SpanStore

T0 = 1_700_000_000_000_000_000


def _request(trace_id: str, span_id: str, **values: dict) -> dict:
    attributes = [{"key": key, "value": value} for key, value in values.items()]
    span = {"traceId": trace_id, "spanId": span_id, "name": "train", "startTimeUnixNano": str(T0),
            "endTimeUnixNano": str(T0 + 2 * 10**9), "attributes": attributes}
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "trainer"}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {}, "spans": [span]}]}]}


def _loaded_by_duckdb(path: Path) -> int | None:
    with SpanStore() as store:
        index = store.register(str(path))
        return store.load(FORMAT_OTLP, [(index, str(path))])[index]


def test_a_plain_otlp_file_is_staged_and_read_as_the_python_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "traces.otlp.jsonl"
    request = _request(
        "ab" * 16, "cd" * 8,
        **{"energy.attributed.joules": {"doubleValue": 6.5}, "energy.joules": {"doubleValue": 8.25},
           "training.epoch": {"intValue": "3"}, "energy.domain_kinds": {"arrayValue": {"values": [{"stringValue": "cpu"}]}},
           "energy.source": {"stringValue": "measured"}, "http.route": {"stringValue": "/not-kept"}},
    )
    path.write_text(json.dumps(request) + "\n", encoding="utf-8")
    assert _loaded_by_duckdb(path) == 1
    (python_span,) = read_inputs([path]).spans
    # training.epoch: the former name of training.epoch.number, read under the new one.
    assert python_span.attributes["training.epoch.number"] == 3 and "http.route" not in python_span.attributes
    report = build_report([path])
    (run,) = report.runs
    assert (run.joules, run.host_interval_joules, run.energy_source, run.service_name) == (6.5, 8.25, "measured", "trainer")
    assert run.duration_s == 2.0 and report.skipped == ()


def test_a_file_the_python_reader_reads_otherwise_is_left_to_it(tmp_path: Path) -> None:
    base64_ids = tmp_path / "base64.otlp.jsonl"
    trace_id = base64.b64encode(bytes(range(16))).decode()
    span_id = base64.b64encode(bytes(range(8))).decode()
    base64_ids.write_text(json.dumps(_request(trace_id, span_id, **{"energy.joules": {"doubleValue": 1.5}})) + "\n")
    torn = tmp_path / "torn.otlp.jsonl"
    torn.write_text(json.dumps(_request("ef" * 16, "01" * 8, **{"energy.joules": {"doubleValue": 2.5}})) + "\n"
                    + '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab')
    for path in (base64_ids, torn):
        assert _loaded_by_duckdb(path) is None
    report = build_report([base64_ids, torn])
    assert sorted(run.run_id for run in report.runs) == [bytes(range(16)).hex(), "ef" * 16]
    assert report.total_joules == 4.0
    assert any(item.path == f"{torn}:2" and "not valid JSON" in item.reason for item in report.skipped)
