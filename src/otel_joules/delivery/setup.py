"""Tracer and meter providers exporting where the standard ``OTEL_*`` variables say, with bounded delivery.

:func:`telemetry_from_env` builds an SDK ``TracerProvider`` and ``MeterProvider`` the
way the OpenTelemetry SDK's own configuration would, for tools that run outside
``opentelemetry-instrument`` (``otel-joules run``):

- exporters per signal from ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``
  (comma-separated; ``otlp`` when unset; ``console``; ``none``; or the name of any
  installed ``opentelemetry_traces_exporter``/``opentelemetry_metrics_exporter`` entry point),
  or from ``exporters=`` specs (``otlp``, ``console``, ``csv:PATH``, ``jsonl:PATH``,
  ``otlp-file:PATH``, ``none``), which replace both variables. The file kinds hold spans
  only; ``otlp-file`` writes OTLP/JSON, one request per line (Jaeger's UI, Tempo);
- ``otlp`` speaks ``OTEL_EXPORTER_OTLP_{TRACES,METRICS}_PROTOCOL`` or
  ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``grpc`` (the Python SDK's default) or ``http/protobuf``.
  The stock OTLP exporters read everything else themselves: ``OTEL_EXPORTER_OTLP_ENDPOINT``
  and the per-signal endpoints, ``..._HEADERS``, ``..._COMPRESSION``, ``..._CERTIFICATE``,
  ``..._INSECURE``, ``..._TIMEOUT``, ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE``;
- metrics through a ``PeriodicExportingMetricReader`` every ``OTEL_METRIC_EXPORT_INTERVAL``
  milliseconds (60000 when unset), flushed by :meth:`Telemetry.shutdown`;
- ``prometheus`` (``pip install 'otel-joules[prometheus]'``): a scrape endpoint on
  ``OTEL_EXPORTER_PROMETHEUS_HOST``:``OTEL_EXPORTER_PROMETHEUS_PORT`` (``localhost:9464``).
  Every scrape is recorded. A pull exporter only delivers what is scraped, so
  :meth:`Telemetry.shutdown` keeps the endpoint up until it has been scraped once more
  after the last measurement, at most ``OTEL_JOULES_PROMETHEUS_WAIT_S`` seconds
  (:data:`otel_joules.config.DEFAULT_PROMETHEUS_WAIT_S`; 0 does not wait), then closes it;
- the resource from ``Resource.create()`` (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS``) over the job attributes of
  :mod:`otel_joules.delivery.resource`.

Delivery never hangs or fails the caller. Every exporter is wrapped so that one export
call takes at most ``export_timeout_s`` (the stock exporters retry for up to their own
timeout, and SDK 1.27's for over a minute), exceptions become failed exports, and each
outcome is recorded in a :class:`DeliveryReport`. Before sending to an OTLP endpoint not
yet known to answer, a TCP connection is tried first (unless a proxy is configured), so a
closed port fails in milliseconds instead of after the exporter's retries; an endpoint that
failed is not tried again for :data:`RETRY_AFTER_S` seconds.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence, TextIO
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_joules._fork import register_fork_hook
from otel_joules.config import OTEL_JOULES_PROMETHEUS_WAIT_S, Settings
from otel_joules.delivery.resource import job_resource
from otel_joules.errors import ConfigurationError
from otel_joules.semconv import SERVICE_NAME

_log = logging.getLogger("otel_joules")

#: The OTLP specification's default export timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``).
DEFAULT_EXPORT_TIMEOUT_S = 10.0
#: Longest wait for the TCP connection that checks an OTLP endpoint is there.
PROBE_TIMEOUT_S = 2.0
#: An endpoint that failed is not tried again before this many seconds.
RETRY_AFTER_S = 30.0

#: Longest wait at shutdown for a last scrape of a Prometheus endpoint (a common scrape interval).
#: ``Destination.kind`` of the Prometheus scrape endpoint.
PROMETHEUS = "prometheus"

SIGNAL_TRACES = "traces"
SIGNAL_METRICS = "metrics"

PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (PROTOCOL_GRPC, PROTOCOL_HTTP_PROTOBUF)

#: ``--exporter`` kinds that write a file (``KIND:PATH``).
FILE_EXPORTER_KINDS = ("csv", "jsonl", "otlp-file")

#: ``--exporter`` kinds, and the signals each one carries.
EXPORTER_KINDS: dict[str, tuple[str, ...]] = {
    "otlp": (SIGNAL_TRACES, SIGNAL_METRICS),
    "console": (SIGNAL_TRACES, SIGNAL_METRICS),
    "csv": (SIGNAL_TRACES,),
    "jsonl": (SIGNAL_TRACES,),
    "otlp-file": (SIGNAL_TRACES,),
    "none": (),
}

_DEFAULT_OTLP_ENDPOINT = {PROTOCOL_GRPC: "http://localhost:4317", PROTOCOL_HTTP_PROTOBUF: "http://localhost:4318"}


# --- what goes where ----------------------------------------------------------------


@dataclass(frozen=True)
class Destination:
    """Where one signal goes.

    Attributes:
        signal: ``traces`` or ``metrics``.
        kind: ``otlp``, ``console``, ``csv``, ``jsonl`` or an entry-point exporter name.
        target: Human-readable target: ``grpc http://localhost:4317``, ``stderr``, a path.
    """

    signal: str
    kind: str
    target: str

    def __str__(self) -> str:
        return f"{self.kind} {self.target}".strip()


@dataclass(frozen=True)
class ExporterSpec:
    """One parsed ``--exporter`` value: ``kind`` and, for the file kinds (:data:`FILE_EXPORTER_KINDS`), the file ``path``."""

    kind: str
    path: str | None = None


def parse_exporter_spec(text: str) -> ExporterSpec:
    """Parse ``otlp``, ``console``, ``none``, ``csv:PATH``, ``jsonl:PATH`` or ``otlp-file:PATH``.

    Raises:
        ConfigurationError: unknown kind, or a file kind without a path (or a path given to another kind).
    """
    kind, sep, path = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in EXPORTER_KINDS:
        raise ConfigurationError(
            f"unknown exporter {text!r}: use otlp, console, csv:PATH, jsonl:PATH, otlp-file:PATH or none"
        )
    if kind in FILE_EXPORTER_KINDS:
        if not path.strip():
            example = "traces.otlp.jsonl" if kind == "otlp-file" else f"spans.{kind}"
            raise ConfigurationError(f"exporter {text!r} needs a file: {kind}:PATH, e.g. {kind}:{example}")
        return ExporterSpec(kind, path.strip())
    if sep:
        raise ConfigurationError(f"exporter {text!r}: only csv, jsonl and otlp-file take a path; write just {kind!r}")
    return ExporterSpec(kind)


def exporter_names(signal: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Exporter names ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` ask for (``["otlp"]`` when unset; ``[]`` for none)."""
    env = os.environ if env is None else env
    raw = env.get(f"OTEL_{signal.upper()}_EXPORTER", "")
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    if not names:
        return ["otlp"]
    if "none" in names:
        return []
    return list(dict.fromkeys(names))


