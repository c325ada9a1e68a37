"""The ``prometheus`` metrics exporter: a scrape endpoint that records every scrape.

``OTEL_METRICS_EXPORTER=prometheus`` (``pip install 'otel-joules[prometheus]'``) serves
``/metrics`` on ``OTEL_EXPORTER_PROMETHEUS_HOST``:``OTEL_EXPORTER_PROMETHEUS_PORT``
(``localhost:9464``). A pull exporter only delivers what is scraped, so the reader counts
each scrape in the :class:`~otel_joules.delivery.outcomes.DeliveryReport`, and
:meth:`~otel_joules.delivery.setup.Telemetry.shutdown` waits (at most
``OTEL_JOULES_PROMETHEUS_WAIT_S`` seconds) for one more scrape after the last measurement
before it closes the endpoint.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_PROMETHEUS_HOST, OTEL_EXPORTER_PROMETHEUS_PORT

from otel_joules._fork import register_fork_hook
from otel_joules.config import Settings
from otel_joules.delivery.destinations import PROMETHEUS, SIGNAL_METRICS, Destination
from otel_joules.delivery.outcomes import DeliveryReport
from otel_joules.errors import ConfigurationError


def prometheus_reader(env: Mapping[str, str], report: DeliveryReport) -> tuple[Any, Destination, None]:
    """A ``PrometheusMetricReader`` serving ``/metrics`` that records each scrape in ``report``."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server
    except ImportError:
        raise ConfigurationError(
            "OTEL_METRICS_EXPORTER=prometheus needs opentelemetry-exporter-prometheus: pip install 'otel-joules[prometheus]'"
        ) from None
    host = env.get(OTEL_EXPORTER_PROMETHEUS_HOST, "").strip() or "localhost"
    raw_port = env.get(OTEL_EXPORTER_PROMETHEUS_PORT, "").strip() or "9464"
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

