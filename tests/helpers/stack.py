"""The real programs of the observability stack, started for a test: the Collector, Jaeger, FerretDB.

``collector/build.sh`` builds them from Go modules into ``collector/_build`` (or
``$OTEL_JOULES_STACK_DIR``). Each is started here as a plain child process on 127.0.0.1,
on ports free at the time, with its configuration, data and log in the test's temp dir,
and stopped by pid at the end; nothing is left outside the temp dir. A missing binary
skips the test with what to run, and fails it in CI, where ``.ci/run`` builds them first.

Prometheus (also built there) is started by :mod:`tests.helpers.prometheus`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

from tests.helpers.processes import REPO, free_port, stop_by_pid

#: Where ``collector/build.sh`` leaves the binaries unless told ``--out``.
DEFAULT_STACK_DIR = REPO / "collector" / "_build"
#: Names another build folder (``collector/build.sh --out DIR``).
STACK_DIR_ENV = "OTEL_JOULES_STACK_DIR"
#: The shipped Collector configuration, run unchanged.
COLLECTOR_CONFIG = REPO / "collector" / "otelcol-config.yaml"
#: How long a program may take to become ready on a loaded 2-core box.
READY_TIMEOUT_S = 60.0


def stack_dir() -> Path:
    """The folder holding the built programs."""
    return Path(os.environ.get(STACK_DIR_ENV) or DEFAULT_STACK_DIR)


def stack_binary(name: str) -> Path:
    """The built program ``name``; skip the test when it is missing (fail in CI)."""
    path = stack_dir() / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"{path} is not built: run collector/build.sh (it builds {name} from Go modules)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + "; in CI .ci/run builds it before the tests")
    pytest.skip(message)


def http_get_json(url: str, timeout_s: float = 10.0) -> Any:
    """GET ``url`` and decode its JSON body (an HTTP error's body too, when it is JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return json.loads(body)
        except ValueError:
            raise AssertionError(f"GET {url}: HTTP {exc.code}: {body[:500]!r}") from None


def http_ok(url: str) -> bool:
    """True when ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def port_open(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy; raise AssertionError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s} s")
        time.sleep(interval_s)


@dataclass
class ManagedProcess:
    """A program started for a test: its command, environment and log; stopped by pid."""

    name: str
    argv: list[str]
    cwd: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] = lambda: True
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> "ManagedProcess":
        """Start the program and wait until :attr:`ready`; its output is appended to :attr:`log_path`."""
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=self.cwd, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.ready():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{self.name} was not ready within {READY_TIMEOUT_S} s:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    @property
    def running(self) -> bool:
        """True while the process lives."""
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; wait for the pid. Idempotent."""
        if self.process is not None:
            stop_by_pid(self.process, 15, kill_timeout_s=5)

    def log_tail(self, characters: int = 4000) -> str:
        """The end of the program's log, for assertion messages."""
        try:
            return self.log_path.read_text(errors="replace")[-characters:]
        except OSError:
            return "(no log)"


@dataclass
class Jaeger:
    """A running Jaeger v2 (in-memory storage): OTLP/gRPC in, the query API out."""

    otlp_grpc_port: int
    query_port: int
    program: ManagedProcess

    @property
    def otlp_endpoint(self) -> str:
        """``host:port`` of its OTLP/gRPC receiver."""
        return f"127.0.0.1:{self.otlp_grpc_port}"

    def services(self) -> list[str]:
        """Every service name Jaeger has spans of (``/api/services``)."""
        return http_get_json(f"http://127.0.0.1:{self.query_port}/api/services").get("data") or []

    def traces(self, service: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The traces of ``service`` (``/api/traces``, Jaeger's JSON model: spans, tags, references, processes)."""
        query = urllib.parse.urlencode({"service": service, "limit": str(limit), "lookback": "1h"})
        return http_get_json(f"http://127.0.0.1:{self.query_port}/api/traces?{query}").get("data") or []

    def spans(self, service: str) -> list[dict[str, Any]]:
        """Every span of ``service``, each with its ``process`` resolved and ``tags`` as ``{key: tag}``."""
        spans = []
        for trace in self.traces(service):
            for span in trace["spans"]:
                process = trace["processes"][span["processID"]]
                if process["serviceName"] != service:
                    continue
                spans.append({**span, "process": process, "tags": {t["key"]: t for t in span.get("tags", [])}})
        return spans

    def wait_for_spans(self, service: str, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until Jaeger holds at least ``count`` spans of ``service``."""
        return wait_until(
            lambda: (spans := self.spans(service)) and len(spans) >= count and spans,
            timeout_s, f"Jaeger did not receive {count} spans of {service!r} (has {len(self.spans(service))})",
        )

    def stop(self) -> None:
        """Stop Jaeger."""
        self.program.stop()


def _jaeger_config(otlp_grpc_port: int, query_port: int, query_grpc_port: int) -> dict[str, Any]:
    """Jaeger's all-in-one pipeline with every listener on a free loopback port.

    The built-in all-in-one configuration listens on fixed ports (4317, 8888, 16686, ...)
    that would clash with the Collector and with anything else on the host.
    """
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]}},
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
        "extensions": {
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"127.0.0.1:{query_port}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc_port}"},
            },
        },
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{otlp_grpc_port}"}}}},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


def start_jaeger(tmp_path: Path) -> Jaeger:
    """Start Jaeger v2 with in-memory storage; config and log under ``tmp_path/jaeger``."""
    binary = stack_binary("jaeger")
    folder = tmp_path / "jaeger"
    folder.mkdir()
    otlp_port, query_port, query_grpc_port = free_port(), free_port(), free_port()
    config = folder / "config.yaml"
    # JSON is YAML.
    config.write_text(json.dumps(_jaeger_config(otlp_port, query_port, query_grpc_port), indent=2))
    program = ManagedProcess(
        "jaeger", [str(binary), f"--config={config}"], folder, folder / "jaeger.log",
        ready=lambda: port_open(otlp_port) and http_ok(f"http://127.0.0.1:{query_port}/api/services"),
    )
    return Jaeger(otlp_port, query_port, program.start())


@dataclass
class Collector:
    """A running otelcol-joules with the shipped ``collector/otelcol-config.yaml``, configured by its variables."""

    otlp_grpc_port: int
    otlp_http_port: int
    prometheus_port: int
    program: ManagedProcess

    @property
    def otlp_grpc_endpoint(self) -> str:
        """``http://host:port`` for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (gRPC)."""
        return f"http://127.0.0.1:{self.otlp_grpc_port}"

    @property
    def prometheus_target(self) -> str:
        """``host:port`` of its prometheus exporter, for a scrape job."""
        return f"127.0.0.1:{self.prometheus_port}"

    def metrics_text(self) -> str:
        """What its prometheus exporter serves now (text format)."""
        with urllib.request.urlopen(f"http://{self.prometheus_target}/metrics", timeout=10) as response:
            return response.read().decode()

    def restart(self) -> None:
        """Stop it and start it again on the same ports (in-memory state is lost, as in production)."""
        self.program.stop()
        self.program.start()

    def stop(self) -> None:
        """Stop the Collector."""
        self.program.stop()


def start_collector(
    tmp_path: Path,
    *,
    jaeger_endpoint: str,
    metric_expiration: str = "2m",
    otlp_files: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Collector:
    """Start otelcol-joules with the shipped config, every endpoint set through its ``OTELCOL_*`` variables.

    Tempo is not run here (AGPL: neither built nor run); its exporter points at a closed
    port, so its retries only log, as they would with Tempo down.
    """
    binary = stack_binary("otelcol-joules")
    folder = tmp_path / "collector"
    folder.mkdir(exist_ok=True)
    grpc_port, http_port, prometheus_port, telemetry_port, tempo_port = (free_port() for _ in range(5))
    env = {
        "OTELCOL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
        "OTELCOL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
        "OTELCOL_OTLP_FILES": otlp_files or str(folder / "no-otlp-files" / "*.jsonl"),
        "OTELCOL_JAEGER_ENDPOINT": jaeger_endpoint,
        "OTELCOL_TEMPO_ENDPOINT": f"127.0.0.1:{tempo_port}",
        "OTELCOL_PROMETHEUS_ENDPOINT": f"127.0.0.1:{prometheus_port}",
        "OTELCOL_METRIC_EXPIRATION": metric_expiration,
        "OTELCOL_TELEMETRY_HOST": "127.0.0.1",
        "OTELCOL_TELEMETRY_PORT": str(telemetry_port),
        **(extra_env or {}),
    }
    program = ManagedProcess(
        "otelcol-joules", [str(binary), f"--config={COLLECTOR_CONFIG}"], folder, folder / "collector.log", env=env,
        ready=lambda: port_open(grpc_port) and http_ok(f"http://127.0.0.1:{prometheus_port}/metrics"),
    )
    return Collector(grpc_port, http_port, prometheus_port, program.start())
