"""JsonLinesSpanExporter: exact bytes, strict JSON, appending, unwritable paths, failures."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult

from otel_joules.exporters import ExporterPathError, JsonLinesSpanExporter

from tests.helpers.known_spans import (
    CHILD_SPAN_ID,
    FAILING_DISK_SCRIPT,
    ROOT_SPAN_ID,
    TRACE_ID,
    emit_run,
    emit_train_and_epoch,
    make_provider,
)
from tests.helpers.processes import REPO


CHILD_LINE = (
    '{"name":"époque, \\"1\\"","trace_id":"' + TRACE_ID + '","span_id":"' + CHILD_SPAN_ID + '",'
    '"parent_span_id":"' + ROOT_SPAN_ID + '",'
    '"start_time":"2023-11-14T22:13:20.250000000Z","end_time":"2023-11-14T22:13:20.260000000Z",'
    '"start_time_unix_nano":1700000000250000000,"end_time_unix_nano":1700000000260000000,'
    '"duration_s":0.01,"service_name":"svc",'
    '"attributes":{"energy.below_resolution":true,"energy.domains":["nvidia_gpu_0"],"energy.joules":0.125,'
    '"energy.nvidia_gpu_0.joules":0.125,"energy.samples":3,"energy.source":"estimate"},"resource":{"host.name":"node-7","slurm.job.id":"4242"}}\n'
)
ROOT_LINE = (
    '{"name":"train","trace_id":"' + TRACE_ID + '","span_id":"' + ROOT_SPAN_ID + '","parent_span_id":null,'
    '"start_time":"2023-11-14T22:13:20.000000000Z","end_time":"2023-11-14T22:13:21.500000000Z",'
    '"start_time_unix_nano":1700000000000000000,"end_time_unix_nano":1700000001500000000,'
    '"duration_s":1.5,"service_name":"svc",'
    '"attributes":{"energy.co2eq.grams":0.0015451388888888889,"energy.core_0.joules":7.25,'
    '"energy.dram_0.joules":2.5,"energy.joules":12.5,"energy.package_0.joules":10.0,'
    '"energy.source":"measured","energy.watts":8.333333333333334},"resource":{"host.name":"node-7","slurm.job.id":"4242"}}\n'
)


def test_lines_byte_for_byte_behind_simple_span_processor(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    assert path.read_bytes() == (CHILD_LINE + ROOT_LINE).encode("utf-8")


def test_same_bytes_behind_batch_span_processor(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = make_provider(BatchSpanProcessor(JsonLinesSpanExporter(path), schedule_delay_millis=60_000))
    emit_train_and_epoch(provider)
    assert path.read_bytes() == b""
    provider.shutdown()  # shutdown drains the batch processor into the exporter
    assert path.read_bytes() == (CHILD_LINE + ROOT_LINE).encode("utf-8")


def test_lines_are_strict_json_with_typed_values(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)), service_name=None)
    tracer = provider.get_tracer("t")
    span = tracer.start_span(
        "odd values",
        start_time=5,
        attributes={"energy.joules": float("nan"), "energy.watts": float("inf"), "energy.limits": (1.5, float("-inf"))},
    )
    span.end(end_time=7)
    provider.shutdown()

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON token {token}")

    record = json.loads(path.read_text(), parse_constant=refuse)
    assert record["service_name"] is None
    assert record["start_time"] == "1970-01-01T00:00:00.000000005Z"
    assert record["duration_s"] == 2e-09
    assert record["attributes"] == {"energy.joules": "NaN", "energy.limits": [1.5, "-Infinity"], "energy.watts": "Infinity"}


def test_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text('{"earlier":1}\n')
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    assert path.read_text(encoding="utf-8") == '{"earlier":1}\n' + CHILD_LINE + ROOT_LINE


def test_file_cut_mid_line_gets_a_newline_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text('{"cut":')
    with caplog.at_level(logging.WARNING, logger="otel_joules.exporters"):
        provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    assert path.read_text(encoding="utf-8") == '{"cut":\n' + CHILD_LINE + ROOT_LINE
    assert "does not end with a newline" in caplog.text


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_unwritable_path_fails_at_construction(tmp_path: Path, where: str) -> None:
    path = tmp_path / "no" / "spans.jsonl" if where == "missing folder" else tmp_path
    with pytest.raises(ExporterPathError, match="spans.jsonl|is a folder"):
        JsonLinesSpanExporter(path)
    assert list(tmp_path.iterdir()) == []


def test_force_flush_and_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(path)
    provider = make_provider(SimpleSpanProcessor(exporter))
    emit_train_and_epoch(provider)
    assert exporter.force_flush() is True
    assert exporter.pending_spans == 0
    provider.shutdown()
    assert exporter.force_flush() is True
    assert exporter.export([]) is SpanExportResult.FAILURE
    assert path.read_bytes() == (CHILD_LINE + ROOT_LINE).encode("utf-8")


def test_disk_failure_then_exit_writes_what_was_kept(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", FAILING_DISK_SCRIPT, str(path), "jsonl", "exit", "10"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["b"] == report["c"] == "FAILURE" and report["size_after_b_equals_size_a"] is True
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["name"] for r in records] == ["a", "b", "c"]
    assert [r["attributes"]["energy.joules"] for r in records] == [1.0, 2.0, 3.0]
    assert [r["start_time_unix_nano"] for r in records] == [1_700_000_000_000_000_000 + k * 10**10 for k in range(3)]
    assert not math.isnan(records[0]["duration_s"]) and records[0]["duration_s"] == 2.0


def test_csv_and_jsonl_hold_the_same_records(tmp_path: Path) -> None:
    from otel_joules.exporters import CsvSpanExporter

    provider = make_provider(
        SimpleSpanProcessor(CsvSpanExporter(tmp_path / "s.csv")),
        SimpleSpanProcessor(JsonLinesSpanExporter(tmp_path / "s.jsonl")),
    )
    emit_train_and_epoch(provider)
    provider.shutdown()
    with open(tmp_path / "s.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text(encoding="utf-8").splitlines()]
    for row, line in zip(rows, lines, strict=True):
        assert json.loads(row["attributes"]) == line["attributes"]
        for key in ("name", "trace_id", "span_id", "start_time", "end_time"):
            assert row[key] == line[key]
        assert int(row["end_time_unix_nano"]) == line["end_time_unix_nano"]
        assert float(row["duration_s"]) == line["duration_s"]


def test_text_utf8_cannot_carry_becomes_the_replacement_character(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    span = provider.get_tracer("t").start_span("bad\ud800name", start_time=1, attributes={"energy.source": "é\udfff"})
    span.end(end_time=2)
    provider.shutdown()
    raw = path.read_bytes()
    assert b"\\ud" not in raw  # no escape a strict reader rejects
    record = json.loads(raw.decode("utf-8"))  # valid UTF-8
    assert record["name"] == "bad\ufffdname" and record["attributes"] == {"energy.source": "é\ufffd"}


PLAIN_EXIT_SCRIPT = r"""
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from otel_joules.exporters import CsvSpanExporter, JsonLinesSpanExporter

