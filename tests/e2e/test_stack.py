"""Every delivery path through the real programs: otelcol-joules, Jaeger v2 and Prometheus 3.5.

The stack (``tests.helpers.stack``, ``tests.helpers.prometheus``): otelcol-joules with the
shipped ``collector/otelcol-config.yaml`` (unchanged; its ``OTELCOL_*`` variables point it at
free loopback ports), Jaeger with in-memory storage as its trace backend, and Prometheus
scraping the Collector's exporter with ``honor_labels`` as ``collector/prometheus.yml`` does.
The apps are real processes (``otel-joules run``, zero-code services under
``opentelemetry-instrument``) on a fake powercap tree drawing :data:`WATTS`.

What is checked is what users see: Jaeger's query API and Prometheus' ``increase()`` over
the span counters, compared with the spans' own ``energy.attributed.self.joules`` as Jaeger
stores them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.fakes.powercap import ConstantPower, make_powercap
from tests.helpers.processes import clean_env, opentelemetry_instrument, otel_joules_command
from tests.helpers.prometheus import Prometheus, ScrapeJob, start_prometheus
from tests.helpers.stack import Collector, Jaeger, start_collector, start_jaeger, wait_until

#: The fake host's power, per domain (core is inside the package).
WATTS = {"package_0": 30.0, "core_0": 12.0, "dram_0": 10.0}
#: The apps' metric export interval; the Collector forgets a series after two of them.
EXPORT_INTERVAL_MS = 1000
METRIC_EXPIRATION = "2s"
SPAN_COUNTER = "span_energy_attributed_self_joules_total"
SELF_JOULES = "energy.attributed.self.joules"
#: How far Prometheus' increase() may be from the spans' sum.
TOLERANCE = 0.01

# A zero-code HTTP service: the app uses only the OpenTelemetry API (context extracted
# from the W3C traceparent header); opentelemetry-instrument configures the SDK and the
# otel_joules instrumentor puts the energy on its spans.
BACKEND = r"""
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from opentelemetry import propagate, trace

tracer = trace.get_tracer("e2e.backend")

