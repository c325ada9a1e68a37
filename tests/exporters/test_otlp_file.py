"""OtlpFileSpanExporter and ``--exporter otlp-file:PATH``: OTLP/JSON the official parser loads, which report reads."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

import otel_joules
from otel_joules.exporters import ExporterPathError, MissingExtraError, OtlpFileSpanExporter

from tests.fakes.powercap import make_powercap
from tests.helpers.known_spans import CHILD_ATTRIBUTES, CHILD_NAME, CHILD_SPAN_ID, ROOT_ATTRIBUTES, ROOT_SPAN_ID, TRACE_ID, emit_train_and_epoch, make_provider
from tests.helpers.processes import BUSY_THEN_ADVANCE, clean_env, otel_joules_command

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def parse_line(line: str) -> ExportTraceServiceRequest:
    """Parse one line with protobuf's own JSON parser, the way OTLP/JSON receivers do.

    OTLP/JSON differs from the plain protobuf JSON mapping in one point: ids are hex,
    not base64 (the Collector's ``otlpjsonfile`` receiver and Jaeger convert them); the
    rest (field names, enums as integers, int64 as strings) is the protobuf mapping.
    """
    document = json.loads(line)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in _ID_FIELDS:
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.Parse(json.dumps(document), ExportTraceServiceRequest())


def spans_by_name(requests: list[ExportTraceServiceRequest]) -> dict[str, tuple]:
    """``name -> (span, resource attributes)`` over every request."""
    found = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = {kv.key: kv.value for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found[span.name] = (span, resource)
    return found


def attribute_values(span) -> dict:
    """Span attributes as Python values (doubles, strings, bools, ints, arrays)."""
    def value(v):
        kind = v.WhichOneof("value")
        if kind == "array_value":
            return tuple(value(x) for x in v.array_value.values)
        return getattr(v, kind)
    return {kv.key: value(kv.value) for kv in span.attributes}


def test_every_line_parses_and_carries_every_attribute(tmp_path):
    path = tmp_path / "traces.otlp.jsonl"
    provider = make_provider(SimpleSpanProcessor(OtlpFileSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2  # SimpleSpanProcessor: one export, so one request line, per span
    raw_spans = [span for line in lines for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]
    # What Jaeger and Tempo require of OTLP/JSON: hex ids, integer enums.
    assert {(s["name"], s["traceId"], s["spanId"], s.get("parentSpanId")) for s in raw_spans} == {
        (CHILD_NAME, TRACE_ID, CHILD_SPAN_ID, ROOT_SPAN_ID), ("train", TRACE_ID, ROOT_SPAN_ID, None)}
    assert all(s["kind"] == 1 for s in raw_spans)

    # protobuf's parser also takes each line exactly as written (it reads the hex ids as
    # base64, so only their bytes differ): every attribute is there.
    raw = spans_by_name([json_format.Parse(line, ExportTraceServiceRequest()) for line in lines])
    assert attribute_values(raw["train"][0]) == ROOT_ATTRIBUTES

    spans = spans_by_name([parse_line(line) for line in lines])
    root, resource = spans["train"]
    assert attribute_values(root) == ROOT_ATTRIBUTES  # all of them, not only energy.*
    assert resource["service.name"].string_value == "svc"
    assert root.trace_id.hex() == TRACE_ID and root.span_id.hex() == ROOT_SPAN_ID and not root.parent_span_id
    assert root.end_time_unix_nano - root.start_time_unix_nano == 1_500_000_000
    child, _ = spans[CHILD_NAME]
    assert attribute_values(child) == CHILD_ATTRIBUTES
    assert child.parent_span_id.hex() == ROOT_SPAN_ID


def test_a_batch_is_one_line_and_an_existing_file_is_appended_to(tmp_path):
    path = tmp_path / "traces.otlp.jsonl"
    path.write_text("")  # a prior run's (empty) file
    provider = make_provider(BatchSpanProcessor(OtlpFileSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    provider = make_provider(BatchSpanProcessor(OtlpFileSpanExporter(path)))
    emit_train_and_epoch(provider)
    provider.shutdown()
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        assert set(spans_by_name([parse_line(line)])) == {"train", CHILD_NAME}


def test_unwritable_path_and_missing_extra_fail_at_construction_with_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(ExporterPathError, match="is a folder"):
        OtlpFileSpanExporter(tmp_path)
    with pytest.raises(ExporterPathError, match="its folder must exist"):
        OtlpFileSpanExporter(tmp_path / "missing" / "t.jsonl")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.json.common.trace_encoder", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'otel-joules\[otlp-file\]'"):
        OtlpFileSpanExporter(tmp_path / "t.jsonl")
    assert not (tmp_path / "t.jsonl").exists()


def test_instrument_users_get_energy_in_the_file(tmp_path):
    """The one-line instrument() path with the exporter behind a BatchSpanProcessor."""
    pc = make_powercap(tmp_path / "sys", "one_socket")
    path = tmp_path / "traces.otlp.jsonl"
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OtlpFileSpanExporter(path)))
    handle = otel_joules.instrument(provider, metrics_enabled=False, sysfs_root=pc.sysfs_root)
    try:
        with provider.get_tracer("t").start_as_current_span("step"):
            pc.zones["package_0"].advance_joules(2.0)
            pc.zones["dram_0"].advance_joules(0.5)
    finally:
        handle.uninstrument()
        provider.shutdown()
    (line,) = path.read_text().splitlines()
    span, _ = spans_by_name([parse_line(line)])["step"]
    attributes = attribute_values(span)
    assert attributes["energy.joules"] == pytest.approx(2.5)
    assert attributes["energy.package_0.joules"] == pytest.approx(2.0)
    assert attributes["energy.source"] == "measured"


def test_a_non_utf8_argument_in_the_command_line_keeps_the_batch_parseable(tmp_path):
    path = tmp_path / "spans.otlp.jsonl"
    provider = make_provider(SimpleSpanProcessor(OtlpFileSpanExporter(path)))
    argument = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 file name: a lone surrogate in the Python str
    span = provider.get_tracer("t").start_span("cmd", attributes={"process.command_line": f"python3 {argument}",
                                                                   "energy.joules": 1.0})
    span.end()
    provider.shutdown()
    raw = path.read_bytes()
    assert b"\\udc" not in raw
    (line,) = raw.decode("utf-8").splitlines()
    span, _ = spans_by_name([parse_line(line)])["cmd"]  # protobuf's own parser accepts the whole batch
    assert attribute_values(span)["process.command_line"] == "python3 caf\ufffd.txt"


def test_run_records_a_non_utf8_argument_as_the_replacement_character(tmp_path):
    path = tmp_path / "run.otlp.jsonl"
    env = clean_env(tmp_path, {"OTEL_JOULES_PROMETHEUS_WAIT_S": "0"})
    command = [*otel_joules_command("run", "--exporter", f"otlp-file:{path}", "--span-name", "bench", "--"),
               sys.executable, "-c", "pass", b"caf\xe9.txt"]
    result = subprocess.run(command, env=env, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    (line,) = path.read_text(encoding="utf-8").splitlines()
    span, _ = spans_by_name([parse_line(line)])["bench"]
    assert attribute_values(span)["process.command_line"].endswith("pass 'caf\ufffd.txt'")


def test_run_writes_otlp_json_that_parses_and_report_reads(tmp_path):
    pc = make_powercap(tmp_path / "sys", "one_socket")
    path = tmp_path / "run.otlp.jsonl"
    env = clean_env(tmp_path, {"OTEL_JOULES_SYSFS_ROOT": pc.sysfs_root})
    child = [sys.executable, "-c", BUSY_THEN_ADVANCE, str(pc.zones["package_0"].path / "energy_uj"), "3000000",
             str(pc.zones["dram_0"].path / "energy_uj"), "500000"]
    result = subprocess.run(otel_joules_command("run", "--exporter", f"otlp-file:{path}", "--span-name", "bench",
                                                "--carbon-intensity", "400", "--service-name", "svc", "--", *child),
                            env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert f"traces -> otlp-file {path}: delivered" in result.stderr
    (line,) = path.read_text().splitlines()
    span, resource = spans_by_name([parse_line(line)])["bench"]
    attributes = attribute_values(span)
    assert attributes["energy.joules"] == 3.5
    assert attributes["energy.co2eq.grams"] == pytest.approx(3.5 / 3.6e6 * 400)
    assert attributes["carbon.intensity.gco2eq_per_kwh"] == 400.0
    assert attributes["process.exit.code"] == 0
    assert resource["service.name"].string_value == "svc"

    report = subprocess.run(otel_joules_command("report", str(path), "--json"), env=env, capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert report.returncode == 0, report.stderr
    (run,) = json.loads(report.stdout)["runs"]
    assert run["name"] == "bench" and run["service_name"] == "svc"
    # The report sums the command's share, read back from the OTLP file, with the host's 3.5 J beside it.
    share_joules = attributes["energy.attributed.joules"]
    assert 0 < share_joules <= 3.5
    assert run["energy_joules"] == pytest.approx(share_joules, rel=1e-12) and run["host_interval_joules"] == 3.5
    assert run["co2eq_grams"] == pytest.approx(share_joules / 3.6e6 * 400, rel=1e-12)
