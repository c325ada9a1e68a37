"""Every PromQL expression shipped (dashboards, collector/README.md, README.md) run on the real paths.

One instrumented app, a child process (``instrument()`` on a fake powercap tree this test
advances at :data:`WATTS`: package 30 W, its core sub-zone 12 W inside it, DRAM 10 W, so
the devices draw 40 W, and psys, the whole platform, 50 W), delivers its telemetry both ways the READMEs document:

- **the Collector** (the recommended path): traces and metrics over OTLP/gRPC
  (``OTLPSpanExporter``, ``OTLPMetricExporter`` read every :data:`EXPORT_INTERVAL_MS`) to the
  real otelcol-joules running the shipped ``collector/otelcol-config.yaml`` unchanged
  (``tests.helpers.stack``), Jaeger as its trace backend; a real Prometheus 3.5 scrapes the
  Collector's exporter with ``honor_labels`` as ``collector/prometheus.yml`` does.
- **a direct scrape**: a second Prometheus scrapes the same app's ``PrometheusMetricReader``.

Each path has a Prometheus of its own, so no query sees the app's metrics twice.

Each expression runs on the path it says it needs: a dashboard panel's description starts
with it; a README expression's comment line in its ``promql`` block says ``Either path``,
``Collector`` or ``Direct scrape``. An expression that says nothing (an inline one in the
prose) runs where its names exist: the ``span_*`` metrics behind the Collector only,
``service_name`` (a ``target_info`` label on a direct scrape only) there only, anything
else on both. On every path it needs, with Grafana's ``$__range``, ``$__rate_interval``
and ``$__interval`` set to :data:`WINDOW`, it must return series, not all zero, with every
label it groups by present and non-empty; the energy rates must equal the fake's watts
within 2%.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.fakes.powercap import ConstantPower, make_powercap
from tests.helpers.docs import documentation_files
from tests.helpers.processes import REPO, clean_env
from tests.helpers.prometheus import Prometheus, ScrapeJob, free_port, prometheus_binary, start_prometheus
from tests.helpers.stack import Collector, Jaeger, stack_binary, start_collector, start_jaeger, wait_until

COLLECTOR_DIR = REPO / "collector"
SERVICE = "checkout-api"
#: What Grafana's ``$__range``, ``$__rate_interval`` and ``$__interval`` stand for here.
WINDOW = "10s"
#: The window of the checks by value. Behind the Collector a sample is the app's last export,
#: up to about one export interval old when scraped, and an export delayed on a loaded box
#: shifts every later one: over a window of N s a rate can be off by up to one interval / N.
#: So the window is a minute (under 2% for a shift of up to 1.2 s) and the value is averaged
#: over a few seconds of evaluation times (the staleness's sawtooth at both ends averages out).
RATE_WINDOW_S = 60
RATE_AVERAGE_S = 10
#: Watts the fake draws, per zone (core is inside the package: energy.nested; psys is the whole platform: hw.host.*).
WATTS = {"package_0": 30.0, "core_0": 12.0, "dram_0": 10.0, "psys": 50.0}
HOST_WATTS = 50.0
#: The hw.energy devices (package, DRAM) and their sum, energy.components.
WATTS_BY_HW_ID = {"intel-rapl:0": 30.0, "intel-rapl:0:2": 10.0}
COMPONENTS_WATTS = 40.0
INTENSITY_GCO2EQ_PER_KWH = 400.0
SPAN_NAMES = {"GET /checkout", "SELECT orders"}
EXPORT_INTERVAL_MS = 1000

COLLECTOR = "collector"
DIRECT = "direct"
PATHS = (COLLECTOR, DIRECT)

# The instrumented app: instrument() with both paths' readers, a request (a root span and a
# child) every 50 ms.
APP = r"""
import socket, sys, time, uuid
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import start_http_server
import otel_joules

sysfs_root, port, otlp_endpoint, service, intensity, interval_ms = sys.argv[1:7]
resource = Resource({"service.name": service, "service.instance.id": str(uuid.uuid4()), "host.name": socket.gethostname()})
collector_reader = PeriodicExportingMetricReader(
    OTLPMetricExporter(endpoint=otlp_endpoint, insecure=True), export_interval_millis=int(interval_ms))