def otlp_protocol(signal: str, env: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol for ``signal``: the per-signal variable, else the general one, else ``grpc``.

    Raises:
        ConfigurationError: a protocol the Python exporters do not speak (``http/json``, typos).
    """
    env = os.environ if env is None else env
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    for name in (specific, "OTEL_EXPORTER_OTLP_PROTOCOL"):
        raw = env.get(name, "").strip()
        if raw:
            if raw.lower() not in PROTOCOLS:
                raise ConfigurationError(
                    f"{name}={raw!r} is not supported: the Python OTLP exporters speak grpc or http/protobuf"
                )
            return raw.lower()
    return PROTOCOL_GRPC


def otlp_endpoint(signal: str, protocol: str, env: Mapping[str, str] | None = None) -> str:
    """The URL the stock OTLP exporter for ``signal`` sends to, resolved as it resolves it."""
    env = os.environ if env is None else env
    specific = env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT", "").strip()
    if specific:
        return specific
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or _DEFAULT_OTLP_ENDPOINT[protocol]
    if protocol == PROTOCOL_GRPC:
        return base
    return base + (f"v1/{signal}" if base.endswith("/") else f"/v1/{signal}")


def _probe_address(endpoint: str, env: Mapping[str, str]) -> tuple[str, int] | None:
    """``(host, port)`` to test with a TCP connection, or None where a test would mislead."""
    if endpoint.startswith("unix:"):
        return None
    url = urlsplit(endpoint if "://" in endpoint else "http://" + endpoint)
    host = url.hostname
    if not host:
        return None
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None
    # Behind a proxy the exporter never connects to the endpoint itself.
    proxies = {k.lower() for k, v in env.items() if k.lower() in ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy") and v}
    if proxies and not urllib.request.proxy_bypass_environment(host, {"no": env.get("no_proxy") or env.get("NO_PROXY") or ""}):
        return None
    return host, port


def probe(address: tuple[str, int], timeout_s: float) -> str | None:
    """Try a TCP connection to ``address``; None when it opens, else why not (one short phrase)."""
    host, port = address
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except ConnectionRefusedError:
        return f"connection to {host}:{port} refused"
    except socket.timeout:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except socket.gaierror as exc:
        return f"cannot resolve {host} ({exc.strerror})"
    except OSError as exc:
        return f"cannot connect to {host}:{port} ({exc.strerror or exc})"


# --- outcomes -----------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryFailure:
    """One failed export: where to and why."""

    destination: Destination
    reason: str


@dataclass
class _EndpointState:
    good: bool = False
    failed_at: float | None = None
    reason: str = ""


class DeliveryReport:
    """What reached each destination, thread-safe; shared by every wrapped exporter of a :class:`Telemetry`.

    Also keeps the state of each OTLP endpoint (answering or not), so spans and metrics
    sent to one unreachable collector fail once each, fast.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        register_fork_hook(self, "_new_lock")  # taken by the exporters' background threads
        self._delivered: dict[Destination, int] = {}
        # Pull destinations: how long shutdown waited for a final scrape, and whether one came.
        self._final_scrape: dict[Destination, tuple[bool, float]] = {}
        self._failures: list[DeliveryFailure] = []
        self._endpoints: dict[tuple[str, int], _EndpointState] = {}
        self.sdk_messages: list[str] = []

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def record_success(self, destination: Destination, items: int) -> None:
        """``items`` spans or metric batches reached ``destination``."""
        with self._lock:
            self._delivered[destination] = self._delivered.get(destination, 0) + items

    def record_failure(self, destination: Destination, reason: str) -> None:
        """An export to ``destination`` failed for ``reason``."""
        with self._lock:
            self._failures.append(DeliveryFailure(destination, reason))

    @property
    def failures(self) -> list[DeliveryFailure]:
        """Every failure, in order."""
        with self._lock:
            return list(self._failures)

    def delivered(self, destination: Destination) -> int:
        """How many items reached ``destination``."""
        with self._lock:
            return self._delivered.get(destination, 0)

    def record_final_scrape(self, destination: Destination, scraped: bool, waited_s: float) -> None:
        """Whether the pull ``destination`` was scraped after the last measurement (waiting ``waited_s`` at most)."""
        with self._lock:
            self._final_scrape[destination] = (scraped, waited_s)

    def outcome(self, destination: Destination) -> str:
        """``delivered``, ``failed`` (nothing got through), ``partly delivered`` or ``nothing sent``.

        For a scrape endpoint: ``scraped N time(s)``, and whether the last measurement was.
        """
        with self._lock:
            ok = self._delivered.get(destination, 0)
            failed = any(f.destination == destination for f in self._failures)
            final = self._final_scrape.get(destination)
        if destination.kind == PROMETHEUS:
            return _scrape_outcome(ok, final)
        if failed:
            return "partly delivered" if ok else "failed"
        return "delivered" if ok else "nothing sent"

    # endpoint bookkeeping, used by the wrapped exporters

    def _endpoint_check(self, address: tuple[str, int], timeout_s: float) -> str | None:
        """None when ``address`` may be sent to now, else the reason it may not."""
        with self._lock:
            state = self._endpoints.setdefault(address, _EndpointState())
            if state.good:
                return None
            if state.failed_at is not None and time.monotonic() - state.failed_at < RETRY_AFTER_S:
                return state.reason
        reason = probe(address, min(PROBE_TIMEOUT_S, timeout_s))
        if reason is not None:
            self._endpoint_failed(address, reason)
        return reason

    def _endpoint_answered(self, address: tuple[str, int]) -> None:
        with self._lock:
            self._endpoints[address] = _EndpointState(good=True)

    def _endpoint_failed(self, address: tuple[str, int], reason: str) -> None:
        with self._lock:
            self._endpoints[address] = _EndpointState(good=False, failed_at=time.monotonic(), reason=reason)


def _scrape_outcome(scrapes: int, final: tuple[bool, float] | None) -> str:
    if final is None:
        return f"scraped {scrapes} time(s)" if scrapes else "not scraped yet"
    scraped, waited_s = final
    if scraped:
        return f"scraped {scrapes} time(s), the last after the final measurement"
    hint = f"waited {waited_s:g} s; set {OTEL_JOULES_PROMETHEUS_WAIT_S} to your scrape interval"
    if not scrapes:
        return f"never scraped ({hint})"
    return f"scraped {scrapes} time(s), not after the final measurement: its last joules were not scraped ({hint})"


class _SdkLogCapture(logging.Handler):
    """Keeps the OpenTelemetry SDK's log messages for the report instead of printing them."""

    def __init__(self, report: DeliveryReport) -> None:
        super().__init__(logging.WARNING)
        self._report = report

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log call must not break delivery
            message = str(record.msg)
        self._report.sdk_messages.append(message.splitlines()[0] if message else message)


# --- bounded exporters --------------------------------------------------------------


class _Bounded:
    """Runs an exporter's calls on a helper thread and stops waiting after ``timeout_s``.

    A call that overruns is left to finish on its (daemon) thread; while it runs, further
    exports fail at once instead of queueing behind it.
    """

    def __init__(self, destination: Destination, report: DeliveryReport, timeout_s: float, address: tuple[str, int] | None) -> None:
        self.destination = destination
        self._report = report
        self._timeout_s = timeout_s
        self._address = address
        self._busy = threading.Event()

    def run(self, call: Callable[[], Any], items: int, ok: Callable[[Any], bool], what: str) -> bool:
        """Export through ``call``; True when ``ok(result)``. Records the outcome."""
        if self._busy.is_set():
            self._report.record_failure(self.destination, f"a previous {what} is still running")
            return False
        if self._address is not None:
            refused = self._report._endpoint_check(self._address, self._timeout_s)
            if refused is not None:
                self._report.record_failure(self.destination, refused)
                return False
        finished, result, error = self.call_bounded(call)
        if not finished:
            reason = f"no answer within {self._timeout_s:g} s"
            if self._address is not None:
                self._report._endpoint_failed(self._address, reason)
            self._report.record_failure(self.destination, reason)
            return False
        if error is not None:
            reason = f"{type(error).__name__}: {error}"
            if self._address is not None:
                self._report._endpoint_failed(self._address, reason)
            self._report.record_failure(self.destination, reason)
            return False
        if ok(result):
            if self._address is not None:
                self._report._endpoint_answered(self._address)
            self._report.record_success(self.destination, items)
            return True
        self._report.record_failure(self.destination, "the exporter reported a failure")
        return False

    def call_bounded(self, call: Callable[[], Any]) -> tuple[bool, Any, BaseException | None]:
        """(finished, result, exception) of ``call`` run for at most ``timeout_s``."""
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                outcome["result"] = call()
            except BaseException as exc:  # noqa: BLE001 - reported to the caller, never raised on this thread
                outcome["error"] = exc
            finally:
                self._busy.clear()
                done.set()

        self._busy.set()
        thread = threading.Thread(target=target, name=f"otel-joules-export-{self.destination.signal}", daemon=True)
        thread.start()
        if not done.wait(self._timeout_s):
            return False, None, None
        return True, outcome.get("result"), outcome.get("error")


class BoundedSpanExporter(SpanExporter):
    """A ``SpanExporter`` that never blocks longer than ``timeout_s`` per call and never raises.

    Args:
        inner: The exporter doing the work.
        destination: What to call it in the report.
        report: Where outcomes are recorded.
        timeout_s: Longest wait for one export, flush or shutdown.
        probe_address: ``(host, port)`` checked with a TCP connection while the endpoint
            is not known to answer (OTLP); None for local exporters.
    """

    def __init__(
        self,
        inner: SpanExporter,
        destination: Destination,
        report: DeliveryReport,
        timeout_s: float,
        probe_address: tuple[str, int] | None = None,
    ) -> None:
        self.inner = inner
        self._bounded = _Bounded(destination, report, timeout_s, probe_address)

    @property
    def destination(self) -> Destination:
        """Where this exporter sends."""
        return self._bounded.destination

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export ``spans`` within the time bound; FAILURE on timeout, error or unreachable endpoint."""
        spans = list(spans)
        ok = self._bounded.run(lambda: self.inner.export(spans), len(spans), lambda r: r == SpanExportResult.SUCCESS, "span export")
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the inner exporter, waiting at most the time bound."""
        finished, result, error = self._bounded.call_bounded(lambda: self.inner.force_flush(timeout_millis))
        return bool(finished and error is None and result is not False)

    def shutdown(self) -> None:
        """Shut the inner exporter down, waiting at most the time bound."""
        self._bounded.call_bounded(self.inner.shutdown)


class BoundedMetricExporter(MetricExporter):
    """A ``MetricExporter`` with the guarantees of :class:`BoundedSpanExporter`.

    Keeps the inner exporter's preferred temporality and aggregation, which the
    metric reader reads from its exporter.
    """

    def __init__(
        self,
        inner: MetricExporter,
        destination: Destination,
        report: DeliveryReport,
        timeout_s: float,
        probe_address: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(
            preferred_temporality=getattr(inner, "_preferred_temporality", None),
            preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
        )
        self.inner = inner
        self._bounded = _Bounded(destination, report, timeout_s, probe_address)

    @property
    def destination(self) -> Destination:
        """Where this exporter sends."""
        return self._bounded.destination

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        """Export one collection within the time bound; FAILURE on timeout, error or unreachable endpoint."""
        ok = self._bounded.run(
            lambda: self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            1,
            lambda r: r == MetricExportResult.SUCCESS,
            "metric export",
        )
        return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Flush the inner exporter, waiting at most the time bound."""
        finished, result, error = self._bounded.call_bounded(lambda: self.inner.force_flush(timeout_millis=timeout_millis))
        return bool(finished and error is None and result is not False)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Shut the inner exporter down, waiting at most the time bound."""
        self._bounded.call_bounded(lambda: self.inner.shutdown(timeout_millis=timeout_millis, **kwargs))


# --- building -----------------------------------------------------------------------


@dataclass
class Telemetry:
    """Providers built by :func:`telemetry_from_env`, and where their data goes.

    Attributes:
        tracer_provider: SDK tracer provider (its processors export to ``destinations``).
        meter_provider: SDK meter provider, or None when no destination takes metrics.
        resource: The resource both carry.
        destinations: Every destination, traces first.
        report: What reached each destination.
    """

    tracer_provider: TracerProvider
    meter_provider: MeterProvider | None
    resource: Resource
    destinations: tuple[Destination, ...]
    report: DeliveryReport
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S
    #: Scrape endpoints (``prometheus``): shutdown waits for their final scrape.
    pull_readers: tuple[Any, ...] = ()
    _shut_down: bool = field(default=False, repr=False)

    def destinations_for(self, signal: str) -> tuple[Destination, ...]:
        """Destinations of one signal."""
        return tuple(d for d in self.destinations if d.signal == signal)

    def shutdown(self) -> None:
        """Export what is pending (spans, then a last metric collection) and shut both providers down.

        Takes at most about two export timeouts per destination, whatever the endpoints
        do, plus ``OTEL_JOULES_PROMETHEUS_WAIT_S`` for a scrape endpoint; never raises. Idempotent.
        """
        if self._shut_down:
            return
        self._shut_down = True
        timeout_millis = int(self.export_timeout_s * 1000)
        try:
            self.tracer_provider.shutdown()
        except Exception as exc:  # noqa: BLE001 - delivery must never fail the caller
            _log.debug("otel-joules: tracer provider shutdown failed: %s", exc)
        for reader in self.pull_readers:
            reader.wait_for_final_scrape()
        if self.meter_provider is not None:
            try:
                self.meter_provider.shutdown(timeout_millis=timeout_millis)
            except Exception as exc:  # noqa: BLE001
                _log.debug("otel-joules: meter provider shutdown failed: %s", exc)


def build_resource(service_name: str | None = None, *, default_service_name: str | None = None) -> Resource:
    """Job attributes, then ``Resource.create()`` (environment), then ``service_name`` over both.

    ``default_service_name`` is used when neither ``service_name`` nor ``OTEL_SERVICE_NAME``
    nor ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` names the service.
    """
    resource = job_resource().merge(Resource.create())
    if service_name:
        return resource.merge(Resource({SERVICE_NAME: service_name}))
    if default_service_name and not _service_name_configured():
        return resource.merge(Resource({SERVICE_NAME: default_service_name}))
    return resource


def _service_name_configured(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("OTEL_SERVICE_NAME", "").strip():
        return True
    for pair in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == SERVICE_NAME and value.strip():
            return True
    return False


def _timeout_configured(signal: str, env: Mapping[str, str]) -> bool:
    return bool(env.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_TIMEOUT", "").strip() or env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "").strip())


def _otlp_exporter(signal: str, env: Mapping[str, str], timeout_s: float) -> tuple[Any, Destination, tuple[str, int] | None]:
    protocol = otlp_protocol(signal, env)
    endpoint = otlp_endpoint(signal, protocol, env)
    # Give the exporter our bound unless the user set one: its own retries then stop in time too.
    kwargs: dict[str, Any] = {} if _timeout_configured(signal, env) else {"timeout": timeout_s}
    if protocol == PROTOCOL_GRPC:
        if signal == SIGNAL_TRACES:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Exporter
        else:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Exporter  # type: ignore[assignment]
    else:
        if signal == SIGNAL_TRACES:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Exporter  # type: ignore[assignment]
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as Exporter  # type: ignore[assignment]
    return Exporter(**kwargs), Destination(signal, "otlp", f"{protocol} {endpoint}"), _probe_address(endpoint, env)


def _console_exporter(signal: str, stream: TextIO) -> tuple[Any, Destination, None]:
    if signal == SIGNAL_TRACES:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter: Any = ConsoleSpanExporter(out=stream)
    else:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        exporter = ConsoleMetricExporter(out=stream)
    return exporter, Destination(signal, "console", getattr(stream, "name", "stream")), None


def _file_exporter(spec: ExporterSpec) -> tuple[Any, Destination, None]:
    if spec.kind == "csv":
        from otel_joules.exporters.csv_exporter import CsvSpanExporter

        exporter: Any = CsvSpanExporter(spec.path)
    elif spec.kind == "otlp-file":
        from otel_joules.exporters.otlp_file_exporter import OtlpFileSpanExporter

        exporter = OtlpFileSpanExporter(spec.path)
    else:
        from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter

        exporter = JsonLinesSpanExporter(spec.path)
    return exporter, Destination(SIGNAL_TRACES, spec.kind, os.path.abspath(str(spec.path))), None


def _prometheus_reader(env: Mapping[str, str], report: DeliveryReport) -> tuple[Any, Destination, None]:
    """A ``PrometheusMetricReader`` serving ``/metrics`` that records each scrape in ``report``."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError:
        raise ConfigurationError(
            "OTEL_METRICS_EXPORTER=prometheus needs opentelemetry-exporter-prometheus: pip install 'otel-joules[prometheus]'"
        ) from None
    host = env.get("OTEL_EXPORTER_PROMETHEUS_HOST", "").strip() or "localhost"
    raw_port = env.get("OTEL_EXPORTER_PROMETHEUS_PORT", "").strip() or "9464"
    try:
        port = int(raw_port)
    except ValueError:
        raise ConfigurationError(f"OTEL_EXPORTER_PROMETHEUS_PORT={raw_port!r} is not a port number") from None
    destination = Destination(SIGNAL_METRICS, PROMETHEUS, f"http://{host}:{port}/metrics")
    wait_s = Settings.from_env(env).prometheus_wait_s

    class ScrapedReader(PrometheusMetricReader):  # type: ignore[misc]
        """Records every scrape; :meth:`wait_for_final_scrape` waits for one that starts after a point in time."""

        def __init__(self) -> None:
            # Before super().__init__, which hands self.collect to the scrape handler.
            self._scraped = threading.Condition()
            register_fork_hook(self, "_new_condition")  # taken by the scrape server's thread
            self._last_scrape = -1.0
            self._server: Any = None
            super().__init__()

        def _new_condition(self) -> None:
            self._scraped = threading.Condition()

        def collect(self, timeout_millis: float = 10_000) -> None:
            """Collect for one scrape, and record it by when it started (the values it reads are from then on)."""
            started = time.monotonic()
            super().collect(timeout_millis=timeout_millis)
            report.record_success(destination, 1)
            with self._scraped:
                self._last_scrape = max(self._last_scrape, started)
                self._scraped.notify_all()

        def wait_for_final_scrape(self) -> None:
            """Wait (at most ``OTEL_JOULES_PROMETHEUS_WAIT_S``) for a scrape from now on, which holds the last values."""
            since = time.monotonic()
            with self._scraped:
                try:
                    scraped = self._scraped.wait_for(lambda: self._last_scrape >= since, timeout=wait_s)
                except KeyboardInterrupt:  # Ctrl-C while waiting: stop waiting, report what happened
                    scraped = self._last_scrape >= since
            report.record_final_scrape(destination, scraped, wait_s)

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            """Unregister and close the endpoint (its port is free again)."""
            super().shutdown(timeout_millis, **kwargs)
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()

    reader = ScrapedReader()
    try:
        started = start_http_server(port, addr=host)
    except OSError as exc:
        reader.shutdown()
        raise ConfigurationError(
            f"cannot serve Prometheus metrics on {host}:{port}: {exc.strerror or exc}; "
            "set OTEL_EXPORTER_PROMETHEUS_PORT to a free port"
        ) from None
    # prometheus_client returns (server, thread) since 0.17; older versions return None.
    reader._server = started[0] if isinstance(started, tuple) else None
    return reader, destination, None


def _entry_point_exporter(signal: str, name: str) -> tuple[Any, Destination, None]:
    from importlib.metadata import entry_points

    group = f"opentelemetry_{signal}_exporter"
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        variable = f"OTEL_{signal.upper()}_EXPORTER"
        raise ConfigurationError(
            f"{variable} names {name!r}, which no installed package provides: use otlp, console or none, "
            f"or install the exporter (entry point group {group})"
        )
    return found[0].load()(), Destination(signal, name, ""), None


def telemetry_from_env(
    *,
    service_name: str | None = None,
    default_service_name: str | None = None,
    exporters: Sequence[str] | None = None,
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S,
    batch_spans: bool = True,
    console_stream: TextIO | None = None,
    resource: Resource | None = None,
    report: DeliveryReport | None = None,
) -> Telemetry:
    """SDK providers exporting by the ``OTEL_*`` variables or ``exporters`` (module docstring).

    Args:
        service_name: ``service.name``, over whatever the environment says.
        default_service_name: ``service.name`` when nothing else names the service.
        exporters: ``--exporter`` specs replacing ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER``.
        export_timeout_s: Longest wait for one export call.
        batch_spans: Batch spans (``BatchSpanProcessor``); False exports each span as it
            ends, for tools that make only a few spans.
        console_stream: Where ``console`` writes (default ``sys.stderr``, so a wrapped
            command's standard output stays its own).
        resource: Use this resource instead of :func:`build_resource`.
        report: Record outcomes here (a new :class:`DeliveryReport` by default).

    Raises:
        ConfigurationError: an unknown exporter or protocol, an unwritable file, a bad timeout.
    """
    if not export_timeout_s > 0:
        raise ConfigurationError(f"export timeout {export_timeout_s!r} must be a positive number of seconds")
    env = os.environ
    report = report or DeliveryReport()
    stream = console_stream or sys.stderr
    built: dict[str, list[tuple[Any, Destination, tuple[str, int] | None]]] = {SIGNAL_TRACES: [], SIGNAL_METRICS: []}
    if exporters is not None:
        for spec in (parse_exporter_spec(text) for text in exporters):
            for signal in EXPORTER_KINDS[spec.kind]:
                if spec.kind == "otlp":
                    built[signal].append(_otlp_exporter(signal, env, export_timeout_s))
                elif spec.kind == "console":
                    built[signal].append(_console_exporter(signal, stream))
                else:
                    built[signal].append(_file_exporter(spec))
    else:
        for signal in (SIGNAL_TRACES, SIGNAL_METRICS):
            for name in exporter_names(signal, env):
                if name == "otlp":
                    built[signal].append(_otlp_exporter(signal, env, export_timeout_s))
                elif name == "console":
                    built[signal].append(_console_exporter(signal, stream))
                elif name == PROMETHEUS and signal == SIGNAL_METRICS:
                    built[signal].append(_prometheus_reader(env, report))
                else:
                    built[signal].append(_entry_point_exporter(signal, name))

    resource = resource or build_resource(service_name, default_service_name=default_service_name)
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    destinations: list[Destination] = []
    for exporter, destination, address in built[SIGNAL_TRACES]:
        bounded = BoundedSpanExporter(exporter, destination, report, export_timeout_s, address)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(bounded, export_timeout_millis=export_timeout_s * 1000) if batch_spans else SimpleSpanProcessor(bounded)
        )
        destinations.append(destination)
    readers: list[MetricReader] = []
    for exporter, destination, address in built[SIGNAL_METRICS]:
        if isinstance(exporter, MetricReader):  # a pull exporter (Prometheus) is itself a reader
            readers.append(exporter)
        else:
            bounded_metrics = BoundedMetricExporter(exporter, destination, report, export_timeout_s, address)
            readers.append(PeriodicExportingMetricReader(bounded_metrics, export_timeout_millis=export_timeout_s * 1000))
        destinations.append(destination)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False) if readers else None
    pull_readers = tuple(reader for reader in readers if hasattr(reader, "wait_for_final_scrape"))
    return Telemetry(tracer_provider, meter_provider, resource, tuple(destinations), report, export_timeout_s, pull_readers)


class capture_sdk_logs:  # noqa: N801 - used as a context manager, like contextlib's
    """Within ``with capture_sdk_logs(report):``, the ``opentelemetry`` loggers' warnings go to ``report.sdk_messages``.

    For command-line tools that report delivery themselves, once, instead of letting the
    SDK print a retry warning and an error per failed export.
    """

    def __init__(self, report: DeliveryReport, logger_name: str = "opentelemetry") -> None:
        self._logger = logging.getLogger(logger_name)
        self._handler = _SdkLogCapture(report)
        self._propagate = True

    def __enter__(self) -> DeliveryReport:
        self._propagate = self._logger.propagate
        self._logger.addHandler(self._handler)
        self._logger.propagate = False
        return self._handler._report

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate


def iter_failures_by_destination(report: DeliveryReport) -> Iterator[tuple[Destination, str]]:
    """Each failed destination once, with its first failure's reason."""
    seen: set[Destination] = set()
    for failure in report.failures:
        if failure.destination not in seen:
            seen.add(failure.destination)
            yield failure.destination, failure.reason
