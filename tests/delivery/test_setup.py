"""Providers from the OTEL_* variables, and bounded delivery to real receivers, closed ports and silent servers."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time

import pytest
from opentelemetry.sdk.resources import Resource

from otel_joules.delivery.destinations import (
    Destination,
    ExporterSpec,
    exporter_names,
    otlp_endpoint,
    otlp_protocol,
    parse_exporter_spec,
)
from otel_joules.delivery.outcomes import DeliveryReport, capture_sdk_logs
from otel_joules.delivery.setup import build_resource, telemetry_from_env
from otel_joules.errors import ConfigurationError
from otel_joules.meter.meter import EnergyMeter
from otel_joules.metrics.instruments import EnergyMetrics

from tests.fakes.otlp_receiver import OTLPHttpReceiver, otlp_grpc_receiver, otlp_receiver  # noqa: F401  (fixtures)
from tests.helpers.processes import closed_port

OTEL_VARIABLES = (
    "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "SLURM_JOB_ID",
    "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "grpc_proxy", "ALL_PROXY", "all_proxy",
)


@pytest.fixture(autouse=True)
def _no_inherited_otel_settings(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# --- parsing ---------------------------------------------------------------------------


def test_exporter_specs():
    assert parse_exporter_spec("otlp") == ExporterSpec("otlp")
    assert parse_exporter_spec(" Console ") == ExporterSpec("console")
    assert parse_exporter_spec("csv:out/runs.csv") == ExporterSpec("csv", "out/runs.csv")
    assert parse_exporter_spec("jsonl:C:x.jsonl") == ExporterSpec("jsonl", "C:x.jsonl")
    assert parse_exporter_spec("otlp-file:t.jsonl") == ExporterSpec("otlp-file", "t.jsonl")
    assert parse_exporter_spec("none") == ExporterSpec("none")
    with pytest.raises(ConfigurationError, match="unknown exporter 'zipkin'"):
        parse_exporter_spec("zipkin")
    with pytest.raises(ConfigurationError, match="needs a file: csv:PATH"):
        parse_exporter_spec("csv:")
    with pytest.raises(ConfigurationError, match="only csv, jsonl, otlp-file and parquet take a path"):
        parse_exporter_spec("otlp:http://x")


def test_exporter_names_from_the_sdk_variables():
    assert exporter_names("traces", {}) == ["otlp"]
    assert exporter_names("traces", {"OTEL_TRACES_EXPORTER": "console, otlp,console"}) == ["console", "otlp"]
    assert exporter_names("metrics", {"OTEL_METRICS_EXPORTER": "none"}) == []
    assert exporter_names("metrics", {"OTEL_TRACES_EXPORTER": "none"}) == ["otlp"]


def test_protocol_and_endpoint_resolution_matches_the_stock_exporters():
    assert otlp_protocol("traces", {}) == "grpc"
    assert otlp_protocol("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == "http/protobuf"
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}
    assert otlp_protocol("metrics", env) == "grpc" and otlp_protocol("traces", env) == "http/protobuf"
    with pytest.raises(ConfigurationError, match="grpc or http/protobuf"):
        otlp_protocol("traces", {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert otlp_endpoint("traces", "grpc", {}) == "http://localhost:4317"
    assert otlp_endpoint("traces", "http/protobuf", {}) == "http://localhost:4318/v1/traces"
    assert otlp_endpoint("metrics", "http/protobuf", {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:9/otlp/"}) == "https://c:9/otlp/v1/metrics"
    specific = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/custom"}
    assert otlp_endpoint("traces", "http/protobuf", specific) == "http://b:2/custom"
    assert otlp_endpoint("metrics", "grpc", specific) == "http://a:1"


def test_resource_service_name_precedence(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "8")
    assert build_resource(default_service_name="train.py").attributes["service.name"] == "train.py"
    assert build_resource(default_service_name="train.py").attributes["slurm.job.id"] == "8"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,team=a")
    assert build_resource(default_service_name="train.py").attributes["service.name"] == "from-attributes"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    assert build_resource(default_service_name="train.py").attributes["service.name"] == "from-env"
    assert build_resource("explicit", default_service_name="train.py").attributes["service.name"] == "explicit"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "slurm.job.id=override")
    assert build_resource().attributes["slurm.job.id"] == "override"  # the user's variables win over detection


# --- on the wire -----------------------------------------------------------------------


def test_spans_and_metrics_reach_a_real_receiver(otlp_receiver, monkeypatch, powercap):
    for key, value in otlp_receiver.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=lab")
    telemetry = telemetry_from_env(service_name="svc", export_timeout_s=5)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    EnergyMetrics(meter, telemetry.meter_provider)
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span("step"):
        pass
    powercap.zones["package_0"].advance_joules(1.25)
    time.sleep(0.55)  # past EnergyMetrics' snapshot reuse window
    telemetry.shutdown()
    meter.close()
    (span,) = otlp_receiver.wait_for_spans(name="step")
    assert span.resource_attributes["service.name"] == "svc"
    package = [p for p in otlp_receiver.wait_for_data_points("hw.energy") if p.attributes["hw.id"] == "intel-rapl:0"]
    assert package[-1].value == 1.25
    assert all(r.headers["x-tenant"] == "lab" for r in otlp_receiver.requests)
    protocol = otlp_receiver.env()["OTEL_EXPORTER_OTLP_PROTOCOL"]
    assert [str(d) for d in telemetry.destinations] == [
        f"otlp {protocol} {otlp_endpoint('traces', protocol)}",
        f"otlp {protocol} {otlp_endpoint('metrics', protocol)}",
    ]
    assert [telemetry.report.outcome(d) for d in telemetry.destinations] == ["delivered", "delivered"]
    assert telemetry.report.delivered(telemetry.destinations[0]) == 1


def test_closed_port_fails_in_milliseconds_for_spans_and_metrics(monkeypatch):
    port = closed_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    telemetry = telemetry_from_env(export_timeout_s=5, batch_spans=False)
    telemetry.meter_provider.get_meter("t").create_counter("work").add(1)
    started = time.monotonic()
    for name in ("a", "b", "c"):
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span(name):
            pass
    telemetry.shutdown()
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, elapsed
    failures = telemetry.report.failures
    assert {f.destination.signal for f in failures} == {"traces", "metrics"}
    assert all(f.reason == f"connection to 127.0.0.1:{port} refused" for f in failures)
    assert [telemetry.report.outcome(d) for d in telemetry.destinations] == ["failed", "failed"]


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never answers (a hung collector)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_silent_collector_costs_at_most_the_export_timeout(monkeypatch, silent_server, protocol):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{silent_server}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    telemetry = telemetry_from_env(export_timeout_s=0.5, batch_spans=False)
    report = telemetry.report
    started = time.monotonic()
    with capture_sdk_logs(report):
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("first"):
            pass
        first_done = time.monotonic()
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("second"):
            pass
        telemetry.shutdown()
    total = time.monotonic() - started
    assert first_done - started < 0.5 + 0.4, first_done - started
    # The endpoint is now known to be down: the second span fails without waiting again.
    assert total - (first_done - started) < 0.3 + 0.5, total
    assert report.outcome(telemetry.destinations[0]) == "failed"
    assert len(report.failures) == 2


def test_refused_export_is_recorded_with_the_sdk_message(monkeypatch):
    with OTLPHttpReceiver(failure=400) as receiver:
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        telemetry = telemetry_from_env(batch_spans=False)
        with capture_sdk_logs(telemetry.report) as report:
            with telemetry.tracer_provider.get_tracer("t").start_as_current_span("x"):
                pass
            telemetry.shutdown()
    assert report.failures[0].reason == "the exporter reported a failure"
    assert any("400" in message for message in report.sdk_messages)
    assert receiver.rejected == 1


def test_capture_sdk_logs_restores_the_logger():
    logger = logging.getLogger("opentelemetry")
    before = (list(logger.handlers), logger.propagate)
    report = DeliveryReport()
    with capture_sdk_logs(report):
        logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").error("Failed to export to %s", "x:1")
    assert report.sdk_messages == ["Failed to export to x:1"]
    assert (list(logger.handlers), logger.propagate) == before


# --- local exporters -------------------------------------------------------------------


def test_console_csv_jsonl_and_none_exporters(tmp_path):
    stream = io.StringIO()
    csv_path, jsonl_path = tmp_path / "s.csv", tmp_path / "s.jsonl"
    telemetry = telemetry_from_env(exporters=["console", f"csv:{csv_path}", f"jsonl:{jsonl_path}", "none"],
                                   console_stream=stream, resource=Resource({"service.name": "local"}))
    with telemetry.tracer_provider.get_tracer("t").start_as_current_span("local-span"):
        pass
    telemetry.shutdown()
    assert [(d.signal, d.kind) for d in telemetry.destinations] == [
        ("traces", "console"), ("traces", "csv"), ("traces", "jsonl"), ("metrics", "console")]
    assert '"name": "local-span"' in stream.getvalue()
    assert json.loads(jsonl_path.read_text())["service_name"] == "local"
    assert csv_path.read_text().splitlines()[1].startswith("local-span,")
    assert all(telemetry.report.outcome(d) == "delivered" for d in telemetry.destinations[:3])
    assert str(Destination("traces", "csv", "/x.csv")) == "csv /x.csv"


def test_no_exporter_at_all(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    telemetry = telemetry_from_env()
    assert telemetry.destinations == () and telemetry.meter_provider is None
    telemetry.shutdown()


def test_unknown_entry_point_exporter_and_bad_timeout(monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
    with pytest.raises(ConfigurationError, match="OTEL_TRACES_EXPORTER names 'carrier-pigeon'"):
        telemetry_from_env()
    with pytest.raises(ConfigurationError, match="must be a positive number of seconds"):
        telemetry_from_env(export_timeout_s=0)


def test_entry_point_exporter_by_name(monkeypatch):
    """Names other than otlp/console/none load the SDK's exporter entry points, like the SDK does."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp_proto_http")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    with OTLPHttpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.traces_url)
        telemetry = telemetry_from_env(batch_spans=False)
        with telemetry.tracer_provider.get_tracer("t").start_as_current_span("via-entry-point"):
            pass
        telemetry.shutdown()
        receiver.wait_for_spans(name="via-entry-point")
    assert [(d.kind, d.target) for d in telemetry.destinations] == [("otlp_proto_http", "")]