meter_provider = MeterProvider(resource=resource, metric_readers=[collector_reader, PrometheusMetricReader()])
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(
    BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True), schedule_delay_millis=200))
otel_joules.instrument(tracer_provider, meter_provider, carbon_intensity=float(intensity), sysfs_root=sysfs_root)
start_http_server(int(port), addr="127.0.0.1")
tracer = tracer_provider.get_tracer("shop")

def work(seconds):
    # Some CPU time of the span's own: the attribution model gives spans their CPU time's share.
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

print("ready", flush=True)
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    with tracer.start_as_current_span("GET /checkout") as root:
        with tracer.start_as_current_span("SELECT orders"):
            work(0.002)
            time.sleep(0.02)
        work(0.002)
        time.sleep(0.02)
    time.sleep(0.01)
"""


@dataclass
class Paths:
    """The two Prometheus servers (one per path) and the programs behind them."""

    prometheus: dict[str, Prometheus]
    collector: Collector
    jaeger: Jaeger


def _wait_for_series(prometheus: Prometheus, expr: str, timeout_s: float, what: str) -> None:
    wait_until(lambda: prometheus.query(expr), timeout_s, what)


def _fewest_samples(prometheus: Prometheus, selector: str) -> float:
    """The fewest samples any series of ``selector`` has stored over the last 5 minutes (0 without one)."""
    result = prometheus.query(f"min(count_over_time({selector}[5m]))")
    return float(result[0]["value"][1]) if result else 0.0


def _start_app(tmp_path: Path, sysfs_root: str, port: int, otlp_endpoint: str) -> subprocess.Popen[bytes]:
    """Start the instrumented app, its output in ``tmp_path/app.log``; wait until it says it is ready."""
    log_path = tmp_path / "app.log"
    with open(log_path, "wb") as log:
        app = subprocess.Popen(
            [sys.executable, "-c", APP, sysfs_root, str(port), otlp_endpoint, SERVICE, str(INTENSITY_GCO2EQ_PER_KWH),
             str(EXPORT_INTERVAL_MS)],
            env=clean_env(tmp_path), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: app.poll() is not None or b"ready" in log_path.read_bytes(), 60, "the instrumented app did not start")
        assert app.poll() is None, f"the instrumented app exited with {app.returncode}:\n{log_path.read_text(errors='replace')}"
    except BaseException:
        app.kill()
        app.wait(10)
        raise
    return app


def _stop_app(app: subprocess.Popen[bytes]) -> None:
    app.kill()
    app.wait(10)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paths]:
    # Skip (or fail in CI) before starting anything.
    prometheus_binary()
    stack_binary("otelcol-joules")
    stack_binary("jaeger")
    tmp_path = tmp_path_factory.mktemp("dashboards")
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    powercap.add_zone("intel-rapl:1", "psys", "psys")
    with contextlib.ExitStack() as stack:
        jaeger = start_jaeger(tmp_path)
        stack.callback(jaeger.stop)
        collector = start_collector(tmp_path, jaeger_endpoint=jaeger.otlp_endpoint)
        stack.callback(collector.stop)
        app_port = free_port()
        servers = {}
        for path, job in ((COLLECTOR, ScrapeJob("collector", [collector.prometheus_target], honor_labels=True)),
                          (DIRECT, ScrapeJob("app", [f"127.0.0.1:{app_port}"]))):
            folder = tmp_path / f"prometheus-{path}"
            folder.mkdir()
            servers[path] = start_prometheus(folder, [job])
            stack.callback(servers[path].stop)
        stack.enter_context(ConstantPower(powercap, WATTS))
        app = _start_app(tmp_path, powercap.sysfs_root, app_port, collector.otlp_grpc_endpoint)
        stack.callback(_stop_app, app)
        # Every metric on both paths, and the span counters behind the Collector, before the window counts.
        _wait_for_series(servers[DIRECT], 'hw_host_energy_joules_total{job="app"}', 60, "the direct scrape had no host energy")
        _wait_for_series(servers[COLLECTOR], f'hw_host_energy_joules_total{{job="{SERVICE}"}}', 60,
                         "Prometheus had no host energy from the Collector")
        _wait_for_series(servers[COLLECTOR], f'span_energy_attributed_self_co2eq_grams_total{{job="{SERVICE}"}}', 60,
                         "Prometheus had no span counters from the Collector")
        # More than the checks' window and averaging (and so more than WINDOW) of the app's data on both paths.
        samples = RATE_WINDOW_S + RATE_AVERAGE_S + 3
        for path, job in ((COLLECTOR, SERVICE), (DIRECT, "app")):
            wait_until(lambda: _fewest_samples(servers[path], f'hw_host_energy_joules_total{{job="{job}"}}') >= samples,
                       3 * samples, f"the {path} path did not store {samples} samples of the app's host energy")
        assert app.poll() is None, f"the instrumented app exited with {app.returncode}"
        yield Paths(servers, collector, jaeger)


# --- the expressions shipped --------------------------------------------------------------

#: A README comment line naming the path of the expressions under it.
_PATH_COMMENTS = {"either path": PATHS, "collector": (COLLECTOR,), "direct scrape": (DIRECT,)}
#: A dashboard panel's description starts with the path it needs (tests/collector/test_config.py checks it).
_PANEL_PATHS = {"Path: the Collector or a direct Prometheus scrape": PATHS, "Path: the Collector only": (COLLECTOR,)}


@dataclass(frozen=True)
class Expression:
    where: str
    expr: str
    paths: tuple[str, ...]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def dashboard_expressions() -> list[Expression]:
    """Every Prometheus target of every dashboard, on the path its panel's description names."""
    found = []
    for path in sorted((COLLECTOR_DIR / "grafana" / "dashboards").glob("*.json")):
        for panel in _panels(json.loads(path.read_text(encoding="utf-8"))["panels"]):
            for target in panel.get("targets") or []:
                if (target.get("datasource") or panel.get("datasource") or {}).get("type") != "prometheus":
                    continue
                description = panel.get("description", "")
                needs = next((p for prefix, p in _PANEL_PATHS.items() if description.startswith(prefix)), None)
                assert needs, f"{path.name}: panel {panel['title']!r} does not start its description with its path"
                found.append(Expression(f"{path.name}: {panel['title']}", target["expr"], needs))
    return found


