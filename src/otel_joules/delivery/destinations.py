"""Where each signal goes: ``--exporter`` specs, the ``OTEL_*`` exporter variables, OTLP endpoints.

- :func:`parse_exporter_spec` reads one ``--exporter`` value (:class:`ExporterSpec`);
  :func:`exporter_names` reads ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER``;
- :func:`otlp_protocol` and :func:`otlp_endpoint` resolve the protocol and URL the stock
  OTLP exporters use;
- :func:`probe_address` and :func:`probe` check with a TCP connection that an OTLP
  endpoint is there before anything is sent to it (:class:`~otel_joules.delivery.outcomes.DeliveryReport`
  keeps which endpoints answered);
- :class:`Destination` names where one signal goes, in reports.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from opentelemetry.environment_variables import OTEL_METRICS_EXPORTER, OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
)

from otel_joules.config import NO_PROXY_VARIABLES, PROXY_VARIABLES
from otel_joules.errors import ConfigurationError

#: ``Destination.kind`` of the Prometheus scrape endpoint.
PROMETHEUS = "prometheus"

SIGNAL_TRACES = "traces"
SIGNAL_METRICS = "metrics"


@dataclass(frozen=True)
class SignalVariables:
    """The OpenTelemetry SDK's variables that say where one signal goes (the SDK's constants, never spelled here)."""

    exporter: str
    protocol: str
    endpoint: str
    timeout: str


#: Per signal, the SDK's own variables otel-joules reads, by the rules the stock exporters apply.
SIGNAL_VARIABLES: Mapping[str, SignalVariables] = {
    SIGNAL_TRACES: SignalVariables(
        OTEL_TRACES_EXPORTER,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
    ),
    SIGNAL_METRICS: SignalVariables(
        OTEL_METRICS_EXPORTER,
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
        OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    ),
}

PROTOCOL_GRPC = "grpc"
PROTOCOL_HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (PROTOCOL_GRPC, PROTOCOL_HTTP_PROTOBUF)

#: ``--exporter`` kinds that write a file (``KIND:PATH``).
FILE_EXPORTER_KINDS = ("csv", "jsonl", "otlp-file", "parquet")

#: ``--exporter`` kinds, and the signals each one carries.
EXPORTER_KINDS: dict[str, tuple[str, ...]] = {
    "otlp": (SIGNAL_TRACES, SIGNAL_METRICS),
    "console": (SIGNAL_TRACES, SIGNAL_METRICS),
    "csv": (SIGNAL_TRACES,),
    "jsonl": (SIGNAL_TRACES,),
    "otlp-file": (SIGNAL_TRACES,),
    "parquet": (SIGNAL_TRACES,),
    "none": (),
}

_DEFAULT_OTLP_ENDPOINT = {PROTOCOL_GRPC: "http://localhost:4317", PROTOCOL_HTTP_PROTOBUF: "http://localhost:4318"}


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
    """Parse ``otlp``, ``console``, ``none``, ``csv:PATH``, ``jsonl:PATH``, ``otlp-file:PATH`` or ``parquet:PATH``.

    Raises:
        ConfigurationError: unknown kind, or a file kind without a path (or a path given to another kind).
    """
    kind, sep, path = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in EXPORTER_KINDS:
        raise ConfigurationError(
            f"unknown exporter {text!r}: use otlp, console, csv:PATH, jsonl:PATH, otlp-file:PATH, parquet:PATH or none"
        )
    if kind in FILE_EXPORTER_KINDS:
        if not path.strip():
            example = "traces.otlp.jsonl" if kind == "otlp-file" else f"spans.{kind}"
            raise ConfigurationError(f"exporter {text!r} needs a file: {kind}:PATH, e.g. {kind}:{example}")
        return ExporterSpec(kind, path.strip())
    if sep:
        raise ConfigurationError(f"exporter {text!r}: only csv, jsonl, otlp-file and parquet take a path; write just {kind!r}")
    return ExporterSpec(kind)


def exporter_names(signal: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Exporter names ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` ask for (``["otlp"]`` when unset; ``[]`` for none)."""
    env = os.environ if env is None else env
    raw = env.get(SIGNAL_VARIABLES[signal].exporter, "")
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
    for name in (SIGNAL_VARIABLES[signal].protocol, OTEL_EXPORTER_OTLP_PROTOCOL):
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
    specific = env.get(SIGNAL_VARIABLES[signal].endpoint, "").strip()
    if specific:
        return specific
    base = env.get(OTEL_EXPORTER_OTLP_ENDPOINT, "").strip() or _DEFAULT_OTLP_ENDPOINT[protocol]
    if protocol == PROTOCOL_GRPC:
        return base
    return base + (f"v1/{signal}" if base.endswith("/") else f"/v1/{signal}")


def probe_address(endpoint: str, env: Mapping[str, str]) -> tuple[str, int] | None:
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
    proxies = {k.lower() for k, v in env.items() if k.lower() in PROXY_VARIABLES and v}
    no_proxy = next((env[name] for name in NO_PROXY_VARIABLES if env.get(name)), "")
    if proxies and not urllib.request.proxy_bypass_environment(host, {"no": no_proxy}):
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
