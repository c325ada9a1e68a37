"""The gate that keeps the energy instruments quiet while the SDK's OTLP metrics endpoint is not there."""

from __future__ import annotations

import logging
import socket

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_joules.delivery import reachability
from otel_joules.delivery.reachability import EndpointGate, sdk_metrics_gate
from otel_joules.meter.meter import EnergyMeter
from otel_joules.metrics.instruments import EnergyMetrics

from tests.helpers.processes import closed_port


@pytest.fixture
def listening_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_a_closed_port_closes_the_gate_with_one_warning(caplog, monkeypatch):
    port = closed_port()
    gate = EndpointGate(("127.0.0.1", port), f"http://127.0.0.1:{port}")
    with caplog.at_level(logging.INFO, logger="otel_joules"):
        assert gate() is False
        monkeypatch.setattr(reachability, "CHECK_REUSE_S", 0.0)  # every call checks again
        assert gate() is False and gate() is False
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"otel-joules: energy metrics are not exported while nothing answers at http://127.0.0.1:{port} "
        f"(connection to 127.0.0.1:{port} refused)"
    ]


def test_a_listening_port_opens_it_silently_and_a_return_is_said_at_info(caplog, listening_port, monkeypatch):
    monkeypatch.setattr(reachability, "CHECK_REUSE_S", 0.0)
    gate = EndpointGate(("127.0.0.1", listening_port), "endpoint")
    with caplog.at_level(logging.INFO, logger="otel_joules"):
        assert gate() is True
        assert caplog.records == []
        gate.address = ("127.0.0.1", closed_port())
        assert gate() is False
        gate.address = ("127.0.0.1", listening_port)
        assert gate() is True
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert "answers: energy metrics are exported again" in caplog.records[1].getMessage()


def test_one_collection_shares_one_check(monkeypatch):
    calls = []
    monkeypatch.setattr(reachability, "probe", lambda address, timeout_s: calls.append(address))
    gate = EndpointGate(("127.0.0.1", 1), "endpoint")
    assert all(gate() for _ in range(6))
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("env", "address"),
    [
        ({}, ("localhost", 4317)),
        ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ("localhost", 4318)),
        ({"OTEL_METRICS_EXPORTER": "otlp_proto_http"}, ("localhost", 4318)),
        ({"OTEL_METRICS_EXPORTER": "otlp_proto_grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1234"}, ("c", 1234)),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://m.example/v1/metrics", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
         ("m.example", 443)),
    ],
)
def test_the_gate_checks_where_the_sdk_sends(env, address):
    gate = sdk_metrics_gate(env)
    assert gate is not None and gate.address == address


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_METRICS_EXPORTER": "none"},
        {"OTEL_METRICS_EXPORTER": "console"},
        {"OTEL_METRICS_EXPORTER": "prometheus"},
        {"OTEL_METRICS_EXPORTER": "otlp,console"},  # the console would lose our metrics too
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},  # the SDK builds no OTLP exporter
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "unix:///run/otel.sock"},
        {"https_proxy": "http://proxy:3128", "OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example:4317"},
    ],
)
def test_no_gate_where_a_tcp_check_would_not_tell(env):
    assert sdk_metrics_gate(env) is None


def test_a_closed_gate_leaves_the_collection_empty_and_an_open_one_reports_everything(powercap):
    """Empty is what spares the exit: the SDK exports nothing when no instrument reported."""
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[])
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    open_ = [False]
    energy_metrics = EnergyMetrics(meter, provider, gate=lambda: open_[0])
    try:
        powercap.zones["package_0"].advance_joules(2.0)
        assert reader.get_metrics_data() is None
        open_[0] = True
        energy_metrics.refresh()
        data = reader.get_metrics_data()
        points = {m.name: m.data.data_points for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        # Nothing measured while closed is lost: the counter holds it.
        assert [p.value for p in points["energy.components"]] == [2.0]
        assert {"hw.energy", "hw.power", "power.components", "process.energy", "process.power"} <= set(points)
    finally:
        provider.shutdown()
        meter.close()


def test_a_failing_gate_costs_no_metrics(powercap):
    def broken() -> bool:
        raise RuntimeError("boom")

    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[])
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, gate=broken)
    try:
        assert reader.get_metrics_data() is not None
    finally:
        provider.shutdown()
        meter.close()
