"""Every PromQL expression shipped (dashboard, collector/README.md, README.md) run by a real Prometheus.

A real ``prometheus`` binary (``tests.helpers.prometheus``) scrapes, every second:

- ``app``: a real instrumented app, in a child process (``instrument()`` with a
  ``PrometheusMetricReader``) on a fake powercap tree whose counters this test advances at
  known power: package 30 W (its core sub-zone 12 W, inside it), DRAM 10 W, so the host
  draws 40 W. This is the direct-scrape path (``hw.*``, ``process.*``, ``target_info``).
- ``collector``: the Collector's prometheus exporter for the ``span_*`` metrics. No
  Collector binary can be installed here (not in Debian, not on PyPI), so that stage is
  reproduced from ``collector/otelcol-config.yaml`` itself: the ``sum`` connector's
  metrics, conditions and grouping keys applied to the app's real spans (read from the
  OTLP/JSON file the app writes), named and labelled as the exporter names them
  (``job`` = ``service.name``, ``instance`` = ``service.instance.id``), with ``target_info``.
  A condition the reproduction does not understand fails the test, so a config change
  cannot slip past it.

Each expression (Grafana's ``$__range`` and ``$__rate_interval`` set to
:data:`WINDOW`) must return series, with every label it groups by present and
non-empty, and the energy rates must equal the fake's watts within 2%.
"""

from __future__ import annotations

import json
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.collector.test_config import COLLECTOR_DIR, _panels, prometheus_label_name, prometheus_metric_name
from tests.fakes.powercap import FakePowercap, make_powercap
from tests.helpers.processes import clean_env
from tests.helpers.prometheus import Prometheus, ScrapeJob, free_port, prometheus_binary, start_prometheus

REPO = COLLECTOR_DIR.parent
SERVICE = "checkout-api"
WINDOW = "10s"
#: Watts the fake draws, per zone (core is inside the package: not added to the host).
WATTS = {"package_0": 30.0, "core_0": 12.0, "dram_0": 10.0}
HOST_WATTS = 40.0
WATTS_BY_HW_ID = {"intel-rapl:0": 30.0, "intel-rapl:0:0": 12.0, "intel-rapl:0:2": 10.0}
INTENSITY_GCO2EQ_PER_KWH = 400.0
SPAN_NAMES = {"GET /checkout", "SELECT orders"}

# The instrumented app: instrument() with a PrometheusMetricReader on the fake tree,
# spans written to an OTLP/JSON file, a request (root span + a child) every 50 ms.
APP = r"""
import socket, sys, time, uuid
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import start_http_server
import otel_joules
from otel_joules.exporters import OtlpFileSpanExporter

sysfs_root, port, otlp_path, service, intensity = sys.argv[1:6]
resource = Resource({"service.name": service, "service.instance.id": str(uuid.uuid4()), "host.name": socket.gethostname()})
meter_provider = MeterProvider(resource=resource, metric_readers=[PrometheusMetricReader()])
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(OtlpFileSpanExporter(otlp_path)))
otel_joules.instrument(tracer_provider, meter_provider, carbon_intensity=float(intensity), sysfs_root=sysfs_root)
start_http_server(int(port), addr="127.0.0.1")
tracer = tracer_provider.get_tracer("shop")

def work(seconds):
    # Some CPU time of the span's own: the attribution model gives spans their CPU time's share.
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

print("ready", flush=True)
sys.stdin.readline()  # "go" (or the end of input: the test is gone)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    with tracer.start_as_current_span("GET /checkout") as root:
        with tracer.start_as_current_span("SELECT orders"):
            work(0.002)
            time.sleep(0.02)
        work(0.002)
        time.sleep(0.02)
    time.sleep(0.01)
"""


class PowerDraw(threading.Thread):
    """Advances the fake zones continuously at :data:`WATTS` (counter = watts x elapsed time)."""

    def __init__(self, powercap: FakePowercap) -> None:
        super().__init__(name="fake-power", daemon=True)
        self._zones = [(powercap.zones[name], watts) for name, watts in WATTS.items()]
        self._stop_event = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self._stop_event.wait(0.005):
            elapsed = time.monotonic() - started
            for zone, watts in self._zones:
                zone.total_uj = round(watts * elapsed * 1e6)
                zone.write()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def _sum_conditions(info: dict[str, Any]) -> list[str]:
    """The attribute keys the connector's conditions require; fails on anything else."""
    keys = []
    for condition in info.get("conditions") or []:
        match = re.fullmatch(r'\s*attributes\["([^"]+)"\]\s*!=\s*nil\s*', condition)
        assert match, f"the test's reproduction of the sum connector does not understand the condition {condition!r}"
        keys.append(match.group(1))
    return keys