def inferred_paths(expr: str) -> tuple[str, ...]:
    """Where an expression's names exist: span_* behind the Collector, service_name on a direct scrape."""
    if re.search(r"\bspan_\w+", expr):
        return (COLLECTOR,)
    if re.search(r"\bservice_name\b", expr):
        return (DIRECT,)
    return PATHS


def _stated_paths(comment: str) -> tuple[str, ...] | None:
    """The path a ``# ...`` comment's last sentence names (``... Either path.``), if any."""
    sentences = [s.strip().lower() for s in comment.lstrip("#").strip().rstrip(".").split(".")]
    return _PATH_COMMENTS.get(sentences[-1]) if sentences else None


def _commented(block: str) -> list[tuple[str, list[str]]]:
    """A promql block as (comment, the expressions under it): consecutive ``#`` lines are one comment."""
    groups: list[tuple[str, list[str]]] = []
    comment_lines: list[str] = []
    for line in block.splitlines():
        if line.lstrip().startswith("#"):
            comment_lines.append(line.lstrip().lstrip("#").strip())
        elif line.strip():
            if comment_lines or not groups:
                groups.append((" ".join(comment_lines), []))
                comment_lines = []
            groups[-1][1].append(line.strip())
    return groups


#: Inline code that is a whole PromQL expression: a function or aggregation applied to something
#: that names a metric otel-joules' stack produces.
_INLINE_PROMQL = re.compile(r"`(\w+(?:\s+by\s*\([^()`]*\))?\s*\([^`]*\b(?:hw|process|span)_\w+[^`]*\))`")


