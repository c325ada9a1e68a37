"""Every plain sum over a published metric equals the truth: no overlap, no estimate among measurements, no label change.

The fake host is the issue's: psys 80 W for the whole platform; package 40 W, of which core 25 W and uncore 2 W;
DRAM 6 W. The truth per ``hw.type`` is cpu = the package, memory = DRAM; the host is psys.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_joules import EnergyMeter
from otel_joules.config import Settings
from otel_joules.metrics.instruments import EnergyMetrics
from otel_joules.sensors import rapl
from otel_joules.sensors.estimator import MemoryEstimateChannel
from tests.fakes.powercap import FakePowercap, make_powercap

#: Joules each zone gains in one step (the issue's watts over one second).
PSYS_J, PACKAGE_J, CORE_J, UNCORE_J, DRAM_J = 80.0, 40.0, 25.0, 2.0, 6.0


def platform_tree(root: Path) -> FakePowercap:
    """One socket with every zone a client sees: package with core and uncore inside, DRAM, and psys."""
    tree = make_powercap(root, "one_socket")
    tree.add_zone("intel-rapl:1", "psys", "psys")
    return tree


def advance(tree: FakePowercap, steps: int = 1) -> None:
    for domain, joules in (("psys", PSYS_J), ("package_0", PACKAGE_J), ("core_0", CORE_J), ("uncore_0", UNCORE_J), ("dram_0", DRAM_J)):
        tree.zones[domain].advance_joules(joules * steps)


def collect(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict, float]]]:
    """Every metric's points (attributes, value) by name."""
    points: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                points[metric.name] += [(dict(p.attributes), p.value) for p in metric.data.data_points]
    return points


def sum_by(points: list[tuple[dict, float]], label: str) -> dict[str, float]:
    """``sum by (label)``: what Prometheus and every dashboard do."""
    sums: dict[str, float] = defaultdict(float)
    for attributes, value in points:
        sums[attributes.get(label, "")] += value
    return dict(sums)


@pytest.fixture
def platform(tmp_path):
    tree = platform_tree(tmp_path / "sys")
    meter = EnergyMeter(sysfs_root=tree.sysfs_root, gpus=[], sample=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, host_id="host-a", attribution=False)
    yield tree, reader
    provider.shutdown()
    meter.close()


def test_every_plain_energy_sum_equals_the_truth(platform) -> None:
    tree, reader = platform
    advance(tree)
    time.sleep(0.1)  # older than the instruments' snapshot reuse window
    points = collect(reader)
    assert sum_by(points["hw.energy"], "hw.type") == {"cpu": PACKAGE_J, "memory": DRAM_J}
    assert sum(v for _, v in points["hw.host.energy"]) == PSYS_J
    assert sum(v for _, v in points["energy.components"]) == PACKAGE_J + DRAM_J
    # The sub-zones are kept, each under its package, where no sum of hw.energy meets them.
    nested = {a["energy.domain"]: (a["hw.parent"], v) for a, v in points["energy.nested"]}
    assert nested == {"core_0": ("intel-rapl:0", CORE_J), "uncore_0": ("intel-rapl:0", UNCORE_J)}
    assert not points["energy.estimate"]


def test_every_plain_power_sum_equals_the_truth(platform) -> None:
    tree, reader = platform
    collect(reader)  # the first interval starts here
    time.sleep(0.1)
    advance(tree)
    points = collect(reader)
    (host_watts,) = [v for _, v in points["hw.host.power"]]
    # Every power is its energy over the same interval: the ratios are the truth's.
    by_type = sum_by(points["hw.power"], "hw.type")
    assert by_type["cpu"] / host_watts == pytest.approx(PACKAGE_J / PSYS_J)
    assert by_type["memory"] / host_watts == pytest.approx(DRAM_J / PSYS_J)
    (components_watts,) = [v for _, v in points["power.components"]]
    assert components_watts / host_watts == pytest.approx((PACKAGE_J + DRAM_J) / PSYS_J)
    assert sum_by(points["power.nested"], "energy.domain")["core_0"] / host_watts == pytest.approx(CORE_J / PSYS_J)


