"""The loopback OTLP receivers decode what the stock OpenTelemetry exporters send.

Spans and metrics are produced by the real SDK and sent by the real exporters from
opentelemetry-exporter-otlp (gRPC and HTTP/protobuf, plain and gzip), and by the
OTLP/JSON encoder of opentelemetry-exporter-otlp-json-file (posted as
``application/json``). The receivers must return exactly the values and ids the SDK
produced.
"""

from __future__ import annotations

import gzip
import io
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.json.file.metric_exporter import FileMetricExporter
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.fakes.otlp_receiver import (  # noqa: F401  (otlp_receiver is a pytest fixture)
    OTLPGrpcReceiver,
    OTLPHttpReceiver,
    ReceivedDataPoint,
    otlp_receiver,
)

SERVICE = "receiver-test"
SPAN_ATTRIBUTES = {
    "energy.joules": 12.5,
    "energy.package_0.joules": 10.25,
    "energy.source": "estimate",
    "training.epoch": 3,
    "energy.measured": False,
    "energy.domains": ("package_0", "dram_0"),
}
DEVICE = {"hw.id": "package_0", "hw.type": "cpu", "hw.name": "Intel(R) Xeon(R)"}


@dataclass(frozen=True)
class Sent:
    """Ids the SDK gave the spans it exported."""

    trace_id: str
    parent_span_id: str
    child_span_id: str


def send_span_and_metrics(span_exporter: SpanExporter, metric_exporter: MetricExporter) -> Sent:
    """A parent and a child span (with a double attribute) and two metrics, through the given exporters."""
    resource = Resource.create({"service.name": SERVICE, "host.name": "node-7"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tracer_provider.get_tracer("otel_joules.test", "1.2.3")
    with tracer.start_as_current_span("train") as parent:
        with tracer.start_as_current_span("epoch") as child:
            child.set_attributes(SPAN_ATTRIBUTES)
            child.add_event("prediction", {"energy.predicted.joules": 99.5})
    tracer_provider.shutdown()

    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = meter_provider.get_meter("otel_joules.test")
    energy = meter.create_counter("hw.energy", unit="J", description="Energy consumed by the component")
    energy.add(3.5, DEVICE)
    energy.add(1.25, DEVICE)
    meter.create_gauge("hw.power", unit="W").set(42.0, DEVICE)
    meter_provider.shutdown()  # exports once, then stops
    return Sent(
        trace_id=format(parent.get_span_context().trace_id, "032x"),
        parent_span_id=format(parent.get_span_context().span_id, "016x"),
        child_span_id=format(child.get_span_context().span_id, "016x"),
    )


def assert_received(receiver: OTLPGrpcReceiver | OTLPHttpReceiver, sent: Sent) -> None:
    """What the SDK sent is what the receiver decoded, value for value."""
    spans = {s.name: s for s in receiver.wait_for_spans(2)}
    assert set(spans) == {"train", "epoch"}
    parent, child = spans["train"], spans["epoch"]
    assert (parent.trace_id, parent.span_id, parent.parent_span_id) == (sent.trace_id, sent.parent_span_id, "")
    assert (child.trace_id, child.span_id, child.parent_span_id) == (sent.trace_id, sent.child_span_id, sent.parent_span_id)
    expected = dict(SPAN_ATTRIBUTES, **{"energy.domains": ["package_0", "dram_0"]})
    assert child.attributes == expected
    assert type(child.attributes["energy.joules"]) is float and type(child.attributes["training.epoch"]) is int
    assert child.resource_attributes["service.name"] == SERVICE
    assert child.resource_attributes["host.name"] == "node-7"
    assert (child.scope_name, child.scope_version) == ("otel_joules.test", "1.2.3")
    assert [(e.name, e.attributes) for e in child.events] == [("prediction", {"energy.predicted.joules": 99.5})]
    assert child.duration_ns >= 0 and parent.start_time_unix_nano <= child.start_time_unix_nano

    (energy,) = receiver.wait_for_data_points("hw.energy")
    assert energy == ReceivedDataPoint(
        metric_name="hw.energy", description="Energy consumed by the component", unit="J", kind="sum",
        value=4.75, attributes=DEVICE, resource_attributes=energy.resource_attributes, scope_name="otel_joules.test",
        is_monotonic=True, aggregation_temporality="cumulative",
        start_time_unix_nano=energy.start_time_unix_nano, time_unix_nano=energy.time_unix_nano,
    )
    assert energy.resource_attributes["service.name"] == SERVICE
    assert 0 < energy.start_time_unix_nano <= energy.time_unix_nano
    (power,) = receiver.wait_for_data_points("hw.power")
    assert (power.kind, power.unit, power.value, power.attributes, power.is_monotonic) == ("gauge", "W", 42.0, DEVICE, None)
    assert receiver.metric_names() == {"hw.energy", "hw.power"}
    assert receiver.rejected == 0


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip], ids=["plain", "gzip"])
def test_grpc_receiver_decodes_the_stock_grpc_exporters(compression: grpc.Compression) -> None:
    with OTLPGrpcReceiver() as receiver:
        sent = send_span_and_metrics(
            GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True, compression=compression, headers={"x-tenant": "lab"}),
            GrpcMetricExporter(endpoint=receiver.endpoint, insecure=True, compression=compression),
        )
        assert_received(receiver, sent)
        signals = [(r.signal, r.transport) for r in receiver.requests]
        assert signals.count(("traces", "grpc")) == 2 and signals.count(("metrics", "grpc")) == 1
        assert receiver.requests[0].headers["x-tenant"] == "lab"
        assert len(receiver.trace_requests) == 2 and len(receiver.metrics_requests) == 1