def readme_expressions(path: Path) -> list[Expression]:
    """Every line of every ```promql block of a README, and every inline expression of its prose."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(REPO).as_posix()
    found = []
    for block in re.findall(r"```promql\n(.*?)```", text, flags=re.S):
        for comment, expressions in _commented(block):
            stated = _stated_paths(comment)
            found += [Expression(where, expr, stated or inferred_paths(expr)) for expr in expressions]
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for match in _INLINE_PROMQL.finditer(prose):
        found.append(Expression(f"{where} (inline)", match.group(1), inferred_paths(match.group(1))))
    return found


EXPRESSIONS = (dashboard_expressions() + readme_expressions(COLLECTOR_DIR / "README.md")
               + [e for path in documentation_files() for e in readme_expressions(path)])


def test_every_place_ships_promql() -> None:
    places = {e.where.split(":")[0].removesuffix(" (inline)") for e in EXPRESSIONS}
    assert {"otel-joules-energy.json", "collector/README.md", "README.md"} <= places, places
    # Both paths are exercised, and each README comment that names a path was understood.
    assert {p for e in EXPRESSIONS for p in e.paths} == set(PATHS)
    for readme in (COLLECTOR_DIR / "README.md", *documentation_files()):
        for block in re.findall(r"```promql\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S):
            for comment, _ in _commented(block):
                if re.search(r"(?i)\b(either path|collector|direct scrape)\.\s*$", comment):
                    assert _stated_paths(comment), comment
    # collector/README.md states a path for each of its expressions.
    assert all(_stated_paths(c) for b in re.findall(r"```promql\n(.*?)```", (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8"),
                                                    flags=re.S) for c, _ in _commented(b))


def test_path_comments_and_inference() -> None:
    assert _stated_paths("# Host power (W). Either path.") == PATHS
    assert _stated_paths("# Energy per service over the last hour (J): spans' own shares. Collector.") == (COLLECTOR,)
    assert _stated_paths("# Per service. Direct scrape.") == (DIRECT,)
    assert _stated_paths("# Power per device, per host (W)") is None
    assert _commented("# A (W).\n# Collector.\nx_total\ny_total\n# B. Either path.\nz\n") == [
        ("A (W). Collector.", ["x_total", "y_total"]), ("B. Either path.", ["z"])]
    assert _commented("a\n# B. Direct scrape.\nb\n") == [("", ["a"]), ("B. Direct scrape.", ["b"])]
    assert inferred_paths("sum by (job) (increase(span_energy_attributed_self_joules_total[1h]))") == (COLLECTOR,)
    assert inferred_paths("sum by (service_name) (x * on (job, instance) group_left (service_name) target_info)") == (DIRECT,)
    assert inferred_paths("sum by (hw_id) (hw_host_power_watts)") == PATHS
    inline = "`sum by (host_name) (max by (host_name, hw_id) (rate(hw_energy_joules_total[5m])))` for"
    assert _INLINE_PROMQL.search(inline).group(1).startswith("sum by (host_name) (max")
    assert not _INLINE_PROMQL.search("`* on (job, instance) group_left (host_name) target_info`, `sum by (host_name)`")


def _params() -> list[Any]:
    return [pytest.param(e.expr, path, id=f"{path}: {e.where}: {e.expr}") for e in EXPRESSIONS for path in e.paths]


def grouping_labels(expr: str) -> set[str]:
    """Labels the outermost aggregation groups by (``sum by (a, b) (...)``, ``sort_desc(sum by ...)``)."""
    match = re.match(r"^\s*(?:sort_desc\(|sort\(|topk\(\s*\d+\s*,\s*)?\s*\w+\s+by\s*\(([^)]*)\)", expr)
    return {label.strip() for label in match.group(1).split(",")} if match else set()


def evaluate(prometheus: Prometheus, expr: str, at: float | None = None) -> list[dict[str, Any]]:
    for variable in ("$__range", "$__rate_interval", "$__interval"):
        expr = expr.replace(variable, WINDOW)
    return prometheus.query(expr, at)


@pytest.mark.parametrize(("expr", "path"), _params())
def test_expression_returns_labelled_series(paths: Paths, expr: str, path: str) -> None:
    result = evaluate(paths.prometheus[path], expr)
    assert result, f"{expr!r} returned nothing on the {path} path"
    assert any(float(series["value"][1]) > 0 for series in result), f"{expr!r}: all zero on the {path} path: {result}"
    for series in result:
        labels = series["metric"]
        for label in grouping_labels(expr):
            assert labels.get(label), f"{expr!r}: series {labels} has no {label!r} on the {path} path"
        assert float(series["value"][1]) >= 0, f"{expr!r}: {series}"
        if "job" in labels:
            # Behind the Collector job is service.name; on a direct scrape the scrape job's name.
            assert labels["job"] == (SERVICE if path == COLLECTOR else "app"), labels
        if "span_name" in labels:
            assert labels["span_name"] in SPAN_NAMES
        if "host_name" in labels:
            assert labels["host_name"] == socket.gethostname()
        if "service_name" in labels:
            assert labels["service_name"] == SERVICE


def _value(prometheus: Prometheus, expr: str, at: float | None = None) -> float:
    (series,) = evaluate(prometheus, expr, at)
    return float(series["value"][1])


def _rate(counter: str, by: str = "") -> str:
    """The counter's rate over :data:`RATE_WINDOW_S`, averaged over :data:`RATE_AVERAGE_S` of evaluation times."""
    grouping = f" by ({by})" if by else ""
    return f"avg_over_time((sum{grouping} (rate({counter}[{RATE_WINDOW_S}s])))[{RATE_AVERAGE_S}s:200ms])"


