"""Whether the collector that the OpenTelemetry SDK's own OTLP metric exporter sends to is there.

Under ``opentelemetry-instrument`` the SDK builds its metric exporter from the ``OTEL_*``
variables, and the energy instruments are often the app's only metrics: without them the
SDK has nothing to export and sends nothing. With them, each collection is sent to the
collector, and when nothing listens there the stock exporter retries for up to its timeout
(10 s by default), logging a warning per attempt, and the final collection at interpreter
exit makes the app wait for those retries. :class:`EndpointGate` lets the instruments report
only while the collector accepts a TCP connection, so an absent collector costs one log
line and no wait; counters are cumulative, so nothing measured meanwhile is lost once it is
back (and with delta temporality the first point after its return holds the whole gap).

:func:`sdk_metrics_gate` builds the gate for the exporter the SDK configured from the
environment, or none where a TCP check could mislead (a proxy, a Unix socket, several
exporters, a pull or console exporter). :func:`sdk_otlp_targets` says where each OTLP
exporter the SDK configures for a signal sends (``otel-joules doctor`` checks them all).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from otel_joules._fork import register_fork_hook
from otel_joules.delivery.destinations import (
    PROTOCOL_GRPC,
    PROTOCOL_HTTP_PROTOBUF,
    SIGNAL_METRICS,
    exporter_names,
    otlp_endpoint,
    otlp_protocol,
    probe,
    probe_address,
)
from otel_joules.delivery.outcomes import PROBE_TIMEOUT_S
from otel_joules.errors import ConfigurationError

_log = logging.getLogger("otel_joules")

#: The callbacks of one collection ask within milliseconds of each other: one check serves
#: them all, and two collections (seconds apart) never share one.
CHECK_REUSE_S = 0.5

#: The OTLP metric exporters' names in ``OTEL_METRICS_EXPORTER`` (their entry points), and the
#: protocol each speaks; None: the protocol the OTLP protocol variables say, as the SDK does.
_OTLP_EXPORTER_PROTOCOLS: Mapping[str, str | None] = {
    "otlp": None,
    "otlp_proto_grpc": PROTOCOL_GRPC,
    "otlp_proto_http": PROTOCOL_HTTP_PROTOBUF,
}


class EndpointGate:
    """``gate()`` is True while ``address`` accepts a TCP connection, checked at most every :data:`CHECK_REUSE_S`.

    The first time the endpoint does not answer, one warning on the ``otel_joules`` logger
    says so; later changes either way are logged at INFO.

    Args:
        address: ``(host, port)`` to connect to.
        endpoint: The URL, for the log line.
        timeout_s: Longest wait for one connection.
    """

    def __init__(self, address: tuple[str, int], endpoint: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.address = address
        self.endpoint = endpoint
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        # Taken on the SDK's metric reader thread: a fork meanwhile must not leave the child's
        # collections (its exit-time collection included) waiting for ever.
        register_fork_hook(self, "_new_lock")
        self._answering: bool | None = None
        self._checked_at = float("-inf")
        self._warned = False

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        """Whether the endpoint answers now (a fresh check unless one was made a moment ago)."""
        with self._lock:
            if self._answering is not None and time.monotonic() - self._checked_at < CHECK_REUSE_S:
                return self._answering
            reason = probe(self.address, self._timeout_s)
            self._checked_at = time.monotonic()
            answering = reason is None
            if answering != self._answering:
                self._log_change(answering, reason)
            self._answering = answering
            return answering

    def _log_change(self, answering: bool, reason: str | None) -> None:
        if not answering and not self._warned:
            self._warned = True
            _log.warning(
                "otel-joules: energy metrics are not exported while nothing answers at %s (%s)", self.endpoint, reason
            )
        elif answering and self._answering is not None:
            _log.info("otel-joules: %s answers: energy metrics are exported again", self.endpoint)
        elif not answering:
            _log.info("otel-joules: energy metrics are not exported while nothing answers at %s (%s)", self.endpoint, reason)


@dataclass(frozen=True)
class OtlpTarget:
    """One OTLP exporter the SDK builds from the environment for one signal, and where it sends.

    Attributes:
        signal: ``traces`` or ``metrics``.
        exporter: Its name in ``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` (``otlp``, ``otlp_proto_grpc``, ...).
        protocol: ``grpc`` or ``http/protobuf``.
        endpoint: The URL it sends to, resolved as the stock exporter resolves it.
        address: ``(host, port)`` a TCP connection can check, or None where one would mislead
            (a proxy, a Unix socket, a URL without a host).
    """

    signal: str
    exporter: str
    protocol: str
    endpoint: str
    address: tuple[str, int] | None


def sdk_otlp_targets(signal: str, env: Mapping[str, str] | None = None) -> list[OtlpTarget]:
    """Every OTLP exporter the SDK configures for ``signal`` from ``env``; other exporters are left out.

    Raises:
        ConfigurationError: the OTLP protocol variables name a protocol the SDK refuses.
    """
    env = os.environ if env is None else env
    targets = []
    for name in exporter_names(signal, env):
        if name not in _OTLP_EXPORTER_PROTOCOLS:
            continue
        protocol = _OTLP_EXPORTER_PROTOCOLS[name] or otlp_protocol(signal, env)
        endpoint = otlp_endpoint(signal, protocol, env)
        targets.append(OtlpTarget(signal, name, protocol, endpoint, probe_address(endpoint, env)))
    return targets


def sdk_metrics_gate(env: Mapping[str, str] | None = None) -> EndpointGate | None:
    """The gate for the one OTLP metric exporter the SDK configures from ``env``, or None.

    None where the metrics go anywhere else too, or a TCP connection would not tell
    (a proxy, a Unix socket, a protocol the SDK refuses).
    """
    env = os.environ if env is None else env
    if len(exporter_names(SIGNAL_METRICS, env)) != 1:
        return None
    try:
        targets = sdk_otlp_targets(SIGNAL_METRICS, env)
    except ConfigurationError:
        return None  # the SDK configured no OTLP exporter either
    if len(targets) != 1 or targets[0].address is None:
        return None
    return EndpointGate(targets[0].address, targets[0].endpoint)
