"""Real OTLP receivers on loopback, for tests that assert what arrives on the wire.

Two receivers share one API:

* :class:`OTLPGrpcReceiver`: a grpcio server built from the service stubs that
  ``opentelemetry-proto`` ships (``TraceServiceServicer``, ``MetricsServiceServicer``,
  ``LogsServiceServicer`` and their ``add_*_to_server``).
* :class:`OTLPHttpReceiver`: an ``http.server`` answering ``POST /v1/traces``,
  ``/v1/metrics`` and ``/v1/logs`` with protobuf (``application/x-protobuf``) or OTLP/JSON
  (``application/json``, hex trace and span ids) bodies, plain or
  ``Content-Encoding: gzip``.

Both bind ``127.0.0.1`` on a free port, keep every decoded ``Export*ServiceRequest``, and
turn them into plain values (:class:`ReceivedSpan`, :class:`ReceivedDataPoint`,
:class:`ReceivedLogRecord`) with attributes as Python dicts. Use them as context managers,
or through the pytest fixtures at the bottom of this module, which a test module imports
by name (no conftest needed)::

    from tests.fakes.otlp_receiver import otlp_grpc_receiver  # noqa: F401  (pytest fixture)

    def test_energy_on_the_wire(otlp_grpc_receiver):
        run_something(env=otlp_grpc_receiver.env())
        span = otlp_grpc_receiver.wait_for_spans(name="train")[0]
        assert span.attributes["energy.joules"] > 0
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Iterator, Mapping, Union

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

ExportTraceServiceRequest = trace_service_pb2.ExportTraceServiceRequest
ExportMetricsServiceRequest = metrics_service_pb2.ExportMetricsServiceRequest
ExportLogsServiceRequest = logs_service_pb2.ExportLogsServiceRequest
ExportRequest = Union[ExportTraceServiceRequest, ExportMetricsServiceRequest, ExportLogsServiceRequest]

#: Default seconds the ``wait_for_*`` helpers wait before failing the test.
DEFAULT_WAIT_SECONDS = 10.0

_TEMPORALITY = {0: "unspecified", 1: "delta", 2: "cumulative"}


# --- decoded values -----------------------------------------------------------------


def any_value_to_python(value: AnyValue) -> Any:
    """Python value of an OTLP ``AnyValue`` (arrays become lists, key-value lists dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value_to_python(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_to_dict(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_to_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """OTLP attributes as a dict; a double stays a float, an int an int."""
    return {kv.key: any_value_to_python(kv.value) for kv in attributes}


@dataclass(frozen=True)
class ReceivedEvent:
    """A span event as received."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """A span as received; ids are lowercase hex, ``parent_span_id`` is "" for a root span."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    resource_attributes: dict[str, Any]
    scope_name: str
    scope_version: str
    status_code: int
    status_message: str
    events: tuple[ReceivedEvent, ...]

    @property
    def duration_ns(self) -> int:
        """End minus start, in nanoseconds."""
        return self.end_time_unix_nano - self.start_time_unix_nano


@dataclass(frozen=True)
class ReceivedDataPoint:
    """One metric data point as received, with its metric's name, unit and type.

    ``kind`` is ``gauge``, ``sum``, ``histogram``, ``exponential_histogram`` or ``summary``;
    ``value`` is set for gauges and sums, ``count``/``sum`` for the distribution kinds.
    """

    metric_name: str
    description: str
    unit: str
    kind: str
    value: float | int | None
    attributes: dict[str, Any]
    resource_attributes: dict[str, Any]
    scope_name: str
    is_monotonic: bool | None
    aggregation_temporality: str | None
    start_time_unix_nano: int
    time_unix_nano: int
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()


@dataclass(frozen=True)
class ReceivedLogRecord:
    """A log record as received."""

    body: Any
    severity_text: str
    severity_number: int
    attributes: dict[str, Any]
    resource_attributes: dict[str, Any]
    scope_name: str
    trace_id: str
    span_id: str
    time_unix_nano: int


@dataclass(frozen=True)
class ReceivedRequest:
    """One accepted export call: its signal, transport, headers (lowercase keys) and message."""

    signal: str
    transport: str
    headers: Mapping[str, str]
    content_type: str
    content_encoding: str
    message: ExportRequest


def spans_of(message: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Every span in one ``ExportTraceServiceRequest``."""
    spans = []
    for resource_spans in message.resource_spans:
        resource = attributes_to_dict(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    start_time_unix_nano=span.start_time_unix_nano,
                    end_time_unix_nano=span.end_time_unix_nano,
                    attributes=attributes_to_dict(span.attributes),
                    resource_attributes=resource,
                    scope_name=scope_spans.scope.name,
                    scope_version=scope_spans.scope.version,
                    status_code=span.status.code,
                    status_message=span.status.message,
                    events=tuple(ReceivedEvent(e.name, e.time_unix_nano, attributes_to_dict(e.attributes)) for e in span.events),
                ))
    return spans


def data_points_of(message: ExportMetricsServiceRequest) -> list[ReceivedDataPoint]:
    """Every data point in one ``ExportMetricsServiceRequest``."""
    points = []
    for resource_metrics in message.resource_metrics:
        resource = attributes_to_dict(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind is None:
                    continue
                data = getattr(metric, kind)
                monotonic = data.is_monotonic if kind == "sum" else None
                temporality = _TEMPORALITY.get(data.aggregation_temporality) if hasattr(data, "aggregation_temporality") else None
                for point in data.data_points:
                    common = dict(
                        metric_name=metric.name,
                        description=metric.description,
                        unit=metric.unit,
                        kind=kind,
                        attributes=attributes_to_dict(point.attributes),
                        resource_attributes=resource,
                        scope_name=scope_metrics.scope.name,
                        is_monotonic=monotonic,
                        aggregation_temporality=temporality,
                        start_time_unix_nano=point.start_time_unix_nano,
                        time_unix_nano=point.time_unix_nano,
                    )
                    if kind in ("gauge", "sum"):
                        number = point.WhichOneof("value")
                        points.append(ReceivedDataPoint(value=getattr(point, number) if number else None, **common))
                    else:
                        points.append(ReceivedDataPoint(
                            value=None,
                            count=point.count,
                            sum=point.sum if kind == "summary" or point.HasField("sum") else None,
                            bucket_counts=tuple(getattr(point, "bucket_counts", ())),
                            explicit_bounds=tuple(getattr(point, "explicit_bounds", ())),
                            **common,
                        ))
    return points


def log_records_of(message: ExportLogsServiceRequest) -> list[ReceivedLogRecord]:
    """Every log record in one ``ExportLogsServiceRequest``."""
    records = []
    for resource_logs in message.resource_logs:
        resource = attributes_to_dict(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                records.append(ReceivedLogRecord(
                    body=any_value_to_python(record.body),
                    severity_text=record.severity_text,
                    severity_number=record.severity_number,
                    attributes=attributes_to_dict(record.attributes),
                    resource_attributes=resource,
                    scope_name=scope_logs.scope.name,
                    trace_id=record.trace_id.hex(),
                    span_id=record.span_id.hex(),
                    time_unix_nano=record.time_unix_nano,
                ))
    return records


def _at_least(items: list[Any], count: int) -> list[Any] | None:
    return items if len(items) >= count else None


# --- shared store -------------------------------------------------------------------


class _OTLPStore:
    """What a receiver has accepted, with helpers to read and wait for it (thread-safe)."""

    transport = ""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._requests: list[ReceivedRequest] = []
        self._rejected = 0

    # Recording happens on server threads; readers get copies.
    def _record(self, request: ReceivedRequest) -> None:
        with self._condition:
            self._requests.append(request)
            self._condition.notify_all()

    def _record_rejection(self) -> None:
        with self._condition:
            self._rejected += 1
            self._condition.notify_all()

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every accepted export call, in arrival order."""
        with self._condition:
            return list(self._requests)

    @property
    def rejected(self) -> int:
        """How many export calls were refused (see ``failure``) or could not be decoded."""
        with self._condition:
            return self._rejected

    def _messages(self, signal: str) -> list[Any]:
        return [r.message for r in self.requests if r.signal == signal]

    @property
    def trace_requests(self) -> list[ExportTraceServiceRequest]:
        """Every ``ExportTraceServiceRequest`` accepted."""
        return self._messages("traces")

    @property
    def metrics_requests(self) -> list[ExportMetricsServiceRequest]:
        """Every ``ExportMetricsServiceRequest`` accepted."""
        return self._messages("metrics")

    @property
    def logs_requests(self) -> list[ExportLogsServiceRequest]:
        """Every ``ExportLogsServiceRequest`` accepted."""
        return self._messages("logs")

    def spans(self, name: str | None = None) -> list[ReceivedSpan]:
        """Spans received so far (only those called ``name`` when given)."""
        return [s for m in self.trace_requests for s in spans_of(m) if name is None or s.name == name]

    def data_points(self, metric_name: str | None = None) -> list[ReceivedDataPoint]:
        """Data points received so far (only those of ``metric_name`` when given), in arrival order."""
        return [p for m in self.metrics_requests for p in data_points_of(m) if metric_name is None or p.metric_name == metric_name]

    def metric_names(self) -> set[str]:
        """Names of every metric received so far."""
        return {p.metric_name for p in self.data_points()}

    def log_records(self) -> list[ReceivedLogRecord]:
        """Log records received so far."""
        return [r for m in self.logs_requests for r in log_records_of(m)]

    def clear(self) -> None:
        """Forget everything received (and the rejection count)."""
        with self._condition:
            self._requests.clear()
            self._rejected = 0

    def wait_until(self, ready: Callable[[], Any], what: str, timeout: float = DEFAULT_WAIT_SECONDS) -> Any:
        """Return ``ready()`` as soon as it is truthy; fail the test with ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                result = ready()
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._condition.wait(remaining)
        received = sorted({s.name for s in self.spans()}), sorted(self.metric_names())
        raise AssertionError(
            f"{self.transport} OTLP receiver: no {what} within {timeout:g} s; "
            f"received spans {received[0]}, metrics {received[1]}, {self.rejected} rejected call(s)"
        )

    def wait_for_spans(self, count: int = 1, *, name: str | None = None, timeout: float = DEFAULT_WAIT_SECONDS) -> list[ReceivedSpan]:
        """Wait until at least ``count`` spans (called ``name`` when given) arrived; return them all."""
        what = f"{count} span(s)" + (f" named {name!r}" if name else "")
        return self.wait_until(lambda: _at_least(self.spans(name), count), what, timeout)

    def wait_for_data_points(self, metric_name: str, count: int = 1, *, timeout: float = DEFAULT_WAIT_SECONDS) -> list[ReceivedDataPoint]:
        """Wait until at least ``count`` data points of ``metric_name`` arrived; return them all."""
        return self.wait_until(lambda: _at_least(self.data_points(metric_name), count),
                               f"{count} data point(s) of {metric_name!r}", timeout)

    def wait_for_log_records(self, count: int = 1, *, timeout: float = DEFAULT_WAIT_SECONDS) -> list[ReceivedLogRecord]:
        """Wait until at least ``count`` log records arrived; return them all."""
        return self.wait_until(lambda: _at_least(self.log_records(), count), f"{count} log record(s)", timeout)


# --- gRPC ---------------------------------------------------------------------------


class OTLPGrpcReceiver(_OTLPStore):
    """OTLP/gRPC receiver on ``host`` (loopback) and a free port.

    Set ``failure`` to a ``grpc.StatusCode`` to refuse every export with it (e.g.
    ``UNAVAILABLE``, which exporters retry, or ``INVALID_ARGUMENT``, which they do not).
    """

    transport = "grpc"

    def __init__(self, host: str = "127.0.0.1", *, failure: grpc.StatusCode | None = None, max_workers: int = 4) -> None:
        super().__init__()
        self.host = host
        self.failure = failure
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the value for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (insecure)."""
        if self._server is None:
            raise RuntimeError("the OTLP gRPC receiver is not started; use it as a context manager or call start()")
        return f"http://{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment variables that make the stock OTLP exporters send here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_INSECURE": "true"}

    def _handle(self, signal: str, request: ExportRequest, context: grpc.ServicerContext, response: Message) -> Message:
        if self.failure is not None:
            self._record_rejection()
            context.abort(self.failure, f"test receiver refuses {signal} with {self.failure.name}")
        metadata = {key.lower(): value if isinstance(value, str) else value.decode("latin-1")
                    for key, value in context.invocation_metadata()}
        self._record(ReceivedRequest(signal, "grpc", metadata, "application/grpc", metadata.get("grpc-encoding", ""), request))
        return response

    def start(self) -> "OTLPGrpcReceiver":
        """Bind a free port and serve."""
        if self._server is not None:
            return self
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 (generated name)
                return receiver._handle("traces", request, context, trace_service_pb2.ExportTraceServiceResponse())

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                return receiver._handle("metrics", request, context, metrics_service_pb2.ExportMetricsServiceResponse())

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):  # noqa: N802
                return receiver._handle("logs", request, context, logs_service_pb2.ExportLogsServiceResponse())

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="otlp-grpc-receiver"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
        self.port = server.add_insecure_port(f"{self.host}:0")
        if not self.port:
            raise RuntimeError(f"the OTLP gRPC receiver could not bind {self.host}")
        server.start()
        self._server = server
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop serving; calls in flight get ``grace`` seconds (None: cancelled at once)."""
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def __enter__(self) -> "OTLPGrpcReceiver":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --- HTTP ---------------------------------------------------------------------------

_HTTP_ROUTES: dict[str, tuple[str, type[Message], type[Message]]] = {
    "/v1/traces": ("traces", ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
    "/v1/metrics": ("metrics", ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
    "/v1/logs": ("logs", ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse),
}
_ID_FIELDS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}


class BadOTLPRequest(ValueError):
    """A body the receiver cannot decode; carries the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping expects base64."""
    if isinstance(node, dict):
        converted = {}
        for key, value in node.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    value = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise BadOTLPRequest(400, f"{key} {value!r} is not hex") from None
            converted[key] = _hex_ids_to_base64(value)
        return converted
    if isinstance(node, list):
        return [_hex_ids_to_base64(item) for item in node]
    return node


def decode_http_body(body: bytes, content_type: str, content_encoding: str, message_type: type[Message]) -> Message:
    """Decode an OTLP/HTTP body the way a receiver must, or raise :class:`BadOTLPRequest`."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as error:
            raise BadOTLPRequest(400, f"body is not valid gzip: {error}") from None
    elif encoding not in ("", "identity"):
        raise BadOTLPRequest(415, f"unsupported Content-Encoding {content_encoding!r}")
    media_type = content_type.split(";", 1)[0].strip().lower()
    message = message_type()
    if media_type == "application/x-protobuf":
        try:
            message.ParseFromString(body)
        except DecodeError as error:
            raise BadOTLPRequest(400, f"body is not a {message_type.__name__}: {error}") from None
    elif media_type == "application/json":
        try:
            # Receivers must ignore unknown fields (OTLP spec), so newer senders still work.
            json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), message, ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError) as error:
            if isinstance(error, BadOTLPRequest):
                raise
            raise BadOTLPRequest(400, f"body is not OTLP/JSON {message_type.__name__}: {error}") from None
    else:
        raise BadOTLPRequest(415, f"unsupported Content-Type {content_type!r}")
    return message


