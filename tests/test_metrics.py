"""hw.energy / hw.power / hw.host.* observable instruments."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import otel_joules
from otel_joules import EnergyMeter


def _points(reader: InMemoryMetricReader) -> dict[str, list]:
    data = reader.get_metrics_data()
    out: dict[str, list] = {}
    if data is None:  # nothing observed at all
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out[metric.name] = (metric.unit, [(dict(p.attributes), p.value) for p in metric.data.data_points])
    return out


def test_energy_and_power_per_domain_and_host(powercap, tracer_provider) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    reader = InMemoryMetricReader()
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), energy_meter=meter)
    powercap.zones["package_0"].advance_joules(30.0)
    powercap.zones["core_0"].advance_joules(20.0)
    powercap.zones["dram_0"].advance_joules(6.0)
    time.sleep(0.6)  # older than the snapshot reuse window
    points = _points(reader)
    unit, energy = points["hw.energy"]
    assert unit == "J"
    by_id = {attrs["hw.id"]: (attrs, value) for attrs, value in energy}
    assert by_id["intel-rapl:0"][1] == 30.0
    assert by_id["intel-rapl:0"][0]["hw.type"] == "cpu"
    assert by_id["intel-rapl:0"][0]["hw.name"] == "RAPL package-0"
    assert by_id["intel-rapl:0:2"][0]["hw.type"] == "memory"
    assert by_id["intel-rapl:0:0"][0]["hw.parent"] == "intel-rapl:0"  # the package's hw.id
    assert {attrs["energy.source"] for attrs, _ in energy} == {"measured"}
    assert points["hw.host.energy"][0] == "J"
    assert [v for _, v in points["hw.host.energy"][1]] == [36.0]  # package + dram, core is inside package
    unit, power = points["hw.power"]
    assert unit == "W"
    watts = {attrs["hw.id"]: v for attrs, v in power}
    # 30 J over the ~0.6 s between the instrument's first snapshot and this collection.
    assert 30.0 / 1.5 < watts["intel-rapl:0"] < 30.0 / 0.6
    (host_watts,) = [v for _, v in points["hw.host.power"][1]]
    assert host_watts == pytest.approx(watts["intel-rapl:0"] * 36.0 / 30.0)
    handle.uninstrument()
    after = _points(reader)
    assert after.get("hw.energy", ("J", []))[1] == []


def test_estimates_are_labelled_in_metrics(tmp_path, tracer_provider) -> None:
    meter = EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False)
    reader = InMemoryMetricReader()
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), energy_meter=meter)
    points = _points(reader)
    assert {a["energy.source"] for a, _ in points["hw.energy"][1]} == {"estimate"}
    assert {a["energy.source"] for a, _ in points["hw.host.energy"][1]} == {"estimate"}
    handle.uninstrument()