@pytest.mark.parametrize("path", PATHS)
def test_rate_of_the_energy_counters_is_the_fakes_power(paths: Paths, path: str) -> None:
    prometheus = paths.prometheus[path]
    assert _value(prometheus, _rate("hw_host_energy_joules_total")) == pytest.approx(HOST_WATTS, rel=0.02)
    by_device = {s["metric"]["hw_id"]: float(s["value"][1]) for s in evaluate(prometheus, _rate("hw_energy_joules_total", "hw_id"))}
    assert set(by_device) == set(WATTS_BY_HW_ID)  # no sub-zone, no psys among the devices: their sum adds up
    for hw_id, watts in WATTS_BY_HW_ID.items():
        assert by_device[hw_id] == pytest.approx(watts, rel=0.02), by_device
    assert _value(prometheus, _rate("energy_components_joules_total")) == pytest.approx(COMPONENTS_WATTS, rel=0.02)
    nested = {s["metric"]["energy_domain"]: float(s["value"][1])
              for s in evaluate(prometheus, _rate("energy_nested_joules_total", "energy_domain"))}
    assert nested == pytest.approx({"core_0": 12.0, "uncore_0": 0.0}, rel=0.02, abs=1e-9)


@pytest.mark.parametrize("path", PATHS)
def test_shipped_energy_queries_give_the_fakes_figures(paths: Paths, path: str) -> None:
    """The dashboard's own expressions, by value: host energy, host power, power per device."""
    prometheus = paths.prometheus[path]
    # The stat panel's expression with Grafana's range at the checks' window.
    energy = "sum(increase(hw_host_energy_joules_total[$__range])) / 3600000".replace("$__range", f"{RATE_WINDOW_S}s")
    times = _evaluation_times()
    kwh = sum(_value(prometheus, energy, at) for at in times) / len(times)
    assert kwh == pytest.approx(HOST_WATTS * RATE_WINDOW_S / 3.6e6, rel=0.02)
    # A gauge is one collection interval (about a second): a wider margin for scheduling jitter.
    assert _value(prometheus, "sum(hw_host_power_watts)") == pytest.approx(HOST_WATTS, rel=0.05)
    per_device = {s["metric"]["hw_id"]: float(s["value"][1]) for s in evaluate(
        prometheus, "sum by (host_name, hw_type, hw_id, hw_name, energy_source) "
                    "(hw_power_watts * on (job, instance) group_left (host_name) target_info)")}
    for hw_id, watts in WATTS_BY_HW_ID.items():
        assert per_device[hw_id] == pytest.approx(watts, rel=0.05), per_device


def _evaluation_times() -> list[float]:
    """Instants over the last :data:`RATE_AVERAGE_S` seconds, 200 ms apart (staleness averages out)."""
    now = time.time()
    return [now - RATE_AVERAGE_S + 0.2 * i for i in range(int(RATE_AVERAGE_S / 0.2))]


