"""hw.energy / hw.power / hw.host.* observable instruments."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import otel_joules
from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.sensors import rapl
from otel_joules.sensors.estimator import MemoryEstimateChannel


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
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), meter=meter)
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
    assert set(by_id) == {"intel-rapl:0", "intel-rapl:0:2"}  # core is inside the package: energy.nested
    assert {attrs["energy.source"] for attrs, _ in energy} == {"measured"}
    assert {attrs["energy.method"] for attrs, _ in energy} == {"counter"}
    nested = {attrs["energy.domain"]: (attrs["hw.parent"], value) for attrs, value in points["energy.nested"][1]}
    assert nested == {"core_0": ("intel-rapl:0", 20.0), "uncore_0": ("intel-rapl:0", 0.0)}  # the package's hw.id
    assert "hw.host.energy" not in points  # no whole-platform meter: the components do not claim to be the host
    assert points["energy.components"][0] == "J"
    assert [v for _, v in points["energy.components"][1]] == [36.0]  # package + dram, core is inside package
    unit, power = points["hw.power"]
    assert unit == "W"
    watts = {attrs["hw.id"]: v for attrs, v in power}
    # 30 J over the ~0.6 s between the instrument's first snapshot and this collection.
    assert 30.0 / 1.5 < watts["intel-rapl:0"] < 30.0 / 0.6
    (components_watts,) = [v for _, v in points["power.components"][1]]
    assert components_watts == pytest.approx(watts["intel-rapl:0"] * 36.0 / 30.0)
    handle.uninstrument()
    after = _points(reader)
    assert after.get("hw.energy", ("J", []))[1] == []


def test_estimates_are_labelled_in_metrics(tmp_path, tracer_provider) -> None:
    meter = EnergyMeter(sysfs_root=str(tmp_path), gpus=[], sample=False)
    reader = InMemoryMetricReader()
    handle = otel_joules.instrument(tracer_provider, MeterProvider(metric_readers=[reader]), meter=meter)
    points = _points(reader)
    # Estimates have metrics of their own: no measured series carries one.
    assert {a["energy.source"] for a, _ in points["energy.estimate"][1]} == {"estimate"}
    assert {a["energy.method"] for a, _ in points["energy.estimate"][1]} == {"estimate"}
    assert not {"hw.energy", "hw.host.energy", "energy.components"} & set(points)
    handle.uninstrument()


EXIT_SCRIPT = r"""
from tests.fakes.powercap import make_powercap
from pathlib import Path
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
import otel_joules

class PrintLastHostEnergy(MetricExporter):
    def __init__(self):
        super().__init__()
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        for rm in metrics_data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "energy.components":
                        print("host", m.data.data_points[0].value, flush=True)
        return MetricExportResult.SUCCESS
    def force_flush(self, timeout_millis=10_000):
        return True
    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass

tree = make_powercap(Path({root!r}), "amd")
# The providers exist before instrument(), as in most applications: their exit hooks run last.
meter_provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(PrintLastHostEnergy(), export_interval_millis=3_600_000)])
otel_joules.instrument(TracerProvider(), meter_provider, sysfs_root=tree.sysfs_root, gpus=[])
tree.zones["package_0"].advance_joules(7.25)
# No shutdown, no flush: the interpreter exits here.
"""


def test_final_collection_at_exit_reports_the_last_values(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from tests.helpers.processes import REPO

    script = EXIT_SCRIPT.format(root=str(tmp_path / "sys"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "host 7.25"
    assert "stopped measuring" not in result.stderr  # no read of counters closed at exit


def test_process_energy_and_power_are_this_processs_share_per_kind(powercap, tmp_path) -> None:
    """On a written /proc: the process used 1 of the host's 4 busy CPU seconds, so a quarter of CPU-side energy;
    memory over the host's whole capacity (4 busy + 4 idle seconds): an eighth."""
    import os

    from otel_joules.attribution import Attributor
    from otel_joules.metrics.instruments import EnergyMetrics
    from tests.fakes.procfs import FakeProcfs

    proc = FakeProcfs(tmp_path / "proc")
    proc.add_process(os.getpid(), 0.0)
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    # busy: the period's whole CPU-side energy over its busy seconds, whatever its baseline.
    attributor = Attributor(meter, sample=False, policy="busy")
    reader = InMemoryMetricReader()
    EnergyMetrics(meter, MeterProvider(metric_readers=[reader]), attribution=attributor)
    time.sleep(0.06)  # a window long enough to set prices
    powercap.zones["package_0"].advance_joules(40.0)
    powercap.zones["dram_0"].advance_joules(8.0)
    proc.add_host(busy_s=4.0, idle_s=4.0)
    proc.add_process(os.getpid(), 1.0)
    points = _points(reader)  # the collection samples the attributor first
    unit, energy = points["process.energy"]
    assert unit == "J"
    assert {attrs["hw.type"]: value for attrs, value in energy} == pytest.approx({"cpu": 10.0, "memory": 1.0})
    assert {attrs["energy.source"] for attrs, _ in energy} == {"measured"}
    unit, power = points["process.power"]
    assert unit == "W"
    assert {attrs["hw.type"] for attrs, _ in power} == {"cpu", "memory"}
    assert all(value > 0 for _, value in power)
    meter.close()