@pytest.mark.parametrize("compression", [HttpCompression.NoCompression, HttpCompression.Gzip], ids=["plain", "gzip"])
def test_http_receiver_decodes_the_stock_http_exporters(compression: HttpCompression) -> None:
    with OTLPHttpReceiver() as receiver:
        sent = send_span_and_metrics(
            HttpSpanExporter(endpoint=receiver.traces_url, compression=compression, headers={"x-tenant": "lab"}),
            HttpMetricExporter(endpoint=receiver.metrics_url, compression=compression),
        )
        assert_received(receiver, sent)
        first = receiver.requests[0]
        assert first.headers["x-tenant"] == "lab"
        assert first.content_type == "application/x-protobuf"
        assert first.content_encoding == ("gzip" if compression is HttpCompression.Gzip else "")


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_http_receiver_decodes_otlp_json_with_hex_ids(gzipped: bool) -> None:
    spans_out, metrics_out = io.StringIO(), io.StringIO()
    sent = send_span_and_metrics(FileSpanExporter(stream=spans_out), FileMetricExporter(stream=metrics_out))
    with OTLPHttpReceiver() as receiver:
        for url, lines in ((receiver.traces_url, spans_out), (receiver.metrics_url, metrics_out)):
            for line in lines.getvalue().splitlines():
                body = gzip.compress(line.encode()) if gzipped else line.encode()
                headers = {"Content-Type": "application/json", **({"Content-Encoding": "gzip"} if gzipped else {})}
                assert _post(url, body, headers) == (200, b"{}")
        assert_received(receiver, sent)