def _summed_samples(prometheus: Prometheus, metric: str) -> dict[float, float]:
    """``scrape time -> sum over the metric's series`` of every sample of the last :data:`RATE_WINDOW_S`."""
    sums: dict[float, float] = {}
    for series in prometheus.query(f"{metric}[{RATE_WINDOW_S}s]"):
        for at, value in series["values"]:
            sums[float(at)] = sums.get(float(at), 0.0) + float(value)
    return sums


def test_span_co2_is_the_span_energy_at_the_configured_intensity(paths: Paths) -> None:
    """The CO2 panels sum what the span carbon hook set: grams = joules / 3.6e6 x intensity, span by span.

    Compared scrape by scrape: the exporter updates the two counters one after the other, so a
    scrape can land between them (one batch of spans apart); most scrapes do not.
    """
    prometheus = paths.prometheus[COLLECTOR]
    joules = _summed_samples(prometheus, "span_energy_attributed_self_joules_total")
    grams = _summed_samples(prometheus, "span_energy_attributed_self_co2eq_grams_total")
    scrapes = sorted(set(joules) & set(grams))
    assert len(scrapes) >= RATE_WINDOW_S / 2 and all(joules[at] > 0 for at in scrapes)
    exact = [at for at in scrapes if grams[at] == pytest.approx(joules[at] / 3.6e6 * INTENSITY_GCO2EQ_PER_KWH, rel=1e-6)]
    assert len(exact) > len(scrapes) / 2, {at: (joules[at], grams[at]) for at in scrapes}
    for at in scrapes:
        assert grams[at] == pytest.approx(joules[at] / 3.6e6 * INTENSITY_GCO2EQ_PER_KWH, rel=0.05)


def test_span_counters_count_every_span_the_app_sent(paths: Paths) -> None:
    """Behind the Collector both span names are counted, and the spans reached Jaeger with their energy."""
    by_name = evaluate(paths.prometheus[COLLECTOR], "sum by (span_name) (span_energy_attributed_self_joules_total)")
    assert {s["metric"]["span_name"] for s in by_name} == SPAN_NAMES
    spans = paths.jaeger.wait_for_spans(SERVICE, 10)
    assert {s["operationName"] for s in spans} == SPAN_NAMES
    assert all(s["tags"]["energy.attributed.self.joules"]["type"] == "float64" for s in spans)


@pytest.mark.parametrize("path", PATHS)
def test_the_share_of_host_power_per_kind_is_the_fakes(paths: Paths, path: str) -> None:
    """collector/README's share query counts the devices once: the package and DRAM, not core."""
    (expr,) = [e.expr for e in EXPRESSIONS if e.where == "collector/README.md" and "/ on (host_name) group_left" in e.expr]
    # Gauges of one collection interval each: the median over instants, so one export delayed on a
    # loaded box (its interval's power skewed between the two devices) does not decide the share.
    samples: dict[str, list[float]] = {}
    for at in _evaluation_times():
        for series in evaluate(paths.prometheus[path], expr, at):
            samples.setdefault(series["metric"]["hw_type"], []).append(float(series["value"][1]))
    shares = {kind: statistics.median(values) for kind, values in samples.items()}
    assert shares == pytest.approx({"cpu": 30.0 / COMPONENTS_WATTS, "memory": 10.0 / COMPONENTS_WATTS}, rel=0.05), shares


@pytest.mark.parametrize("path", PATHS)
def test_process_share_is_labelled_and_never_more_than_the_host(paths: Paths, path: str) -> None:
    """The per-process panels: this app's share per kind, measured, positive, at most what the host drew."""
    prometheus = paths.prometheus[path]
    shares = evaluate(prometheus, f"sum by (hw_type, energy_source) (rate(process_energy_joules_total[{RATE_WINDOW_S}s]))")
    assert {s["metric"]["hw_type"] for s in shares} == {"cpu", "memory"}, shares
    assert {s["metric"]["energy_source"] for s in shares} == {"measured"}, shares
    total_watts = sum(float(s["value"][1]) for s in shares)
    assert 0 < total_watts <= COMPONENTS_WATTS * 1.02  # shares of what the measured devices spent
    assert _value(prometheus, "sum(process_power_watts)") <= COMPONENTS_WATTS * 1.05