def test_the_host_is_the_platform_meter_and_psys_is_no_device_of_its_own(platform) -> None:
    tree, reader = platform
    points = collect(reader)
    (host,) = [a for a, _ in points["hw.host.energy"]]
    assert host == {
        "hw.id": "host-a", "hw.name": "host-a", "energy.source": "measured", "energy.method": "counter", "energy.domain": "psys",
    }
    assert "enclosure" not in {a["hw.type"] for a, _ in points["hw.energy"]}
    assert {a["energy.domain"] for a, _ in points["hw.energy"]} == {"package_0", "dram_0"}


def test_without_a_platform_meter_there_is_no_host_series_and_the_components_say_what_they_are(powercap) -> None:
    meter = EnergyMeter(sysfs_root=powercap.sysfs_root, gpus=[], sample=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, host_id="host-a", attribution=False)
    powercap.zones["package_0"].advance_joules(30.0)
    powercap.zones["core_0"].advance_joules(20.0)
    powercap.zones["dram_0"].advance_joules(6.0)
    time.sleep(0.1)
    points = collect(reader)
    provider.shutdown()
    meter.close()
    assert not points["hw.host.energy"] and not points["hw.host.power"]
    assert points["energy.components"] == [({"hw.id": "host-a", "hw.name": "host-a", "energy.source": "measured"}, 36.0)]
    assert sum_by(points["hw.energy"], "hw.type") == {"cpu": 30.0, "memory": 6.0}


def test_estimates_never_share_a_series_with_measurements(powercap) -> None:
    package = rapl.discover(Settings(sysfs_root=powercap.sysfs_root)).channels[0]
    meter = EnergyMeter(channels=[package, MemoryEstimateChannel(2.0)], sample=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    EnergyMetrics(meter, provider, host_id="host-a", attribution=False)
    powercap.zones["package_0"].advance_joules(4.0)
    time.sleep(0.1)
    points = collect(reader)
    provider.shutdown()
    meter.close()
    assert [(a["energy.domain"], a["energy.source"], v) for a, v in points["hw.energy"]] == [("package_0", "measured", 4.0)]
    assert [v for _, v in points["energy.components"]] == [4.0]
    assert [(a["energy.domain"], a["energy.source"]) for a, _ in points["energy.estimate"]] == [("memory_estimate", "estimate")]
    assert {a["energy.source"] for name in ("hw.energy", "hw.power", "energy.components", "power.components")
            for a, _ in points[name]} == {"measured"}


def test_a_retried_domain_changes_no_label_and_is_counted_as_missing_time(platform) -> None:
    """DRAM fails reads for a while: every series keeps its labels; energy.missing counts the seconds; no counter goes back."""
    tree, reader = platform
    collect(reader)
    time.sleep(0.1)
    advance(tree)
    before = collect(reader)
    time.sleep(0.1)
    advance(tree)
    tree.zones["dram_0"].write_raw("garbage\n")
    failing = collect(reader)
    time.sleep(0.1)
    failing_later = collect(reader)
    tree.zones["dram_0"].write()
    time.sleep(0.1)
    recovering = collect(reader)  # the interval from a failing read: DRAM still out of its power
    time.sleep(0.1)
    after = collect(reader)

    def labels(points):
        return {name: {tuple(sorted(a.items())) for a, _ in series} for name, series in points.items() if series}

    # Across the failure every series seen is one of the steady run's: no label changed, none was added.
    assert labels(after) == labels(before)
    for view in (failing, failing_later, recovering):
        for name, series in labels(view).items():
            assert series <= labels(before)[name], name
    assert {a["energy.domain"] for a, _ in failing_later["hw.power"]} == {"package_0"}  # DRAM left out of power meanwhile
    missing = {a["energy.domain"]: v for a, v in failing_later["energy.missing"]}
    assert missing["dram_0"] >= 0.1 and missing["package_0"] == 0.0
    components = [v for view in (before, failing, failing_later, recovering, after) for _, v in view["energy.components"]]
    assert components == sorted(components)  # a counter never goes backwards
    assert components[-1] == 2 * (PACKAGE_J + DRAM_J)  # nothing spent in the gap is lost