provider = TracerProvider()  # shutdown_on_exit=True, the SDK default
provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(sys.argv[1] + "/s.jsonl"), schedule_delay_millis=60_000))
provider.add_span_processor(BatchSpanProcessor(CsvSpanExporter(sys.argv[1] + "/s.csv"), schedule_delay_millis=60_000))
tracer = provider.get_tracer("t")
for index in range(5):
    with tracer.start_as_current_span(f"s{index}", attributes={"energy.joules": float(index)}):
        pass
# No flush, no shutdown: the spans sit in the batch processors when the script ends.
"""


def test_spans_still_batched_at_exit_reach_both_files(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PLAIN_EXIT_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [(r["name"], r["attributes"]["energy.joules"]) for r in records] == [(f"s{i}", float(i)) for i in range(5)]
    with open(tmp_path / "s.csv", newline="") as handle:
        assert [row["energy.joules"] for row in csv.DictReader(handle)] == ["0.0", "1.0", "2.0", "3.0", "4.0"]
    assert done.stderr == ""


def test_carbon_attributes_are_in_the_line_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    provider = make_provider(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    emit_run(provider)
    provider.shutdown()
    assert path.read_bytes() == (
        '{"name":"python3","trace_id":"' + TRACE_ID + '","span_id":"' + ROOT_SPAN_ID + '","parent_span_id":null,'
        '"start_time":"2023-11-14T22:13:20.000000000Z","end_time":"2023-11-14T22:13:22.000000000Z",'
        '"start_time_unix_nano":1700000000000000000,"end_time_unix_nano":1700000002000000000,'
        '"duration_s":2.0,"service_name":"svc",'
        '"attributes":{"carbon.intensity.gco2eq_per_kwh":300.0,"carbon.intensity.source":"explicit",'
        '"carbon.pue":1.2,"energy.co2eq.grams":0.00035,"energy.core_0.joules":0.25,"energy.dram_0.joules":0.5,'
        '"energy.joules":3.5,"energy.package_0.joules":3.0,"energy.source":"measured","energy.watts":1.75},"resource":{"host.name":"node-7","slurm.job.id":"4242"}}\n'
    ).encode("utf-8")