def test_http_receiver_answers_protobuf_with_an_export_response() -> None:
    with OTLPHttpReceiver() as receiver:
        status, body = _post(receiver.traces_url, b"", {"Content-Type": "application/x-protobuf"})
        # An empty ExportTraceServiceResponse serialises to no bytes at all.
        assert (status, body) == (200, b"")
        assert len(receiver.trace_requests) == 1 and receiver.spans() == []


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("/v1/traces", b"\x0a\xff\x01", {"Content-Type": "application/x-protobuf"}, 400),  # length past the end
        ("/v1/traces", b"not gzip", {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}, 400),
        ("/v1/traces", b"{}", {"Content-Type": "text/plain"}, 415),
        ("/v1/traces", b"{}", {"Content-Type": "application/json", "Content-Encoding": "br"}, 415),
        ("/v1/metrics", b"{not json", {"Content-Type": "application/json"}, 400),
        ("/v1/traces", b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","name":"x"}]}]}]}',
         {"Content-Type": "application/json"}, 400),
        ("/v1/profiles", b"", {"Content-Type": "application/x-protobuf"}, 404),
    ],
    ids=["truncated-protobuf", "bad-gzip", "text-plain", "brotli", "bad-json", "non-hex-id", "unknown-path"],
)
def test_http_receiver_refuses_what_it_cannot_decode(path: str, body: bytes, headers: dict[str, str], status: int) -> None:
    with OTLPHttpReceiver() as receiver:
        assert _post(receiver.endpoint + path, body, headers)[0] == status
        assert receiver.requests == [] and receiver.rejected == 1


def test_http_receiver_failure_status_makes_the_exporter_fail() -> None:
    with OTLPHttpReceiver(failure=400) as receiver:
        exporter = HttpSpanExporter(endpoint=receiver.traces_url, timeout=5)
        provider = TracerProvider()
        with provider.get_tracer("t").start_as_current_span("refused") as span:
            pass
        assert exporter.export([span]) is SpanExportResult.FAILURE
        assert receiver.rejected == 1 and receiver.spans() == []
        receiver.failure = None
        assert exporter.export([span]) is SpanExportResult.SUCCESS
        assert [s.name for s in receiver.spans()] == ["refused"]


def test_grpc_receiver_failure_code_makes_the_exporter_fail() -> None:
    with OTLPGrpcReceiver(failure=grpc.StatusCode.INVALID_ARGUMENT) as receiver:
        exporter = GrpcSpanExporter(endpoint=receiver.endpoint, insecure=True, timeout=5)
        provider = TracerProvider()
        with provider.get_tracer("t").start_as_current_span("refused") as span:
            pass
        assert exporter.export([span]) is SpanExportResult.FAILURE
        assert receiver.rejected == 1 and receiver.spans() == []
        receiver.failure = None
        assert exporter.export([span]) is SpanExportResult.SUCCESS
        assert [s.name for s in receiver.spans()] == ["refused"]
        exporter.shutdown()


def test_env_points_the_stock_exporters_at_the_receiver(otlp_receiver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in otlp_receiver.env().items():
        monkeypatch.setenv(key, value)
    exporter_class = GrpcSpanExporter if otlp_receiver.transport == "grpc" else HttpSpanExporter
    exporter = exporter_class()  # everything from the environment
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("from-env") as span:
        span.set_attribute("energy.joules", 0.5)
    assert exporter.export([span]) is SpanExportResult.SUCCESS
    (received,) = otlp_receiver.wait_for_spans(name="from-env")
    assert received.attributes == {"energy.joules": 0.5}
    exporter.shutdown()


def test_wait_fails_with_what_did_arrive() -> None:
    with OTLPHttpReceiver() as receiver:
        _post(receiver.traces_url, b"", {"Content-Type": "application/x-protobuf"})
        with pytest.raises(AssertionError, match=r"no 1 span\(s\) named 'train' within 0.2 s; received spans \[\], metrics \[\]"):
            receiver.wait_for_spans(name="train", timeout=0.2)
        with pytest.raises(AssertionError, match="no 2 data point"):
            receiver.wait_for_data_points("hw.energy", 2, timeout=0.1)
        receiver.clear()
        assert receiver.requests == [] and receiver.rejected == 0


@pytest.mark.parametrize("receiver_class", [OTLPGrpcReceiver, OTLPHttpReceiver])
def test_stopped_receiver_frees_its_port(receiver_class: type) -> None:
    receiver = receiver_class()
    with pytest.raises(RuntimeError, match="not started"):
        receiver.endpoint  # noqa: B018
    with receiver:
        port = receiver.port
        assert port > 0 and receiver.endpoint == f"http://127.0.0.1:{port}"
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
