"""Tracer and meter providers exporting where the standard ``OTEL_*`` variables say, with bounded delivery.

:func:`telemetry_from_env` builds an SDK ``TracerProvider`` and ``MeterProvider`` the
way the OpenTelemetry SDK's own configuration would, for tools that run outside
``opentelemetry-instrument`` (``otel-joules run``):

- exporters per signal from ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER``
  (comma-separated; ``otlp`` when unset; ``console``; ``none``; or the name of any
  installed ``opentelemetry_traces_exporter``/``opentelemetry_metrics_exporter`` entry point),
  or from ``exporters=`` specs (``otlp``, ``console``, ``csv:PATH``, ``jsonl:PATH``,
  ``otlp-file:PATH``, ``parquet:PATH``, ``none``), which replace both variables. The file kinds hold spans
  only; ``otlp-file`` writes OTLP/JSON, one request per line (Jaeger's UI, Tempo); ``parquet``
  rotated Parquet files named after PATH (:mod:`otel_joules.exporters.parquet_exporter`);
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
failed is not tried again for :data:`~otel_joules.delivery.outcomes.RETRY_AFTER_S` seconds.

The parts live by job: :mod:`.destinations` (exporter specs, the ``OTEL_*`` exporter
variables, OTLP endpoints and their probe), :mod:`.bounded` (the bounded exporters),
:mod:`.outcomes` (:class:`DeliveryReport`, :class:`capture_sdk_logs`) and
:mod:`.prometheus` (the scrape endpoint). This module builds the providers from them.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TextIO

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from otel_joules.delivery.bounded import BoundedMetricExporter, BoundedSpanExporter
from otel_joules.delivery.destinations import (
    EXPORTER_KINDS,
    PROMETHEUS,
    PROTOCOL_GRPC,
    SIGNAL_METRICS,
    SIGNAL_TRACES,
    SIGNAL_VARIABLES,
    Destination,
    ExporterSpec,
    exporter_names,
    otlp_endpoint,
    otlp_protocol,
    parse_exporter_spec,
    probe_address,
)
from otel_joules.delivery.outcomes import DeliveryReport
from otel_joules.delivery.prometheus import prometheus_reader
from otel_joules.delivery.resource import job_resource
from otel_joules.errors import ConfigurationError
from otel_joules.semconv import SERVICE_NAME

_log = logging.getLogger("otel_joules")

#: The OTLP specification's default export timeout (``OTEL_EXPORTER_OTLP_TIMEOUT``).
DEFAULT_EXPORT_TIMEOUT_S = 10.0


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
    if env.get(OTEL_SERVICE_NAME, "").strip():
        return True
    for pair in env.get(OTEL_RESOURCE_ATTRIBUTES, "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == SERVICE_NAME and value.strip():
            return True
    return False


def _timeout_configured(signal: str, env: Mapping[str, str]) -> bool:
    return bool(env.get(SIGNAL_VARIABLES[signal].timeout, "").strip() or env.get(OTEL_EXPORTER_OTLP_TIMEOUT, "").strip())


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
    return Exporter(**kwargs), Destination(signal, "otlp", f"{protocol} {endpoint}"), probe_address(endpoint, env)


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
    elif spec.kind == "parquet":
        from otel_joules.exporters.parquet_exporter import ParquetSpanExporter

        exporter = ParquetSpanExporter(spec.path)
    else:
        from otel_joules.exporters.jsonl_exporter import JsonLinesSpanExporter

        exporter = JsonLinesSpanExporter(spec.path)
    return exporter, Destination(SIGNAL_TRACES, spec.kind, os.path.abspath(str(spec.path))), None


def _entry_point_exporter(signal: str, name: str) -> tuple[Any, Destination, None]:
    from importlib.metadata import entry_points

    group = f"opentelemetry_{signal}_exporter"
    found = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        raise ConfigurationError(
            f"{SIGNAL_VARIABLES[signal].exporter} names {name!r}, which no installed package provides: use otlp, console or none, "
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
                    built[signal].append(prometheus_reader(env, report))
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