def test_estimated_process_energy_says_estimate(tmp_path) -> None:
    from otel_joules.metrics.instruments import EnergyMetrics

    (tmp_path / "empty").mkdir()
    meter = EnergyMeter(sysfs_root=str(tmp_path / "empty"), gpus=[], estimate=True, sample=False)
    reader = InMemoryMetricReader()
    metrics = EnergyMetrics(meter, MeterProvider(metric_readers=[reader]))
    assert metrics.attributor is not None
    _, energy = _points(reader)["process.energy"]
    assert {attrs["energy.source"] for attrs, _ in energy} == {"estimate"}
    metrics.attributor.close()
    meter.close()


_SHARE_METRICS = {"process.energy", "process.power", "energy.unattributed", "energy.baseline.power", "energy.baseline.state"}


def test_attribution_false_registers_the_hardware_instruments_only(powercap, tracer_provider) -> None:
    """The processor's spelling: ``attribution=False``, on EnergyMetrics and through instrument() alike."""
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    reader = InMemoryMetricReader()
    metrics = EnergyMetrics(meter, MeterProvider(metric_readers=[reader]), attribution=False)
    assert metrics.attributor is None
    powercap.zones["package_0"].advance_joules(5.0)
    time.sleep(0.1)  # older than the snapshot reuse window
    points = _points(reader)
    assert not _SHARE_METRICS & set(points)
    assert [v for _, v in points["energy.components"][1]] == [5.0]

    instrumented = InMemoryMetricReader()
    handle = otel_joules.instrument(
        tracer_provider, MeterProvider(metric_readers=[instrumented]), meter=meter, attribution=False
    )
    assert handle.meter is meter and handle.processor.attributor is None and handle.metrics.attributor is None
    points = _points(instrumented)
    assert "hw.energy" in points and not _SHARE_METRICS & set(points)
    handle.uninstrument()
    meter.close()


@pytest.mark.parametrize("attribution", [None, "off", 0])
def test_attribution_that_is_not_a_bool_or_an_attributor_is_refused(powercap, attribution) -> None:
    from otel_joules.errors import ConfigurationError
    from otel_joules.tracing import EnergySpanProcessor

    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    with pytest.raises(ConfigurationError, match="False \\(no attribution\\)"):
        EnergyMetrics(meter, MeterProvider(metric_readers=[InMemoryMetricReader()]), attribution=attribution)
    with pytest.raises(ConfigurationError, match="False \\(no attribution\\)"):
        EnergySpanProcessor(meter, attribution=attribution)
    with pytest.raises(ConfigurationError, match="False \\(no attribution\\)"):
        otel_joules.instrument(TracerProvider(), meter=meter, metrics_enabled=False, attribution=attribution)
    meter.close()


def _host_points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict, float]]]:
    points: dict[str, list[tuple[dict, float]]] = {}
    for resource_metrics in reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points[metric.name] = [(dict(p.attributes), p.value) for p in metric.data.data_points]
    return points