class CollectorExporterReproduction:
    """What the Collector's prometheus exporter shows for the ``sum`` connector's metrics (module docstring)."""

    def __init__(self, otlp_path: Path) -> None:
        config = yaml.safe_load((COLLECTOR_DIR / "otelcol-config.yaml").read_text())
        self._metrics = config["connectors"]["sum"]["spans"]
        # transform/span_name copies the span name into this attribute before the connector.
        statements = json.dumps(config["processors"]["transform/span_name"]["trace_statements"])
        assert 'set(attributes[\\"span.name\\"], name)' in statements
        self._otlp_path = otlp_path

    def _spans(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        for line in self._otlp_path.read_text().splitlines():
            for resource_spans in json.loads(line)["resourceSpans"]:
                resource = {a["key"]: next(iter(a["value"].values())) for a in resource_spans["resource"]["attributes"]}
                for scope_spans in resource_spans["scopeSpans"]:
                    for span in scope_spans["spans"]:
                        attributes = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                        attributes["span.name"] = span["name"]
                        yield resource, attributes

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        resources: dict[tuple[str, str], dict[str, Any]] = {}
        sums: dict[str, dict[tuple[str, ...], float]] = {name: {} for name in self._metrics}
        keys = {name: [a["key"] for a in info["attributes"]] for name, info in self._metrics.items()}
        for resource, attributes in self._spans():
            job_instance = (resource["service.name"], resource["service.instance.id"])
            resources[job_instance] = resource
            for name, info in self._metrics.items():
                if not all(attributes.get(key) is not None for key in _sum_conditions(info)):
                    continue
                group = job_instance + tuple(str(attributes.get(key, "")) for key in keys[name])
                sums[name][group] = sums[name].get(group, 0.0) + float(attributes[info["source_attribute"]])
        for name, groups in sums.items():
            family = CounterMetricFamily(
                prometheus_metric_name(name, "", is_counter=True).removesuffix("_total"), self._metrics[name]["description"],
                labels=["job", "instance"] + [prometheus_label_name(key) for key in keys[name]],
            )
            for group, value in groups.items():
                family.add_metric(list(group), value)
            yield family
        info = GaugeMetricFamily("target_info", "Target metadata", labels=["job", "instance", "host_name"])
        for (job, instance), resource in resources.items():
            info.add_metric([job, instance, resource.get("host.name", "")], 1.0)
        yield info


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    prometheus_binary()  # skip or fail first, before starting anything
    from prometheus_client import CollectorRegistry, start_http_server

    tmp_path = tmp_path_factory.mktemp("prometheus-dashboard")
    powercap = make_powercap(tmp_path / "sys", "one_socket")
    otlp_path = tmp_path / "spans.otlp.jsonl"
    otlp_path.touch()
    app_port = free_port()
    app = subprocess.Popen(
        [sys.executable, "-c", APP, powercap.sysfs_root, str(app_port), str(otlp_path), SERVICE, str(INTENSITY_GCO2EQ_PER_KWH)],
        env=clean_env(tmp_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    draw = PowerDraw(powercap)
    registry = CollectorRegistry()
    registry.register(CollectorExporterReproduction(otlp_path))
    started = start_http_server(0, addr="127.0.0.1", registry=registry)
    server = started[0]
    prometheus = None
    try:
        assert app.stdout is not None
        assert select.select([app.stdout], [], [], 60)[0], "the instrumented app did not start within 60 s"
        assert app.stdout.readline().strip() == "ready"
        draw.start()
        assert app.stdin is not None
        app.stdin.write("go\n")
        app.stdin.flush()
        prometheus = start_prometheus(tmp_path, [
            ScrapeJob("app", [f"127.0.0.1:{app_port}"]),
            ScrapeJob("collector", [f"127.0.0.1:{server.server_port}"], honor_labels=True),
        ])
        # More than WINDOW of data, so windowed queries see a full window.
        prometheus.wait_for_scrapes("app", 14, timeout_s=40)
        prometheus.wait_for_scrapes("collector", 14, timeout_s=10)
        yield prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        draw.stop()
        app.kill()
        app.wait(10)
        server.shutdown()
        server.server_close()


# --- the expressions shipped --------------------------------------------------------------


def dashboard_expressions() -> list[tuple[str, str]]:
    """``(where, expr)`` of every Prometheus target of every dashboard."""
    found = []
    for path in sorted((COLLECTOR_DIR / "grafana" / "dashboards").glob("*.json")):
        for panel in _panels(json.loads(path.read_text())["panels"]):
            for target in panel.get("targets") or []:
                if (target.get("datasource") or panel.get("datasource") or {}).get("type") == "prometheus":
                    found.append((f"{path.name}: {panel['title']}", target["expr"]))
    return found


def readme_expressions(path: Path) -> list[tuple[str, str]]:
    """``(where, expr)`` of every line of every ```promql block of a README."""
    found = []
    for block in re.findall(r"```promql\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                found.append((path.relative_to(REPO).as_posix(), line.strip()))
    return found


EXPRESSIONS = dashboard_expressions() + readme_expressions(COLLECTOR_DIR / "README.md") + readme_expressions(REPO / "README.md")


def _params() -> list[Any]:
    params = []
    for where, expr in EXPRESSIONS:
        params.append(pytest.param(expr, id=f"{where}: {expr}"))
    return params


def test_every_place_ships_promql() -> None:
    places = {where.split(":")[0] for where, _ in EXPRESSIONS}
    assert {"otel-joules-energy.json", "collector/README.md", "README.md"} <= places, places


def grouping_labels(expr: str) -> set[str]:
    """Labels the outermost aggregation groups by (``sum by (a, b) (...)``, ``sort_desc(sum by ...)``)."""
    match = re.match(r"^\s*(?:sort_desc\(|sort\(|topk\(\s*\d+\s*,\s*)?\s*\w+\s+by\s*\(([^)]*)\)", expr)
    return {label.strip() for label in match.group(1).split(",")} if match else set()


def evaluate(prometheus: Prometheus, expr: str) -> list[dict[str, Any]]:
    return prometheus.query(expr.replace("$__range", WINDOW).replace("$__rate_interval", WINDOW))


@pytest.mark.parametrize("expr", _params())
def test_expression_returns_labelled_series(stack: Prometheus, expr: str) -> None:
    result = evaluate(stack, expr)
    assert result, f"{expr!r} returned nothing"
    assert any(float(series["value"][1]) > 0 for series in result), f"{expr!r}: all zero: {result}"
    for series in result:
        labels = series["metric"]
        for label in grouping_labels(expr):
            assert labels.get(label), f"{expr!r}: series {labels} has no {label!r}"
        assert float(series["value"][1]) >= 0, f"{expr!r}: {series}"
        if "job" in labels and "span_" in expr:
            assert labels["job"] == SERVICE  # behind the Collector, job is service.name
        if "span_name" in labels:
            assert labels["span_name"] in SPAN_NAMES
        if "host_name" in labels:
            assert labels["host_name"] == socket.gethostname()


def _value(prometheus: Prometheus, expr: str) -> float:
    (series,) = evaluate(prometheus, expr)
    return float(series["value"][1])


def test_rate_of_the_energy_counters_is_the_fakes_power(stack: Prometheus) -> None:
    assert _value(stack, f"sum(rate(hw_host_energy_joules_total[{WINDOW}]))") == pytest.approx(HOST_WATTS, rel=0.02)
    by_device = {s["metric"]["hw_id"]: float(s["value"][1])
                 for s in evaluate(stack, f"sum by (hw_id) (rate(hw_energy_joules_total[{WINDOW}]))")}
    for hw_id, watts in WATTS_BY_HW_ID.items():
        assert by_device[hw_id] == pytest.approx(watts, rel=0.02), by_device
    assert by_device["intel-rapl:0:1"] == 0.0  # uncore: not advanced


def test_shipped_energy_queries_give_the_fakes_figures(stack: Prometheus) -> None:
    """The dashboard's own expressions, by value: host energy, host power, power per device."""
    window_s = float(WINDOW.rstrip("s"))
    assert _value(stack, "sum(increase(hw_host_energy_joules_total[$__range])) / 3600000") == pytest.approx(
        HOST_WATTS * window_s / 3.6e6, rel=0.02)
    # A gauge is one collection interval (about a scrape interval): a wider margin for scheduling jitter.
    assert _value(stack, "sum(hw_host_power_watts)") == pytest.approx(HOST_WATTS, rel=0.05)
    per_device = {s["metric"]["hw_id"]: float(s["value"][1]) for s in evaluate(
        stack, "sum by (host_name, hw_type, hw_id, hw_name, energy_source) (hw_power_watts * on (job, instance) group_left (host_name) target_info)")}
    for hw_id, watts in WATTS_BY_HW_ID.items():
        assert per_device[hw_id] == pytest.approx(watts, rel=0.05), per_device


def test_span_co2_is_the_span_energy_at_the_configured_intensity(stack: Prometheus) -> None:
    """The CO2 panels sum what the span carbon hook set: grams = joules / 3.6e6 x intensity, span by span."""
    joules = _value(stack, "sum(span_energy_attributed_self_joules_total)")
    grams = _value(stack, "sum(span_energy_attributed_self_co2eq_grams_total)")
    assert joules > 0
    assert grams == pytest.approx(joules / 3.6e6 * INTENSITY_GCO2EQ_PER_KWH, rel=1e-9)


def test_process_share_is_labelled_and_never_more_than_the_host(stack: Prometheus) -> None:
    """The per-process panels: this app's share per kind, measured, positive, at most what the host drew."""
    shares = evaluate(stack, f"sum by (hw_type, energy_source) (rate(process_energy_joules_total[{WINDOW}]))")
    assert {s["metric"]["hw_type"] for s in shares} == {"cpu", "memory"}, shares
    assert {s["metric"]["energy_source"] for s in shares} == {"measured"}, shares
    total_watts = sum(float(s["value"][1]) for s in shares)
    assert 0 < total_watts <= HOST_WATTS * 1.02
    assert _value(stack, "sum(process_power_watts)") <= HOST_WATTS * 1.05