def work(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        context = propagate.extract(self.headers)  # case-insensitive, as HTTP headers are
        with tracer.start_as_current_span("GET /work", context=context, kind=trace.SpanKind.SERVER):
            work(0.01)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
import threading
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.readline()  # the test closes stdin to stop the service
server.shutdown()
"""

# The calling service: bursts of "checkout" requests, each a root span with a CLIENT child
# that calls a backend (alternating between the backends' ports); quiet for QUIET_S between
# bursts, longer than the Collector's expiry, so the span names' series restart.
FRONTEND = r"""
import sys, time, urllib.request
from opentelemetry import propagate, trace

tracer = trace.get_tracer("e2e.frontend")
ports = sys.argv[1].split(",")
bursts = [int(n) for n in sys.argv[2].split(",")]
quiet_s = float(sys.argv[3])

def work(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

request = 0
for index, count in enumerate(bursts):
    if index:
        time.sleep(quiet_s)
    for _ in range(count):
        with tracer.start_as_current_span("checkout", kind=trace.SpanKind.SERVER):
            work(0.005)
            with tracer.start_as_current_span("call backend", kind=trace.SpanKind.CLIENT):
                headers = {}
                propagate.inject(headers)
                port = ports[request % len(ports)]
                request += 1
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/work", headers=headers), timeout=30).read()
print("done", flush=True)
"""

# A zero-code app that makes one span every 100 ms and prints when each ended.
TICKER = r"""
import sys, time
from opentelemetry import trace

tracer = trace.get_tracer("e2e.ticker")
count = int(sys.argv[1])
for i in range(count):
    started = time.monotonic()
    with tracer.start_as_current_span("tick") as span:
        span.set_attribute("tick.index", i)
        end = time.thread_time() + 0.002
        while time.thread_time() < end:
            pass
    print(f"tick {i} {time.monotonic() - started:.4f}", flush=True)
    time.sleep(0.1)
print("last", flush=True)
"""

BUSY = "import time\nend = time.process_time() + float(__import__('sys').argv[1])\nwhile time.process_time() < end: pass\n"


class Stack:
    """The programs and the fake host one module's tests share."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.powercap = make_powercap(tmp_path / "sys", "one_socket")
        self.otlp_files = tmp_path / "otlp-files"
        self.otlp_files.mkdir()
        self.jaeger: Jaeger = start_jaeger(tmp_path)
        self.collector: Collector = start_collector(
            tmp_path, jaeger_endpoint=self.jaeger.otlp_endpoint, metric_expiration=METRIC_EXPIRATION,
            otlp_files=str(self.otlp_files / "*.jsonl"),
        )
        self.prometheus: Prometheus = start_prometheus(
            tmp_path, [ScrapeJob("collector", [self.collector.prometheus_target], honor_labels=True)]
        )
        # Prometheus applies its targets a few seconds after it is ready; a series that lived
        # only until the expiry before the first scrape would never be stored.
        self.prometheus.wait_for_scrapes("collector", 1)

    def env(self, service: str, collector: Collector | None = None, **extra: str) -> dict[str, str]:
        """An app's environment: OTLP/gRPC to the Collector, fast exports, the fake tree."""
        collector = collector or self.collector
        return clean_env(self.tmp_path, {
            "OTEL_SERVICE_NAME": service,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.otlp_grpc_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_METRIC_EXPORT_INTERVAL": str(EXPORT_INTERVAL_MS),
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            # host.name and the job attributes on zero-code resources, as the README says.
            "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "otel_joules",
            "OTEL_JOULES_SYSFS_ROOT": self.powercap.sysfs_root,
            **extra,
        })

    def stop(self) -> None:
        for program in (self.prometheus, self.collector, self.jaeger):
            program.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp_path = tmp_path_factory.mktemp("stack")
    stack = None
    try:
        stack = Stack(tmp_path)
        with ConstantPower(stack.powercap, WATTS):
            yield stack
    finally:
        if stack is not None:
            stack.stop()


def _float_tag(span: dict[str, Any], key: str) -> float:
    """A span's tag that must be a double in Jaeger (its type says so)."""
    tag = span["tags"][key]
    assert tag["type"] == "float64", f"{span['operationName']}: {key} is a {tag['type']}, not a double: {tag}"
    return float(tag["value"])


def _process_tag(span: dict[str, Any], key: str) -> str | None:
    return next((str(t["value"]) for t in span["process"].get("tags", []) if t["key"] == key), None)


def _samples(prometheus: Prometheus, selector: str) -> dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]:
    """Every stored sample of the matching series over the last 10 minutes, by label set."""
    result = prometheus.query(f"{selector}[10m]")
    return {
        tuple(sorted(series["metric"].items())): [(float(t), float(v)) for t, v in series["values"]]
        for series in result
    }


def _increase_at_last_sample(prometheus: Prometheus, selector: str, by: str) -> dict[tuple[str, ...], float]:
    """Prometheus' ``increase(SELECTOR[10m])`` of each series at its own last scrape, summed by ``BY``.

    Evaluated at a series' last sample, increase() extrapolates nothing past its data (at a later
    instant it would, by up to its average scrape gap, which a quiet spell inflates); its first
    sample is the 0 that created-timestamp ingestion stored, so nothing before either.
    """
    samples = _samples(prometheus, selector)
    assert samples, f"Prometheus has no samples of {selector}"
    keys = [label.strip() for label in by.split(",")]
    totals: dict[tuple[str, ...], float] = {}
    for labels, values in samples.items():
        exact = "{" + ", ".join(f"{name}={json.dumps(value)}" for name, value in labels) + "}"
        (series,) = prometheus.query(f"increase({exact}[10m])", at=values[-1][0])
        key = tuple(dict(labels).get(k, "") for k in keys)
        totals[key] = totals.get(key, 0.0) + float(series["value"][1])
    return totals


def _wait_for_settled_counter(prometheus: Prometheus, selector: str, series_count: int, timeout_s: float = 60) -> None:
    """Wait until ``series_count`` series exist and none changed over the last 3 scrapes."""
    def settled() -> bool:
        samples = _samples(prometheus, selector)
        if len(samples) < series_count:
            return False
        latest_s = max(values[-1][0] for values in samples.values())
        return all(values[-1][1] == max(v for _, v in values) for values in samples.values()) and (
            time.time() - latest_s > 3 or all(len({v for t, v in values if t > time.time() - 3.5}) == 1 for values in samples.values())
        )
    wait_until(settled, timeout_s, f"{selector} did not settle with {series_count} series", 0.5)


def _assert_close(measured: float, expected: float, what: str) -> None:
    assert expected > 0, f"{what}: the spans carry no energy"
    assert abs(measured - expected) <= TOLERANCE * expected, f"{what}: Prometheus says {measured} J, the spans {expected} J"


def test_a_single_short_run_job_counts_its_energy(stack: Stack) -> None:
    """Defect 1: one ``otel-joules run`` job, one root span: its counter's first and only value counts."""
    service = "e2e-run"
    completed = subprocess.run(
        otel_joules_command("run", "--service-name", service, "--", sys.executable, "-c", BUSY, "0.3"),
        env=stack.env(service), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 0, completed.stderr
    (span,) = stack.jaeger.wait_for_spans(service, 1)
    expected_joules = _float_tag(span, SELF_JOULES)
    assert _float_tag(span, "energy.joules") > 0
    selector = f'{SPAN_COUNTER}{{job="{service}"}}'
    _wait_for_settled_counter(stack.prometheus, selector, 1)
    ((labels, values),) = _samples(stack.prometheus, selector).items()
    assert values[0][1] == 0.0, f"the first sample is not the created timestamp's 0: {values}"
    increase = _increase_at_last_sample(stack.prometheus, selector, "job, span_name")
    _assert_close(increase[(service, span["operationName"])], expected_joules, f"{service} {span['operationName']}")


@pytest.fixture(scope="module")
def services(stack: Stack) -> dict[str, Any]:
    """Two backend processes of one service and a frontend calling both in two bursts, a quiet spell between."""
    env_backend = stack.env("e2e-backend")
    backends = [
        subprocess.Popen([opentelemetry_instrument(), sys.executable, "-c", BACKEND], env=env_backend,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        ports = [backend.stdout.readline().strip() for backend in backends]  # type: ignore[union-attr]
        assert all(port.isdigit() for port in ports), [b.stderr.read() for b in backends if b.poll() is not None]
        quiet_s = 3 * EXPORT_INTERVAL_MS / 1000 + 2
        frontend = subprocess.run(
            [opentelemetry_instrument(), sys.executable, "-c", FRONTEND, ",".join(ports), "10,6", str(quiet_s)],
            env=stack.env("e2e-frontend"), capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
        )
        assert frontend.returncode == 0 and "done" in frontend.stdout, frontend.stderr
        # Both backends reported; now the second one exits and the first stays up.
        wait_until(lambda: len(stack.prometheus.query('power_components_watts{job="e2e-backend"}')) == 2, 60,
                   "two backend processes' power_components_watts series did not appear")
        backends[1].stdin.close()  # type: ignore[union-attr]
        backends[1].wait(60)
        exited_s = time.monotonic()
        wait_until(lambda: len(stack.prometheus.query('power_components_watts{job="e2e-backend"}')) == 1, 60,
                   "the exited backend's power_components_watts did not go", 0.1)
        gone_after_s = time.monotonic() - exited_s
        instances = {
            result["metric"]["instance"]
            for result in stack.prometheus.query('target_info{job="e2e-backend"}[10m]')
        }
        target_info = stack.prometheus.query('last_over_time(target_info{job=~"e2e-.*"}[10m])')
        yield {"gone_after_s": gone_after_s, "instances": instances, "target_info": target_info}
    finally:
        for backend in backends:
            if backend.poll() is None:
                backend.stdin.close()  # type: ignore[union-attr]
                try:
                    backend.wait(30)
                except subprocess.TimeoutExpired:
                    backend.kill()


def test_jaeger_has_every_services_spans_with_double_energy_and_the_remote_parent(stack: Stack, services: dict[str, Any]) -> None:
    frontend = stack.jaeger.wait_for_spans("e2e-frontend", 32)
    backend = stack.jaeger.wait_for_spans("e2e-backend", 16)
    assert {"e2e-frontend", "e2e-backend"} <= set(stack.jaeger.services())
    assert len([s for s in frontend if s["operationName"] == "checkout"]) == 16
    clients = {(s["traceID"], s["spanID"]) for s in frontend if s["operationName"] == "call backend"}
    assert len(clients) == 16
    for span in frontend + backend:
        for key in ("energy.joules", "energy.watts", SELF_JOULES, "energy.attributed.joules"):
            _float_tag(span, key)
        assert span["tags"]["energy.source"]["value"] == "measured"
    for span in backend:
        assert span["operationName"] == "GET /work"
        parents = [(r["traceID"], r["spanID"]) for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        assert len(parents) == 1 and parents[0] in clients, f"the backend span lost its remote parent: {span.get('references')}"


def test_span_counters_equal_the_spans_shares_per_service_and_span_name(stack: Stack, services: dict[str, Any]) -> None:
    """Includes "checkout", quiet for longer than the expiry between its two bursts."""
    spans = stack.jaeger.wait_for_spans("e2e-frontend", 32) + stack.jaeger.wait_for_spans("e2e-backend", 16)
    expected: dict[tuple[str, str], float] = {}
    for span in spans:
        key = (span["process"]["serviceName"], span["operationName"])
        expected[key] = expected.get(key, 0.0) + _float_tag(span, SELF_JOULES)
    selector = f'{SPAN_COUNTER}{{job=~"e2e-frontend|e2e-backend"}}'
    # checkout and call backend (each twice: the quiet spell restarted them), GET /work per backend.
    _wait_for_settled_counter(stack.prometheus, selector, 4)
    increase = _increase_at_last_sample(stack.prometheus, selector, "job, span_name")
    assert set(increase) == set(expected)
    for key, joules in expected.items():
        _assert_close(increase[key], joules, " ".join(key))


def test_processes_sharing_a_service_name_stay_separate_series(stack: Stack, services: dict[str, Any]) -> None:
    """Defect 3: one ``instance`` per process, and ``target_info`` with ``host_name`` for every process."""
    assert len(services["instances"]) == 2, services["instances"]
    by_instance: dict[str, float] = {}
    for span in stack.jaeger.wait_for_spans("e2e-backend", 16):
        instance = _process_tag(span, "service.instance.id")
        assert instance, f"the backend's resource has no service.instance.id: {span['process']}"
        by_instance[instance] = by_instance.get(instance, 0.0) + _float_tag(span, SELF_JOULES)
    assert set(by_instance) == services["instances"]
    selector = f'{SPAN_COUNTER}{{job="e2e-backend"}}'
    increase = _increase_at_last_sample(stack.prometheus, selector, "instance")
    for instance, joules in by_instance.items():
        _assert_close(increase[(instance,)], joules, f"e2e-backend instance {instance}")
    jobs = {(r["metric"]["job"], r["metric"]["instance"]): r["metric"].get("host_name") for r in services["target_info"]}
    assert {job for job, _ in jobs} >= {"e2e-backend", "e2e-frontend"}
    assert all(jobs.values()), f"target_info without host_name: {jobs}"


def test_an_exited_process_stops_counting_within_two_export_intervals(stack: Stack, services: dict[str, Any]) -> None:
    """Defect 4: the Collector forgets a finished process's gauges after two export intervals, not 5 minutes.

    The bound: two export intervals, plus one scrape for Prometheus to see it gone and one
    second for a loaded box.
    """
    bound_s = 2 * EXPORT_INTERVAL_MS / 1000 + 1 + 1
    assert services["gone_after_s"] <= bound_s, f"the exited process's gauge lingered {services['gone_after_s']:.1f} s"
    total = stack.prometheus.query('sum(power_components_watts{job="e2e-backend"})')
    assert total and abs(float(total[0]["value"][1]) - (WATTS["package_0"] + WATTS["dram_0"])) < 2.0, total


def _otlp_value(value: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a plain value: a string array becomes a list."""
    (kind, plain), = value.items()
    if kind == "arrayValue":
        return [_otlp_value(item) for item in plain.get("values", [])]
    return plain


def _otlp_file_spans(path: Path) -> dict[str, dict[str, Any]]:
    """The spans of an OTLP/JSON file by span id (hex), with attributes as plain values."""
    spans = {}
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    attributes = {a["key"]: _otlp_value(a["value"]) for a in span.get("attributes", [])}
                    spans[span["spanId"].lower()] = {"traceId": span["traceId"].lower(), "name": span["name"], "attributes": attributes}
    return spans


def test_otlp_json_files_reach_jaeger_through_the_collector_with_the_same_values(stack: Stack) -> None:
    """The file path users have to Jaeger and Tempo: ``--exporter otlp-file:`` -> otlpjsonfile receiver."""
    # The otlp-file extra needs a recent SDK: absent where the lowest supported one is tested.
    pytest.importorskip("opentelemetry.exporter.otlp.json.common", reason="the otlp-file extra is not installed")
    service = "e2e-file"
    path = stack.otlp_files / "run.jsonl"
    completed = subprocess.run(
        otel_joules_command("run", "--service-name", service, "--exporter", f"otlp-file:{path}", "--",
                            sys.executable, "-c", BUSY, "0.2"),
        env=stack.env(service, OTEL_METRICS_EXPORTER="none"), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 0, completed.stderr
    written = _otlp_file_spans(path)
    assert written
    stored = {span["spanID"].lower(): span for span in stack.jaeger.wait_for_spans(service, len(written))}
    assert set(stored) == set(written)
    for span_id, span in written.items():
        in_jaeger = stored[span_id]
        assert in_jaeger["traceID"].lower().lstrip("0") == span["traceId"].lstrip("0")
        assert in_jaeger["operationName"] == span["name"]
        energy = {k: v for k, v in span["attributes"].items() if k.startswith(("energy.", "carbon."))}
        assert SELF_JOULES in energy
        for key, value in energy.items():
            tag = in_jaeger["tags"][key]
            if isinstance(value, float):
                assert tag["type"] == "float64" and float(tag["value"]) == value, (key, value, tag)
            elif isinstance(value, list):
                # Jaeger keeps an array attribute as its JSON text.
                assert tag["type"] == "string" and json.loads(tag["value"]) == value, (key, value, tag)
            else:
                assert str(tag["value"]).lower() == str(value).lower(), (key, value, tag)


def test_a_collector_restart_does_not_disturb_apps_and_delivery_resumes(stack: Stack, tmp_path: Path) -> None:
    """The Collector stops mid-run and comes back on the same ports: no stall, a bounded exit, spans again."""
    collector = start_collector(tmp_path, jaeger_endpoint=stack.jaeger.otlp_endpoint, metric_expiration=METRIC_EXPIRATION)
    service = "e2e-restart"
    ticks = 80
    app = subprocess.Popen(
        [opentelemetry_instrument(), sys.executable, "-c", TICKER, str(ticks)], env=stack.env(service, collector),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        durations_s: list[float] = []
        restarted_at_tick = None
        assert app.stdout is not None
        for line in app.stdout:
            if line.startswith("tick "):
                index, duration_s = line.split()[1:]
                durations_s.append(float(duration_s))
                if int(index) == 15:
                    collector.stop()
                elif int(index) == 35:
                    collector.program.start()
                    restarted_at_tick = int(index)
            elif line.strip() == "last":
                break
        last_span_s = time.monotonic()
        app.wait(60)
        exit_s = time.monotonic() - last_span_s
        assert app.returncode == 0, app.stderr.read() if app.stderr else ""
    finally:
        if app.poll() is None:
            app.kill()
        collector.stop()
    assert len(durations_s) == ticks
    # A span's own time stays what it was: exports happen off the app's thread.
    assert max(durations_s) < 0.5, f"a span took {max(durations_s):.3f} s while the Collector was away"
    # The SDK's shutdown flush, not a retry loop against the gone Collector.
    assert exit_s < 15, f"the app took {exit_s:.1f} s to exit after its last span"
    assert restarted_at_tick is not None
    # Everything made a second after the restart arrives (the exporter's retries may bring earlier ones too).
    expected = set(range(0, 10)) | set(range(restarted_at_tick + 10, ticks))

    def indices() -> set[int]:
        return {int(span["tags"]["tick.index"]["value"]) for span in stack.jaeger.spans(service)}

    wait_until(lambda: expected <= indices(), 60, f"spans missing from Jaeger: {sorted(expected - indices())}")