def test_measured_and_estimated_domains_go_to_separate_metrics(powercap) -> None:
    package = rapl.discover(Settings(sysfs_root=powercap.sysfs_root)).channels[0]
    memory = MemoryEstimateChannel(2.0)
    meter = EnergyMeter(channels=[package, memory], sample=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, host_id="host-a")
    powercap.zones["package_0"].advance_joules(4.0)
    time.sleep(0.3)  # longer than the instruments' snapshot reuse window
    points = _host_points(reader)
    provider.shutdown()
    meter.close()
    (components,) = points["energy.components"]
    (components_power,) = points["power.components"]
    assert components == ({"hw.id": "host-a", "hw.name": "host-a", "energy.source": "measured"}, 4.0)
    assert components_power[0]["energy.source"] == "measured"
    assert {a["hw.id"]: a["energy.source"] for a, _ in points["hw.energy"]} == {"intel-rapl:0": "measured"}
    assert {a["hw.id"]: a["energy.source"] for a, _ in points["energy.estimate"]} == {"memory_estimate": "estimate"}


@pytest.mark.parametrize("policy", ["capacity", "busy", "dynamic"])
def test_unattributed_energy_is_the_hosts_and_the_same_from_every_process(powercap, tmp_path, policy) -> None:
    """Two processes on one written host (2001: 1 of 4 busy CPU seconds, 2002: 3): each reports the host's
    energy.unattributed with the host's hw.id, the same value, so a dashboard takes one per host (max by hw.id);
    their process.energy plus it is the host's energy, under every policy. energy.baseline.power says the
    configured baseline. (Within 5%: here the two sample moments apart, and the static joules are watts x each
    one's own periods; in production every sampler samples at the same instants.)"""
    from otel_joules.attribution import Attributor, CpuClocks
    from otel_joules.metrics.instruments import EnergyMetrics
    from tests.fakes.procfs import FakeProcfs

    proc = FakeProcfs(tmp_path / "proc")
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, procfs_root=proc.procfs_root, gpus=[], sample=False)
    readers, attributors = [], []
    for pid in (2001, 2002):
        proc.add_process(pid, 0.0)
        attributor = Attributor(
            meter, clocks=CpuClocks(proc.procfs_root, pid=pid), sample=False, policy=policy,
            static_watts={"package_0": 100.0, "dram_0": 20.0},
        )
        reader = InMemoryMetricReader()
        EnergyMetrics(meter, MeterProvider(metric_readers=[reader]), host_id="host-a", attribution=attributor)
        readers.append(reader)
        attributors.append(attributor)
    time.sleep(0.2)  # one 0.2 s period: the baselines' static joules are 20 J package, 4 J dram
    powercap.zones["package_0"].advance_joules(40.0)
    powercap.zones["dram_0"].advance_joules(8.0)
    proc.add_host(busy_s=4.0, idle_s=4.0)
    proc.add_process(2001, 1.0)
    proc.add_process(2002, 3.0)
    for attributor in attributors:
        attributor.sample()
    views = [_points(reader) for reader in readers]
    unattributed = [{a["hw.type"]: v for a, v in view["energy.unattributed"][1]} for view in views]
    assert views[0]["energy.unattributed"][0] == "J"
    assert all(a["hw.id"] == "host-a" for view in views for a, _ in view["energy.unattributed"][1])
    assert unattributed[0] == pytest.approx(unattributed[1], rel=0.05)
    shares = sum(v for view in views for _, v in view["process.energy"][1])
    host_j = meter.measure(attributors[0].history[0].snapshot, attributors[0].history[-1].snapshot).total_joules
    print(policy, "shares", shares, "unattributed", unattributed[0], "host", host_j)
    assert shares + sum(unattributed[0].values()) == pytest.approx(host_j, rel=0.05)
    baselines = {a["hw.id"]: v for a, v in views[0]["energy.baseline.power"][1]}
    assert sorted(baselines.values()) == [20.0, 100.0]
    # Where each baseline comes from: one series per domain and state, for the whole run; 1 marks the current one.
    states = {(a["hw.id"], a["energy.baseline"]): v for a, v in views[0]["energy.baseline.state"][1]}
    assert views[0]["energy.baseline.state"][0] == "1"
    assert states == {(hw_id, state): int(state == "configured")
                      for hw_id in baselines for state in ("learned", "configured", "unknown")}
    meter.close()