class OTLPHttpReceiver(_OTLPStore):
    """OTLP/HTTP receiver on ``host`` (loopback) and a free port.

    Set ``failure`` to an HTTP status (e.g. 503, which exporters retry, or 400, which they
    do not) to refuse every export with it.
    """

    transport = "http"

    def __init__(self, host: str = "127.0.0.1", *, failure: int | None = None) -> None:
        super().__init__()
        self.host = host
        self.failure = failure
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``: the base for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        if self._server is None:
            raise RuntimeError("the OTLP HTTP receiver is not started; use it as a context manager or call start()")
        return f"http://{self.host}:{self.port}"

    @property
    def traces_url(self) -> str:
        """Full URL of the traces endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""
        return self.endpoint + "/v1/traces"

    @property
    def metrics_url(self) -> str:
        """Full URL of the metrics endpoint (``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)."""
        return self.endpoint + "/v1/metrics"

    @property
    def logs_url(self) -> str:
        """Full URL of the logs endpoint (``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``)."""
        return self.endpoint + "/v1/logs"

    def env(self) -> dict[str, str]:
        """Environment variables that make the stock OTLP exporters send here."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}

    def start(self) -> "OTLPHttpReceiver":
        """Bind a free port and serve on a background thread."""
        if self._server is not None:
            return self
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                receiver._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # keep test output clean

        server = ThreadingHTTPServer((self.host, 0), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="otlp-http-receiver", daemon=True)
        self._thread.start()
        return self

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?", 1)[0]
        route = _HTTP_ROUTES.get(path)
        body = _read_body(handler)
        content_type = handler.headers.get("Content-Type", "")
        if route is None:
            self._record_rejection()
            _respond(handler, 404, "text/plain", f"no OTLP endpoint at {path}".encode())
            return
        signal, request_type, response_type = route
        if self.failure is not None:
            self._record_rejection()
            _respond(handler, self.failure, "text/plain", f"test receiver refuses {signal} with {self.failure}".encode())
            return
        try:
            message = decode_http_body(body, content_type, handler.headers.get("Content-Encoding", ""), request_type)
        except BadOTLPRequest as error:
            self._record_rejection()
            _respond(handler, error.status, "text/plain", str(error).encode())
            return
        headers = {key.lower(): value for key, value in handler.headers.items()}
        self._record(ReceivedRequest(signal, "http", headers, content_type, handler.headers.get("Content-Encoding", ""), message))
        if content_type.split(";", 1)[0].strip().lower() == "application/json":
            _respond(handler, 200, "application/json", b"{}")
        else:
            _respond(handler, 200, "application/x-protobuf", response_type().SerializeToString())

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = None
            self._thread = None

    def __enter__(self) -> "OTLPHttpReceiver":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _respond(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


# --- pytest fixtures (import them by name into a test module) ------------------------


@pytest.fixture
def otlp_grpc_receiver() -> Iterator[OTLPGrpcReceiver]:
    """A started :class:`OTLPGrpcReceiver`, stopped after the test."""
    with OTLPGrpcReceiver() as receiver:
        yield receiver


@pytest.fixture
def otlp_http_receiver() -> Iterator[OTLPHttpReceiver]:
    """A started :class:`OTLPHttpReceiver`, stopped after the test."""
    with OTLPHttpReceiver() as receiver:
        yield receiver


@pytest.fixture(params=["grpc", "http"])
def otlp_receiver(request: pytest.FixtureRequest) -> Iterator[OTLPGrpcReceiver | OTLPHttpReceiver]:
    """Each receiver in turn: a test using it runs once over gRPC and once over HTTP."""
    receiver: OTLPGrpcReceiver | OTLPHttpReceiver = OTLPGrpcReceiver() if request.param == "grpc" else OTLPHttpReceiver()
    with receiver:
        yield receiver
